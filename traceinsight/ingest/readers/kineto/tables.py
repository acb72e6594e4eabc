"""Kineto events -> store tables: one builder per event family.

A batch of events is grouped by (phase, category) into families (kernels, runtime calls, CPU
ops, Python frames, ...); each family becomes rows of one store table, its ``args`` decoded in
one call. Columns that are constant within a (phase, category) run cost no per-event work.
"""

from __future__ import annotations

import contextlib
import itertools
import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from traceinsight.ingest.columns import (
    TableBuilder,
    capped_names,
    dict_col,
    float_col,
    from_numpy,
    id_str_col,
    int_col,
    json_text_col,
    rank_col,
    repeat_col,
    xyz_cols,
)
from traceinsight.ingest.readers.kineto.events import (
    BUILTIN_PREFIX,
    CAT,
    DEVICE_TYPES,
    EVENT_SHAPES,
    FLOW_KINDS,
    FLOW_PHASES,
    ID,
    MEMORY_NAMES,
    MODULE_PREFIX,
    NAME,
    NULL,
    PH,
    PID,
    STEP_RE,
    TID,
    X_FAMILY,
    CommArgs,
    Event,
    GpuArgs,
    MemArgs,
    MetaArgs,
    OpArgs,
    PyArgs,
    RuntimeArgs,
    State,
    arg_columns,
    decode_args,
    times,
)
from traceinsight.ingest.readers.kineto.timeconv import us_to_ns
from traceinsight.util.redact import clean_text, redact_text
from traceinsight.util.safetext import cap_name

Args = dict[str, Sequence[Any]]  #: decoded args, one sequence per key (``arg_columns``)
_STREAM_RE = re.compile(r"(-?\d+)")
_COPY_RE = re.compile(r"\b(HtoD|DtoH|DtoD|HtoH|PtoP|DtoA|AtoD|HtoA|AtoH|AtoA)\b")


# --- grouping a batch into families --------------------------------------------------------


def _family_of(ph: Any, c: Any) -> str:
    if ph == "X":
        f = None
        if c.__class__ is str:
            f = X_FAMILY.get(c) or X_FAMILY.get(c.lower())
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


def _run_col(
    evs: list[Event], pick: Callable[[tuple], Any], fallback: Callable[[Event], Any]
) -> pa.Array:
    """A dictionary column that is constant within each (ph, cat) run of a family."""
    runs = getattr(evs, "cat_runs", None)
    if runs is None:
        return dict_col([fallback(e) for e in evs])
    vals = [pick(k) for k, _ in runs]
    if any(v is None for v in vals):
        return dict_col([fallback(e) for e in evs])
    return repeat_col(vals, [n for _, n in runs])


def _cat_col(evs: list[Event]) -> pa.Array:
    runs = getattr(evs, "cat_runs", None)
    if runs is None:
        return dict_col(list(map(CAT, evs)))
    return repeat_col([c for (_, c), _ in runs], [n for _, n in runs])


def _split_steps(evs: list) -> tuple[list, list]:
    """ProfilerStep#N events out of a family (they become ranges)."""
    names = set(map(NAME, evs))
    if not any(n.__class__ is str and n.startswith("ProfilerStep#") for n in names):
        return evs, []
    keep: list[Event] = []
    steps: list[Event] = []
    for e in evs:
        is_step = e.name.__class__ is str and e.name.startswith("ProfilerStep#")
        (steps if is_step else keep).append(e)
    return keep, steps


_COUNT_NAMES = {"op": "cpu_op", "python": "python_function"}
_FAMILIES = (
    "op",
    "annotation",
    "gpu_annotation",
    "kernel",
    "memcpy",
    "memset",
    "sync",
    "runtime",
    "driver",
    "python",
    "memory",
    "flow",
    "meta",
    "other",
    "invalid",
)


def process_batch(events: list[Event], st: State, out: dict[str, TableBuilder]) -> None:
    """Add a batch of events to the tables (``out``) and the state's counts and names."""
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
        phs = set(map(PH, lst))
        if len(phs) == 1:
            route[(phs.pop(), cat)] = lst
        else:  # e.g. flows: "s" and "f" share a category
            for ph in sorted(phs, key=repr):  # a fixed row order in every process
                route[(ph, cat)] = [e for e in lst if e.ph == ph]
    del by_cat
    parts: dict[str, list[tuple[Any, list]]] = {}
    instants: list[Event] = []
    for (ph, cat), lst in route.items():
        f = _family_of(ph, cat)
        if f == "instant":
            instants.extend(lst)
        else:
            parts.setdefault(f, []).append(((ph, cat), lst))
    del route
    fam: dict[str, list] = {f: _family(p) for f, p in parts.items()}
    for e in instants:
        fam.setdefault("memory" if e.name in MEMORY_NAMES else "other", []).append(e)
    for k in _FAMILIES:
        fam.setdefault(k, [])

    # ProfilerStep#N is a user annotation (a cpu_op in PyTorch 1.8-1.12): move it to ranges
    steps: list[Event] = []
    for key in ("op", "annotation"):
        keep, found = _split_steps(fam[key])
        if found:
            fam[key] = keep
            steps.extend(found)
    fam["step"] = steps
    gsteps = sum(
        1
        for n in map(NAME, fam["gpu_annotation"])
        if n.__class__ is str and n.startswith("ProfilerStep#")
    )

    c = st.counts
    for key, lst in fam.items():
        if lst:
            c[_COUNT_NAMES.get(key, key)] += len(lst)
    if gsteps:
        c["gpu_step"] += gsteps
        c["gpu_annotation"] -= gsteps

    for kind in ("kernel", "memcpy", "memset", "sync"):
        _gpu(st, fam[kind], kind, out)
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


# --- one table per family ------------------------------------------------------------------


def _stream_of(tid: Any) -> int | None:
    if tid.__class__ is int:
        return tid
    if isinstance(tid, str):
        m = _STREAM_RE.search(tid)
        if m:
            return int(m.group(1))
    return None


def _common(st: State, evs: list[Event], *, thread: bool = True) -> dict[str, pa.Array]:
    ts, dur = times(st, evs)
    cols = {
        "rank": rank_col(len(evs), st.rank),
        "name": dict_col(list(map(NAME, evs))),
        "start_ns": ts,
        "dur_ns": dur,
        "cat_raw": _cat_col(evs),
    }
    if cols["name"].null_count:
        cols["name"] = pc.fill_null(cols["name"].cast(pa.string()), "").dictionary_encode()
    cols["name"] = capped_names(cols["name"])
    if thread:
        cols["process"] = id_str_col(list(map(PID, evs)))
        cols["thread"] = id_str_col(list(map(TID, evs)))
    return cols


def _ext(a: Args) -> pa.Array:
    ids = a["external_id"]
    old = a["external_id_legacy"]
    legacy = any(x is not None for x in old[:64])
    if legacy or ids.count(None) == len(ids):
        ids = _either(ids, old)
    return int_col(ids)


def _either(p: Sequence[Any], q: Sequence[Any]) -> Sequence[Any]:
    """``p``'s values, ``q``'s where ``p`` has none."""
    if p.count(None) == 0 or q.count(None) == len(q):
        return p
    return [x if x is not None else y for x, y in zip(p, q)]


def _kind_col(kind: str, n: int) -> pa.Array:
    return repeat_col([kind], [n])


def _gpu(st: State, evs: list[Event], kind: str, out: dict[str, TableBuilder]) -> None:
    if not evs:
        return
    a = arg_columns(evs, GpuArgs, st.args_dec)
    cols = _common(st, evs, thread=False)
    cols["kind"] = _kind_col(kind, len(evs))
    dev = a["device"]
    cols["device"] = int_col(_either(dev, list(map(PID, evs))) if None in dev else dev)
    stream = list(a["stream"])
    if kind != "sync" and set(map(type, stream)) == {int}:  # the usual case
        cols["stream"] = int_col(stream)
    else:
        for i, (s, e) in enumerate(zip(stream, evs)):
            if s is None or s.__class__ is not int:
                s = _stream_of(e.tid) if s is None else _stream_of(s)
            if kind == "sync" and s is not None and s >= 1_000_000:
                s -= 1_000_000  # Stream Sync rows sit at stream + 1,000,000 (kineto#1356)
            stream[i] = s
        cols["stream"] = int_col(stream)
    cols["correlation"] = int_col(a["correlation"])
    cols["external_id"] = _ext(a)
    grids = xyz_cols(a["grid"])
    blocks = xyz_cols(a["block"])
    for i, axis in enumerate("xyz"):
        cols[f"grid_{axis}"] = grids[i]
        cols[f"block_{axis}"] = blocks[i]
    cols["registers_per_thread"] = int_col(a["registers"])
    cols["shared_memory_bytes"] = int_col(a["shared_memory"])
    cols["blocks_per_sm"] = float_col(a["blocks_per_sm"])
    cols["warps_per_sm"] = float_col(a["warps_per_sm"])
    cols["occupancy_pct"] = float_col(a["occupancy"])
    cols["bytes"] = int_col(_either(a["bytes"], a["size"]))
    if kind == "memcpy":
        cols["copy_kind"] = dict_col(list(map(_copy_kind, map(NAME, evs), a["kind"])))
    cols["graph_id"] = int_col(a["graph_id"])
    cols["graph_node_id"] = int_col(a["graph_node_id"])
    cols["collective"] = dict_col(a["collective"])
    cols["pg_name"] = dict_col(a["pg_name"])
    cols["seq"] = int_col(a["seq"])
    out["gpu_activities"].add(cols)


def _copy_kind(name: Any, kind: Any) -> str | None:
    if isinstance(name, str):
        m = _COPY_RE.search(name)
        if m:
            return m.group(1)
    if isinstance(kind, str) and _COPY_RE.fullmatch(kind):
        return kind
    return None


def _runtime(st: State, evs: list[Event], kind: str, out: dict[str, TableBuilder]) -> None:
    if not evs:
        return
    a = arg_columns(evs, RuntimeArgs, st.args_dec)
    cols = _common(st, evs)
    cols["kind"] = _kind_col(kind, len(evs))
    cols["correlation"] = int_col(a["correlation"])
    cols["external_id"] = _ext(a)
    cols["cbid"] = int_col(_either(a["cbid"], a["cid"]))
    out["runtime_calls"].add(cols)


def _ops(st: State, evs: list[Event], out: dict[str, TableBuilder]) -> None:
    if not evs:
        return
    a = arg_columns(evs, OpArgs, st.args_dec)
    cols = _common(st, evs)
    cols["external_id"] = _ext(a)
    cols["sequence_nr"] = int_col(a["sequence_nr"])
    cols["fwd_thread"] = int_col(a["fwd_thread"])
    dims = a["input_dims"]
    old = a["input_dims_legacy"]
    if any(
        d is NULL and x is not NULL for d, x in zip(dims[:64], old[:64])
    ):  # PyTorch <= 1.8 wrote "Input dims"
        dims = [d if d is not NULL else x for d, x in zip(dims, old)]
    cols["input_dims"] = json_text_col(dims)
    cols["input_types"] = json_text_col(a["input_types"])
    cols["concrete_inputs"] = json_text_col(a["concrete_inputs"])
    cols["call_stack"] = _call_stack_col(a["call_stack"])
    cols["flops"] = float_col(a["flops"])
    named = a["collective_name"]
    n = len(evs)
    comm = [i for i, x in enumerate(named) if x is not None] if named.count(None) != n else []
    if comm:
        ca = decode_args([evs[i] for i in comm], CommArgs, st.args_dec)

        def spread(values: list, to_col: Callable[[list], pa.Array]) -> pa.Array:
            full = [None] * n
            for i, v in zip(comm, values):
                full[i] = v
            return to_col(full)

        cols["collective_name"] = spread([x.collective_name if x else None for x in ca], dict_col)
        cols["in_msg_nelems"] = spread([x.in_nelems if x else None for x in ca], int_col)
        cols["out_msg_nelems"] = spread([x.out_nelems if x else None for x in ca], int_col)
        cols["group_size"] = spread([x.group_size if x else None for x in ca], int_col)
        cols["dtype"] = spread([x.dtype if x else None for x in ca], dict_col)
        cols["pg_name"] = spread([x.pg_name if x else None for x in ca], dict_col)
        cols["seq"] = spread([x.seq if x else None for x in ca], int_col)
    out["cpu_ops"].add(cols)


def _call_stack_col(values: Sequence[Any]) -> pa.Array:
    """``args["Call stack"]`` (``frame;frame;...``, innermost first) as one frame per line,
    home-directory user names redacted; each distinct stack is converted once, each distinct
    frame redacted once (stacks share most of their frames)."""
    arr = dict_col([v if isinstance(v, str) and v else None for v in values])
    if len(arr.dictionary) == 0:
        return arr
    done: dict[str, str] = {}

    def frame(f: str) -> str:
        r = done.get(f)
        if r is None:
            r = done[f] = redact_text(f)
        return r

    vals = [
        "\n".join(map(frame, cap_name(v).split(";"))) if v is not None else v
        for v in arr.dictionary.to_pylist()
    ]
    return pa.DictionaryArray.from_arrays(arr.indices, pa.array(vals, pa.string()))


def _ranges(
    st: State, steps: list[Event], ann: list[Event], gann: list[Event], out: dict[str, TableBuilder]
) -> None:
    for evs, gpu in ((steps, False), (ann, False), (gann, True)):
        if not evs:
            continue
        a = arg_columns(evs, OpArgs, st.args_dec)
        cols = _common(st, evs, thread=not gpu)
        step_nums = []
        kinds = []
        for e in evs:
            m = STEP_RE.match(e.name if isinstance(e.name, str) else "")
            step_nums.append(int(m.group(1)) if m else None)
            if gpu:
                kinds.append("gpu_step" if m else "gpu_annotation")
            else:
                kinds.append("step" if m else "annotation")
        cols["kind"] = dict_col(kinds)
        cols["step"] = pa.array(step_nums, type=pa.int64())
        cols["external_id"] = _ext(a)
        if gpu:
            cols["device"] = int_col(list(map(PID, evs)))
            cols["stream"] = int_col([_stream_of(e.tid) for e in evs])
        out["ranges"].add(cols)


def _python(st: State, evs: list[Event], out: dict[str, TableBuilder]) -> None:
    """Python frames. Their args (frame ids) are decoded for ``nn.Module`` frames only: the
    module frames are what attribution needs, and they are a few percent of all frames."""
    if not evs:
        return
    cols = _common(st, evs)
    names = cols["name"]
    # the kind of each distinct name, then of each frame (0 function, 1 module, 2 builtin)
    is_mod = pc.fill_null(pc.starts_with(names.dictionary, MODULE_PREFIX), False)
    is_builtin = pc.fill_null(pc.starts_with(names.dictionary, BUILTIN_PREFIX), False)
    kind_of_name = np.where(
        is_mod.to_numpy(zero_copy_only=False),
        1,
        np.where(is_builtin.to_numpy(zero_copy_only=False), 2, 0),
    )
    codes = kind_of_name.astype(np.int32)[names.indices.to_numpy(zero_copy_only=False)]
    cols["frame_kind"] = pa.DictionaryArray.from_arrays(
        from_numpy(codes, pa.int32()), pa.array(["function", "module", "builtin"])
    )
    pos = np.flatnonzero(codes == 1)
    n = len(evs)
    if len(pos):
        a = arg_columns([evs[i] for i in pos], PyArgs, st.args_dec)
        for col in ("python_id", "parent_id", "module_id"):
            cols[col] = _scatter(int_col(a[col]), pos, n)
    out["python_frames"].add(cols)


def _scatter(vals: pa.Array, pos: np.ndarray, n: int) -> pa.Array:
    """An int64 column of ``n`` rows: ``vals`` at rows ``pos``, null elsewhere (numpy: no
    Python list of ``n`` values to convert when ``pos`` are a few percent of the rows)."""
    full = np.zeros(n, dtype=np.int64)
    valid = np.zeros(n, dtype=bool)
    full[pos] = pc.fill_null(vals, 0).to_numpy(zero_copy_only=False)
    valid[pos] = pc.is_valid(vals).to_numpy(zero_copy_only=False)
    return from_numpy(full, pa.int64(), ~valid)


def _device_type_col(codes: pa.Array) -> pa.Array:
    """c10::DeviceType codes -> names (codes beyond the table: ``unknown``)."""
    known = pc.and_(pc.greater_equal(codes, 0), pc.less(codes, len(DEVICE_TYPES)))
    idx = pc.if_else(known, codes, len(DEVICE_TYPES))
    return pc.take(pa.array([*DEVICE_TYPES, "unknown"]), idx).dictionary_encode()


def _memory(st: State, evs: list[Event], out: dict[str, TableBuilder]) -> None:
    if not evs:
        return
    a = arg_columns(evs, MemArgs, st.args_dec)
    ts, _ = times(st, evs, with_dur=False)
    byt = a["bytes"]
    cols = {
        "rank": rank_col(len(evs), st.rank),
        "kind": _memory_kinds(evs, byt),
        "process": id_str_col(list(map(PID, evs))),
        "thread": id_str_col(list(map(TID, evs))),
        "ts_ns": ts,
        "device_type": _device_type_col(int_col(a["device_type"])),
        "device": int_col(a["device"]),
        "addr": int_col(a["addr"], st.bad, "memory Addr beyond int64"),
        "bytes": int_col(byt),
        "total_allocated_bytes": int_col(a["total_allocated"]),
        "total_reserved_bytes": int_col(a["total_reserved"]),
    }
    out["memory_events"].add(cols)


def _memory_kinds(evs: list[Event], byt: Sequence[Any]) -> pa.Array:
    """``oom`` for ``[OutOfMemory]`` events, ``free`` where Bytes is a negative integer, else
    ``alloc`` (dictionary strings in the order they first occur)."""
    raw = None
    if "[OutOfMemory]" not in map(NAME, evs):
        with contextlib.suppress(pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            raw = pa.array(byt)
    if raw is not None and (pa.types.is_integer(raw.type) or pa.types.is_null(raw.type)):
        if pa.types.is_null(raw.type):
            free = np.zeros(len(raw), dtype=bool)
        elif raw.null_count:
            free = pc.fill_null(pc.less(raw, 0), False).to_numpy(zero_copy_only=False)
        else:  # the usual case: integers only
            free = raw.to_numpy() < 0
        vals = ["free", "alloc"] if free[0] else ["alloc", "free"]
        codes = free != bool(free[0])  # 0: the first value's kind, 1: the other
        if not codes.any():
            vals = vals[:1]
        return pa.DictionaryArray.from_arrays(
            from_numpy(codes, pa.int32()), pa.array(vals, pa.string())
        )
    kinds = []
    for e, b in zip(evs, byt):
        if MEMORY_NAMES.get(e.name) == "oom":
            kinds.append("oom")
        else:
            kinds.append("free" if isinstance(b, int) and b < 0 else "alloc")
    return dict_col(kinds)


def _flow_kind(cat: Any) -> Any:
    return FLOW_KINDS.get(cat, cat) if cat.__class__ is str else cat


def _flows(st: State, evs: list[Event], out: dict[str, TableBuilder]) -> None:
    if not evs:
        return
    ts, _ = times(st, evs, with_dur=False)
    cols = {
        "rank": rank_col(len(evs), st.rank),
        "kind": _run_col(
            evs,
            lambda k: _flow_kind(k[1]),
            lambda e: _flow_kind(e.cat if e.cat is not None else (e.name or "")),
        ),
        "phase": _run_col(evs, lambda k: FLOW_PHASES.get(k[0]), lambda e: FLOW_PHASES.get(e.ph)),
        "flow_id": int_col(list(map(ID, evs)), st.bad, "flow id beyond int64"),
        "process": id_str_col(list(map(PID, evs))),
        "thread": id_str_col(list(map(TID, evs))),
        "ts_ns": ts,
    }
    out["flows"].add(cols)


def _other(st: State, evs: list[Event], out: dict[str, TableBuilder]) -> None:
    if not evs:
        return
    ts, _ = times(st, evs, with_dur=False)
    durs = [e.dur for e in evs]
    dur = (
        us_to_ns(durs, st.tstats)
        if any(d is not None for d in durs)
        else pa.nulls(len(evs), pa.int64())
    )
    shape = EVENT_SHAPES.get
    cols = {
        "rank": rank_col(len(evs), st.rank),
        "event_shape": dict_col([shape(e.ph, "other") for e in evs]),
        "name": capped_names(dict_col([e.name if e.name is not None else "" for e in evs])),
        "process": id_str_col(list(map(PID, evs))),
        "thread": id_str_col(list(map(TID, evs))),
        "start_ns": ts,
        "dur_ns": dur,
        "cat_raw": dict_col(list(map(CAT, evs))),
    }
    out["other_events"].add(cols)


def _meta(st: State, evs: list[Event]) -> None:
    if not evs:
        return
    a = decode_args(evs, MetaArgs, st.args_dec)
    for e, x in zip(evs, a):
        if x is None:
            continue
        pid = None if e.pid is None else str(e.pid)
        if e.name == "process_name" and isinstance(x.name, str):
            st.process_names[pid] = clean_text(x.name)  # type: ignore[index]
        elif e.name == "process_labels" and isinstance(x.labels, str):
            st.process_labels[pid] = clean_text(x.labels)  # type: ignore[index]
        elif e.name == "thread_name" and isinstance(x.name, str):
            st.thread_names[f"{pid}/{e.tid}"] = clean_text(x.name)
    st.counts["metadata"] += 0  # a 0 entry in event_counts (the events are counted as "meta")
