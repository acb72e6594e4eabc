"""Reader for Nsight Systems: SQLite exports, and ``.nsys-rep`` / ``.qdrep`` reports through
``nsys export``.

Everything about the nsys format lives in this package: ``db`` (opening an export read-only,
columns by name, strings, enums, metadata), ``cuda`` (kernels, copies, memsets, syncs, API
calls, memory usage), ``nvtx`` (ranges -> operators, annotations, steps, layers), ``host`` (OS
runtime calls and other host tables), ``export_read`` (rows -> one rank per process),
``report`` (converting a report with the ``nsys`` executable). docs/NSYS.md describes the
mapping and the parity with ``nsys stats``.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

from traceinsight.errors import TraceFormatError
from traceinsight.ingest.readers.base import RankRead, Reader, column_sources
from traceinsight.ingest.source import SQLITE_MAGIC

# the modules that read an export (``db``, ``export_read``, ``report`` and what they import,
# sqlite3 among them) are imported when a file is an nsys export: a Kineto ingest never needs
# them, and importing them cost every start-up several milliseconds

__all__ = ["FORMAT", "READER", "confirm", "read_nsys", "sniff"]

FORMAT = "nsys"


def sniff(head: bytes) -> bool:
    """An SQLite database (its tables are checked by :func:`confirm`) or an nsys report."""
    from traceinsight.ingest.readers.nsys.report import is_report

    return head.startswith(SQLITE_MAGIC) or is_report(head)


def confirm(head: bytes, path: Path, data: bytes | None) -> bool:
    """An nsys report, or an SQLite database with one of the tables only an Nsight Systems
    export has (:data:`NSYS_TABLES`). A database whose schema cannot be read is claimed: it
    has the export's suffix or magic, and the reader says what is damaged."""
    if not head.startswith(SQLITE_MAGIC):
        return True
    if data is None or _holds(path, data):
        return _has_export_tables(path)
    with tempfile.TemporaryDirectory(prefix="traceinsight-nsys-") as tmp:
        copy = Path(tmp) / "export.sqlite"  # a compressed export: its content, on disk
        copy.write_bytes(data)
        return _has_export_tables(copy)


def _has_export_tables(path: Path) -> bool:
    import sqlite3
    from urllib.parse import quote

    from traceinsight.ingest.readers.nsys.db import NSYS_TABLES

    uri = f"file:{quote(str(path.resolve()))}?mode=ro&immutable=1"
    try:
        con = sqlite3.connect(uri, uri=True)
        try:
            names = con.execute(
                "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')"
            ).fetchall()
        finally:
            con.close()
    except sqlite3.DatabaseError:
        return True  # damaged: the reader says so
    return not {str(n) for (n,) in names}.isdisjoint(NSYS_TABLES)


def read_nsys(
    data: bytes,
    *,
    source: str,
    rank_hint: int | None = None,
    salvage: bool = False,
    progress: Callable[[str, float], None] | None = None,
    background: Callable[[], None] | None = None,
    path: Path | None = None,
) -> RankRead:
    """Read one export (or report) into one rank per process that ran GPU work (the first is
    returned; the others are in ``.more``). ``data`` is the file's content, ``path`` the file
    (opened read-only in place when it holds ``data`` as is)."""
    from traceinsight.ingest.readers.nsys.export_read import read_export
    from traceinsight.ingest.readers.nsys.report import exported, is_report

    if background:
        background()
    prog = progress or (lambda stage, frac: None)
    with tempfile.TemporaryDirectory(prefix="traceinsight-nsys-") as tmp:
        here = path if path is not None and _holds(path, data) else None
        if is_report(data[:256]):
            db = exported(here or _copy(data, Path(tmp) / source), data, source, prog)
            layout = "sqlite (exported from the report)"
        else:
            db = here or _copy(data, Path(tmp) / "export.sqlite")
            layout = "sqlite"
        reads = read_export(db, source, rank_hint, prog, layout)
    if not reads:  # pragma: no cover - read_export always returns a rank
        raise TraceFormatError("holds no process", path=source)
    first = reads[0]
    first.more = reads[1:]
    return first


def _holds(path: Path, data: bytes) -> bool:
    """Whether the file at ``path`` is ``data`` as is (not compressed, not a stream)."""
    try:
        if path.stat().st_size != len(data):
            return False
        with open(path, "rb") as f:
            return f.read(64) == data[:64]
    except OSError:
        return False


def _copy(data: bytes, target: Path) -> Path:
    target.write_bytes(data)
    return target


_COMMON = {
    "rank": "one rank per process with kernels, copies or memsets (ordered by its first GPU, "
    "then pid); a single process: the rank in the file name, else an `MPI Rank N` "
    "NVTX thread name, else 0",
    "name": "the row's name (see `kind`)",
    "process": "pid: (`globalTid` >> 24) & 0xFFFFFF, as text",
    "thread": "tid: `globalTid` & 0xFFFFFF, as text",
    "start_ns": "`start` (integer ns, exact) + `TARGET_INFO_SESSION_START_TIME.utcEpochNs`",
    "dur_ns": "`end` - `start` (missing or earlier end: 0)",
    "cat_raw": "the export table (CUPTI_ACTIVITY_KIND_KERNEL, NVTX_EVENTS, ...)",
    "correlation": "`correlationId` (unique within a process)",
}
_TABLES = {
    "gpu_activities": {
        "kind": "CUPTI_ACTIVITY_KIND_KERNEL -> kernel, _MEMCPY -> memcpy, _MEMSET -> memset, "
        "_SYNCHRONIZATION -> sync",
        "name": "kernels: `demangledName`, else `shortName`, else `mangledName` (StringIds); "
        "copies: `Memcpy <copyKind> (<srcKind> -> <dstKind>)`; memsets: "
        "`Memset (<memKind>)`; syncs: `syncType` as Event Sync / Stream Wait Event / "
        "Stream Sync / Context Sync",
        "device": "`deviceId` (= TARGET_INFO_GPU.id)",
        "stream": "`streamId`",
        **{f"grid_{a}": f"`grid{a.upper()}`" for a in "xyz"},
        **{f"block_{a}": f"`block{a.upper()}`" for a in "xyz"},
        "registers_per_thread": "`registersPerThread`",
        "shared_memory_bytes": "`staticSharedMemory` + `dynamicSharedMemory`",
        "blocks_per_sm": "grid blocks / TARGET_INFO_GPU.smCount",
        "warps_per_sm": "blocks per SM x warps per block",
        "occupancy_pct": "estimated from the block size, registers, shared memory and the "
        "GPU's limits (TARGET_INFO_GPU), as Kineto does",
        "bytes": "`bytes` (copies, memsets)",
        "copy_kind": "`copyKind` (ENUM_CUDA_MEMCPY_OPER, else built-in): HtoD, DtoH, DtoD, ...",
        "graph_id": "`graphId` (nsys 2026.1+)",
        "graph_node_id": "`graphNodeId`",
    },
    "runtime_calls": {
        "kind": "`eventClass` 0 -> runtime, 1 -> driver (CUPTI_ACTIVITY_KIND_DRIVER -> driver); "
        "class 67 (CUDA backtrace copies) is skipped",
        "name": "`nameId` (StringIds) without one `_vNNNN` suffix",
    },
    "cpu_ops": {
        "name": "emit_nvtx ranges: the text before `, seq = ` / `, op_id = ` / `, sizes = `; "
        "communication ranges (NCCL, MPI, NVSHMEM, UCX domains; `nccl*` names): "
        "`DOMAIN:range`",
        "sequence_nr": "`seq = N` (an `autograd::engine::evaluate_function:` range takes the "
        "seq of the backward node it runs)",
        "input_dims": "`sizes = [[...]]` (emit_nvtx(record_shapes=True)), as JSON",
        "collective_name": "communication ranges: the range name without `nccl`, lower case",
    },
    "ranges": {
        "kind": "`ProfilerStep#N`, `step N`, `iteration N` -> step; other push/pop ranges -> "
        "annotation; start/end ranges -> nvtx",
        "name": "`text`, else `textId` (StringIds); `DOMAIN:text` outside the default domain",
        "step": "N of a step range",
        "domain": "the text of the NvtxDomainCreate row of `domainId` in the same process",
    },
    "python_frames": {
        "name": "user NVTX push/pop ranges (layers, phases); OSRT_API calls of threads that "
        "call CUDA",
        "frame_kind": "module (user NVTX ranges: the layer path is their nesting); builtin "
        "(OS runtime calls)",
    },
    "memory_events": {
        "kind": "CUDA_GPU_MEMORY_USAGE_EVENTS `memoryOperationType`: 0 alloc, 1 free",
        "ts_ns": "`start` + the session epoch",
        "device_type": "cuda",
        "device": "`deviceId`",
        "addr": "`address`",
        "bytes": "`bytes` (negative for a free)",
        "total_reserved_bytes": "running sum of the process's allocations on the device",
    },
    "flows": {
        "kind": "launch: from each API call to the GPU rows of its correlation id",
        "phase": "start on the API call, end on the GPU row",
        "flow_id": "`correlationId`",
        "process": "the API call's pid; the GPU row's device",
        "thread": "the API call's tid; the GPU row's stream",
        "ts_ns": "the API call's start; the GPU row's start",
    },
    "other_events": {
        "event_shape": "span (OS runtime calls of other threads, PROFILER_OVERHEAD, "
        "CUPTI_ACTIVITY_KIND_OVERHEAD, CUDA_GRAPH_EVENTS, CUDA_GRAPH_NODE_EVENTS), "
        "instant (NVTX marks, CUDA event records with a timestamp)",
        "dur_ns": "`end` - `start` (null for instants)",
    },
}


READER = Reader(
    name=FORMAT,
    title="Nsight Systems",
    doc="Nsight Systems SQLite exports (`nsys export --type sqlite`, nsys 2022.1 to 2026.2, "
    "export schema 2.x to 3.25), opened read-only; `.nsys-rep` / `.qdrep` reports are "
    "exported first with the `nsys` on PATH. Columns are selected by name, absent tables "
    "read as empty, enums use the export's ENUM_* tables or built-in maps. Times are "
    "integer ns on the capture clock plus the session's epoch. docs/NSYS.md has the "
    "details and the parity with `nsys stats`.",
    suffixes=(".sqlite", ".nsys-rep", ".qdrep"),
    sniff=sniff,
    confirm=confirm,
    looks_for="an SQLite export with StringIds, TARGET_INFO_*, CUPTI_ACTIVITY_KIND_* or "
    "NVTX_EVENTS tables, or an .nsys-rep report",
    read=read_nsys,
    column_sources=column_sources(_TABLES, _COMMON),
    opens_path=True,
)
