"""Why the GPU was idle: every idle nanosecond of the step windows gets exactly one cause.

An idle gap is a stretch of a step window in which the rank's GPU runs nothing (no kernel,
copy or memset on any stream). The activity that ends the gap was launched by one host thread;
the gap is explained by when that launch happened and by what that thread was doing:

- ``dependency``: the work after the gap had been launched before the gap began (the whole
  gap), or its launch call returned more than ``DEPENDENCY_MIN_NS`` before it started (the
  part after the call): it sat queued behind a stream wait event, another stream or a peer;
- otherwise the host side of the gap (gap start → end of the launch call) is painted by the
  host's activity, first match wins: graph ``capture`` (Begin..EndCapture on the thread, graph
  instantiation, capture ranges), one-off ``startup`` calls (context/module/stream creation, a
  kernel launch of 1 ms or more = lazy module loading, an allocator call of 100 ms or more),
  ``compile`` (torch.compile / Triton compile ranges), ``input`` (DataLoader ranges), a
  blocking ``copy`` call, a ``sync`` call, an ``alloc`` call (cudaMalloc/cudaFree/hipFree...,
  a host stall), ``host`` (no runtime call on the rank for 0.5 ms or more: one long CPU op,
  GC, I/O);
- what is left is ``sync`` / ``copy`` when a blocking call drained the queue (it started while
  the GPU was busy and returned as it went idle), up to the time the host waited in it while
  the GPU was busy: the lead it lost, shared by this gap and the next ones of the window until
  the host is ahead again; beyond that it is ``launch`` overhead. A gap with no later activity
  (end of the trace) or whose next activity has no launch record leaves the rest ``unknown``;
  before the first recorded GPU work a blocking call waits on unrecorded work: ``unknown`` too.
- the host side of a gap after which queued work still waited (launch → start over
  ``DEPENDENCY_MIN_NS``) is painted as above, the queued part is ``dependency`` (``input`` where
  the host was loading data meanwhile).

Calls shorter than ``BLOCKING_MIN_NS`` are ordinary launch overhead, whatever their name: a
microsecond-long sync while the GPU is already idle drains nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from traceinsight.analysis import Analysis, by_rank
from traceinsight.analysis import intervals as iv
from traceinsight.analysis.attribution import name_matches, thread_keys
from traceinsight.analysis.completeness import unrecorded_overlap
from traceinsight.analysis.oneoff import (
    CAPTURE_RANGE_RE,
    COMPILE_RANGE_RE,
    ONE_OFF_CALL_RE,
    STARTUP_RANGE_RE,
    first_calls,
)
from traceinsight.store import partitions
from traceinsight.util import fmt

#: the causes, in the order the host side of a gap is painted (dependency is decided first;
#: the last three take what no host activity explains)
CAUSES = (
    "dependency",
    "capture",
    "startup",
    "compile",
    "input",
    "copy",
    "sync",
    "alloc",
    "host",
    "launch",
    "unknown",
    "unrecorded",
)
#: causes that say the window is not a steady state
NONSTEADY = ("startup", "capture", "compile")

SYNC_RE = re.compile(
    r"^(cuda|hip)(DeviceSynchronize|StreamSynchronize|EventSynchronize|Memcpy|MemcpyDtoH|"
    r"Memcpy2D|MemcpyFromSymbol)(_v\d+)?$|^cu(CtxSynchronize|StreamSynchronize|EventSynchronize|"
    r"MemcpyDtoH|MemcpyHtoD|Memcpy)(_v\d+)?$"
)
SYNC_CALL_RE = re.compile(r"^(?:cuda|hip|cu)(?:Device|Stream|Event|Ctx)Synchronize(?:_v\d+)?$")
COPY_CALL_RE = re.compile(r"^(?:cuda|hip|cu)Memcpy\w*$")
ASYNC_RE = re.compile(r"Async")
ALLOC_CALL_RE = re.compile(
    r"^(?:cuda|hip)(?:Malloc|Free|MallocHost|FreeHost|HostAlloc|HostMalloc|HostFree|"
    r"MallocManaged|MallocPitch|Malloc3D|ExtMallocWithFlags)(?:_v\d+)?$"
    r"|^cuMem(?:Alloc|Free|AllocHost|FreeHost|HostAlloc)\w*?(?:_v\d+)?$"
)
LAUNCH_CALL_RE = re.compile(
    r"(?:LaunchKernel|LaunchCooperativeKernel|ModuleLaunchKernel)"
    r"(?:ExC|Ex)?(?:_v\d+|_ptsz)?$|^cuLaunch(?!HostFunc)"
)
BEGIN_CAPTURE_RE = re.compile(r"StreamBeginCapture")
END_CAPTURE_RE = re.compile(r"StreamEndCapture")
INSTANTIATE_RE = re.compile(r"GraphInstantiate|GraphUpload|GraphExecUpdate")
WAIT_CALL_RE = re.compile(r"StreamWaitEvent|StreamWaitValue")
DATALOADER_RE = re.compile(
    r"enumerate\(DataLoader\)|DataLoader.*__next__|enumerate\(DataPipe\)|"
    r"\[pl\]\[profile\].*(?:next|train_dataloader)|_next_data|get_batch",
    re.IGNORECASE,
)

STALL_MIN_NS = 500_000  #: host stretches without runtime calls shorter than this: launch overhead
BLOCKING_MIN_NS = 50_000  #: a copy/sync/alloc call shorter than this is launch overhead
STARTUP_CALL_MIN_NS = 1_000_000  #: a one-off call (or a kernel launch) this long is start-up work
STARTUP_ALLOC_MIN_NS = 100_000_000  #: an allocator call this long is context/driver start-up
DEPENDENCY_MIN_NS = 100_000  #: launch end → start beyond this: the work waited on a dependency
DRAIN_TOLERANCE_NS = 50_000  #: a blocking call returning this close to the gap start drained it
LAUNCH_TOLERANCE_NS = 1_000  #: clock skew allowed between a launch and the gap start
NONSTEADY_MIN_PCT = 30.0  #: at or above: the window is not a steady state


@dataclass
class IdleSplit:
    """Idle nanoseconds per cause (:data:`CAUSES`); they sum to the idle time."""

    ns: dict[str, int] = field(default_factory=lambda: {c: 0 for c in CAUSES})
    gaps: list[dict] = field(default_factory=list)  #: one record per gap
    stall_events: pd.DataFrame = field(default_factory=pd.DataFrame)
    calls: pd.DataFrame = field(default_factory=pd.DataFrame)  #: blocking calls, see _call_table
    longest_wait_ns: int = 0  #: the longest single dependency wait
    longest_wait: dict | None = None

    def add(self, other: IdleSplit) -> None:
        for c in CAUSES:
            self.ns[c] += other.ns[c]

    @property
    def total_ns(self) -> int:
        return sum(self.ns.values())

    @property
    def launch_ns(self) -> int:
        return self.ns["launch"]


# --- host-side interval sets ------------------------------------------------------------------


def _py_frames(an: Analysis, rank: int) -> pd.DataFrame:
    """Python frames of the rank lasting at least ``STALL_MIN_NS`` (cached)."""
    key = ("idle_py", rank)
    if key not in an.cache:
        cols = ["rank", "name", "start_ns", "dur_ns"]
        alone = _alone(an, "idle_py_long")
        if not alone and "idle_py_long" not in an.cache:
            an.cache["idle_py_long"] = _long(an.store.table("python_frames", cols))
        long = _long(an.store.rank_table("python_frames", rank, cols)) if alone else None
        if alone and long is not None:
            df = long.reset_index(drop=True)
        elif not alone and an.cache["idle_py_long"] is not None:
            df = by_rank.rows(an.cache["idle_py_long"], rank).reset_index(drop=True)
        else:
            df = pd.DataFrame({"name": [], "start_ns": [], "dur_ns": []})
        an.cache[key] = df[["name", "start_ns", "dur_ns"]].astype({"name": object})
    return an.cache[key]


def _alone(an: Analysis, whole: str) -> bool:
    """Whether a rank's host rows are read from its partition alone: a partitioned store whose
    ranks were analysed in workers (the client asks for a rank or two: the straggler's, the
    timeline's), while the whole table (``whole``, cached) was not read here."""
    return (
        whole not in an.cache
        and "idle_rank_splits" in an.cache
        and bool(partitions.names(an.store.meta))
    )


def _annotations(rng: pd.DataFrame) -> pd.DataFrame:
    return rng[rng["kind"].astype(str).isin(["annotation"])]


def _long(py: pa.Table) -> pd.DataFrame | None:
    """The python frames lasting at least ``STALL_MIN_NS`` (None: no frame recorded)."""
    return (
        py.filter(pc.greater_equal(py["dur_ns"], STALL_MIN_NS)).to_pandas() if py.num_rows else None
    )


def _host_events(
    an: Analysis, rank: int, frames: bool
) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """The rank's annotation ranges and CPU ops (and python frames of 0.5 ms or more), with
    their names factorised (kept for the rank asked for last: the patterns of ``rank_ranges``
    are asked for one rank after another)."""
    key = ("idle_host_events", frames)
    if an.cache.get(key, (None,))[0] != rank:
        cols = ["rank", "kind", "name", "start_ns", "dur_ns", "thread"]
        if _alone(an, "idle_annotations"):  # the rank's partition, not every rank's ranges
            rng = _annotations(an.store.rank_table("ranges", rank, cols).to_pandas())
        else:
            if "idle_annotations" not in an.cache:
                an.cache["idle_annotations"] = _annotations(
                    an.store.table("ranges", cols).to_pandas()
                )
            rng = by_rank.rows(an.cache["idle_annotations"], rank)
        ops = by_rank.rows(an.attribution.ops, rank)[["name", "start_ns", "dur_ns", "thread"]]
        parts = [rng[["name", "start_ns", "dur_ns", "thread"]], ops]
        if frames:
            parts.append(_py_frames(an, rank).assign(thread=None))
        df = pd.concat([p.astype({"name": object}) for p in parts], ignore_index=True)
        codes, uniq = pd.factorize(df["name"].astype(str))
        an.cache[key] = (rank, (df, codes, np.asarray(uniq, dtype=object)))
    return an.cache[key][1]


def rank_ranges(
    an: Analysis, rank: int, rx: re.Pattern, *, frames: bool = False
) -> tuple[np.ndarray, np.ndarray, pd.DataFrame]:
    """Host intervals (any thread of the rank) of annotation ranges and CPU ops (and, with
    ``frames``, python frames of 0.5 ms or more) whose names match ``rx``."""
    key = ("rank_ranges", rank, rx.pattern, frames)
    if key not in an.cache:
        df, codes, uniq = _host_events(an, rank, frames)
        hit = np.array([bool(rx.search(n)) for n in uniq], dtype=bool)
        sel = df[hit[codes]] if len(df) else df
        s = sel["start_ns"].to_numpy(np.int64)
        an.cache[key] = (s, s + sel["dur_ns"].to_numpy(np.int64), sel)
    return an.cache[key]


def _host_stalls(
    an: Analysis, rank: int, rt: pd.DataFrame
) -> tuple[tuple[np.ndarray, np.ndarray], pd.DataFrame]:
    """Host stretches in which the rank issued no GPU runtime call for at least 0.5 ms, and the
    long host events (python frames, CPU ops of 0.5 ms or more) inside them.

    A GPU that idles while the host calls the runtime every few microseconds is launch-bound;
    one that idles while the host issues nothing at all waits for host-side work (GC, I/O,
    CPU compute, or time the profiler did not record).
    """
    empty = (np.empty(0, np.int64), np.empty(0, np.int64))
    if not len(rt):
        return empty, pd.DataFrame()
    s = rt["start_ns"].to_numpy(np.int64)
    e = s + rt["dur_ns"].to_numpy(np.int64)
    busy = iv.union(s, np.maximum(e, s + 1))
    qs, qe = busy[1][:-1], busy[0][1:]
    long = (qe - qs) >= STALL_MIN_NS
    quiet = (qs[long], qe[long])
    ops = by_rank.rows(an.attribution.ops, rank)
    frames = [
        _py_frames(an, rank),
        ops[ops["dur_ns"] >= STALL_MIN_NS][["name", "start_ns", "dur_ns"]],
    ]
    df = pd.concat([f.astype({"name": object}) for f in frames], ignore_index=True)
    if len(df) and len(quiet[0]):
        es = df["start_ns"].to_numpy(np.int64)
        ee = es + df["dur_ns"].to_numpy(np.int64)
        k = np.searchsorted(quiet[0], es, side="right") - 1
        inside = (k >= 0) & (ee <= np.where(k >= 0, quiet[1][np.clip(k, 0, None)], 0) + 1_000)
        df = df[inside]
    else:
        df = df.iloc[0:0]
    return quiet, df


def _capture_spans(
    rt: pd.DataFrame, kind: np.ndarray, tkey: np.ndarray, t: int
) -> tuple[np.ndarray, np.ndarray]:
    """Begin..EndCapture spans of thread ``t`` (a capture still open at the end runs to the end
    of the trace) and graph instantiations."""
    s = rt["start_ns"].to_numpy(np.int64)
    e = s + rt["dur_ns"].to_numpy(np.int64)
    on = tkey == t
    b = np.sort(s[on & (kind == "begin")])
    ends = np.sort(e[on & (kind == "end")])
    j = np.searchsorted(ends, b, side="left")
    last = int(e.max()) if len(e) else 0
    be = np.where(
        j < len(ends), ends[np.clip(j, 0, max(len(ends) - 1, 0))] if len(ends) else last, last
    )
    inst = on & (kind == "instantiate")
    return np.concatenate((b, s[inst])), np.concatenate((be, e[inst]))


def _classify_calls(rt: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per runtime call: the idle cause it stands for when it spans idle time ('' for none),
    its capture role (begin / end / instantiate / ''), and its family for the evidence (the
    cause whatever its length: every allocator call counts, '' for ordinary calls)."""
    names = rt["name"].astype(str).to_numpy()
    dur = rt["dur_ns"].to_numpy(np.int64)
    launch = name_matches(names, LAUNCH_CALL_RE)
    alloc = name_matches(names, ALLOC_CALL_RE)
    copy = name_matches(names, COPY_CALL_RE)
    sync = name_matches(names, SYNC_CALL_RE)
    one_off = name_matches(names, ONE_OFF_CALL_RE)
    startup = ((one_off | launch) & (dur >= STARTUP_CALL_MIN_NS)) | (
        alloc & (dur >= STARTUP_ALLOC_MIN_NS)
    )
    family = np.full(len(rt), "", dtype=object)
    family[alloc] = "alloc"
    family[sync] = "sync"
    family[copy] = "copy"
    family[startup] = "startup"
    cause = np.where(dur >= BLOCKING_MIN_NS, family, "")
    role = np.full(len(rt), "", dtype=object)
    role[name_matches(names, BEGIN_CAPTURE_RE)] = "begin"
    role[name_matches(names, END_CAPTURE_RE)] = "end"
    role[name_matches(names, INSTANTIATE_RE)] = "instantiate"
    family[role != ""] = "capture"
    return cause, role, family


def _drain_calls(rt: pd.DataFrame) -> pd.DataFrame:
    """Calls that block the host until the GPU has finished earlier work: syncs, synchronous
    copies, and asynchronous copies that lasted ``BLOCKING_MIN_NS`` or more (pageable memory)."""
    names = rt["name"].astype(str).to_numpy()
    sync = name_matches(names, SYNC_CALL_RE)
    copy = name_matches(names, COPY_CALL_RE)
    is_async = name_matches(names, ASYNC_RE)
    blocking_copy = copy & (~is_async | (rt["dur_ns"].to_numpy(np.int64) >= BLOCKING_MIN_NS))
    sel = rt[sync | blocking_copy]
    out = pd.DataFrame(
        {
            "start_ns": sel["start_ns"].to_numpy(np.int64),
            "end_ns": (sel["start_ns"] + sel["dur_ns"]).to_numpy(np.int64),
            "cause": np.where(sync[sync | blocking_copy], "sync", "copy"),
        }
    )
    return out.sort_values("start_ns", kind="stable").reset_index(drop=True)


# --- classification -----------------------------------------------------------------------------


@dataclass
class _RankHost:
    """What the rank's host threads did, as disjoint interval sets per cause and thread."""

    rt: pd.DataFrame
    tkey: np.ndarray
    cause: np.ndarray
    role: np.ndarray
    family: np.ndarray
    ranges: dict[str, tuple[np.ndarray, np.ndarray]]
    quiet: tuple[np.ndarray, np.ndarray]
    painted: dict[int, list[tuple[str, tuple[np.ndarray, np.ndarray]]]] = field(
        default_factory=dict
    )

    def layers(self, t: int) -> list[tuple[str, tuple[np.ndarray, np.ndarray]]]:
        """Disjoint interval sets, in painting order, for gaps launched by thread ``t``."""
        if t in self.painted:
            return self.painted[t]
        s = self.rt["start_ns"].to_numpy(np.int64)
        e = s + self.rt["dur_ns"].to_numpy(np.int64)
        on = self.tkey == t
        cs, ce = _capture_spans(self.rt, self.role, self.tkey, t)
        sets = {
            "capture": iv.union(
                np.concatenate((cs, self.ranges["capture"][0])),
                np.concatenate((ce, self.ranges["capture"][1])),
            )
        }
        for c in ("startup", "copy", "sync", "alloc"):
            m = on & (self.cause == c)
            sets[c] = iv.union(s[m], e[m])
        sets["startup"] = iv.union(
            np.concatenate((sets["startup"][0], self.ranges["startup"][0])),
            np.concatenate((sets["startup"][1], self.ranges["startup"][1])),
        )
        sets["compile"] = self.ranges["compile"]
        sets["input"] = self.ranges["input"]
        sets["host"] = self.quiet
        out, acc = [], (np.empty(0, np.int64), np.empty(0, np.int64))
        for c in CAUSES[1:9]:
            u = sets[c]
            out.append((c, iv.subtract(u, acc) if len(acc[0]) else u))
            acc = iv.union(np.concatenate((acc[0], u[0])), np.concatenate((acc[1], u[1])))
        self.painted[t] = out
        return out


def _rank_host(an: Analysis, rank: int) -> _RankHost:
    key = ("idle_host", rank)
    if key not in an.cache:
        an.cache[key] = _rank_host_uncached(an, rank)
    return an.cache[key]


def _rank_host_uncached(an: Analysis, rank: int) -> _RankHost:
    rt = (
        by_rank.rows(an.attribution.runtime, rank)
        .sort_values("start_ns", kind="stable")
        .reset_index(drop=True)
    )
    tkey = thread_keys(
        rt["process"].to_numpy(), rt["thread"].to_numpy(), an.cache.setdefault("idle_threads", {})
    )
    cause, role, family = _classify_calls(rt)
    dl_s, dl_e, _ = rank_ranges(an, rank, DATALOADER_RE)
    cap_s, cap_e, _ = rank_ranges(an, rank, CAPTURE_RANGE_RE, frames=True)
    com_s, com_e, _ = rank_ranges(an, rank, COMPILE_RANGE_RE, frames=True)
    st_s, st_e, _ = rank_ranges(an, rank, STARTUP_RANGE_RE, frames=True)
    fc_s, fc_e = first_calls(an, rt)
    quiet, stall_events = _host_stalls(an, rank, rt)
    host = _RankHost(
        rt,
        tkey,
        cause,
        role,
        family,
        {
            "input": iv.union(dl_s, dl_e),
            "capture": iv.union(cap_s, cap_e),
            "compile": iv.union(com_s, com_e),
            "startup": iv.union(np.concatenate((st_s, fc_s)), np.concatenate((st_e, fc_e))),
        },
        quiet,
    )
    host.stall_events = stall_events  # type: ignore[attr-defined]
    return host


def idle_split(
    an: Analysis, rank: int, g: pd.DataFrame, windows, top: int | None = 20
) -> tuple[IdleSplit, list[dict]]:
    """Classify the idle gaps of one rank's step windows; returns the split and the largest
    ``top`` gaps (all of them with ``top=None``). The last split is kept: the same rank's same
    windows asked again next (the step table, then the idle metrics) are not classified twice.
    The split returned is shared: callers read it."""
    key = (rank, len(g), tuple((w.step, w.start_ns, w.end_ns) for w in windows))
    last = an.cache.get("idle_split_last")
    if last is not None and last[0] == key:
        out, gaps = last[1]
    else:
        out, gaps = _idle_split(an, rank, g, windows)
        an.cache["idle_split_last"] = (key, (out, gaps))
    return out, gaps if top is None else gaps[:top]


def _idle_split(an: Analysis, rank: int, g: pd.DataFrame, windows) -> tuple[IdleSplit, list[dict]]:
    out = IdleSplit()
    if not len(g):
        return out, []
    host = _rank_host(an, rank)
    out.stall_events = host.stall_events  # type: ignore[attr-defined]
    gs_all = g["start_ns"].to_numpy(np.int64)
    ge_all = g["end_ns"].to_numpy(np.int64)
    U = iv.union(gs_all, ge_all)
    cs_l, ce_l, step_l = [], [], []
    for w in windows:
        inner = iv.clip(U, w.start_ns, w.end_ns)
        cs = np.concatenate(([w.start_ns], inner[1]))
        ce = np.concatenate((inner[0], [w.end_ns]))
        keep = ce > cs
        cs_l.append(cs[keep])
        ce_l.append(ce[keep])
        step_l.append(np.full(int(keep.sum()), -1 if w.step is None else w.step, dtype=np.int64))
    if not cs_l:
        return out, []
    cs, ce, steps = np.concatenate(cs_l), np.concatenate(ce_l), np.concatenate(step_l)
    win = np.repeat(np.arange(len(cs_l)), [len(x) for x in cs_l])
    if not len(cs):
        out.calls = _call_table(host, cs, ce, windows)
        return out, []

    # the activity that ends each gap: its launch call (start, end, thread)
    order = np.argsort(gs_all, kind="stable")
    gs = gs_all[order]
    corr = g["correlation"].to_numpy()[order]
    ops = g["op"].to_numpy()[order] if "op" in g.columns else np.full(len(gs), None, object)
    rt = host.rt
    rt_c = rt[rt["correlation"].notna()].drop_duplicates("correlation", keep="first")
    pos = pd.Index(rt_c["correlation"].astype("int64")).get_indexer(
        pd.Series(corr).fillna(-(2**62)).astype("int64")
    )
    l_start = (
        np.where(pos >= 0, rt_c["start_ns"].to_numpy(np.int64)[np.clip(pos, 0, None)], -1)
        if len(rt_c)
        else np.full(len(gs), -1, np.int64)
    )
    l_end = (
        np.where(
            pos >= 0,
            (rt_c["start_ns"] + rt_c["dur_ns"]).to_numpy(np.int64)[np.clip(pos, 0, None)],
            -1,
        )
        if len(rt_c)
        else np.full(len(gs), -1, np.int64)
    )
    rt_pos = rt_c.index.to_numpy()
    l_thread = (
        np.where(pos >= 0, host.tkey[rt_pos[np.clip(pos, 0, None)]], -1)
        if len(rt_c)
        else np.full(len(gs), -1, np.int64)
    )
    launched = host.tkey[np.unique(rt_pos[pos[pos >= 0]])] if (pos >= 0).any() else host.tkey
    main = int(pd.Series(launched).mode().iloc[0]) if len(launched) else -1

    k = np.searchsorted(gs, ce, side="left")
    has_next = k < len(gs)
    kk = np.clip(k, 0, len(gs) - 1)
    L = np.where(has_next, l_start[kk], -1)
    Le = np.where(has_next, l_end[kk], -1)
    known = has_next & (L >= 0)
    thread = np.where(known, l_thread[kk], main)
    # dependency: queued before the gap, or launched in it but started long after the call
    queued_before = known & (Le <= cs) & (cs - LAUNCH_TOLERANCE_NS > L)
    h_end = np.where(known, np.clip(Le, cs, ce), ce)
    late = known & ~queued_before & (ce - h_end > DEPENDENCY_MIN_NS)
    h_end = np.where(late, h_end, ce)
    h_end = np.where(queued_before, cs, h_end)
    # a blocking call that held the host while the GPU was still busy and returned as it went
    # idle emptied the queue: without it the host would have issued work for as long as it
    # waited, so the gap after it is the call's up to that wait, launch overhead beyond
    drain = _drain_calls(rt)
    drained = np.full(len(cs), "", dtype=object)
    waited = np.zeros(len(cs), np.int64)
    if len(drain):
        ds = drain["start_ns"].to_numpy(np.int64)
        de = drain["end_ns"].to_numpy(np.int64)
        run = np.maximum.accumulate(de)
        who = np.maximum.accumulate(np.where(de == run, np.arange(len(de)), 0))
        j = np.searchsorted(ds, cs, side="left") - 1
        ok = (j >= 0) & (np.where(j >= 0, run[np.clip(j, 0, None)], -1) >= cs - DRAIN_TOLERANCE_NS)
        first = who[np.clip(j, 0, None)]
        drained[ok] = drain["cause"].to_numpy()[first][ok]
        # only the wait behind recorded work counts (before it, the GPU ran unrecorded work)
        waited = np.where(ok, cs - np.maximum(ds[first], gs[0]), 0)

    per_gap = {c: np.zeros(len(cs), np.int64) for c in CAUSES}
    per_gap["dependency"] = ce - h_end
    for t in np.unique(thread):
        sel = np.flatnonzero(thread == t)
        hs, he = cs[sel], h_end[sel]
        for c, u in host.layers(int(t)):
            per_gap[c][sel] = iv.overlap_with_windows(u, hs, he) if len(u[0]) else 0
            if c == "input" and len(u[0]):  # the host loading data: input even if work was queued
                q = iv.overlap_with_windows(u, he, ce[sel])
                per_gap["input"][sel] += q
                per_gap["dependency"][sel] -= q
    explained = sum(per_gap[c] for c in CAUSES[1:9])
    rest = (ce - cs) - explained - per_gap["dependency"]
    # no known launch after the gap: nothing says the host was late, only positive evidence
    per_gap["unknown"] = np.where(known, 0, rest + per_gap["host"])
    per_gap["host"] = np.where(known, per_gap["host"], 0)
    rest = np.where(known, rest, 0)
    # the host was ahead before the gap: work in the busy stretch before it sat queued
    queued = (gs - l_end > DEPENDENCY_MIN_NS) & (l_end >= 0)
    n_queued = np.concatenate(([0], np.cumsum(queued)))
    prev_end = np.concatenate(([np.iinfo(np.int64).min], ce[:-1]))
    ahead = (
        n_queued[np.searchsorted(gs, cs, side="left")]
        - n_queued[np.searchsorted(gs, prev_end, side="left")]
    ) > 0
    owed, kind = _owed_to_drains(rest, drained, waited, win, ahead)
    per_gap["copy"] += np.where(kind == "copy", owed, 0)
    per_gap["sync"] += np.where(kind == "sync", owed, 0)
    per_gap["launch"] = rest - owed
    # before the first recorded GPU work a blocking call waits on work launched before the
    # trace began: the GPU was busy for all we know
    lead = ce <= gs[0]
    for c in ("copy", "sync"):
        per_gap["unknown"] += np.where(lead, per_gap[c], 0)
        per_gap[c] = np.where(lead, 0, per_gap[c])
    _unrecorded(per_gap, unrecorded_overlap(an, rank, cs, ce))
    for c in CAUSES:
        out.ns[c] = int(per_gap[c].sum())

    mat = np.stack([per_gap[c] for c in CAUSES])
    label = np.array(CAUSES, dtype=object)[mat.argmax(axis=0)]
    nxt_op = np.where(has_next, ops[kk], np.array(None, dtype=object))
    delay = np.where(known, ce - np.maximum(Le, L), -1)
    gaps = [
        {
            "rank": rank,
            "step": None if st < 0 else int(st),
            "start_ns": int(a),
            "dur_ns": int(b - a),
            "cause": _LABEL[c],
            "next_op": op,
            "launch_to_start_ns": int(d) if d >= 0 else None,
        }
        for a, b, st, c, op, d in zip(cs, ce, steps, label, nxt_op, delay)
    ]
    dep = per_gap["dependency"]
    if dep.any():
        i = int(dep.argmax())
        out.longest_wait_ns = int(dep[i])
        out.longest_wait = gaps[i] | {
            "wait_ns": int(dep[i]),
            "waited_on": _wait_call(host, int(thread[i]), int(L[i])),
        }
    out.calls = _call_table(host, cs, ce, windows)
    gaps.sort(key=lambda x: -x["dur_ns"])
    out.gaps = gaps
    return out, gaps


#: the causes idle inside an incompletely recorded replay is taken from, first to last
_UNRECORDED_FROM = ("dependency", "unknown", "launch", *CAUSES[1:9])


def _unrecorded(per_gap: dict[str, np.ndarray], inside: np.ndarray) -> None:
    """Idle inside an incompletely recorded graph replay is ``unrecorded``: the nodes between
    the recorded ones ran then, for all the trace says (:mod:`.completeness`)."""
    left = inside.astype(np.int64).copy()
    for c in _UNRECORDED_FROM:
        if not left.any():
            break
        take = np.minimum(per_gap[c], left)
        per_gap[c] = per_gap[c] - take
        per_gap["unrecorded"] = per_gap["unrecorded"] + take
        left -= take


def _owed_to_drains(
    rest: np.ndarray, drained: np.ndarray, waited: np.ndarray, win: np.ndarray, ahead: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """How much of each gap's launch-overhead rest blocking calls are owed, and which kind.

    A call that held the host for ``waited`` while the GPU was busy cost the host that much
    lead: without it the host would have issued that much more work ahead of the GPU. The gaps
    after it are the call's up to that budget, which adds up over calls until the host is ahead
    again (``ahead``: work queued in the busy stretch before the gap) or the window ends.
    """
    n = len(rest)
    owed = np.zeros(n, np.int64)
    kind = np.full(n, "", dtype=object)
    budget, what, cur, i = 0, "", -1, 0
    # walk only the gaps a budget reaches: from each draining call until it is spent
    for d in [*np.flatnonzero(drained != "").tolist(), n]:
        while budget > 0 and i < d:
            if win[i] != cur or ahead[i]:
                budget = 0
                break
            if rest[i] > 0:
                owed[i] = min(int(rest[i]), budget)
                kind[i] = what
                budget -= int(owed[i])
            i += 1
        if d == n:
            break
        if win[d] != cur or ahead[d]:
            budget, cur = 0, win[d]
        budget, what = budget + int(waited[d]), drained[d]
        if rest[d] > 0:
            owed[d] = min(int(rest[d]), budget)
            kind[d] = what
            budget -= int(owed[d])
        i = d + 1
    return owed, kind


def _wait_call(host: _RankHost, t: int, launch: int) -> str | None:
    """The last stream-wait call the launching thread issued before a launch (what queued
    work most likely waited on)."""
    names = host.rt["name"].astype(str).to_numpy()
    s = host.rt["start_ns"].to_numpy(np.int64)
    m = name_matches(names, WAIT_CALL_RE) & (host.tkey == t) & (s <= launch)
    if launch < 0 or not m.any():
        return None
    j = np.flatnonzero(m)[-1]
    return f"`{names[j]}` issued {fmt.fmt_ns(launch - s[j])} before the launch"


#: the cause as shown in a gap table (also the ``cause`` filter of the idle_gaps evidence)
_LABEL = {
    "dependency": "device wait",
    "capture": "graph capture",
    "startup": "start-up",
    "compile": "compile",
    "input": "input",
    "copy": "blocking copy",
    "sync": "sync",
    "alloc": "allocator",
    "host": "host stall",
    "launch": "launch",
    "unknown": "unknown",
    "unrecorded": "unrecorded",
}


def _call_table(host: _RankHost, gap_s: np.ndarray, gap_e: np.ndarray, windows) -> pd.DataFrame:
    """Runtime calls of the windows that stand for an idle cause (start-up, graph capture,
    copies, syncs, allocator calls), with the host time inside the windows and the GPU idle
    time inside each call."""
    rt = host.rt
    cols = ["cause", "name", "start_ns", "dur_ns", "idle_ns"]
    sel = host.family != ""
    if not sel.any() or not windows:
        return pd.DataFrame(columns=cols)
    calls = rt[sel]
    s = calls["start_ns"].to_numpy(np.int64)
    e = s + calls["dur_ns"].to_numpy(np.int64)
    W = iv.union(np.array([w.start_ns for w in windows]), np.array([w.end_ns for w in windows]))
    inside = iv.overlap_with_windows(W, s, np.maximum(e, s + 1))
    idle = (
        iv.overlap_with_windows((gap_s, gap_e), s, e) if len(gap_s) else np.zeros(len(s), np.int64)
    )
    df = pd.DataFrame(
        {
            "cause": host.family[sel],
            "name": calls["name"].astype(str).to_numpy(),
            "start_ns": s,
            "dur_ns": np.minimum(inside, e - s),
            "idle_ns": idle,
        }
    )
    return df[inside > 0].reset_index(drop=True)
