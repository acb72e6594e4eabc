"""Reader for PyTorch profiler (Kineto) Chrome-trace JSON.

Design (measured, see README "Why msgspec"):

- one pass of ``msgspec`` decoding into typed structs, with ``args`` kept as raw JSON bytes;
  the args of each event family are then decoded in one batch into a small struct that names
  only the keys we use (unknown keys are skipped in C);
- numbers decode as int or float; ``timeconv`` turns µs into exact int64 ns and asks for a
  re-read with floats as text when a float column is too large to be exact (absolute
  3-decimal timestamps, 2024-03/04 traces);
- columns go straight into Arrow arrays; Python's garbage collector is paused while the
  millions of small objects are alive (it costs 2-5x otherwise and frees nothing here);
- very large files are decoded in batches or chunks of events, in two processes when
  worthwhile, so peak memory stays near the file size plus one batch (``decode.py``).

Everything about the Kineto format lives in this package: ``events`` (the decoded event, its
args, Kineto's vocabulary), ``tables`` (events -> store tables), ``decode`` (reading a file).
The store schema knows nothing of it.
"""

from __future__ import annotations

import gc
import re
from collections.abc import Callable
from pathlib import Path

from traceinsight.diagnostics import DiagnosticLog
from traceinsight.ingest.readers.base import RankRead, RankStreamed, Reader, column_sources
from traceinsight.ingest.readers.kineto import stream
from traceinsight.ingest.readers.kineto.decode import FORMAT, read
from traceinsight.ingest.readers.kineto.stream import StreamFallback
from traceinsight.ingest.readers.kineto.timeconv import NeedExactText
from traceinsight.ingest.sink import TableSink
from traceinsight.ingest.source import json_start

__all__ = ["READER", "StreamFallback", "read_kineto", "sniff", "stream_kineto"]


def read_kineto(
    data: bytes,
    *,
    source: str,
    rank_hint: int | None = None,
    salvage: bool = False,
    progress: Callable[[str, float], None] | None = None,
    background: Callable[[], None] | None = None,
) -> RankRead:
    """Parse the JSON bytes of one Kineto trace into store tables.

    ``source`` names the file in messages. Raises :class:`TraceFormatError` for input that is
    not a Kineto trace and :class:`EmptyTraceError` for a trace without events. ``background``
    starts work that may run in a thread (hashing the file); it is called once no process fork
    is pending.
    """
    diags = DiagnosticLog()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        try:
            return read(
                data,
                source,
                rank_hint,
                diags,
                exact_text=False,
                salvage=salvage,
                progress=progress,
                background=background,
            )
        except NeedExactText:
            diags.add(
                "timestamps-exact-path",
                "fractional timestamps beyond 2**43 µs (float64 cannot hold them to the "
                "nanosecond): numbers re-read as text for exact values",
                severity="info",
                source=source,
            )
            return read(
                data,
                source,
                rank_hint,
                diags,
                exact_text=True,
                salvage=salvage,
                progress=progress,
                background=background,
            )
    finally:
        if was_enabled:
            gc.enable()


def stream_kineto(
    path: Path,
    sink: TableSink,
    *,
    source: str,
    rank_hint: int | None = None,
    progress: Callable[[str, float], None] | None = None,
    background: Callable[[], None] | None = None,
    salvage: bool = False,
) -> RankStreamed:
    """Read the plain Kineto JSON file at ``path`` chunk by chunk into ``sink`` (``stream.py``):
    the whole file is never in memory. Raises :class:`StreamFallback` when the file must be
    read whole (``read_kineto``), after ``sink`` has been emptied."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        for exact_text in (False, True):
            diags = DiagnosticLog()
            if exact_text:
                diags.add(
                    "timestamps-exact-path",
                    "fractional timestamps beyond 2**43 µs (float64 cannot hold them to "
                    "the nanosecond): numbers re-read as text for exact values",
                    severity="info",
                    source=source,
                )
            try:
                meta, counts = stream.stream_kineto(
                    path,
                    sink,
                    source=source,
                    rank_hint=rank_hint,
                    diags=diags,
                    exact_text=exact_text,
                    progress=progress,
                    background=background,
                    salvage=salvage,
                )
                return RankStreamed(meta, counts)
            except NeedExactText:
                sink.reset()
                background = None  # started already
            except BaseException:
                sink.reset()
                raise
        raise AssertionError("unreachable")
    finally:
        if was_enabled:
            gc.enable()


#: top-level keys of a Kineto trace (one of them near the start of an object claims it)
_TOP_KEY = re.compile(
    rb'"(?:traceEvents|schemaVersion|deviceProperties|distributedInfo|baseTimeNanoseconds|'
    rb'displayTimeUnit|traceName|trace_id)"\s*:'
)
_BLANKS = b" \t\r\n\xef\xbb\xbf"


def sniff(head: bytes) -> bool:
    """A Kineto trace: a JSON object with one of its top-level keys (``traceEvents``,
    ``schemaVersion``, ``deviceProperties``, ...) in its first bytes, or a bare list of event
    objects (or an empty list). Other JSON is left to other readers (or refused)."""
    first = json_start(head)
    if first == b"{":
        return _TOP_KEY.search(head) is not None
    if first == b"[":
        return head.lstrip(_BLANKS)[1:].lstrip(_BLANKS)[:1] in (b"{", b"]", b"")
    return False


_COMMON = {
    "rank": "`distributedInfo.rank`, else the rank in the file name (`rank-3`, `worker3`), else 0",
    "name": "`name` (missing: empty)",
    "process": "`pid`, as text",
    "thread": "`tid`, as text",
    "start_ns": "`ts` (µs, exact decimal) × 1000, plus `baseTimeNanoseconds`",
    "dur_ns": "`dur` (µs) × 1000, missing -> 0, negative -> 0",
    "cat_raw": "`cat`",
    "external_id": '`args["External id"]` (older traces: `args["external id"]`)',
    "correlation": "`args.correlation`",
}
_TABLES = {
    "gpu_activities": {
        "kind": "`cat`: kernel, mtia_ccp_events -> kernel; gpu_memcpy, memcpy -> memcpy; "
        "gpu_memset, memset -> memset; cuda_sync -> sync (complete `X` events)",
        "device": "`args.device`, else `pid`",
        "stream": "`args.stream`, else the number in `tid` (sync rows: minus 1,000,000)",
        **{f"grid_{a}": f"`args.grid[{i}]`" for i, a in enumerate("xyz")},
        **{f"block_{a}": f"`args.block[{i}]`" for i, a in enumerate("xyz")},
        "registers_per_thread": '`args["registers per thread"]`',
        "shared_memory_bytes": '`args["shared memory"]`',
        "blocks_per_sm": '`args["blocks per SM"]`',
        "warps_per_sm": '`args["warps per SM"]`',
        "occupancy_pct": '`args["est. achieved occupancy %"]`',
        "bytes": "`args.bytes` (MTIA: `args.size`)",
        "copy_kind": "the HtoD / DtoH / DtoD / ... word in `name`, else `args.kind` (ROCm)",
        "graph_id": '`args["graph id"]`',
        "graph_node_id": '`args["graph node id"]`',
        "collective": '`args["Collective name"]`',
        "pg_name": '`args["Process Group Name"]` (communication kernels)',
        "seq": '`args["Seq"]` (communication kernels)',
    },
    "runtime_calls": {
        "kind": "`cat`: cuda_runtime, runtime, xpu_runtime, mtia_runtime, privateuse1_runtime "
        "-> runtime; cuda_driver, xpu_driver, privateuse1_driver -> driver",
        "cbid": "`args.cbid` (ROCm: `args.cid`)",
    },
    "cpu_ops": {
        "sequence_nr": '`args["Sequence number"]`',
        "fwd_thread": '`args["Fwd thread id"]`',
        "input_dims": '`args["Input Dims"]` (PyTorch <= 1.8: `args["Input dims"]`), as JSON',
        "input_types": '`args["Input type"]`, as JSON',
        "concrete_inputs": '`args["Concrete Inputs"]`, as JSON',
        "call_stack": '`args["Call stack"]` (`;`-separated frames -> one per line)',
        "flops": "`args.flops`",
        "collective_name": '`args["Collective name"]`',
        "in_msg_nelems": '`args["In msg nelems"]`',
        "out_msg_nelems": '`args["Out msg nelems"]`',
        "group_size": '`args["Group size"]`',
        "dtype": "`args.dtype`",
        "pg_name": '`args["Process Group Name"]`',
        "seq": '`args["Seq"]`',
    },
    "ranges": {
        "kind": "`ProfilerStep#N` (cat cpu_op, user_annotation) -> step; cat user_annotation, "
        "user -> annotation; cat gpu_user_annotation -> gpu_step or gpu_annotation",
        "step": "N of `name` ProfilerStep#N",
        "device": "`pid` (GPU rows)",
        "stream": "the number in `tid` (GPU rows)",
    },
    "python_frames": {
        "python_id": '`args["Python id"]` (module frames)',
        "parent_id": '`args["Python parent id"]` (module frames)',
        "module_id": '`args["Python module id"]` (module frames)',
        "frame_kind": "`name`: `nn.Module: ...` -> module, `<built-in ...` -> builtin, "
        "else function (cat python_function, python)",
    },
    "memory_events": {
        "kind": "`name` [OutOfMemory] -> oom; `args.Bytes` < 0 -> free; else alloc "
        "(instant events named [memory] / [OutOfMemory])",
        "ts_ns": "`ts` (µs) × 1000, plus `baseTimeNanoseconds`",
        "device_type": '`args["Device Type"]` (c10::DeviceType: 0 cpu, 1 cuda, 6 hip, 12 xpu, '
        "19 mtia, 20 privateuse1, ...)",
        "device": '`args["Device Id"]`',
        "addr": "`args.Addr`",
        "bytes": "`args.Bytes`",
        "total_allocated_bytes": '`args["Total Allocated"]`',
        "total_reserved_bytes": '`args["Total Reserved"]`',
    },
    "flows": {
        "kind": "`cat` (no cat: `name`): ac2g, async, async_gpu -> launch; fwdbwd -> fwd_bwd; "
        "other categories as recorded",
        "phase": "`ph`: s -> start, f -> end, t -> step",
        "flow_id": "`id`",
        "ts_ns": "`ts` (µs) × 1000, plus `baseTimeNanoseconds`",
    },
    "other_events": {
        "event_shape": "`ph`: X span, i/I instant, C counter, B begin, E end, b/S async_begin, "
        "n/T/p async_step, e/F async_end, P sample, N/O/D object, R mark, "
        "c clock_sync, ( ) context, else other",
        "dur_ns": "`dur` (µs) × 1000 (null when absent)",
    },
}


READER = Reader(
    name=FORMAT,
    title="Kineto",
    doc="PyTorch profiler traces (`torch.profiler` `export_chrome_trace` / "
    "`tensorboard_trace_handler`): Chrome-trace JSON, plain or gzip, an object with a "
    "`traceEvents` list or a bare list of events. Times are µs in the file. Metadata (`M`) "
    "events fill the rank's process and thread names; events without `ph` are counted and "
    "dropped.",
    suffixes=(".json", ".json.gz", ".gz"),
    sniff=sniff,
    looks_for='a JSON object with "traceEvents", "schemaVersion", "deviceProperties" or '
    '"distributedInfo" near its start, or a JSON list of event objects',
    read=read_kineto,
    stream=stream_kineto,
    column_sources=column_sources(_TABLES, _COMMON),
)
