"""Every ``TRACEINSIGHT_*`` environment variable the package reads: one table, typed, validated.

A module never reads ``os.environ`` for these itself: it asks :func:`get` (or :func:`text` for
the raw string of an internal variable), which parses the variable each call (a value set at
run time, by a test or by the parent of a worker, counts). A bad value is a
:class:`~traceinsight.errors.ConfigError` naming the variable: one line on stderr and exit code 2,
before any work, since the CLI checks every variable that is set first (:func:`check`).

An empty value means unset (the default). Booleans take ``1``/``0``, ``true``/``false``,
``yes``/``no``, ``on``/``off``. README.md shows the table (``tests/test_settings.py`` keeps it in
step with :data:`VARS`).

This module imports nothing of the package but :mod:`traceinsight.errors`, so every layer, util
included, may read through it.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from traceinsight.errors import ConfigError

Kind = Literal["int", "float", "bool", "path", "text"]

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


@dataclass(frozen=True)
class Var:
    """One environment variable: its type, default (None: computed where it is used, as
    ``default_text`` says), smallest valid value, and what it does."""

    name: str
    kind: Kind
    default: Any
    meaning: str
    minimum: float | None = None
    default_text: str | None = None  #: the default as the README shows it
    internal: bool = False  #: set by traceinsight itself for its child processes

    def parse(self, raw: str) -> Any:
        """The typed value of ``raw`` (stripped, non-empty); ConfigError when it is invalid."""
        if self.kind == "bool":
            low = raw.lower()
            if low in _TRUE:
                return True
            if low in _FALSE:
                return False
            raise self._bad(raw, "is not a boolean (1 or 0)")
        if self.kind == "int":
            try:
                v: Any = int(raw.replace("_", ""))
            except ValueError:
                raise self._bad(raw, "is not an integer") from None
        elif self.kind == "float":
            try:
                v = float(raw)
            except ValueError:
                raise self._bad(raw, "is not a number") from None
            if not math.isfinite(v):
                raise self._bad(raw, "is not a finite number")
        else:
            return raw
        if self.minimum is not None and v < self.minimum:
            lo = int(self.minimum) if float(self.minimum).is_integer() else self.minimum
            raise self._bad(raw, f"is below the smallest valid value, {lo}")
        return v

    def _bad(self, raw: str, why: str) -> ConfigError:
        shown = raw if len(raw) <= 40 else raw[:37] + "..."
        shown = "".join(c if c.isprintable() else "?" for c in shown)
        return ConfigError(
            f"environment variable {self.name}={shown!r} {why}",
            hint=f"{self.meaning}; unset it for the default ({self.shown_default})",
        )

    @property
    def shown_default(self) -> str:
        if self.default_text is not None:
            return self.default_text
        if self.kind == "bool":
            return "1" if self.default else "0"
        if self.kind == "int" and isinstance(self.default, int) and self.default >= 1 << 20:
            return _bytes(self.default)
        return str(self.default)


def _bytes(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit} ({n})"
    return str(n)


_MIB = 1 << 20
_GIB = 1 << 30

#: every variable, in the order README.md lists them
VARS: dict[str, Var] = {
    v.name: v
    for v in (
        Var(
            "TRACEINSIGHT_CACHE_DIR",
            "path",
            None,
            "where the stores of trace files are cached",
            default_text="$XDG_CACHE_HOME/traceinsight, else ~/.cache/traceinsight",
        ),
        Var(
            "TRACEINSIGHT_CACHE_MAX_GB",
            "float",
            20.0,
            "size bound of the cache, GiB (0: none): a new entry evicts the least recently "
            "used ones (`traceinsight cache list` shows them)",
            minimum=0,
        ),
        Var(
            "TRACEINSIGHT_MAX_MEMORY_MB",
            "float",
            4096.0,
            "memory limit of one diagnosis, MB (--max-memory wins): a larger trace is analysed "
            "in step chunks, one at a time",
            minimum=1,
        ),
        Var(
            "TRACEINSIGHT_WORKERS",
            "int",
            None,
            "processes that parse one large trace file",
            minimum=1,
            default_text="2 on Linux for a large file, else 1",
        ),
        Var(
            "TRACEINSIGHT_DEVICES",
            "path",
            None,
            "a YAML file of extra device rows, ahead of the built-in table",
            default_text="none",
        ),
        Var("TRACEINSIGHT_DEBUG", "bool", False, "full tracebacks instead of one-line errors"),
        Var("TRACEINSIGHT_NO_PROGRESS", "bool", False, "no progress lines on stderr"),
        Var(
            "TRACEINSIGHT_STREAM",
            "bool",
            True,
            "read Kineto JSON and memory-timeline exports with the streaming readers (0: decode "
            "the whole file at once)",
        ),
        Var(
            "TRACEINSIGHT_GZIP_MAX_RATIO",
            "int",
            200,
            "largest decompressed/compressed size ratio of a gzip input (a decompression bomb "
            "beyond it is refused)",
            minimum=1,
        ),
        Var(
            "TRACEINSIGHT_NSYS_TIMEOUT_S",
            "float",
            900.0,
            "seconds one Nsight Systems SQLite export may take to read before it is refused "
            "(a crafted file's queries are interrupted)",
            minimum=1e-9,
        ),
        Var(
            "TRACEINSIGHT_GZIP_MAX_BYTES",
            "int",
            64 * _GIB,
            "largest decompressed size of a gzip input, bytes",
            minimum=1,
        ),
        Var(
            "TRACEINSIGHT_STREAM_MAX_BYTES",
            "int",
            64 * _GIB,
            "largest trace read from a pipe or stdin, bytes",
            minimum=1,
        ),
        Var(
            "TRACEINSIGHT_BATCH_BYTES",
            "int",
            48 * _MIB,
            "Kineto JSON larger than this is decoded in batches of events (bounds memory)",
            minimum=1,
        ),
        Var(
            "TRACEINSIGHT_CHUNK_BYTES",
            "int",
            24 * _MIB,
            "bytes of Kineto JSON decoded at a time when a file is split into chunks",
            minimum=1024,
        ),
        Var(
            "TRACEINSIGHT_STREAM_CHUNK_BYTES",
            "int",
            4 * _MIB,
            "bytes of JSON per chunk of the streaming Kineto reader",
            minimum=1024,
        ),
        Var(
            "TRACEINSIGHT_ROW_GROUP_ROWS",
            "int",
            1_000_000,
            "rows per parquet row group of a store table",
            minimum=1,
        ),
        Var(
            "TRACEINSIGHT_PENDING_BYTES",
            "int",
            16 * _MIB,
            "bytes of rows a store table buffers before it writes a row group",
            minimum=1,
        ),
        Var(
            "TRACEINSIGHT_SNAPSHOT_MAX_BYTES",
            "int",
            4 * _GIB,
            "largest CUDA memory snapshot read, bytes after gzip",
            minimum=1,
        ),
        Var(
            "TRACEINSIGHT_SNAPSHOT_ISOLATE_BYTES",
            "int",
            _MIB,
            "snapshots from this size on are unpickled in a child process (Linux), bounded in "
            "memory and time",
            minimum=0,
        ),
        Var(
            "TRACEINSIGHT_SNAPSHOT_TIME_LIMIT_S",
            "float",
            120.0,
            "time limit of that child, seconds, plus one per MiB of file",
            minimum=0.001,
        ),
        Var(
            "TRACEINSIGHT_PROFILE",
            "text",
            None,
            "set by `traceinsight profile` for the processes it records; never by hand",
            default_text="unset",
            internal=True,
        ),
    )
}


def _raw(name: str, environ: Mapping[str, str] | None) -> str | None:
    if name not in VARS:  # a typo in the code, not in the environment
        raise KeyError(f"{name} is not a traceinsight setting (settings.VARS)")
    v = (os.environ if environ is None else environ).get(name)
    v = None if v is None else v.strip()
    return v or None


def get(name: str, environ: Mapping[str, str] | None = None) -> Any:
    """The typed value of variable ``name`` (its default when unset or empty)."""
    raw = _raw(name, environ)
    return VARS[name].default if raw is None else VARS[name].parse(raw)


def text(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The raw value of variable ``name`` (None when unset or empty), unparsed: for the
    internal ones whose reader must never fail (``TRACEINSIGHT_PROFILE``)."""
    return _raw(name, environ)


def check(environ: Mapping[str, str] | None = None) -> None:
    """Parse every variable that is set: the first bad one raises ConfigError."""
    for name in VARS:
        get(name, environ)


def markdown_table() -> str:
    """The README's table of the variables."""
    rows = [
        "| Variable | Type | Default | Meaning |",
        "| --- | --- | --- | --- |",
    ]
    for v in VARS.values():
        kind: str = "boolean" if v.kind == "bool" else ("JSON" if v.internal else v.kind)
        if v.minimum is not None:
            lo = int(v.minimum) if float(v.minimum).is_integer() else v.minimum
            kind += f" ≥ {lo}"
        rows.append(f"| `{v.name}` | {kind} | {v.shown_default} | {v.meaning} |")
    return "\n".join(rows)
