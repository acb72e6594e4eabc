"""The trace store's tables: names, column types, units. Defined once, here.

The schema is source-neutral: the Kineto reader fills it today and a Nsight Systems reader
fills the same tables, so columns are named by meaning (kernel, runtime call, CPU op, range,
memory counter), never by a producer's field names. Conventions:

- times are int64 nanoseconds (``*_ns``); ``start_ns`` is absolute (Unix epoch) when the
  source gives an epoch (Kineto ``baseTimeNanoseconds`` or absolute ``ts``), else the
  producer's own clock; ``dur_ns`` is never negative.
- sizes are ``*_bytes``; percentages ``*_pct`` (0-100); ratios ``*_ratio`` (0-1).
- ``process`` / ``thread`` are strings (producers mix integers and names); GPU rows carry
  ``device`` and ``stream`` as integers instead.
- ``cat_raw`` keeps the producer's category string; ``kind`` is our normalised one.
- string columns that repeat (names, kinds) are dictionary-encoded in memory and in parquet.

``docs/STORE.md`` is generated from this module and the readers' column sources
(``python -m traceinsight.ingest.store_doc``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa

#: Bump when a table or column changes meaning or type. A store of another version is
#: re-ingested (the cache) or refused with a hint (an explicit ``-o`` store).
SCHEMA_VERSION = 4  # 3: collective process group and sequence number; 4: cpu_ops call_stack

DICT = pa.dictionary(pa.int32(), pa.string())


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    type: pa.DataType
    doc: str
    nullable: bool = True


#: each table's Arrow schema, built once (keyed by name; the table it was built from)
_ARROW_SCHEMAS: dict[str, tuple[Table, pa.Schema]] = {}


@dataclass(frozen=True, slots=True)
class Table:
    name: str
    doc: str
    columns: tuple[Column, ...]

    @property
    def arrow_schema(self) -> pa.Schema:
        sch = _ARROW_SCHEMAS.get(self.name)
        if sch is None or sch[0] is not self:
            sch = _ARROW_SCHEMAS[self.name] = (
                self,
                pa.schema([pa.field(c.name, c.type, nullable=c.nullable) for c in self.columns]),
            )
        return sch[1]

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]


def _c(name: str, type_: pa.DataType, doc: str, nullable: bool = True) -> Column:
    return Column(name, type_, doc, nullable)


RANK = _c("rank", pa.int32(), "rank of the process that recorded the row", nullable=False)
START = _c("start_ns", pa.int64(), "start time, ns (absolute epoch when known)", nullable=False)
DUR = _c("dur_ns", pa.int64(), "duration, ns (>= 0)", nullable=False)
NAME = _c("name", DICT, "event name as recorded", nullable=False)
CAT = _c("cat_raw", DICT, "the producer's category string (Kineto cat, nsys table)")
PROCESS = _c("process", DICT, "process id or name (string)")
THREAD = _c("thread", DICT, "thread id or name (string)")
DEVICE = _c("device", pa.int32(), "GPU device index")
STREAM = _c("stream", pa.int64(), "GPU stream / queue id")
CORR = _c("correlation", pa.int64(), "launch correlation id, unique per process (CUPTI/roctracer)")
EXT = _c(
    "external_id", pa.int64(), "id of the launching CPU op (Kineto External id); cross-check only"
)
#: a slice on a host thread: what CPU ops, runtime calls and Python frames have in common
HOST_SLICE = (NAME, PROCESS, THREAD, START, DUR)

GPU_ACTIVITIES = Table(
    "gpu_activities",
    "Work on the GPU timeline: kernels, memory copies, memsets and device-side synchronisation.",
    (
        RANK,
        _c("kind", DICT, "kernel | memcpy | memset | sync", nullable=False),
        NAME,
        DEVICE,
        STREAM,
        START,
        DUR,
        CORR,
        EXT,
        _c("grid_x", pa.int32(), "grid size x"),
        _c("grid_y", pa.int32(), "grid size y"),
        _c("grid_z", pa.int32(), "grid size z"),
        _c("block_x", pa.int32(), "block size x"),
        _c("block_y", pa.int32(), "block size y"),
        _c("block_z", pa.int32(), "block size z"),
        _c("registers_per_thread", pa.int32(), "registers per thread"),
        _c("shared_memory_bytes", pa.int64(), "shared memory per block, static + dynamic"),
        _c("blocks_per_sm", pa.float64(), "blocks per SM (grid blocks / SM count)"),
        _c("warps_per_sm", pa.float64(), "warps per SM"),
        _c(
            "occupancy_pct",
            pa.float64(),
            "estimated achieved occupancy, 0-100 (calculator, not measured)",
        ),
        _c("bytes", pa.int64(), "bytes copied or set (memcpy / memset)"),
        _c("copy_kind", DICT, "memcpy direction: HtoD, DtoH, DtoD, HtoH, PtoP, ..."),
        _c("graph_id", pa.int64(), "CUDA/HIP graph id when launched from a graph"),
        _c("graph_node_id", pa.int64(), "graph node id"),
        _c("collective", DICT, "collective name carried on a communication kernel"),
        _c("pg_name", DICT, "process group name carried on a communication kernel"),
        _c(
            "seq",
            pa.int64(),
            "collective sequence number in its process group, carried on a communication kernel",
        ),
        CAT,
    ),
)

RUNTIME_CALLS = Table(
    "runtime_calls",
    "Host-side calls into the GPU runtime or driver (cudaLaunchKernel, hipMemcpyAsync, ...).",
    (
        RANK,
        _c("kind", DICT, "runtime | driver", nullable=False),
        *HOST_SLICE,
        CORR,
        EXT,
        _c("cbid", pa.int32(), "CUPTI callback id / roctracer cid"),
        CAT,
    ),
)

CPU_OPS = Table(
    "cpu_ops",
    "Framework operators on CPU threads (aten::mm, autograd nodes, c10d collectives, ...).",
    (
        RANK,
        *HOST_SLICE,
        EXT,
        _c(
            "sequence_nr",
            pa.int64(),
            "autograd sequence number: links a backward node to its forward op",
        ),
        _c("fwd_thread", pa.int64(), "thread id of the forward op of a backward node"),
        _c("input_dims", pa.string(), "input shapes as JSON text (record_shapes)"),
        _c("input_types", pa.string(), "input dtypes as JSON text (record_shapes)"),
        _c("concrete_inputs", pa.string(), "concrete scalar inputs as JSON text"),
        _c(
            "call_stack",
            DICT,
            "Python call stack recorded on the op (with_stack, PyTorch 1.8-1.x), innermost "
            "frame first, one `file(line): function` per line (home-directory user names "
            "redacted)",
        ),
        _c("flops", pa.float64(), "FLOPs recorded by the profiler (with_flops), rarely present"),
        _c("collective_name", DICT, "c10d collective name (record_param_comms)"),
        _c("in_msg_nelems", pa.int64(), "collective input elements"),
        _c("out_msg_nelems", pa.int64(), "collective output elements"),
        _c("group_size", pa.int32(), "collective process-group size"),
        _c("dtype", DICT, "collective element type"),
        _c("pg_name", DICT, "process group name"),
        _c("seq", pa.int64(), "collective sequence number in its process group"),
        CAT,
    ),
)

RANGES = Table(
    "ranges",
    "Named time ranges: profiler steps, record_function / user annotations (CPU and their "
    "GPU projections), NVTX ranges.",
    (
        RANK,
        _c("kind", DICT, "step | gpu_step | annotation | gpu_annotation | nvtx", nullable=False),
        NAME,
        _c("step", pa.int64(), "N of ProfilerStep#N"),
        PROCESS,
        THREAD,
        DEVICE,
        STREAM,
        START,
        DUR,
        EXT,
        _c("domain", DICT, "NVTX domain"),
        CAT,
    ),
)

PYTHON_FRAMES = Table(
    "python_frames",
    "Python call frames (with_stack=True), including the nn.Module frames.",
    (
        RANK,
        *HOST_SLICE,
        _c("python_id", pa.int64(), "frame id (nn.Module frames; null on other frames)"),
        _c("parent_id", pa.int64(), "parent frame id (nn.Module frames; null on other frames)"),
        _c("module_id", pa.int64(), "per-class instance counter on nn.Module frames"),
        _c(
            "frame_kind",
            DICT,
            "module (an `nn.Module: X_k` frame) / builtin (a C function "
            "called from Python) / function",
            nullable=False,
        ),
        CAT,
    ),
)

MEMORY_EVENTS = Table(
    "memory_events",
    "Allocator events (profile_memory=True): allocations, frees and out-of-memory markers with "
    "the allocator-wide totals after each event.",
    (
        RANK,
        _c("kind", DICT, "alloc | free | oom", nullable=False),
        PROCESS,
        THREAD,
        _c("ts_ns", pa.int64(), "time, ns", nullable=False),
        _c(
            "device_type",
            DICT,
            "cpu / cuda / hip / xpu / mtia / privateuse1 / ... (unknown: "
            "a device kind the reader does not know)",
        ),
        _c("device", pa.int32(), "device index, -1 for CPU"),
        _c("addr", pa.int64(), "block address (null if beyond int64)"),
        _c("bytes", pa.int64(), "bytes allocated (> 0) or freed (< 0)"),
        _c("total_allocated_bytes", pa.int64(), "allocator-wide live bytes after the event"),
        _c("total_reserved_bytes", pa.int64(), "allocator-wide reserved bytes after the event"),
    ),
)

FLOWS = Table(
    "flows",
    "Flow events linking two slices: a CPU launch to its GPU activity, a forward op to its "
    "backward node.",
    (
        RANK,
        _c(
            "kind",
            DICT,
            "launch (CPU launch -> GPU activity) | fwd_bwd (forward op -> "
            "backward node) | another producer category as recorded",
            nullable=False,
        ),
        _c("phase", DICT, "start | end | step (an intermediate point)", nullable=False),
        _c("flow_id", pa.int64(), "flow id (null if beyond int64)"),
        PROCESS,
        THREAD,
        _c("ts_ns", pa.int64(), "time, ns", nullable=False),
    ),
)

OTHER_EVENTS = Table(
    "other_events",
    "Every other event, kept so no input row is lost: profiler spans, overhead, counters, "
    "accelerator-specific categories.",
    (
        RANK,
        _c(
            "event_shape",
            DICT,
            "span | instant | counter | begin | end | async_begin | "
            "async_step | async_end | sample | object | mark | clock_sync | context | other",
            nullable=False,
        ),
        NAME,
        PROCESS,
        THREAD,
        START,
        _c("dur_ns", pa.int64(), "duration, ns (null for instants and counters)"),
        CAT,
    ),
)

#: the call stack of an allocation as recorded (innermost frame first)
FRAMES = _c(
    "frames",
    DICT,
    "call stack, innermost frame first, one `file:line function` per "
    "line (home-directory user names redacted)",
)
CALL_SITE = _c(
    "call_site",
    DICT,
    "the innermost frame of `frames` in user code (not in torch, "
    "the Python runtime or C++), else the innermost frame",
)

MEMORY_SEGMENTS = Table(
    "memory_segments",
    "Segments of the CUDA caching allocator in a memory snapshot: each is one cudaMalloc'd "
    "range (reserved memory), cut into the blocks of `memory_blocks`.",
    (
        RANK,
        _c("device", pa.int32(), "GPU device index", nullable=False),
        _c("address", pa.int64(), "start address (null if beyond int64)"),
        _c("total_bytes", pa.int64(), "reserved bytes of the segment", nullable=False),
        _c("allocated_bytes", pa.int64(), "bytes of its blocks in use by tensors (allocated)"),
        _c(
            "active_bytes",
            pa.int64(),
            "allocated bytes plus bytes freed but still awaiting their stream (pending_free)",
        ),
        _c(
            "requested_bytes",
            pa.int64(),
            "bytes the callers asked for in its allocated blocks "
            "(before rounding; null in old snapshots)",
        ),
        STREAM,
        _c("pool", DICT, "small (requests up to 1 MiB, 2 MiB segments) / large", nullable=False),
        _c(
            "pool_id",
            DICT,
            "memory pool as `a,b`: `0,0` the default pool, else a private pool "
            "(a CUDA graph's, a MemPool)",
        ),
        _c("expandable", pa.bool_(), "an expandable segment (expandable_segments:True)"),
        CALL_SITE,
        FRAMES,
    ),
)

MEMORY_BLOCKS = Table(
    "memory_blocks",
    "Blocks of the allocator's segments in a memory snapshot, in address order: together they "
    "cover each segment exactly.",
    (
        RANK,
        _c("device", pa.int32(), "GPU device index", nullable=False),
        _c("segment_address", pa.int64(), "start address of its segment (null if beyond int64)"),
        _c("address", pa.int64(), "start address (null if beyond int64)"),
        _c(
            "size_bytes",
            pa.int64(),
            "block size (requests are rounded up to 512 B)",
            nullable=False,
        ),
        _c(
            "requested_bytes",
            pa.int64(),
            "bytes the caller asked for (allocated and pending_free blocks)",
        ),
        _c(
            "state",
            DICT,
            "allocated (in use) / pending_free (freed, awaiting its stream) / "
            "inactive (cached, free for reuse)",
            nullable=False,
        ),
        CALL_SITE,
        FRAMES,
    ),
)

MEMORY_ACTIONS = Table(
    "memory_actions",
    "The allocator's trace in a memory snapshot (`device_traces`, a ring buffer of the last "
    "actions before the snapshot): allocations, frees, segments mapped and released, OOMs.",
    (
        RANK,
        _c("device", pa.int32(), "GPU device index", nullable=False),
        _c(
            "seq", pa.int64(), "position in the device's trace (0: the oldest kept)", nullable=False
        ),
        _c(
            "ts_ns",
            pa.int64(),
            "time, ns since the epoch (null: PyTorch 2.0 snapshots record none)",
        ),
        _c(
            "action",
            DICT,
            "alloc / free_requested / free_completed / segment_alloc / "
            "segment_free / segment_map / segment_unmap / oom / snapshot / annotate, as recorded",
            nullable=False,
        ),
        _c("addr", pa.int64(), "block or segment address (null for oom, or if beyond int64)"),
        _c("size_bytes", pa.int64(), "bytes of the block or segment; oom: the request that failed"),
        STREAM,
        _c("device_free_bytes", pa.int64(), "oom: bytes the driver still reported free"),
        CALL_SITE,
        FRAMES,
    ),
)

MEMORY_CATEGORIES = Table(
    "memory_categories",
    "Memory by what it holds, over time (torch.profiler `export_memory_timeline` raw "
    "export): each row adds or removes bytes of one category.",
    (
        RANK,
        _c("device", pa.int32(), "GPU device index (null: the export does not record it)"),
        _c("seq", pa.int64(), "position in the export", nullable=False),
        _c("ts_ns", pa.int64(), "time, ns since the epoch (null: existed before the window)"),
        _c(
            "action",
            DICT,
            "preexisting / create / increment_version (a tensor changes "
            "category: one row removes, the next adds) / destroy",
            nullable=False,
        ),
        _c("delta_bytes", pa.int64(), "bytes added (> 0) or removed (< 0)", nullable=False),
        _c(
            "category",
            DICT,
            "parameter / optimizer_state / input / temporary / activation / "
            "gradient / autograd_detail / unknown",
            nullable=False,
        ),
    ),
)

TABLES: dict[str, Table] = {
    t.name: t
    for t in (
        GPU_ACTIVITIES,
        RUNTIME_CALLS,
        CPU_OPS,
        RANGES,
        PYTHON_FRAMES,
        MEMORY_EVENTS,
        FLOWS,
        OTHER_EVENTS,
        MEMORY_SEGMENTS,
        MEMORY_BLOCKS,
        MEMORY_ACTIONS,
        MEMORY_CATEGORIES,
    )
}


def empty_table(name: str) -> pa.Table:
    return TABLES[name].arrow_schema.empty_table()


def conform(name: str, columns: dict[str, pa.Array]) -> pa.Table:
    """Build table ``name`` from ``columns`` (missing columns become nulls), cast to the schema."""
    spec = TABLES[name]
    n = None
    for arr in columns.values():
        n = len(arr)
        break
    if n is None:
        return empty_table(name)
    arrays = []
    for col in spec.columns:
        arr = columns.get(col.name)
        arrays.append(pa.nulls(n, type=col.type) if arr is None else cast_column(arr, col.type))
    return pa.Table.from_arrays(arrays, schema=spec.arrow_schema)


def cast_column(arr: pa.Array, type_: pa.DataType) -> pa.Array:
    """``arr`` as ``type_`` (plain strings are dictionary-encoded for a dictionary type)."""
    if arr.type.equals(type_):
        return arr
    if pa.types.is_dictionary(type_) and not pa.types.is_dictionary(arr.type):
        arr = arr.cast(pa.string()).dictionary_encode()
        if arr.type.equals(type_):
            return arr
    return arr.cast(type_)


def markdown(sources: Sequence[tuple[str, str, Mapping[str, Mapping[str, str]]]] = ()) -> str:
    """The table reference, as Markdown (docs/STORE.md).

    ``sources``: per reader (title, introduction, table -> column -> the source field that fills
    it), rendered as one column-mapping section each."""
    out = [
        "# Trace store reference",
        "",
        f"Schema version **{SCHEMA_VERSION}**. Generated from `traceinsight/store/schema.py` "
        "and the readers (`python -m traceinsight.ingest.store_doc > docs/STORE.md`).",
        "",
        "A store is a directory: one zstd-compressed parquet file per table below plus "
        "`meta.json` (schema version, source file hashes, per-rank trace metadata after the "
        "allow-list (`RankMeta` in `traceinsight/ingest/readers/base.py`), event counts, ingest "
        "diagnostics). `diagnose` may add a `derived/` folder "
        "with cached results (`diagnosis-KEY.json`, the newest 8; KEY hashes the sources, the "
        "code, the rules and thresholds and the options): a cache, never needed to read the store, "
        "bypassed with `diagnose --recompute`.",
        "",
    ]
    for t in TABLES.values():
        out += [f"## `{t.name}`", "", t.doc, "", "| column | type | meaning |", "|---|---|---|"]
        for c in t.columns:
            typ = "string (dictionary)" if pa.types.is_dictionary(c.type) else str(c.type)
            null = "" if c.nullable else ", not null"
            out.append(f"| `{c.name}` | {typ}{null} | {_cell(c.doc)} |")
        out.append("")
    for title, intro, mapping in sources:
        out += [f"## {title} column mapping", "", intro, ""]
        for t in TABLES.values():
            cols = mapping.get(t.name, {})
            out += [f"### `{t.name}`", "", "| column | filled from |", "|---|---|"]
            out += [
                f"| `{c.name}` | {_cell(cols.get(c.name, 'not filled (null)'))} |"
                for c in t.columns
            ]
            out.append("")
    return "\n".join(out)


def _cell(text: str) -> str:
    return text.replace("|", "/")
