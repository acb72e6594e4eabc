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

import functools
import gc
import itertools
import operator
import os
import sys
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
BATCH_BYTES = int(os.environ.get("TRACEINSIGHT_BATCH_BYTES", str(48 * 2**20)))
BATCH_EVENTS = 200_000


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
    collective_name: Any = _f("Collective name")  # decoded in full by _CommArgs when present


class _CommArgs(msgspec.Struct, gc=False):
    """Collective keys of c10d ops (record_param_comms); decoded only for those ops."""

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
    buf = b"[" + b",".join(list(map(_ARGS, events))) + b"]"
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

    def __init__(self, bad: Counter | None = None) -> None:
        self.batches: list[dict[str, pa.Array]] = []
        self.bad = bad if bad is not None else Counter()

    def add(self, cols: dict[str, pa.Array]) -> None:
        # events without a usable time are invalid rows: counted, not stored
        t = cols.get("start_ns", cols.get("ts_ns"))
        if t is not None and t.null_count:
            keep = pc.is_valid(t)
            self.bad["events without a valid ts"] += t.null_count
            cols = {k: pc.filter(v, keep) for k, v in cols.items()}
        self.batches.append(cols)

    def table(self, name: str) -> pa.Table:
        if not self.batches:
            return schema.empty_table(name)
        spec = schema.TABLES[name]
        names = {k for b in self.batches for k in b}
        arrays, fields = [], []
        for col in spec.columns:
            chunks = []
            for b in self.batches:
                n = len(next(iter(b.values())))
                arr = b.get(col.name) if col.name in names else None
                if arr is None:
                    arr = pa.nulls(n, col.type)
                elif not arr.type.equals(col.type):
                    if pa.types.is_dictionary(col.type) and not pa.types.is_dictionary(arr.type):
                        arr = arr.cast(pa.string()).dictionary_encode()
                    arr = arr.cast(col.type)
                chunks.append(arr)
            arrays.append(pa.chunked_array(chunks, type=col.type))
            fields.append(pa.field(col.name, col.type, nullable=col.nullable))
        table = pa.Table.from_arrays(arrays, schema=pa.schema(fields))
        return table.unify_dictionaries().combine_chunks() if len(self.batches) > 1 else table


# --- column helpers ------------------------------------------------------------------------

def _int_col(values: list, stats: Counter | None = None, key: str = "") -> pa.Array:
    """int64 column from Python values; non-integers (text, floats, out of range) -> null."""
    try:
        arr = pa.array(values)  # infers: int64 when every value is an int (or None)
        if pa.types.is_integer(arr.type) or pa.types.is_null(arr.type):
            return arr.cast(pa.int64())
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
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
    try:
        arr = pa.array(values)
        if pa.types.is_floating(arr.type) or pa.types.is_integer(arr.type) or pa.types.is_null(arr.type):
            return arr.cast(pa.float64())
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        pass
    out = []
    for v in values:
        try:
            out.append(None if v is None else float(v))
        except (TypeError, ValueError):
            out.append(None)
    return pa.array(out, type=pa.float64())


def _dictionary(codes: Any, vals: list[str], null_codes: list[int] = ()) -> pa.Array:
    """A dictionary array from codes into ``vals``; duplicate strings in ``vals`` are merged
    (pandas needs unique categories) and ``null_codes`` become null entries."""
    idx = np.asarray(codes, dtype=np.int32)
    if len(set(vals)) != len(vals):
        first: dict[str, int] = {}
        remap = np.array([first.setdefault(v, len(first)) for v in vals], dtype=np.int32)
        vals = list(first)
        mask = np.isin(idx, np.asarray(null_codes, dtype=np.int32)) if len(null_codes) else None
        idx = remap[idx] if len(idx) else idx
    else:
        mask = np.isin(idx, np.asarray(null_codes, dtype=np.int32)) if len(null_codes) else None
    arr = pa.array(idx, type=pa.int32(), mask=mask if mask is not None and mask.any() else None)
    return pa.DictionaryArray.from_arrays(arr, pa.array(vals, type=pa.string()))


def _dict_col(values: list) -> pa.Array:
    """Dictionary-encoded string column. Distinct values are found with a Python dict (one
    hash per value), so each distinct string is converted and copied once."""
    n = len(values)
    if values.count(None) == n:
        return pa.DictionaryArray.from_arrays(pa.nulls(n, pa.int32()), pa.array([], pa.string()))
    d: dict = {}
    sd = d.setdefault
    codes = [sd(v, len(d)) for v in values]
    vals = ["" if k is None else (k if k.__class__ is str else str(k)) for k in d]
    return _dictionary(codes, vals, [d[None]] if None in d else [])


def _str_col(values: list) -> pa.Array:
    """Dictionary-encoded strings; non-strings are converted with str()."""
    return _dict_col(values)


def _id_str_col(values: list) -> pa.Array:
    """pid / tid as strings (producers mix ints and names); all-integer columns are encoded
    in C and only their distinct values become strings."""
    try:
        arr = pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        return _dict_col(values)
    if pa.types.is_integer(arr.type):
        enc = arr.dictionary_encode()
        return pa.DictionaryArray.from_arrays(enc.indices.cast(pa.int32()),
                                              enc.dictionary.cast(pa.string()))
    return _dict_col(values)


def _const_col(value: str | None, n: int) -> pa.Array:
    return pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, dtype=np.int32)),
                                          pa.array([value], type=pa.string()))


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
    if "\n" in text:
        # pretty-printed files: literal newlines only occur between JSON tokens (inside strings
        # they are escaped), so the indentation around them can go
        text = re.sub(r"[ \t\r]*\n[ \t\r]*", "", text)
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


_TS = operator.attrgetter("ts")
_PH = operator.attrgetter("ph")
_DUR = operator.attrgetter("dur")
_NAME = operator.attrgetter("name")
_PID = operator.attrgetter("pid")
_TID = operator.attrgetter("tid")
_ARGS = operator.attrgetter("args")


def _times(st: _State, evs: list[_Ev], *, with_dur: bool = True) -> tuple[pa.Array, pa.Array | None]:
    ts = us_to_ns(list(map(_TS, evs)), st.tstats)
    if st.base_ns:
        ts = pc.add(ts, st.base_ns)
    dur = None
    if with_dur:
        dur = us_to_ns(list(map(_DUR, evs)), st.tstats)
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
    background: Callable[[], None] | None = None,
) -> KinetoRead:
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
            return _read(data, source, rank_hint, diags, exact_text=False, salvage=salvage,
                         progress=progress, background=background)
        except NeedExactText:
            diags.add("timestamps-exact-path",
                      "fractional timestamps beyond 2**43 µs (float64 cannot hold them to the "
                      "nanosecond): numbers re-read as text for exact values", severity="info", source=source)
            return _read(data, source, rank_hint, diags, exact_text=True, salvage=salvage,
                         progress=progress, background=background)
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


_EVENT_SEP = re.compile(rb"\}\s*,\s*\{")
_TOP_DEC = msgspec.json.Decoder(_TopEvents)
#: bytes of JSON decoded at a time when a file is split into chunks
CHUNK_BYTES = int(os.environ.get("TRACEINSIGHT_CHUNK_BYTES", str(24 * 2**20)))


class _SplitFailed(Exception):
    """A chunk boundary fell inside a string: use the exact (raw-list) path instead."""


@dataclass
class _Split:
    header: Any
    layout: str
    bounds: list[tuple[int, int]]


def _fast_split(data: bytes, chunk_bytes: int) -> _Split | None:
    """Cut the event list into byte ranges of whole events without parsing it.

    The header (everything but the event list) is decoded on its own; chunk boundaries are the
    first ``},{`` after each ``chunk_bytes`` mark. A boundary inside a string (or anything odd)
    makes a chunk fail to decode, and the caller falls back to splitting with the parser.
    """
    first = data[:4096].lstrip(b" \t\r\n\xef\xbb\xbf")[:1]
    if first == b"[":
        a = data.find(b"[")
        end = data.rfind(b"]")
        header, layout = None, "array"
        if end <= a:
            return None
    elif first == b"{":
        key = data.find(b'"traceEvents"')
        if key < 0:
            return None
        a = data.find(b"[", key)
        if a < 0 or data[key + len(b'"traceEvents"'):a].strip(b" \t\r\n:") != b"":
            return None
        end = len(data)
        header = None
        for _ in range(16):  # the event list ends at the last ']' after which the object parses
            end = data.rfind(b"]", a, end)
            if end < 0:
                return None
            try:
                header = _TOP_DEC.decode(data[:a] + b"[]" + data[end + 1:])
                break
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue
        if header is None:
            return None
        layout = "object"
    else:
        return None
    start = data.find(b"{", a, end)
    bounds: list[tuple[int, int]] = []
    if start < 0:
        return _Split(header, layout, bounds)
    close = data.rfind(b"}", start, end) + 1
    pos = start
    while pos < close:
        target = pos + chunk_bytes
        m = _EVENT_SEP.search(data, target, close) if target < close else None
        if m is None:
            bounds.append((pos, close))
            break
        bounds.append((pos, m.start() + 1))
        pos = m.end() - 1
    return _Split(header, layout, bounds)


def _run_chunks(data: bytes, bounds: list[tuple[int, int]], st: "_State",
                collectors: dict[str, "_Columns"],
                progress: Callable[[str, float], None] | None,
                done: Callable[[int, int], None] | None = None) -> int:
    """Decode and process byte ranges of whole events; returns the number of events.
    ``done(a, b)`` is told each range once it has been read."""
    dec = msgspec.json.Decoder(list[_Ev], float_hook=str if st.exact_text else None)
    n = 0
    for i, (a, b) in enumerate(bounds):
        try:
            batch = dec.decode(b"[" + data[a:b] + b"]")
        except (msgspec.DecodeError, msgspec.ValidationError):
            raise _SplitFailed()
        if done:
            done(a, b)
        n += len(batch)
        _process_batch(batch, st, collectors)
        del batch
        if progress:
            progress("parse", (i + 1) / len(bounds))
    return n


@functools.cache
def _madvise() -> Callable[..., int] | None:
    """libc's madvise, looked up once (None off Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        fn = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


def _release_pages(data: bytes, a: int, b: int) -> None:
    """In a forked helper only: give back the pages of ``data[a:b]`` it will not read again.

    After ``fork`` the helper maps every page the parent had, so the 300 MB of JSON would count
    twice in the memory of the process tree. ``MADV_DONTNEED`` drops the helper's private
    copy-on-write view of whole pages inside the range (they would read as zeros here; the
    parent's pages are untouched). A no-op off Linux."""
    fn = _madvise()
    if fn is None or b <= a:
        return
    import ctypes
    import mmap

    base = ctypes.cast(ctypes.c_char_p(data), ctypes.c_void_p).value or 0
    page = mmap.PAGESIZE
    start = -(-(base + a) // page) * page
    end = ((base + b) // page) * page
    if end > start:
        fn(start, end - start, 4)  # MADV_DONTNEED


def _run_batches(events: list, lo: int, hi: int, st: "_State", collectors: dict[str, "_Columns"],
                 progress: Callable[[str, float], None] | None) -> None:
    """Decode and process the raw events ``events[lo:hi]`` batch by batch (bounded memory)."""
    dec = msgspec.json.Decoder(list[_Ev], float_hook=str if st.exact_text else None)
    for start in range(lo, hi, BATCH_EVENTS):
        chunk = events[start:min(start + BATCH_EVENTS, hi)]
        batch = dec.decode(b"[" + b",".join(chunk) + b"]")
        del chunk
        _process_batch(batch, st, collectors)
        del batch
        if progress:
            progress("parse", min(1.0, (start + BATCH_EVENTS - lo) / max(1, hi - lo)))


#: files with at least this many events are parsed by two processes (fork, Linux)
PARALLEL_MIN_EVENTS = 300_000


def _workers(n_events: int) -> int:
    env = os.environ.get("TRACEINSIGHT_WORKERS")
    if env:
        return max(1, int(env))
    if n_events < PARALLEL_MIN_EVENTS or not sys.platform.startswith("linux"):
        return 1
    return max(1, min(2, os.cpu_count() or 1))


# the raw events and state a forked worker inherits (set just before the pool starts)
_SHARED: dict[str, Any] = {}


def _worker(task: tuple[int, int, int, str]) -> dict[str, Any]:
    """A forked worker: parse ``events[lo:hi]`` into Arrow IPC files, return its state."""
    idx, lo, hi, outdir = task
    events = _SHARED["events"]
    st, collectors = _worker_state(_SHARED["state"])
    try:
        _run_batches(events, lo, hi, st, collectors, None)
    except NeedExactText:
        return {"need_exact": True}
    return _hand_back(st, collectors, outdir, f"w{idx}")


def _worker_state(base: "_State") -> tuple["_State", dict[str, "_Columns"]]:
    st = _State(source=base.source, rank=base.rank, base_ns=base.base_ns,
                exact_text=base.exact_text, diags=DiagnosticLog())
    return st, {name: _Columns(st.bad) for name in schema.TABLES}


def _hand_back(st: "_State", collectors: dict[str, "_Columns"], outdir: str,
               prefix: str) -> dict[str, Any]:
    """A worker's tables as Arrow IPC files in ``outdir`` and its state, for the parent."""
    files = {}
    for name, col in collectors.items():
        t = col.table(name)
        path = os.path.join(outdir, f"{prefix}_{name}.arrow")
        with pa.OSFile(path, "wb") as f, pa.ipc.new_file(f, t.schema) as w:
            w.write_table(t)
        files[name] = path
    return {"files": files, "counts": st.counts, "bad": st.bad, "tstats": st.tstats,
            "negative": st.negative_durations, "process_names": st.process_names,
            "process_labels": st.process_labels, "thread_names": st.thread_names,
            "diags": st.diags.items}


def _chunk_worker(task: tuple[int, int, str]) -> dict[str, Any]:
    """Forked helper: parse chunks ``lo:hi`` of the shared split into Arrow IPC files."""
    lo, hi, outdir = task
    data, bounds = _SHARED["data"], _SHARED["bounds"]
    st, collectors = _worker_state(_SHARED["state"])
    _release_pages(data, 0, bounds[lo][0])  # the parent's half
    try:
        n = _run_chunks(data, bounds[lo:hi], st, collectors, None,
                        lambda a, b: _release_pages(data, a, b))
    except NeedExactText:
        return {"need_exact": True}
    except _SplitFailed:
        return {"split_failed": True}
    return {**_hand_back(st, collectors, outdir, "c"), "events": n}


def _merge_state(st: "_State", r: dict[str, Any]) -> None:
    st.counts.update(r["counts"])
    st.bad.update(r["bad"])
    for k in ("rounded", "invalid", "negative"):
        setattr(st.tstats, k, getattr(st.tstats, k) + getattr(r["tstats"], k))
    st.negative_durations += r["negative"]
    st.process_names.update(r["process_names"])
    st.process_labels.update(r["process_labels"])
    st.thread_names.update(r["thread_names"])
    st.diags.extend(r["diags"])


def _chunks_two_processes(data: bytes, bounds: list[tuple[int, int]], st: "_State",
                          progress: Callable[[str, float], None] | None,
                          background: Callable[[], None] | None) -> tuple[dict[str, pa.Table], int]:
    """This process parses the first half of the chunks while a forked helper parses the
    second half (it inherits ``data`` copy-on-write and returns Arrow IPC files)."""
    import multiprocessing
    import tempfile

    k = (len(bounds) + 1) // 2
    with tempfile.TemporaryDirectory(prefix="traceinsight-parse-") as tmp:
        _SHARED.update(data=data, bounds=bounds, state=st)
        ctx = multiprocessing.get_context("fork")
        pool = ctx.Pool(1)
        try:
            _SHARED.clear()
            pending = pool.apply_async(_chunk_worker, ((k, len(bounds), tmp),))
            if background:
                background()  # threads may start once the helper has forked
            collectors = {name: _Columns(st.bad) for name in schema.TABLES}
            n = _run_chunks(data, bounds[:k], st, collectors,
                            (lambda stage, f: progress(stage, 0.5 * f)) if progress else None)
            mine = {name: col.table(name) for name, col in collectors.items()}
            del collectors
            r = pending.get()
        finally:
            pool.close()
            pool.join()
        if r.get("need_exact"):
            raise NeedExactText()
        if r.get("split_failed"):
            raise _SplitFailed()
        _merge_state(st, r)
        tables = {}
        for name in schema.TABLES:  # one table at a time: free each half once joined
            other = pa.ipc.open_file(pa.memory_map(r["files"][name])).read_all()
            tables[name] = pa.concat_tables([mine.pop(name), other]).unify_dictionaries().combine_chunks()
            del other
        if progress:
            progress("parse", 1.0)
    return tables, n + r["events"]


def _parallel(events: list, st: "_State", workers: int,
              progress: Callable[[str, float], None] | None) -> dict[str, pa.Table]:
    """Parse contiguous halves of the event list in forked processes and join their tables.

    The children inherit the decoded raw event slices (copy-on-write) and hand back Arrow IPC
    files, so nothing large is pickled; the tables are joined in event order.
    """
    import multiprocessing
    import tempfile

    n = len(events)
    bounds = [n * i // workers for i in range(workers + 1)]
    with tempfile.TemporaryDirectory(prefix="traceinsight-parse-") as tmp:
        _SHARED["events"], _SHARED["state"] = events, st
        try:
            ctx = multiprocessing.get_context("fork")
            with ctx.Pool(workers) as pool:
                results = []
                for i, r in enumerate(pool.imap(_worker, [(i, bounds[i], bounds[i + 1], tmp)
                                                           for i in range(workers)])):
                    results.append(r)
                    if progress:
                        progress("parse", (i + 1) / workers)
        finally:
            _SHARED.clear()
        if any(r.get("need_exact") for r in results):
            raise NeedExactText()
        for r in results:
            _merge_state(st, r)
        tables = {}
        for name in schema.TABLES:
            parts = [pa.ipc.open_file(pa.memory_map(r["files"][name])).read_all() for r in results]
            t = pa.concat_tables(parts)
            tables[name] = t.unify_dictionaries().combine_chunks()
    return tables


def _events_and_header(top: Any, source: str) -> tuple[list, dict[str, Any], str]:
    if isinstance(top, list):
        return top, {}, "array"
    events = top.traceEvents
    if events is None:
        what = ("a PyTorch Execution Trace (nodes), not a profiler trace"
                if top.nodes is not _NULL or top.schema is not None
                else "JSON without a 'traceEvents' list")
        raise TraceFormatError(f"is {what}", path=source,
                               hint="pass the Kineto trace written by torch.profiler "
                                    "(export_chrome_trace / tensorboard_trace_handler)")
    return events, {k: getattr(top, k) for k in _TOP_FIELDS if k not in ("nodes", "schema")}, "object"


def _state_for(header: dict[str, Any], source: str, rank_hint: int | None, diags: DiagnosticLog,
               exact_text: bool) -> tuple["_State", dict[str, Any]]:
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
    return st, dist


def _read_split(data: bytes, split: _Split, source: str, rank_hint: int | None,
                diags: DiagnosticLog, *, exact_text: bool,
                progress: Callable[[str, float], None] | None,
                background: Callable[[], None] | None, salvage: bool) -> KinetoRead:
    """The fast path for large files: chunks of whole events, two processes when worthwhile."""
    header = ({} if split.header is None else
              {k: getattr(split.header, k) for k in _TOP_FIELDS if k not in ("nodes", "schema")})
    st, dist = _state_for(header, source, rank_hint, diags, exact_text)
    try:
        if len(split.bounds) >= 2 and _workers(PARALLEL_MIN_EVENTS) > 1:
            tables, n_events = _chunks_two_processes(data, split.bounds, st, progress, background)
        else:
            if background:
                background()
            collectors = {name: _Columns(st.bad) for name in schema.TABLES}
            n_events = _run_chunks(data, split.bounds, st, collectors, progress)
            tables = {name: col.table(name) for name, col in collectors.items()}
    except _SplitFailed:
        diags.add("split-fallback", "event chunks could not be cut by text; parsed with the "
                  "slower exact splitter", severity="info", source=source)
        return _read(data, source, rank_hint, diags, exact_text=exact_text, salvage=salvage,
                     progress=progress, background=None, force_exact_split=True)
    return _finish(tables, header, dist, st, split.layout, rank_hint, n_events, source)


def _read(data: bytes, source: str, rank_hint: int | None, diags: DiagnosticLog, *,
          exact_text: bool, salvage: bool,
          progress: Callable[[str, float], None] | None,
          background: Callable[[], None] | None = None,
          force_exact_split: bool = False) -> KinetoRead:
    batched = len(data) > BATCH_BYTES
    split = _fast_split(data, CHUNK_BYTES) if batched and not force_exact_split else None
    if split is not None:
        return _read_split(data, split, source, rank_hint, diags, exact_text=exact_text,
                           progress=progress, background=background, salvage=salvage)
    top = _decode_top(data, source, diags, exact_text=exact_text, batched=batched,
                      salvage=salvage)
    events, header, layout = _events_and_header(top, source)
    del top
    n_events = len(events)
    st, dist = _state_for(header, source, rank_hint, diags, exact_text)
    workers = _workers(n_events) if batched and not force_exact_split else 1
    if workers > 1:
        tables = _parallel(events, st, workers, progress)
        if background:
            background()  # after the workers: no thread may run while the process forks
    else:
        if background:
            background()
        collectors = {name: _Columns(st.bad) for name in schema.TABLES}
        if batched:
            _run_batches(events, 0, n_events, st, collectors, progress)
        else:
            _process_batch(events, st, collectors)
            if progress:
                progress("parse", 1.0)
        tables = {name: col.table(name) for name, col in collectors.items()}
    del events
    return _finish(tables, header, dist, st, layout, rank_hint, n_events, source)


def _finish(tables: dict[str, pa.Table], header: dict[str, Any], dist: dict[str, Any],
            st: "_State", layout: str, rank_hint: int | None, n_events: int,
            source: str) -> KinetoRead:
    if n_events == 0:
        raise EmptyTraceError("trace holds no events", path=source,
                              hint="the profiler window may have been empty: check the schedule "
                                   "(wait/warmup/active) and that prof.step() is called")
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
                      counts=dict(st.counts), diagnostics=st.diags)


def _family_of(ph: Any, c: Any) -> str:
    if ph == "X":
        f = None
        if c.__class__ is str:
            f = _X_FAMILY.get(c) or _X_FAMILY.get(c.lower())
        return f or "other"
    if ph == "i" or ph == "I":
        return "instant"
    if ph == "s" or ph == "f" or ph == "t":
        return "flow"
    if ph == "M":
        return "meta"
    if ph is None:
        return "invalid"
    return "other"


class _Runs(list):
    """A family's events, concatenated from its (ph, cat) groups; ``cat_runs`` remembers the
    category of each run so the category column needs no per-event work."""

    cat_runs: list


def _family(parts: list[tuple[Any, list]]) -> _Runs:
    out = _Runs(itertools.chain.from_iterable(lst for _, lst in parts))
    out.cat_runs = [(key, len(lst)) for key, lst in parts]
    return out


def _run_col(evs: list[_Ev], pick: Callable[[tuple], Any], fallback: Callable[[_Ev], Any]) -> pa.Array:
    """A dictionary column that is constant within each (ph, cat) run of a family."""
    runs = getattr(evs, "cat_runs", None)
    if runs is None:
        return _dict_col([fallback(e) for e in evs])
    vals = [pick(k) for k, _ in runs]
    if any(v is None for v in vals):
        return _dict_col([fallback(e) for e in evs])
    vals = [v if v.__class__ is str else str(v) for v in vals]
    idx = np.repeat(np.arange(len(runs), dtype=np.int32), [n for _, n in runs])
    return _dictionary(idx, vals)


def _split_steps(evs: _Runs) -> tuple[list, list]:
    """ProfilerStep#N events out of a family (they become ranges)."""
    names = set(map(_NAME, evs))
    if not any(n.__class__ is str and n.startswith("ProfilerStep#") for n in names):
        return evs, []
    keep, steps = [], []
    for e in evs:
        (steps if e.name.__class__ is str and e.name.startswith("ProfilerStep#") else keep).append(e)
    return keep, steps


def _process_batch(events: list[_Ev], st: _State, out: dict[str, _Columns]) -> None:
    # one dict lookup per event: cat -> its group (groups are split by ph afterwards, which
    # only matters for the few categories shared by several phases); joined per family after
    by_cat: dict[Any, list] = {}
    get = by_cat.get
    for e in events:
        c = e.cat
        lst = get(c)
        if lst is None:
            lst = by_cat[c] = []
        lst.append(e)
    route: dict[tuple, list] = {}
    for cat, lst in by_cat.items():
        phs = set(map(_PH, lst))
        if len(phs) == 1:
            route[(phs.pop(), cat)] = lst
        else:  # e.g. flows: "s" and "f" share a category
            for ph in phs:
                route[(ph, cat)] = [e for e in lst if e.ph == ph]
    del by_cat
    parts: dict[str, list[tuple[Any, list]]] = {}
    instants: list[_Ev] = []
    for (ph, cat), lst in route.items():
        f = _family_of(ph, cat)
        if f == "instant":
            instants.extend(lst)
        else:
            parts.setdefault(f, []).append(((ph, cat), lst))
    del route
    fam: dict[str, list] = {f: _family(p) for f, p in parts.items()}
    for e in instants:
        fam.setdefault("memory" if e.name in _MEMORY_NAMES else "other", []).append(e)
    for k in ("op", "annotation", "gpu_annotation", "kernel", "memcpy", "memset", "sync",
              "runtime", "driver", "python", "memory", "flow", "meta", "other", "invalid"):
        fam.setdefault(k, [])

    # ProfilerStep#N is a user annotation (a cpu_op in PyTorch 1.8-1.12): move it to ranges
    steps: list[_Ev] = []
    for key in ("op", "annotation"):
        keep, found = _split_steps(fam[key])
        if found:
            fam[key] = keep
            steps.extend(found)
    fam["step"] = steps
    gsteps = sum(1 for n in map(_NAME, fam["gpu_annotation"])
                 if n.__class__ is str and n.startswith("ProfilerStep#"))

    c = st.counts
    for key, lst in fam.items():
        if lst:
            c[{"op": "cpu_op", "annotation": "annotation", "step": "step",
               "gpu_annotation": "gpu_annotation", "python": "python_function"}.get(key, key)] += len(lst)
    if gsteps:
        c["gpu_step"] += gsteps
        c["gpu_annotation"] -= gsteps

    _gpu(st, fam["kernel"], "kernel", out)
    _gpu(st, fam["memcpy"], "memcpy", out)
    _gpu(st, fam["memset"], "memset", out)
    _gpu(st, fam["sync"], "sync", out)
    _runtime(st, fam["runtime"], "runtime", out)
    _runtime(st, fam["driver"], "driver", out)
    _ops(st, fam["op"], out)
    _ranges(st, fam["step"], fam["annotation"], fam["gpu_annotation"], out)
    _python(st, fam["python"], out)
    _memory(st, fam["memory"], out)
    _flows(st, fam["flow"], out)
    _other(st, fam["other"], out)
    _meta(st, fam["meta"])
    if fam["invalid"]:
        st.bad["events without ph"] += len(fam["invalid"])


def _cat_col(evs: list[_Ev]) -> pa.Array:
    runs = getattr(evs, "cat_runs", None)
    if runs is None:
        return _dict_col([e.cat for e in evs])
    cats = [c for (_, c), _ in runs]
    idx = np.repeat(np.arange(len(runs), dtype=np.int32), [n for _, n in runs])
    vals = ["" if c is None else (c if c.__class__ is str else str(c)) for c in cats]
    return _dictionary(idx, vals, [i for i, c in enumerate(cats) if c is None])


def _common(st: _State, evs: list[_Ev], *, thread: bool = True) -> dict[str, pa.Array]:
    ts, dur = _times(st, evs)
    names = list(map(_NAME, evs))
    cols = {
        "rank": pa.array(np.full(len(evs), st.rank, dtype=np.int32)),
        "name": _dict_col(names),
        "start_ns": ts,
        "dur_ns": dur,
        "cat_raw": _cat_col(evs),
    }
    if cols["name"].null_count:
        cols["name"] = pc.fill_null(cols["name"].cast(pa.string()), "").dictionary_encode()
    if thread:
        cols["process"] = _id_str_col(list(map(_PID, evs)))
        cols["thread"] = _id_str_col(list(map(_TID, evs)))
    return cols


def _ext(a: list) -> pa.Array:
    ids = [x.external_id if x else None for x in a]
    if any(x is not None and x.external_id_legacy is not None for x in a[:64]) or ids.count(None) == len(ids):
        ids = [_first(x.external_id, x.external_id_legacy) if x else None for x in a]  # legacy key
    return _int_col(ids)


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
    dims = [x.input_dims if x else None for x in a]
    if any(x is not None and x.input_dims is _NULL and x.input_dims_legacy is not _NULL for x in a[:64]):
        dims = [(x.input_dims if x.input_dims is not _NULL else x.input_dims_legacy) if x else None
                for x in a]  # PyTorch <= 1.8 wrote "Input dims"
    cols["input_dims"] = _raw_text(dims)
    cols["input_types"] = _raw_text([x.input_types if x else None for x in a])
    cols["concrete_inputs"] = _raw_text([x.concrete_inputs if x else None for x in a])
    cols["flops"] = _float_col([x.flops if x else None for x in a])
    comm = [i for i, x in enumerate(a) if x is not None and x.collective_name is not None]
    n = len(evs)
    if comm:
        ca = _decode_args([evs[i] for i in comm], _CommArgs, st.args_dec)
        idx = pa.array(comm, type=pa.int64())

        def spread(values: list, typ: pa.DataType) -> pa.Array:
            full = [None] * n
            for i, v in zip(comm, values):
                full[i] = v
            return _dict_col(full) if pa.types.is_dictionary(typ) else _int_col(full)

        cols["collective_name"] = spread([x.collective_name if x else None for x in ca], schema.DICT)
        cols["in_msg_nelems"] = spread([x.in_nelems if x else None for x in ca], pa.int64())
        cols["out_msg_nelems"] = spread([x.out_nelems if x else None for x in ca], pa.int64())
        cols["group_size"] = spread([x.group_size if x else None for x in ca], pa.int64())
        cols["dtype"] = spread([x.dtype if x else None for x in ca], schema.DICT)
        cols["pg_name"] = spread([x.pg_name if x else None for x in ca], schema.DICT)
        del idx
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
    """Python frames. Their args (frame ids) are decoded for ``nn.Module`` frames only: the
    module frames are what attribution needs, and they are a few percent of all frames."""
    if not evs:
        return
    cols = _common(st, evs)
    names = cols["name"]
    is_mod_dict = pc.starts_with(names.dictionary, "nn.Module: ")
    is_module = pc.fill_null(pc.take(is_mod_dict, names.indices), False)
    cols["is_module"] = is_module
    pos = np.flatnonzero(is_module.to_numpy(zero_copy_only=False))
    n = len(evs)
    if len(pos):
        a = _decode_args([evs[i] for i in pos], _PyArgs, st.args_dec)
        for col, attr in (("python_id", "python_id"), ("parent_id", "parent_id"),
                          ("module_id", "module_id")):
            full = [None] * n
            for i, x in zip(pos.tolist(), a):
                if x is not None:
                    full[i] = getattr(x, attr)
            cols[col] = _int_col(full)
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
        "kind": _run_col(evs, lambda k: k[1], lambda e: e.cat if e.cat is not None else (e.name or "")),
        "phase": _run_col(evs, lambda k: k[0], lambda e: e.ph),
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
