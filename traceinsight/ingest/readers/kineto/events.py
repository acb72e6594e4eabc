"""Kineto events as decoded, their ``args``, the per-file state, and Kineto's vocabulary.

Events are decoded into :class:`Event` structs with their ``args`` still raw JSON; the args of
each event family are decoded later in one call into a small struct that names only the keys
read (unknown keys are skipped in C). The tables here translate Kineto's words (flow categories,
event phases, the c10 device-type enum) into the store's meanings.
"""

from __future__ import annotations

import operator
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec
import pyarrow as pa
import pyarrow.compute as pc

from traceinsight.diagnostics import DiagnosticLog
from traceinsight.ingest.columns import TableBuilder
from traceinsight.ingest.readers.kineto.timeconv import ConversionStats, count_negative, us_to_ns
from traceinsight.store import schema

NULL = msgspec.Raw(b"null")


class Event(msgspec.Struct, gc=False):
    """One trace event, ``args`` kept as raw JSON."""

    ph: Any = None
    cat: Any = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    id: Any = None
    args: msgspec.Raw = NULL


# --- args of each event family: only the keys we read --------------------------------------


def _f(name: str) -> Any:
    return msgspec.field(default=None, name=name)


class _Linked(msgspec.Struct, gc=False):
    """Args that name the launching CPU op."""

    external_id: Any = _f("External id")
    external_id_legacy: Any = _f("external id")


class _Launched(_Linked, gc=False):
    correlation: Any = None


class GpuArgs(_Launched, gc=False):
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
    pg_name: Any = _f("Process Group Name")
    seq: Any = _f("Seq")


class RuntimeArgs(_Launched, gc=False):
    cbid: Any = None
    cid: Any = None


class OpArgs(_Linked, gc=False):
    sequence_nr: Any = _f("Sequence number")
    fwd_thread: Any = _f("Fwd thread id")
    input_dims: msgspec.Raw = msgspec.field(default=NULL, name="Input Dims")
    input_dims_legacy: msgspec.Raw = msgspec.field(default=NULL, name="Input dims")
    input_types: msgspec.Raw = msgspec.field(default=NULL, name="Input type")
    concrete_inputs: msgspec.Raw = msgspec.field(default=NULL, name="Concrete Inputs")
    call_stack: Any = _f("Call stack")
    flops: Any = None
    collective_name: Any = _f("Collective name")  # decoded in full by CommArgs when present


class CommArgs(msgspec.Struct, gc=False):
    """Collective keys of c10d ops (record_param_comms); decoded only for those ops."""

    collective_name: Any = _f("Collective name")
    in_nelems: Any = _f("In msg nelems")
    out_nelems: Any = _f("Out msg nelems")
    group_size: Any = _f("Group size")
    dtype: Any = None
    pg_name: Any = _f("Process Group Name")
    seq: Any = _f("Seq")


class PyArgs(msgspec.Struct, gc=False):
    python_id: Any = _f("Python id")
    parent_id: Any = _f("Python parent id")
    module_id: Any = _f("Python module id")


class MemArgs(msgspec.Struct, gc=False):
    device_type: Any = _f("Device Type")
    device: Any = _f("Device Id")
    addr: Any = _f("Addr")
    bytes: Any = _f("Bytes")
    total_allocated: Any = _f("Total Allocated")
    total_reserved: Any = _f("Total Reserved")


class MetaArgs(msgspec.Struct, gc=False):
    name: Any = None
    labels: Any = None


class OpMetaArgs(OpArgs, gc=False):
    """The args of CPU ops, annotations and metadata events: what :class:`OpEvent` decodes."""

    name: Any = None
    labels: Any = None


#: the categories an :class:`OpEvent` may have (as written; others fail its decode early)
_OP_CATS = Literal[
    "cpu_op", "Operator", "operator", "user_annotation", "User", "user", "gpu_user_annotation"
]


class OpEvent(msgspec.Struct, gc=False):
    """An event of a chunk of CPU ops (and metadata) only, ``args`` decoded with the event:
    the 2021 traces write long runs of ops whose args (call stacks) a second pass would scan
    again. Another phase or category fails the decode at once (the chunk is then decoded as
    :class:`Event`); :func:`ops_only` tells whether a chunk decoded so may be used."""

    ph: Literal["X", "M"] | None = None
    cat: _OP_CATS | None = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    id: Any = None
    args: OpMetaArgs | None = None


TS = operator.attrgetter("ts")
PH = operator.attrgetter("ph")
DUR = operator.attrgetter("dur")
NAME = operator.attrgetter("name")
PID = operator.attrgetter("pid")
TID = operator.attrgetter("tid")
ARGS = operator.attrgetter("args")
CAT = operator.attrgetter("cat")
ID = operator.attrgetter("id")
_COLLECTIVE = operator.attrgetter("collective_name")


#: args whose first values average more than this many bytes are decoded one value per call
_LARGE_ARGS = 400
_SAMPLE = 64


def decode_args(events: list[Event], typ: type, dec_cache: dict) -> list:
    """Decode the raw ``args`` of ``events`` in one batch into ``typ`` (None where absent).

    (Decoding every event's args with the event, into one struct of all keys, was measured
    slower on three of four shapes: matching 43 names per object costs more than the second
    pass, except where args are large, as the 2021 call stacks; those are decoded without
    joining them into one buffer first.)"""
    if not events:
        return []
    if events[0].__class__ is OpEvent:  # decoded with the events (``ops_only`` holds)
        if typ is not OpArgs and typ is not MetaArgs:
            raise TypeError(f"{typ.__name__} args of an op chunk")  # pragma: no cover
        return list(map(ARGS, events))
    raws = list(map(ARGS, events))
    one = dec_cache.get((typ, 1))
    if one is None:
        one = dec_cache[(typ, 1)] = msgspec.json.Decoder(typ | None)
    try:
        if sum(map(len, raws[:_SAMPLE])) > _LARGE_ARGS * min(len(raws), _SAMPLE):
            # large args (call stacks): one call per value costs less than copying them
            # all into one buffer
            return list(map(one.decode, raws))
        dec = dec_cache.get(typ)
        if dec is None:
            dec = dec_cache[typ] = msgspec.json.Decoder(list[typ | None])  # type: ignore[valid-type]
        return dec.decode(b"[" + b",".join(raws) + b"]")
    except msgspec.DecodeError:
        # an args value of an unexpected shape (e.g. a list where an object belongs):
        # decode one by one and drop the bad ones
        out = []
        for r in raws:
            try:
                out.append(one.decode(r))
            except msgspec.DecodeError:
                out.append(None)
        return out


_EMPTY: dict[type, Any] = {}


class _ArgColumns(dict):
    """Field name -> the values of that field over a batch of args structs, each gathered
    (one ``attrgetter`` pass in C) the first time it is read: a family reads only some
    fields, and transposing every struct into tuples costs more than that."""

    def __init__(self, rows: list, fields: tuple[str, ...]) -> None:
        super().__init__()
        self._rows = rows
        self._fields = fields

    def __missing__(self, key: str) -> list:
        if key not in self._fields:
            raise KeyError(key)
        getter = _GETTERS.get(key)
        if getter is None:
            getter = _GETTERS[key] = operator.attrgetter(key)
        values = self[key] = list(map(getter, self._rows))
        return values


_GETTERS: dict[str, Callable[[Any], Any]] = {}


def arg_columns(events: list[Event], typ: type, dec_cache: dict) -> dict[str, Sequence[Any]]:
    """The ``args`` of ``events`` decoded into ``typ`` (:func:`decode_args`), one sequence of
    values per field of ``typ`` (gathered when first read); events without args read as
    ``typ()`` (its defaults)."""
    a = decode_args(events, typ, dec_cache)
    if events and events[0].__class__ is OpEvent:
        typ = OpMetaArgs  # the struct the args were decoded into (its keys include typ's)
    fields = typ.__struct_fields__  # type: ignore[attr-defined]
    if not a:
        return {f: () for f in fields}
    if None in a:
        empty = _EMPTY.get(typ)
        if empty is None:
            empty = _EMPTY[typ] = typ()
        a = [x if x is not None else empty for x in a]
    return _ArgColumns(a, fields)


# --- Kineto's vocabulary -> the store's ----------------------------------------------------

# normalised family of complete ('X') events, keyed by lower-cased cat
X_FAMILY = {
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
#: flow category -> flows.kind (launch flows were "async" / "async_gpu" before "ac2g")
FLOW_KINDS = {"ac2g": "launch", "async": "launch", "async_gpu": "launch", "fwdbwd": "fwd_bwd"}
#: flow phase -> flows.phase
FLOW_PHASES = {"s": "start", "f": "end", "t": "step"}
#: Chrome-trace phase -> other_events.event_shape
EVENT_SHAPES = {
    "X": "span",
    "B": "begin",
    "E": "end",
    "i": "instant",
    "I": "instant",
    "C": "counter",
    "b": "async_begin",
    "S": "async_begin",
    "n": "async_step",
    "T": "async_step",
    "p": "async_step",
    "e": "async_end",
    "F": "async_end",
    "P": "sample",
    "N": "object",
    "O": "object",
    "D": "object",
    "R": "mark",
    "c": "clock_sync",
    "(": "context",
    ")": "context",
}
#: c10::DeviceType codes (memory events' ``Device Type``) -> memory_events.device_type
DEVICE_TYPES = (
    "cpu",
    "cuda",
    "mkldnn",
    "opengl",
    "opencl",
    "ideep",
    "hip",
    "fpga",
    "maia",
    "xla",
    "vulkan",
    "metal",
    "xpu",
    "mps",
    "meta",
    "hpu",
    "ve",
    "lazy",
    "ipu",
    "mtia",
    "privateuse1",
)

STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")
MEMORY_NAMES = {"[memory]": "memory", "[OutOfMemory]": "oom"}
MODULE_PREFIX = "nn.Module: "
BUILTIN_PREFIX = "<built-in "


#: X-event families whose args :class:`OpMetaArgs` holds
_OP_FAMILIES = frozenset({"op", "annotation", "gpu_annotation"})


def ops_only(events: list) -> bool:
    """Whether a chunk decoded as :class:`OpEvent` may be used: every event is a CPU op, an
    annotation or a metadata event (the decode let only their phases and categories pass,
    and events without them), and no op is a collective (their ``CommArgs`` are read from the
    raw args)."""
    phs = set(map(PH, events))
    if None in phs:
        return False
    if (
        "X" in phs
        and None in set(map(CAT, events))
        and any(e.ph == "X" and e.cat is None for e in events)
    ):  # X without a cat
        return False
    named = list(map(_COLLECTIVE, filter(None, map(ARGS, events))))
    return named.count(None) == len(named)


def looks_ops_only(events: list) -> bool:
    """Whether every 64th event is a CPU op, an annotation or a metadata event (a chunk of
    :class:`Event`: then the next chunk is likely one of ops only)."""
    try:
        pairs = set(zip(map(PH, events[::64]), map(CAT, events[::64])))
    except TypeError:  # an unhashable category
        return False
    for ph, cat in pairs:
        if ph == "M":
            continue
        if ph != "X" or cat.__class__ is not str:
            return False
        if (X_FAMILY.get(cat) or X_FAMILY.get(cat.lower())) not in _OP_FAMILIES:
            return False
    return True


# --- per-file state ------------------------------------------------------------------------


@dataclass
class State:
    """What reading one file accumulates besides the tables."""

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
    missing_durations: int = 0  #: complete events whose dur is absent or unreadable (read as 0)
    negative_ts: int = 0  #: events before the time origin

    def builders(self) -> dict[str, TableBuilder]:
        """One empty builder per store table."""
        return {name: TableBuilder(self.bad) for name in schema.TABLES}

    def fresh(self) -> State:
        """A new state for a part of the same file (a forked helper's)."""
        return State(
            source=self.source,
            rank=self.rank,
            base_ns=self.base_ns,
            exact_text=self.exact_text,
            diags=DiagnosticLog(),
        )

    def hand_back(self) -> dict[str, Any]:
        """What a helper's state adds to the parent's (picklable)."""
        return {
            "counts": self.counts,
            "bad": self.bad,
            "tstats": self.tstats,
            "negative": self.negative_durations,
            "missing_dur": self.missing_durations,
            "negative_ts": self.negative_ts,
            "process_names": self.process_names,
            "process_labels": self.process_labels,
            "thread_names": self.thread_names,
            "diags": self.diags.items,
        }

    def merge(self, r: dict[str, Any]) -> None:
        """Add a helper's :meth:`hand_back`."""
        self.counts.update(r["counts"])
        self.bad.update(r["bad"])
        for k in ("rounded", "invalid", "negative"):
            setattr(self.tstats, k, getattr(self.tstats, k) + getattr(r["tstats"], k))
        self.negative_durations += r["negative"]
        self.missing_durations += r["missing_dur"]
        self.negative_ts += r["negative_ts"]
        self.process_names.update(r["process_names"])
        self.process_labels.update(r["process_labels"])
        self.thread_names.update(r["thread_names"])
        self.diags.extend(r["diags"])


def times(st: State, evs: list[Event], *, with_dur: bool = True) -> tuple[pa.Array, pa.Array]:
    ts = us_to_ns(list(map(TS, evs)), st.tstats)
    st.negative_ts += count_negative(ts)
    if st.base_ns:
        ts = pc.add_checked(ts, st.base_ns)
    dur = None
    if with_dur:
        dur = us_to_ns(list(map(DUR, evs)), st.tstats)
        if dur.null_count:
            st.missing_durations += dur.null_count
            dur = pc.fill_null(dur, 0)
        neg = count_negative(dur)
        if neg:
            st.negative_durations += neg
            dur = pc.max_element_wise(dur, 0)
    return ts, dur
