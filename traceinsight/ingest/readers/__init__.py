"""The readers: the one ordered list of trace formats, and the one way a file finds its reader.

Every caller that needs to know which format a file is (ingestion, the streaming path, the
per-rank path, ``--memory-snapshot``) asks :func:`reader_for`. Each reader's ``sniff`` looks at
the file's first bytes (gzip removed, up to :data:`HEAD_BYTES`) and claims only what it
recognises; a reader whose first bytes say too little (an SQLite database) also ``confirm``\\ s on
the file itself. When no reader claims a file, the error lists what each one looked for.

Adding a format is one module that defines a :class:`~traceinsight.ingest.readers.base.Reader`,
one entry in :data:`READERS` and one sample in ``tests/test_reader_contract.py``.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from pathlib import Path

from traceinsight.errors import InputError, TraceFormatError, UnsupportedTraceVersion
from traceinsight.ingest import source
from traceinsight.ingest.readers.base import Reader
from traceinsight.ingest.readers.kineto import READER as KINETO
from traceinsight.ingest.readers.memtimeline import READER as MEMORY_TIMELINE
from traceinsight.ingest.readers.nsys import READER as NSYS
from traceinsight.ingest.readers.snapshot import READER as SNAPSHOT

__all__ = [
    "HEAD_BYTES",
    "READERS",
    "documented",
    "open_trace",
    "reader_for",
    "suffixes",
    "unclaimed",
]

#: how many first bytes (gzip removed) a reader's ``sniff`` is shown
HEAD_BYTES = 65536

#: the readers, tried in this order: the first whose ``sniff`` (and ``confirm``) claims a file
#: reads it. The memory timeline (a list of number lists) comes before Kineto (a list of events)
READERS: list[Reader] = [MEMORY_TIMELINE, KINETO, NSYS, SNAPSHOT]


def suffixes() -> tuple[str, ...]:
    """File name endings a folder listing picks up: those of every reader."""
    return tuple(dict.fromkeys(s for r in READERS for s in r.suffixes))


def documented() -> list[tuple[str, str, Mapping[str, Mapping[str, str]]]]:
    """Each reader's title, description and column sources (docs/STORE.md)."""
    return [(r.title, r.doc, r.column_sources) for r in READERS]


def _head_of(path: Path) -> tuple[bytes, bool]:
    """The first bytes of the file at ``path`` (gzip removed) and whether it is gzip."""
    try:
        with open(path, "rb") as f:
            raw = f.read(HEAD_BYTES)
    except OSError:
        return b"", False
    if not raw.startswith(source.GZIP_MAGIC):
        return raw, False
    try:
        return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(raw, HEAD_BYTES), True
    except zlib.error:
        return b"", True


def reader_for(path: Path, data: bytes | None = None, *, compressed: bool | None = None) -> Reader:
    """The reader that claims the file at ``path``: the first of :data:`READERS` whose
    ``sniff`` claims its first bytes and whose ``confirm`` (if any) holds.

    ``data`` is the file's content (gzip removed) when the caller has it already, and
    ``compressed`` whether the file on disk is gzip; without ``data`` the first bytes are read
    from ``path`` (and the whole content only when a ``confirm`` needs it of a gzip file).
    Raises :func:`unclaimed`'s error when no reader claims the file."""
    if data is None:
        head, gz = _head_of(path)
    else:
        head, gz = data[:HEAD_BYTES], bool(compressed)
    for reader in READERS:
        if not reader.sniff(head):
            continue
        if reader.confirm is not None:
            if data is None and gz:
                data = source.gunzip(path, source.read_raw(path))
            if not reader.confirm(head, path, data):
                continue
        return reader
    raise unclaimed(path, data if data is not None else head, compressed=gz)


def open_trace(path: Path, raw: bytes, *, salvage: bool = False) -> tuple[Reader, bytes]:
    """The reader for a file's bytes ``raw``, and the bytes it reads (gzip removed; with
    ``salvage`` what a gzip stream that ends early holds)."""
    compressed = raw.startswith(source.GZIP_MAGIC)
    data = source.gunzip(path, raw, salvage=salvage) if compressed else raw
    return reader_for(path, data, compressed=compressed), data


def check_whole(path: Path, head: bytes, size: int) -> None:
    """Refuse, before it is read, a plain file of a memory reader (snapshot, timeline: read
    whole) larger than :func:`source.whole_limit`; gzip is bounded while it decompresses."""
    if head.startswith(source.GZIP_MAGIC) or size <= source.whole_limit():
        return
    if any(r.memory and r.sniff(head) for r in READERS):
        raise source.too_large_whole(path, "the memory input")


def looked_for() -> str:
    """What each reader looks for, in one line (the hint of an unclaimed file)."""
    if not READERS:
        return "no reader is registered"
    return "readers look for: " + "; ".join(f"{r.title}: {r.looks_for}" for r in READERS)


def unclaimed(path: Path, data: bytes, *, compressed: bool) -> TraceFormatError:
    """The error for a file no reader claims (``data``: its content or first bytes, gzip
    removed): what the file is, and in the hint what each reader looked for."""
    kind = source.sniff(data[:4096])
    hint = looked_for()
    if kind == "empty":
        return TraceFormatError(
            "file is empty",
            path=path,
            hint="the profiler wrote nothing; check that it ran and stopped cleanly",
        )
    if kind == "nsys-rep":
        return UnsupportedTraceVersion(
            "is an Nsight Systems report (.nsys-rep), a binary container",
            path=path,
            hint=source.NSYS_EXPORT_HINT.format(name=path.name),
        )
    if kind == "sqlite":
        what = "is an SQLite database without Nsight Systems tables"
    elif kind == "json":
        head = data[:HEAD_BYTES]
        if b'"nodes"' in head and b'"schema"' in head:
            what = "is a PyTorch Execution Trace (nodes), not a profiler trace"
            hint = (
                "pass the Kineto trace written by torch.profiler "
                "(export_chrome_trace / tensorboard_trace_handler)"
            )
        elif b'"traceinsight.' in head:
            what = "is a traceinsight result, not a trace (its schema tag is not one it reads)"
            hint = "write it again with traceinsight diagnose --json, or pass the trace"
        else:
            what = "is JSON text no registered reader recognises (not a PyTorch profiler trace)"
    elif compressed:
        what = "gzip file holds no format a registered reader recognises"
    else:
        what = (
            "is not JSON text or any format a registered reader recognises "
            f"({source.file_kind(data)})"
        )
    return TraceFormatError(what, path=path, hint=hint)


def is_memory_input(path: Path) -> bool:
    """Whether the reader that claims ``path`` reads a memory input (False when none does)."""
    try:
        return reader_for(path).memory
    except (TraceFormatError, InputError):
        return False
