"""Reader for CUDA caching-allocator memory snapshots (``torch.cuda.memory._snapshot()`` /
``_dump_snapshot()`` pickles, PyTorch 1.13 to current).

Recognised by content: the pickle protocol marker (``0x80`` then protocol 2-5), then the shape
(a dict of ``segments`` and ``device_traces``, or a bare list of segments). Loaded without
trusting the file (``unpickle.py``: no global is ever resolved, memory and time are bounded),
converted into the store's ``memory_segments``, ``memory_blocks`` and ``memory_actions``
tables (``tables.py``). A snapshot is a *memory input*: given with a trace of the same run
(``diagnose trace.json.gz --memory-snapshot snap.pickle``) its rows join the trace's rank;
alone, it is a memory-only run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from traceinsight.diagnostics import DiagnosticLog
from traceinsight.errors import EmptyTraceError
from traceinsight.ingest.readers.base import RankMeta, RankRead, Reader
from traceinsight.store import schema

# ``tables`` and ``unpickle`` are imported when a snapshot is read (not at every start-up)

__all__ = ["FORMAT", "READER", "read_snapshot", "sniff"]

FORMAT = "cuda-memory-snapshot"
PICKLE_PROTOCOLS = range(2, 6)
#: rows a file may expand into: shared references cannot blow a small pickle up
ROWS_PER_BYTE = 1 / 16
MIN_ROW_BUDGET = 100_000


def sniff(head: bytes) -> bool:
    """A pickle of protocol 2 to 5 (what ``pickle.dump`` writes since Python 3)."""
    return len(head) >= 2 and head[0] == 0x80 and head[1] in PICKLE_PROTOCOLS


def read_snapshot(
    data: bytes,
    *,
    source: str,
    rank_hint: int | None = None,
    salvage: bool = False,
    progress: Callable[[str, float], None] | None = None,
    background: Callable[[], None] | None = None,
) -> RankRead:
    """The tables and metadata of one snapshot file (``salvage`` does not apply: a truncated
    pickle holds no complete object)."""
    from traceinsight.ingest.readers.snapshot import tables, unpickle

    rank = rank_hint if rank_hint is not None else 0
    budget = max(MIN_ROW_BUDGET, int(len(data) * ROWS_PER_BYTE))

    def work(obj: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        return tables.convert(obj, source, rank, row_budget=budget)

    if progress:
        progress("parse", 0.0)
    tabs, info = unpickle.load_and_convert(data, source, work, started=background)
    if progress:
        progress("parse", 1.0)
    if not any(info.get("counts", {}).values()):
        raise EmptyTraceError(
            "memory snapshot holds no segments and no allocator trace",
            path=source,
            hint="dump it while the process holds GPU memory "
            "(after _record_memory_history() for the trace)",
        )
    diags = DiagnosticLog()
    for d in info.get("diagnostics") or []:
        diags.add(d["code"], d["message"], severity=d.get("severity", "warning"), source=source)
    meta = RankMeta(
        rank=rank,
        rank_source="file name" if rank_hint is not None else "default",
        source=source,
        format=FORMAT,
        vendor="unknown",
        time_origin="epoch" if info.get("span_ns") else "trace",
        span_ns=info.get("span_ns"),
        devices_used=list(info.get("devices") or []),
        memory={
            "allocator": dict(info.get("allocator") or {}),
            "snapshot_layout": info.get("layout"),
        },
        diagnostics=diags,
    )
    counts = {k: int(v) for k, v in (info.get("counts") or {}).items()}
    full = {name: tabs.get(name) or schema.empty_table(name) for name in schema.TABLES}
    return RankRead(full, meta, counts)


READER = Reader(
    name=FORMAT,
    title="CUDA memory snapshot",
    doc="PyTorch CUDA caching-allocator snapshots (`torch.cuda.memory._dump_snapshot()` "
    "pickles, PyTorch 1.13 to current), recognised by the pickle protocol marker and read "
    "without resolving any global. A memory input: with a trace (`diagnose TRACE "
    "--memory-snapshot SNAP`) its rows join the trace's rank, else the rank in its file "
    "name, else 0. Only the `memory_*` tables are filled.",
    suffixes=(),
    sniff=sniff,
    looks_for="a pickle (protocol 2 to 5) of torch.cuda.memory._snapshot()",
    read=read_snapshot,
    memory=True,
    column_sources={
        "memory_segments": {
            "rank": "the trace's rank (with a trace), else the rank in the file name, else 0",
            "device": "`segment.device`",
            "address": "`segment.address`",
            "total_bytes": "`segment.total_size`",
            "allocated_bytes": "`segment.allocated_size`",
            "active_bytes": "`segment.active_size`",
            "requested_bytes": "`segment.requested_size`",
            "stream": "`segment.stream`",
            "pool": "`segment.segment_type`",
            "pool_id": "`segment.segment_pool_id`",
            "expandable": "`segment.is_expandable`",
            "call_site": "chosen from `segment.frames`",
            "frames": "`segment.frames`",
        },
        "memory_blocks": {
            "rank": "as `memory_segments.rank`",
            "device": "`segment.device`",
            "segment_address": "`segment.address`",
            "address": "`block.address` (PyTorch < 2.1: the segment address plus the sizes "
            "of the blocks before it)",
            "size_bytes": "`block.size`",
            "requested_bytes": "`block.requested_size` (PyTorch < 2.1: "
            "`block.history[0].real_size`)",
            "state": "`block.state`: active_allocated -> allocated; active_pending_free, "
            "active_awaiting_free -> pending_free; inactive",
            "call_site": "chosen from `block.frames`",
            "frames": "`block.frames` (PyTorch < 2.1: `block.history[0].frames`)",
        },
        "memory_actions": {
            "rank": "as `memory_segments.rank`",
            "device": "the index in `device_traces`",
            "seq": "the index in the device's trace",
            "ts_ns": "`time_us` x 1000",
            "action": "`action`",
            "addr": "`addr`",
            "size_bytes": "`size`",
            "stream": "`stream`",
            "device_free_bytes": "`device_free`",
            "call_site": "chosen from `frames`",
            "frames": "`frames`",
        },
    },
)
