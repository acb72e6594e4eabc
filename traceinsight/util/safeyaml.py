"""Reading a user's YAML file (rules, devices) with bounded cost.

A 2 KB file of nested aliases (a "billion laughs") expands to gigabytes, and a file nested
thousands of levels deep exhausts the stack: aliases are refused (rule and device files never
need them), the file's size is capped, and any failure becomes a one-line ``ConfigError``
naming the file, the line and a hint.
"""

from __future__ import annotations

import math
import os
import stat
from pathlib import Path
from typing import Any

import yaml

from traceinsight.errors import ConfigError

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
#: the largest YAML file read (rule and device files are a few KB)
MAX_BYTES = 1 << 20
#: a format spec's width or precision in a rule's texts is at most this
MAX_FORMAT_WIDTH = 64


def read_small(path: Path | str, *, what: str = "rule file") -> bytes:
    """The bytes of a configuration file: a regular file (never a FIFO, a device or a socket,
    which could block or never end, also behind a symbolic link) of at most :data:`MAX_BYTES`."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise ConfigError(f"{what} not found", path=path, hint="check the path") from None
    except OSError as e:
        raise ConfigError(
            f"cannot read the {what}: {e.strerror}",
            path=path,
            hint="check the path and its permissions",
        ) from None
    if not stat.S_ISREG(st.st_mode):
        kind = "a folder" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise ConfigError(
            f"{what} is {kind} (a FIFO, device or socket is never read)",
            path=path,
            hint=f"pass a {what} saved as a plain file",
        )
    if st.st_size > MAX_BYTES:
        raise ConfigError(
            f"{what} is larger than {MAX_BYTES:,} bytes",
            path=path,
            hint=f"a {what} is a few KB of YAML; check that this is the right file",
        )
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except OSError as e:
        raise ConfigError(
            f"cannot read the {what}: {e.strerror}",
            path=path,
            hint="check the path and its permissions",
        ) from None
    if len(raw) > MAX_BYTES:  # it grew while being read
        raise ConfigError(
            f"{what} is larger than {MAX_BYTES:,} bytes",
            path=path,
            hint=f"a {what} is a few KB of YAML; check that this is the right file",
        )
    return raw


def non_finite(doc: Any, where: str = "") -> str | None:
    """The key path of the first NaN or infinite number in ``doc``, or None."""
    if isinstance(doc, float) and not math.isfinite(doc):
        return where or "the document"
    if isinstance(doc, dict):
        for k, v in doc.items():
            hit = non_finite(v, f"{where}.{k}" if where else str(k))
            if hit:
                return hit
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            hit = non_finite(v, f"{where}[{i}]")
            if hit:
                return hit
    return None


def load(path: Path, *, what: str = "rule file") -> Any:
    """The YAML document of ``path``: UTF-8, at most :data:`MAX_BYTES`, no aliases, every
    number finite (``.nan`` and ``.inf`` would make every comparison quietly false)."""
    raw = read_small(path, what=what)
    doc = _parse(raw, path, what)
    bad = non_finite(doc)
    if bad:
        raise ConfigError(
            f"{bad} is not a finite number",
            path=path,
            hint="thresholds, factors and peaks are finite numbers (not .nan or .inf)",
        )
    return doc


def _parse(raw: bytes, path: Path, what: str) -> Any:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(
            f"{what} is not UTF-8 text (byte {e.start:,})", path=path, hint="save the file as UTF-8"
        ) from None
    try:
        refuse_aliases(text, path, what)
        return yaml.load(text, Loader=_LOADER)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(
            f"invalid YAML{where}: {problem}", path=path, hint="check the indentation and quoting"
        ) from None
    except RecursionError:
        raise ConfigError(
            "YAML is nested too deeply",
            path=path,
            hint=f"a {what} is a few levels of mappings and lists",
        ) from None


def refuse_aliases(text: str, path: Path | str, what: str) -> None:
    """A clear error when YAML ``text`` uses an anchor or alias (read as events: nothing is
    expanded). YAML syntax errors pass through to the caller's own loading."""
    try:
        events = list(yaml.parse(text, Loader=_LOADER))
    except yaml.YAMLError:
        return
    for event in events:
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            line = event.start_mark.line + 1 if event.start_mark else "?"
            raise ConfigError(
                f"uses a YAML alias or anchor (line {line}), which a {what} may not",
                path=path,
                hint="write the repeated values out in full",
            )


def check_format_spec(spec: str | None, field: str, source: str) -> None:
    """Refuse a format spec (``{x:>20000000.1f}``) whose width or precision is above
    :data:`MAX_FORMAT_WIDTH`: it would write megabytes into every report."""
    if not spec:
        return
    import re

    for n in re.findall(r"\d+", spec):
        if int(n) > MAX_FORMAT_WIDTH:
            raise ConfigError(
                f"text field {{{field}:{spec[:20]}}} has a format width or "
                f"precision of {int(n):,} (at most {MAX_FORMAT_WIDTH})",
                path=source,
                hint="use a plain {field} or a small format spec",
            )
