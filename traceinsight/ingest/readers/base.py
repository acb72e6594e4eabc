"""The reader seam: how a trace format plugs into ingestion.

A reader turns the bytes of one file (one rank) into the store's tables and a typed
:class:`RankMeta`. It is chosen by content, never by extension alone: after a gzip wrapper is
removed, each reader of ``readers.READERS`` in turn looks at the first bytes (``sniff``) and the
first that claims the file reads it (``readers.reader_for``). Adding a format is one module that
defines a :class:`Reader` and one entry in ``readers.READERS`` (``readers/__init__.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa

from traceinsight.diagnostics import DiagnosticLog

__all__ = [
    "RankMeta",
    "RankRead",
    "RankStreamed",
    "Reader",
]

#: ``progress(stage, fraction)`` as readers report it
ProgressFn = Callable[[str, float], None]


#: process and thread names kept per rank in ``meta.json``
NAMES_KEPT = 4096


@dataclass
class RankMeta:
    """What one file says about its rank (kept in the store's ``meta.json`` ``ranks`` list).

    Free text is already redacted and cut (``ingest/metadata.py``); readers fill what their
    format records and leave the rest empty."""

    rank: int
    rank_source: str  #: distributedInfo | file name | default
    source: str  #: file name
    format: str  #: the reader's name (kineto, ...)
    layout: str | None = None  #: how the file arranges its events (kineto: object | array)
    vendor: str = "unknown"  #: nvidia | amd | mtia | other | unknown
    base_time_ns: int | None = None  #: offset added to the file's times
    time_origin: str = "trace"  #: epoch | trace (the producer's own clock)
    span_ns: list[int] | None = None  #: first start and last end of the rank's activity
    devices: list[dict[str, Any]] = field(default_factory=list)  #: allow-listed device properties
    devices_used: list[int] = field(default_factory=list)  #: GPU indices with activity
    #: backend, rank, world_size, pg_count, nccl_version, pg_config (what the file records)
    distributed: dict[str, Any] = field(default_factory=dict)
    exact_text_timestamps: bool = False  #: times were re-read as text to stay exact
    process_names: dict[str, str] = field(default_factory=dict)
    process_labels: dict[str, str] = field(default_factory=dict)
    thread_names: dict[str, str] = field(default_factory=dict)  #: "process/thread" -> name
    #: record_shapes, with_stack, profile_memory, with_flops, with_modules (None: not recorded)
    capture_flags: dict[str, bool | None] = field(default_factory=dict)
    versions: dict[str, Any] = field(default_factory=dict)  #: runtime / driver / tracer versions
    trace_name: str | None = None
    trace_id: str | None = None
    framework: str | None = None
    display_time_unit: Any = None
    schema_version: Any = None  #: the source format's own version field
    #: memory inputs (allocator snapshot, memory timeline): the allocator's settings as recorded
    #: (allow-listed), the snapshot layout, and the memory files joined to this rank
    memory: dict[str, Any] = field(default_factory=dict)
    #: what names this rank inside its file when a file holds several (nsys: process, GPUs)
    label: str | None = None
    #: what reading this file found (kept in the store's diagnostics, not per rank)
    diagnostics: DiagnosticLog = field(default_factory=DiagnosticLog)

    @property
    def world_size(self) -> int | None:
        ws = self.distributed.get("world_size")
        return ws if isinstance(ws, int) else None

    @property
    def backend(self) -> str | None:
        return self.distributed.get("backend")

    def to_dict(self) -> dict[str, Any]:
        """The ``meta.json`` entry (every field but the diagnostics). Name maps keep their
        first :data:`NAMES_KEPT` entries: a file naming a million threads still makes a
        ``meta.json`` of a few MB."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "diagnostics"}
        for k in ("process_names", "process_labels", "thread_names"):
            names = out[k]
            if len(names) > NAMES_KEPT:
                out[k] = dict(list(names.items())[:NAMES_KEPT])
        return out


@dataclass
class RankRead:
    """What one file contributes to a store: its tables, its rank's metadata, event counts."""

    tables: dict[str, pa.Table]
    meta: RankMeta
    counts: dict[str, int]
    #: further ranks read from the same file (an Nsight Systems capture of several processes)
    more: list[RankRead] = field(default_factory=list)
    #: tables already written to parquet by a streaming reader (name -> ``sink.StoredTable``);
    #: rows in ``tables`` (e.g. a memory snapshot joined to this rank) follow them
    stored: dict[str, Any] = field(default_factory=dict)

    def parts(self) -> list[RankRead]:
        """This rank and the further ranks of the same file."""
        return [self, *self.more]


@dataclass
class RankStreamed:
    """What a streaming read returns: the rank's metadata and event counts (its tables went
    to the sink it was given)."""

    meta: RankMeta
    counts: dict[str, int]


class StreamFn(Protocol):
    def __call__(
        self,
        path: Path,
        sink: Any,
        *,
        source: str,
        rank_hint: int | None = None,
        progress: ProgressFn | None = None,
        background: Callable[[], None] | None = None,
        salvage: bool = False,
    ) -> RankStreamed:
        """Read the plain (gzip removed) file at ``path`` in bounded pieces, its rows handed
        to ``sink`` (``ingest/sink.py``) as they come. Raises an exception with
        ``stream_fallback = True`` when the file must be read whole by ``read``. ``salvage``
        (passed only when set) keeps the complete events of a truncated file."""


class ReadFn(Protocol):
    def __call__(
        self,
        data: bytes,
        *,
        source: str,
        rank_hint: int | None = None,
        salvage: bool = False,
        progress: ProgressFn | None = None,
        background: Callable[[], None] | None = None,
    ) -> RankRead:
        """Parse ``data`` (the file's bytes, gzip removed) of the file named ``source``.

        ``rank_hint`` is the rank in the file name, if any; ``salvage`` keeps what a truncated
        file holds; ``background`` starts work that may run in a thread (hashing the file) and
        must be called once the reader will fork no more processes. A reader registered with
        ``opens_path`` also gets ``path=`` (the file itself, e.g. to open a database)."""


def column_sources(
    tables: Mapping[str, Mapping[str, str]], common: Mapping[str, str]
) -> dict[str, dict[str, str]]:
    """A reader's column sources for :attr:`Reader.column_sources`: per store table, where each
    of its columns comes from (``tables``: per table, the columns with their own source;
    ``common``: sources shared by every table), for the columns the schema has."""
    from traceinsight.store import schema

    out = {}
    for name, own in tables.items():
        cols = schema.TABLES[name].column_names
        out[name] = {c: own.get(c) or common[c] for c in cols if c in own or c in common}
    return out


@dataclass(frozen=True)
class Reader:
    """One trace format."""

    name: str  #: stored as the source's and the rank's ``format``
    title: str  #: the format's name in documents
    doc: str  #: what the reader reads, for docs/STORE.md
    suffixes: tuple[str, ...]  #: file names a folder listing picks up (lower case)
    #: the first bytes (gzip removed, up to 64 KiB) -> whether this reads it: only what the
    #: reader recognises as its format, never any JSON or any database
    sniff: Callable[[bytes], bool]
    read: ReadFn
    #: what ``sniff`` (and ``confirm``) look for, in a few words: the error for a file no
    #: reader claims lists it
    looks_for: str = ""
    #: ``(head, path, data)`` -> whether the file is this format, for formats whose first bytes
    #: say too little (an SQLite database: its tables); ``data`` is the content (gzip removed)
    #: when the caller holds it, else None and ``path`` is read
    confirm: Callable[[bytes, Path, bytes | None], bool] | None = None
    #: table -> column -> the source field that fills it (docs/STORE.md)
    column_sources: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    #: reads a large file without holding it whole (rows written as they come); optional
    stream: StreamFn | None = None
    #: a memory input (allocator snapshot, memory timeline): with traces, its rows join a
    #: trace's rank instead of being a rank of their own
    memory: bool = False
    #: ``read`` is also given ``path=`` (the file on disk), for formats opened in place
    opens_path: bool = False
