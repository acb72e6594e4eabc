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
- very large files are decoded in batches of events (the event list is first split into raw
  slices) so peak memory stays near the file size plus one batch.

Everything about the Kineto format lives here; the store schema knows nothing of it.
"""

from __future__ import annotations

import gc
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import schema
from ..diagnostics import DiagnosticLog
from ..errors import EmptyTraceError, TraceFormatError
from . import repair
from .metadata import device_properties, distributed_info, kineto_capture_info
from .timeconv import ConversionStats, NeedExactText, us_to_ns

_NULL = msgspec.Raw(b"null")

#: Above this many bytes of JSON, events are decoded in batches to bound memory.
BATCH_BYTES = int(os.environ.get("TRACEINSIGHT_BATCH_BYTES", str(512 * 2**20)))
BATCH_EVENTS = 400_000


class _Ev(msgspec.Struct, gc=False):
    ph: Any = None
    cat: Any = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    id: Any = None
    args: msgspec.Raw = _NULL


_TOP_FIELDS: dict[str, Any] = {
    "schemaVersion": Any,
    "deviceProperties": Any,
    "distributedInfo": Any,
    "baseTimeNanoseconds": Any,
    "displayTimeUnit": Any,
    "traceName": Any,
    "record_shapes": Any,
    "with_stack": Any,
    "profile_memory": Any,
    "with_flops": Any,
    "with_modules": Any,
    "trace_id": Any,
    "cupti_version": Any,
    "cuda_runtime_version": Any,
    "cuda_driver_version": Any,
    "roctracer_version": Any,
    "hip_runtime_version": Any,
    "hip_driver_version": Any,
    "INFO": Any,
    "WARNING": Any,
    "ERROR": Any,
    "Framework": Any,
    # only to recognise non-trace JSON (Execution Trace: schema + nodes)
    "nodes": msgspec.Raw,
    "schema": Any,
}


def _top_struct(events_type: Any) -> type:
    fields = [("traceEvents", events_type | None, None)]
    for k, t in _TOP_FIELDS.items():
        fields.append((k, t, _NULL if t is msgspec.Raw else None))
    return msgspec.defstruct("_Top", fields)


_TopEvents = _top_struct(list[_Ev])
_TopRaw = _top_struct(list[msgspec.Raw])


# --- args of each event family: only the keys we read --------------------------------------

def _f(name: str) -> Any:
    return msgspec.field(default=None, name=name)


class _GpuArgs(msgspec.Struct, gc=False):
    correlation: Any = None
    external_id: Any = _f("External id")
    external_id_legacy: Any = _f("external id")
    device: Any = None
    stream: Any = None
    grid: Any = None
    block: Any = None
    registers: Any = _f("registers per thread")
    shared_memory: Any = _f("shared memory")
    blocks_per_sm: Any = _f("blocks per SM")
    warps_per_sm: Any = _f("warps per SM")
    occupancy: Any = _f("est. achieved occupancy %")
    graph_id: Any = _f("graph id")
    graph_node_id: Any = _f("graph node id")
    bytes: Any = None
    size: Any = None  # MTIA dma_request
    kind: Any = None  # ROCm memcpy direction
    collective: Any = _f("Collective name")


class _RuntimeArgs(msgspec.Struct, gc=False):
    correlation: Any = None
    external_id: Any = _f("External id")
    external_id_legacy: Any = _f("external id")
    cbid: Any = None
    cid: Any = None


class _OpArgs(msgspec.Struct, gc=False):
    external_id: Any = _f("External id")
    external_id_legacy: Any = _f("external id")
    sequence_nr: Any = _f("Sequence number")
    fwd_thread: Any = _f("Fwd thread id")
    input_dims: msgspec.Raw = msgspec.field(default=_NULL, name="Input Dims")
    input_dims_legacy: msgspec.Raw = msgspec.field(default=_NULL, name="Input dims")
    input_types: msgspec.Raw = msgspec.field(default=_NULL, name="Input type")
    concrete_inputs: msgspec.Raw = msgspec.field(default=_NULL, name="Concrete Inputs")
    flops: Any = None
    collective_name: Any = _f("Collective name")
    in_nelems: Any = _f("In msg nelems")
    out_nelems: Any = _f("Out msg nelems")
    group_size: Any = _f("Group size")
    dtype: Any = None
    pg_name: Any = _f("Process Group Name")


class _PyArgs(msgspec.Struct, gc=False):
    python_id: Any = _f("Python id")
    parent_id: Any = _f("Python parent id")
    module_id: Any = _f("Python module id")


class _MemArgs(msgspec.Struct, gc=False):
    device_type: Any = _f("Device Type")
    device: Any = _f("Device Id")
    addr: Any = _f("Addr")
    bytes: Any = _f("Bytes")
    total_allocated: Any = _f("Total Allocated")
    total_reserved: Any = _f("Total Reserved")


class _MetaArgs(msgspec.Struct, gc=False):
    name: Any = None
    labels: Any = None


def _decode_args(events: list[_Ev], typ: type, dec_cache: dict) -> list:
    """Decode the raw ``args`` of ``events`` in one batch into ``typ`` (None where absent)."""
    if not events:
        return []
    dec = dec_cache.get(typ)
    if dec is None:
        dec = dec_cache[typ] = msgspec.json.Decoder(list[typ | None])
    buf = b"[" + b",".join([e.args for e in events]) + b"]"
    try:
        return dec.decode(buf)
    except msgspec.DecodeError:
        # an args value of an unexpected shape (e.g. a list where an object belongs):
        # decode one by one and drop the bad ones
        one = msgspec.json.Decoder(typ | None)
        out = []
        for e in events:
            try:
                out.append(one.decode(e.args))
            except msgspec.DecodeError:
                out.append(None)
        return out


# --- category normalisation ----------------------------------------------------------------

# normalised family of complete ('X') events, keyed by lower-cased cat
_X_FAMILY = {
    "cpu_op": "op",
    "operator": "op",
    "user_annotation": "annotation",
    "user": "annotation",
    "gpu_user_annotation": "gpu_annotation",
    "kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "memcpy": "memcpy",
    "gpu_memset": "memset",
    "memset": "memset",
    "cuda_sync": "sync",
    "cuda_runtime": "runtime",
    "runtime": "runtime",
    "xpu_runtime": "runtime",
    "privateuse1_runtime": "runtime",
    "mtia_runtime": "runtime",
    "cuda_driver": "driver",
    "xpu_driver": "driver",
    "privateuse1_driver": "driver",
    "python_function": "python",
    "python": "python",
    # accelerator-side work of Meta's MTIA (device pid, linked by ac2g flows)
    "mtia_ccp_events": "kernel",
}

_STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")
_STREAM_RE = re.compile(r"(-?\d+)")
_MEMORY_NAMES = {"[memory]": "memory", "[OutOfMemory]": "oom"}


@dataclass
class KinetoRead:
    """What one Kineto file contributes to a store."""

    source: str
    tables: dict[str, pa.Table]
    rank_meta: dict[str, Any]
    counts: dict[str, int]
    diagnostics: DiagnosticLog = field(default_factory=DiagnosticLog)


class _Columns:
    """Accumulates Arrow columns of one table over batches (columns may differ per batch)."""

    def __init__(self) -> None:
        self.batches: list[dict[str, pa.Array]] = []

    def add(self, cols: dict[str, pa.Array]) -> None:
        self.batches.append(cols)

    def table(self, name: str) -> pa.Table:
        if not self.batches:
            return schema.empty_table(name)
        spec = schema.TABLES[name]
        names = {k for b in self.batches for k in b}
        cols = {}
        for col in spec.columns:
            if col.name not in names:
                continue
            typ = pa.string() if pa.types.is_dictionary(col.type) else col.type
            chunks = []
            for b in self.batches:
                n = len(next(iter(b.values())))
                arr = b.get(col.name)
                if arr is None:
                    arr = pa.nulls(n, typ)
                elif not arr.type.equals(typ):
                    arr = arr.cast(typ)
                chunks.append(arr)
            cols[col.name] = pa.concat_arrays(chunks)
        return schema.conform(name, cols)


# --- column helpers ------------------------------------------------------------------------

def _int_col(values: list, stats: Counter | None = None, key: str = "") -> pa.Array:
    """int64 column from Python values; non-integers (text, floats, out of range) -> null."""
    kinds = set(map(type, values))
    kinds.discard(type(None))
    if kinds <= {int}:
        try:
            return pa.array(values, type=pa.int64())
        except (pa.ArrowInvalid, OverflowError):
            pass
    out = []
    bad = 0
    for v in values:
        if v is None or v.__class__ is int and -(2**63) <= v < 2**63:
            out.append(v)
            continue
        try:
            iv = int(v, 0) if isinstance(v, str) else int(v)
            if isinstance(v, float) and iv != v:
                raise ValueError
            if not -(2**63) <= iv < 2**63:
                raise OverflowError
            out.append(iv)
        except (ValueError, TypeError, OverflowError):
            out.append(None)
            bad += 1
    if bad and stats is not None:
        stats[key] += bad
    return pa.array(out, type=pa.int64())


def _float_col(values: list) -> pa.Array:
    kinds = set(map(type, values))
    kinds.discard(type(None))
    if kinds <= {int, float}:
        return pa.array(values, type=pa.float64())
    out = []
    for v in values:
        try:
            out.append(None if v is None else float(v))
        except (TypeError, ValueError):
            out.append(None)
    return pa.array(out, type=pa.float64())


def _str_col(values: list) -> pa.Array:
    """Dictionary-encoded strings; non-strings are converted with str()."""
    try:
        arr = pa.array(values, type=pa.string())
    except (pa.ArrowTypeError, pa.ArrowInvalid):
        arr = pa.array([v if v is None or v.__class__ is str else str(v) for v in values],
                       type=pa.string())
    return arr.dictionary_encode()


def _id_str_col(values: list) -> pa.Array:
    """pid / tid as strings (producers mix ints and names)."""
    try:
        arr = pa.array(values)
    except (pa.ArrowTypeError, pa.ArrowInvalid, OverflowError):
        arr = pa.array([v if v is None or v.__class__ is str else str(v) for v in values],
                       type=pa.string())
    if not pa.types.is_string(arr.type):
        arr = arr.cast(pa.string()) if not pa.types.is_null(arr.type) else pa.nulls(len(arr), pa.string())
    return arr.dictionary_encode()


def _stream_of(tid: Any) -> int | None:
    if tid.__class__ is int:
        return tid
    if isinstance(tid, str):
        m = _STREAM_RE.search(tid)
        if m:
            return int(m.group(1))
    return None


def _raw_text(raws: list) -> pa.Array:
    """Raw JSON values as text (JSON ``null`` and absent values become null).

    All values are joined with NUL, which valid JSON text cannot contain, and split again in
    Arrow: one C-level pass instead of a Python call per value.
    """
    if not raws:
        return pa.array([], pa.string())
    blob = b"\x00".join([r if r is not None else b"null" for r in raws])
    try:
        text = blob.decode("utf-8")
    except UnicodeDecodeError:
        text = blob.decode("utf-8", "replace")
    parts = pc.list_flatten(pc.split_pattern(pa.array([text], pa.string()), "\x00"))
    if len(parts) != len(raws):  # pragma: no cover - NUL inside JSON text is invalid JSON
        return pa.array([None if r is None or bytes(r) == b"null" else bytes(r).decode("utf-8", "replace")
                         for r in raws], pa.string())
    return pc.if_else(pc.equal(parts, "null"), pa.scalar(None, pa.string()), parts)


def _first(a: Any, b: Any) -> Any:
    return a if a is not None else b


def _grid3(values: list) -> list[pa.Array]:
    """x, y, z columns of ``grid``/``block`` lists."""
    try:
        arr = pa.array(values, type=pa.list_(pa.int64()))
        if pc.min(pc.list_value_length(arr)).as_py() in (None, 3) or arr.null_count == len(arr):
            return [pc.list_element(arr, i) if arr.null_count < len(arr) else pa.nulls(len(arr), pa.int64())
                    for i in range(3)]
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        pass
    out = []
    for i in range(3):
        col = []
        for v in values:
            col.append(v[i] if isinstance(v, list) and len(v) > i and v[i].__class__ is int else None)
        out.append(pa.array(col, type=pa.int64()))
    return out


# --- the reader ----------------------------------------------------------------------------

@dataclass
class _State:
    source: str
    rank: int
    base_ns: int
    exact_text: bool
    diags: DiagnosticLog
    tstats: ConversionStats = field(default_factory=ConversionStats)
    bad: Counter = field(default_factory=Counter)
    counts: Counter = field(default_factory=Counter)
    process_names: dict[str, str] = field(default_factory=dict)
    process_labels: dict[str, str] = field(default_factory=dict)
    thread_names: dict[str, str] = field(default_factory=dict)
    args_dec: dict = field(default_factory=dict)
    negative_durations: int = 0


def _times(st: _State, evs: list[_Ev], *, with_dur: bool = True) -> tuple[pa.Array, pa.Array | None]:
    ts = us_to_ns([e.ts for e in evs], st.tstats)
    if st.base_ns:
        ts = pc.add(ts, st.base_ns)
    if ts.null_count:
        st.bad["ts"] += ts.null_count
    dur = None
    if with_dur:
        dur = us_to_ns([e.dur for e in evs], st.tstats)
        if dur.null_count:
            dur = pc.fill_null(dur, 0)
        neg = int(pc.sum(pc.less(dur, 0)).as_py() or 0)
        if neg:
            st.negative_durations += neg
            dur = pc.max_element_wise(dur, 0)
    return ts, dur


def read_kineto(
    data: bytes,
    *,
    source: str,
    rank_hint: int | None = None,
    salvage: bool = False,
    progress: Callable[[str, float], None] | None = None,
) -> KinetoRead:
    """Parse the JSON bytes of one Kineto trace into store tables.

    ``source`` names the file in messages. Raises :class:`TraceFormatError` for input that is
    not a Kineto trace and :class:`EmptyTraceError` for a trace without events.
    """
    diags = DiagnosticLog()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        try:
            return _read(data, source, rank_hint, diags, exact_text=False, salvage=salvage,
                         progress=progress)
        except NeedExactText:
            diags.add("timestamps-exact-path",
                      "fractional timestamps beyond 2**43 µs (float64 cannot hold them to the "
                      "nanosecond): numbers re-read as text for exact values", severity="info", source=source)
            return _read(data, source, rank_hint, diags, exact_text=True, salvage=salvage,
                         progress=progress)
    finally:
        if was_enabled:
            gc.enable()


def _decode_top(data: bytes, source: str, diags: DiagnosticLog, *, exact_text: bool,
                batched: bool, salvage: bool) -> Any:
    hook = str if exact_text else None
    first = data[:4096].lstrip(b" \t\r\n\xef\xbb\xbf")[:1]
    if first == b"[":
        typ = list[msgspec.Raw] if batched else list[_Ev]
    else:
        typ = _TopRaw if batched else _TopEvents
    dec = msgspec.json.Decoder(typ, float_hook=hook)
    try:
        return dec.decode(data)
    except msgspec.ValidationError as e:
        raise TraceFormatError(
            f"JSON but not a PyTorch profiler trace ({e})", path=source,
            hint="expected an object with a 'traceEvents' list of events (or a bare list of events)")
    except msgspec.DecodeError as e:
        if "truncated" in str(e) and salvage:
            cut = repair.salvage_truncated(data, diags, source)
            if cut is not None:
                return dec.decode(cut)
        fixed = repair.repair_json(data, str(e), source, diags)
        try:
            return dec.decode(fixed)
        except msgspec.ValidationError as e2:
            raise TraceFormatError(f"JSON but not a PyTorch profiler trace ({e2})", path=source,
                                   hint="expected an object with a 'traceEvents' list")
        except msgspec.DecodeError as e2:
            raise repair.explain_decode_error(data, str(e2), source)


def _read(data: bytes, source: str, rank_hint: int | None, diags: DiagnosticLog, *,
          exact_text: bool, salvage: bool,
          progress: Callable[[str, float], None] | None) -> KinetoRead:
    batched = len(data) > BATCH_BYTES
    top = _decode_top(data, source, diags, exact_text=exact_text, batched=batched,
                      salvage=salvage)
    if isinstance(top, list):
        events = top
        header: dict[str, Any] = {}
        layout = "array"
    else:
        events = top.traceEvents
        if events is None:
            what = ("a PyTorch Execution Trace (nodes), not a profiler trace"
                    if top.nodes is not _NULL or top.schema is not None
                    else "JSON without a 'traceEvents' list")
            raise TraceFormatError(f"is {what}", path=source,
                                   hint="pass the Kineto trace written by torch.profiler "
                                        "(export_chrome_trace / tensorboard_trace_handler)")
        header = {k: getattr(top, k) for k in _TOP_FIELDS if k not in ("nodes", "schema")}
        layout = "object"
    del top
    n_events = len(events)
    if n_events == 0:
        raise EmptyTraceError("trace holds no events", path=source,
                              hint="the profiler window may have been empty: check the schedule "
                                   "(wait/warmup/active) and that prof.step() is called")

    base_ns = 0
    base = header.get("baseTimeNanoseconds")
    if base is not None:
        try:
            base_ns = int(base)
        except (TypeError, ValueError):
            diags.add("bad-base-time", "baseTimeNanoseconds is not an integer; ignored",
                      source=source)

    dist = distributed_info(header.get("distributedInfo"))
    rank = dist.get("rank") if dist.get("rank") is not None else rank_hint
    st = _State(source=source, rank=int(rank) if rank is not None else 0, base_ns=base_ns,
                exact_text=exact_text, diags=diags)

    collectors = {name: _Columns() for name in schema.TABLES}
    if batched:
        dec = msgspec.json.Decoder(list[_Ev], float_hook=str if exact_text else None)
        for lo in range(0, n_events, BATCH_EVENTS):
            chunk = events[lo:lo + BATCH_EVENTS]
            batch = dec.decode(b"[" + b",".join(chunk) + b"]")
            del chunk
            _process_batch(batch, st, collectors)
            del batch
            if progress:
                progress("parse", min(1.0, (lo + BATCH_EVENTS) / n_events))
    else:
        _process_batch(events, st, collectors)
        if progress:
            progress("parse", 1.0)
    del events

    tables = {name: col.table(name) for name, col in collectors.items()}
    if st.counts.get("invalid") == n_events:
        raise TraceFormatError("is JSON but holds no trace events (no 'ph' field)", path=source,
                               hint="pass the Kineto trace written by torch.profiler")
    real = sum(v for k, v in st.counts.items() if k not in ("meta", "invalid"))
    if real == 0:
        raise EmptyTraceError("trace holds only metadata events, no activity", path=source,
                              hint="the profiler window may have been empty")
    _diagnose_ingest(st, tables)
    rank_meta = _rank_meta(header, dist, st, tables, layout, rank_hint)
    return KinetoRead(source=source, tables=tables, rank_meta=rank_meta,
                      counts=dict(st.counts), diagnostics=diags)


def _process_batch(events: list[_Ev], st: _State, out: dict[str, _Columns]) -> None:
    fam: dict[str, list[_Ev]] = {k: [] for k in (
        "op", "annotation", "gpu_annotation", "kernel", "memcpy", "memset", "sync", "runtime",
        "driver", "python", "memory", "flow", "meta", "other", "invalid")}
    xfam = _X_FAMILY
    get = xfam.get
    for e in events:
        ph = e.ph
        if ph == "X":
            c = e.cat
            f = get(c) if c.__class__ is str else None
            if f is None and c.__class__ is str:
                f = get(c.lower(), "other")
            fam[f or "other"].append(e)
        elif ph == "i" or ph == "I":
            if e.name in _MEMORY_NAMES:
                fam["memory"].append(e)
            else:
                fam["other"].append(e)
        elif ph == "s" or ph == "f" or ph == "t":
            fam["flow"].append(e)
        elif ph == "M":
            fam["meta"].append(e)
        elif ph is None:
            fam["invalid"].append(e)
        else:
            fam["other"].append(e)

    # ProfilerStep#N is a user annotation (a cpu_op in PyTorch 1.8-1.12): move it to ranges
    for key in ("op", "annotation"):
        lst = fam[key]
        steps = [e for e in lst if e.name.__class__ is str and e.name.startswith("ProfilerStep#")]
        if steps:
            fam[key] = [e for e in lst if not (e.name.__class__ is str
                                               and e.name.startswith("ProfilerStep#"))]
            fam.setdefault("step", []).extend(steps)
    gsteps = [e for e in fam["gpu_annotation"]
              if e.name.__class__ is str and e.name.startswith("ProfilerStep#")]

    # events without a usable name or time are invalid rows: counted, not stored
    for key, lst in list(fam.items()):
        if key in ("meta", "invalid"):
            continue
        ok = [e for e in lst if e.ts is not None and e.ts is not True and e.ts is not False]
        if len(ok) != len(lst):
            st.bad["missing ts"] += len(lst) - len(ok)
            fam[key] = ok

    c = st.counts
    for key, lst in fam.items():
        if lst:
            c[{"op": "cpu_op", "annotation": "annotation", "step": "step",
               "gpu_annotation": "gpu_annotation", "python": "python_function"}.get(key, key)] += len(lst)
    if gsteps:
        c["gpu_step"] += len(gsteps)
        c["gpu_annotation"] -= len(gsteps)

    _gpu(st, fam["kernel"], "kernel", out)
    _gpu(st, fam["memcpy"], "memcpy", out)
    _gpu(st, fam["memset"], "memset", out)
    _gpu(st, fam["sync"], "sync", out)
    _runtime(st, fam["runtime"], "runtime", out)
    _runtime(st, fam["driver"], "driver", out)
    _ops(st, fam["op"], out)
    _ranges(st, fam.get("step", []), fam["annotation"], fam["gpu_annotation"], out)
    _python(st, fam["python"], out)
    _memory(st, fam["memory"], out)
    _flows(st, fam["flow"], out)
    _other(st, fam["other"], out)
    _meta(st, fam["meta"])
    if fam["invalid"]:
        st.bad["events without ph"] += len(fam["invalid"])


def _common(st: _State, evs: list[_Ev], *, thread: bool = True) -> dict[str, pa.Array]:
    ts, dur = _times(st, evs)
    cols = {
        "rank": pa.array(np.full(len(evs), st.rank, dtype=np.int32)),
        "name": _str_col([e.name if e.name is not None else "" for e in evs]),
        "start_ns": ts,
        "dur_ns": dur,
        "cat_raw": _str_col([e.cat for e in evs]),
    }
    if thread:
        cols["process"] = _id_str_col([e.pid for e in evs])
        cols["thread"] = _id_str_col([e.tid for e in evs])
    return cols


def _ext(a: list) -> pa.Array:
    return _int_col([_first(x.external_id, x.external_id_legacy) if x else None for x in a])


def _gpu(st: _State, evs: list[_Ev], kind: str, out: dict[str, _Columns]) -> None:
    if not evs:
        return
    a = _decode_args(evs, _GpuArgs, st.args_dec)
    cols = _common(st, evs, thread=False)
    n = len(evs)
    cols["kind"] = pa.array([kind] * n, type=pa.string()).dictionary_encode()
    dev = [x.device if x and x.device is not None else e.pid for x, e in zip(a, evs)]
    cols["device"] = _int_col(dev)
    stream = []
    for x, e in zip(a, evs):
        s = x.stream if x and x.stream is not None else None
        if s is None or s.__class__ is not int:
            s = _stream_of(e.tid) if s is None else _stream_of(s)
        if kind == "sync" and s is not None and s >= 1_000_000:
            s -= 1_000_000  # Stream Sync rows sit at stream + 1,000,000 (kineto#1356)
        stream.append(s)
    cols["stream"] = _int_col(stream)
    cols["correlation"] = _int_col([x.correlation if x else None for x in a])
    cols["external_id"] = _ext(a)
    grids = _grid3([x.grid if x else None for x in a])
    blocks = _grid3([x.block if x else None for x in a])
    for i, axis in enumerate("xyz"):
        cols[f"grid_{axis}"] = grids[i]
        cols[f"block_{axis}"] = blocks[i]
    cols["registers_per_thread"] = _int_col([x.registers if x else None for x in a])
    cols["shared_memory_bytes"] = _int_col([x.shared_memory if x else None for x in a])
    cols["blocks_per_sm"] = _float_col([x.blocks_per_sm if x else None for x in a])
    cols["warps_per_sm"] = _float_col([x.warps_per_sm if x else None for x in a])
    cols["occupancy_pct"] = _float_col([x.occupancy if x else None for x in a])
    cols["bytes"] = _int_col([_first(x.bytes, x.size) if x else None for x in a])
    if kind == "memcpy":
        cols["copy_kind"] = _str_col([_copy_kind(e.name, x.kind if x else None) for e, x in zip(evs, a)])
    cols["graph_id"] = _int_col([x.graph_id if x else None for x in a])
    cols["graph_node_id"] = _int_col([x.graph_node_id if x else None for x in a])
    cols["collective"] = _str_col([x.collective if x else None for x in a])
    out["gpu_activities"].add(cols)


_COPY_RE = re.compile(r"\b(HtoD|DtoH|DtoD|HtoH|PtoP|DtoA|AtoD|HtoA|AtoH|AtoA)\b")


def _copy_kind(name: Any, kind: Any) -> str | None:
    if isinstance(name, str):
        m = _COPY_RE.search(name)
        if m:
            return m.group(1)
    if isinstance(kind, str) and _COPY_RE.fullmatch(kind):
        return kind
    return None


def _runtime(st: _State, evs: list[_Ev], kind: str, out: dict[str, _Columns]) -> None:
    if not evs:
        return
    a = _decode_args(evs, _RuntimeArgs, st.args_dec)
    cols = _common(st, evs)
    cols["kind"] = pa.array([kind] * len(evs), type=pa.string()).dictionary_encode()
    cols["correlation"] = _int_col([x.correlation if x else None for x in a])
    cols["external_id"] = _ext(a)
    cols["cbid"] = _int_col([_first(x.cbid, x.cid) if x else None for x in a])
    out["runtime_calls"].add(cols)


def _ops(st: _State, evs: list[_Ev], out: dict[str, _Columns]) -> None:
    if not evs:
        return
    a = _decode_args(evs, _OpArgs, st.args_dec)
    cols = _common(st, evs)
    cols["external_id"] = _ext(a)
    cols["sequence_nr"] = _int_col([x.sequence_nr if x else None for x in a])
    cols["fwd_thread"] = _int_col([x.fwd_thread if x else None for x in a])
    cols["input_dims"] = _raw_text([
        (x.input_dims if x.input_dims is not _NULL and bytes(x.input_dims) != b"null"
         else x.input_dims_legacy) if x else None for x in a])
    cols["input_types"] = _raw_text([x.input_types if x else None for x in a])
    cols["concrete_inputs"] = _raw_text([x.concrete_inputs if x else None for x in a])
    cols["flops"] = _float_col([x.flops if x else None for x in a])
    cols["collective_name"] = _str_col([x.collective_name if x else None for x in a])
    cols["in_msg_nelems"] = _int_col([x.in_nelems if x else None for x in a])
    cols["out_msg_nelems"] = _int_col([x.out_nelems if x else None for x in a])
    cols["group_size"] = _int_col([x.group_size if x else None for x in a])
    cols["dtype"] = _str_col([x.dtype if x else None for x in a])
    cols["pg_name"] = _str_col([x.pg_name if x else None for x in a])
    out["cpu_ops"].add(cols)


def _ranges(st: _State, steps: list[_Ev], ann: list[_Ev], gann: list[_Ev],
            out: dict[str, _Columns]) -> None:
    for evs, gpu in ((steps, False), (ann, False), (gann, True)):
        if not evs:
            continue
        a = _decode_args(evs, _OpArgs, st.args_dec)
        cols = _common(st, evs, thread=not gpu)
        names = [e.name if isinstance(e.name, str) else "" for e in evs]
        step_nums = []
        kinds = []
        for nm in names:
            m = _STEP_RE.match(nm)
            step_nums.append(int(m.group(1)) if m else None)
            if gpu:
                kinds.append("gpu_step" if m else "gpu_annotation")
            else:
                kinds.append("step" if m else "annotation")
        cols["kind"] = _str_col(kinds)
        cols["step"] = pa.array(step_nums, type=pa.int64())
        cols["external_id"] = _ext(a)
        if gpu:
            cols["device"] = _int_col([e.pid for e in evs])
            cols["stream"] = _int_col([_stream_of(e.tid) for e in evs])
        out["ranges"].add(cols)


def _python(st: _State, evs: list[_Ev], out: dict[str, _Columns]) -> None:
    if not evs:
        return
    a = _decode_args(evs, _PyArgs, st.args_dec)
    cols = _common(st, evs)
    cols["python_id"] = _int_col([x.python_id if x else None for x in a])
    cols["parent_id"] = _int_col([x.parent_id if x else None for x in a])
    cols["module_id"] = _int_col([x.module_id if x else None for x in a])
    cols["is_module"] = pa.array([isinstance(e.name, str) and e.name.startswith("nn.Module: ")
                                  for e in evs], type=pa.bool_())
    out["python_frames"].add(cols)


def _memory(st: _State, evs: list[_Ev], out: dict[str, _Columns]) -> None:
    if not evs:
        return
    a = _decode_args(evs, _MemArgs, st.args_dec)
    ts, _ = _times(st, evs, with_dur=False)
    byt = [x.bytes if x else None for x in a]
    kinds = []
    for e, b in zip(evs, byt):
        if _MEMORY_NAMES.get(e.name) == "oom":
            kinds.append("oom")
        else:
            kinds.append("free" if isinstance(b, int) and b < 0 else "alloc")
    cols = {
        "rank": pa.array(np.full(len(evs), st.rank, dtype=np.int32)),
        "kind": _str_col(kinds),
        "process": _id_str_col([e.pid for e in evs]),
        "thread": _id_str_col([e.tid for e in evs]),
        "ts_ns": ts,
        "device_type": _int_col([x.device_type if x else None for x in a]),
        "device": _int_col([x.device if x else None for x in a]),
        "addr": _int_col([x.addr if x else None for x in a], st.bad, "memory Addr beyond int64"),
        "bytes": _int_col(byt),
        "total_allocated_bytes": _int_col([x.total_allocated if x else None for x in a]),
        "total_reserved_bytes": _int_col([x.total_reserved if x else None for x in a]),
    }
    out["memory_events"].add(cols)


def _flows(st: _State, evs: list[_Ev], out: dict[str, _Columns]) -> None:
    if not evs:
        return
    ts, _ = _times(st, evs, with_dur=False)
    cols = {
        "rank": pa.array(np.full(len(evs), st.rank, dtype=np.int32)),
        "kind": _str_col([e.cat if e.cat is not None else (e.name or "") for e in evs]),
        "phase": _str_col([e.ph for e in evs]),
        "flow_id": _int_col([e.id for e in evs], st.bad, "flow id beyond int64"),
        "process": _id_str_col([e.pid for e in evs]),
        "thread": _id_str_col([e.tid for e in evs]),
        "ts_ns": ts,
    }
    out["flows"].add(cols)


def _other(st: _State, evs: list[_Ev], out: dict[str, _Columns]) -> None:
    if not evs:
        return
    ts, _ = _times(st, evs, with_dur=False)
    durs = [e.dur for e in evs]
    dur = us_to_ns(durs, st.tstats) if any(d is not None for d in durs) else pa.nulls(len(evs), pa.int64())
    cols = {
        "rank": pa.array(np.full(len(evs), st.rank, dtype=np.int32)),
        "ph": _str_col([e.ph for e in evs]),
        "name": _str_col([e.name if e.name is not None else "" for e in evs]),
        "process": _id_str_col([e.pid for e in evs]),
        "thread": _id_str_col([e.tid for e in evs]),
        "start_ns": ts,
        "dur_ns": dur,
        "cat_raw": _str_col([e.cat for e in evs]),
    }
    out["other_events"].add(cols)


def _meta(st: _State, evs: list[_Ev]) -> None:
    if not evs:
        return
    a = _decode_args(evs, _MetaArgs, st.args_dec)
    for e, x in zip(evs, a):
        if x is None:
            continue
        pid = None if e.pid is None else str(e.pid)
        if e.name == "process_name" and isinstance(x.name, str):
            st.process_names[pid] = x.name[:200]
        elif e.name == "process_labels" and isinstance(x.labels, str):
            st.process_labels[pid] = x.labels[:200]
        elif e.name == "thread_name" and isinstance(x.name, str):
            st.thread_names[f"{pid}/{e.tid}"] = x.name[:200]
    st.counts["metadata"] += 0  # counted by the dispatcher


def _diagnose_ingest(st: _State, tables: dict[str, pa.Table]) -> None:
    d, src = st.diags, st.source
    if st.tstats.rounded:
        d.add("timestamps-rounded", "timestamps with more than 3 fractional µs digits were "
              "rounded to the nearest ns", severity="info", source=src, count=st.tstats.rounded)
    if st.tstats.invalid:
        d.add("timestamps-invalid", "non-numeric ts/dur values", source=src,
              count=st.tstats.invalid)
    if st.negative_durations:
        d.add("negative-durations", "negative durations clamped to 0", source=src,
              count=st.negative_durations)
    for what, n in st.bad.items():
        d.add("invalid-values", f"events or values dropped: {what}", source=src, count=n)


def _rank_meta(header: dict[str, Any], dist: dict[str, Any], st: _State,
               tables: dict[str, pa.Table], layout: str, rank_hint: int | None) -> dict[str, Any]:
    spans = []
    for name, col in (("gpu_activities", "start_ns"), ("cpu_ops", "start_ns"),
                      ("runtime_calls", "start_ns"), ("ranges", "start_ns"),
                      ("python_frames", "start_ns")):
        t = tables[name]
        if t.num_rows:
            lo = pc.min(t[col]).as_py()
            hi = pc.max(pc.add(t[col], t["dur_ns"])).as_py()
            spans.append((lo, hi))
    span = [min(s[0] for s in spans), max(s[1] for s in spans)] if spans else None
    gpu = tables["gpu_activities"]
    devices_used = sorted(set(pc.unique(gpu["device"]).to_pylist()) - {None}) if gpu.num_rows else []
    rt_names = tables["runtime_calls"]["name"]
    vendor = _vendor(header, rt_names, gpu)
    meta = {
        "rank": st.rank,
        "rank_source": "distributedInfo" if dist.get("rank") is not None
        else ("file name" if rank_hint is not None else "default"),
        "source": st.source,
        "format": "kineto",
        "layout": layout,
        "vendor": vendor,
        "base_time_ns": st.base_ns or None,
        "time_origin": "epoch" if (st.base_ns or (span and span[0] > 10**15)) else "trace",
        "span_ns": span,
        "devices": device_properties(header.get("deviceProperties")),
        "devices_used": devices_used,
        "distributed": dist,
        "exact_text_timestamps": st.exact_text,
        "process_names": st.process_names,
        "process_labels": st.process_labels,
        "thread_names": st.thread_names,
    }
    meta.update(kineto_capture_info(header, st.diags, st.source))
    return meta


def _vendor(header: dict[str, Any], rt_names: pa.ChunkedArray, gpu: pa.Table) -> str:
    if any(header.get(k) is not None for k in ("roctracer_version", "hip_runtime_version")):
        return "amd"
    if len(rt_names):
        names = pc.unique(rt_names.cast(pa.string())).to_pylist()
        if any(isinstance(n, str) and n.startswith("hip") for n in names):
            return "amd"
        if any(isinstance(n, str) and (n.startswith("cuda") or n.startswith("cu")) for n in names):
            return "nvidia"
    props = header.get("deviceProperties") or []
    for p in props if isinstance(props, list) else []:
        nm = str(p.get("name", "")) if isinstance(p, dict) else ""
        if "AMD" in nm or "Instinct" in nm or "Radeon" in nm:
            return "amd"
        if "NVIDIA" in nm or "Tesla" in nm or "Quadro" in nm or "GeForce" in nm:
            return "nvidia"
        if nm:
            return "other"
    cats = gpu["cat_raw"] if gpu.num_rows else None
    if cats is not None and "mtia_ccp_events" in pc.unique(cats.cast(pa.string())).to_pylist():
        return "mtia"
    return "unknown"
