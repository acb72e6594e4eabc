"""The dependency graph of one rank's step window, as flat numpy arrays.

Two kinds of node: **host items** (the top-level runtime/driver calls of each host thread, in
time order) and **GPU items** (the kernels, copies and memsets of the step, in stream order).
Edges, all derived without a per-event Python loop:

- thread order: a host item starts after the previous item of its thread ends plus the CPU
  time between them (the *gap*, kept as recorded and categorised by the CPU ops that cover it:
  host and Python, input loading, start-up and compile);
- launch: a GPU item is ready one launch latency after the runtime call that launched it
  (matched by correlation id; a ``cudaGraphLaunch`` launches every kernel of its graph);
- stream order: a GPU item starts after the previous item of its stream ends;
- synchronisation: device, stream and event syncs and blocking copies end only after the GPU
  work they wait for (device: all work launched before; stream: that stream's work; event:
  the work launched before the matching ``cudaEventRecord``; a blocking copy: its own copy);
- ``cudaStreamWaitEvent``: the next GPU item launched after it waits for the work recorded by
  the matching ``cudaEventRecord`` (the latest record of the same thread before the wait).

Times are int64 ns relative to the window's origin (the host step start), so the arrays stay
exact and small.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from traceinsight.analysis.critical_path.prep import RankPrep

#: path and replay categories, in the order they are reported
CATEGORIES = (
    "compute",
    "communication",
    "copies",
    "host",
    "launch",
    "input",
    "sync",
    "startup",
    "unrecorded",
)
CAT = {c: i for i, c in enumerate(CATEGORIES)}
#: what each category means, for the docs and the renderers
CATEGORY_LABELS = {
    "compute": "compute",
    "communication": "communication",
    "copies": "copies",
    "host": "host and Python",
    "launch": "launch overhead",
    "input": "input",
    "sync": "synchronisation",
    "startup": "start-up and compile",
    "unrecorded": "unrecorded",
}

DEVICE_SYNC_RE = re.compile(r"^(?:cuda|hip)DeviceSynchronize|^cuCtxSynchronize", re.I)
STREAM_SYNC_RE = re.compile(r"^(?:cuda|hip)StreamSynchronize|^cuStreamSynchronize", re.I)
EVENT_SYNC_RE = re.compile(r"^(?:cuda|hip)EventSynchronize|^cuEventSynchronize", re.I)
WAIT_EVENT_RE = re.compile(r"^(?:cuda|hip)StreamWaitEvent|^cuStreamWaitEvent", re.I)
RECORD_RE = re.compile(r"^(?:cuda|hip)EventRecord|^cuEventRecord", re.I)
BLOCKING_COPY_RE = re.compile(r"^(?:cuda|hip)Memcpy(?:2D|3D)?(?:_v2)?$|^cuMemcpy[DH]to[DH]", re.I)
STARTUP_RE = re.compile(
    r"TorchDynamo|Torch-Compiled Region|torch\._dynamo|_inductor|compile_fx|autotun|"
    r"^cuModuleLoad|^cudaGetFuncBySymbol|^cuLibraryLoad|^hipModuleLoad",
    re.I,
)
#: runtime calls that are host work, not launches: allocator calls and device queries
HOST_CALL_RE = re.compile(
    r"^(?:cuda|hip)(?:Malloc|Free|HostMalloc|HostFree|MallocHost|FreeHost|HostAlloc|"
    r"GetDeviceProperties|DeviceGetAttribute|GetDevice|SetDevice|PointerGetAttributes)|"
    r"^cuMem(?:Alloc|Free|HostAlloc|FreeHost)|^cuDeviceGet|^cuCtxGet",
    re.I,
)
#: kind of a host item
H_CALL, H_SYNC, H_COPY_SYNC, H_WAIT, H_RECORD = 0, 1, 2, 3, 4
#: a queued kernel (stream busy) starts within this of its predecessor's end
QUEUED_NS = 2_000
#: a launch latency above this many times the rank's median (and above LATENCY_MIN_CAP_NS) is
#: not launch latency but a dependency the trace does not record
LATENCY_CAP_FACTOR = 4
LATENCY_MIN_CAP_NS = 50_000
#: a launch latency is never more than this: longer, the stream waited for something else
MAX_LATENCY_NS = 20_000
NEG = -(1 << 40)
#: matrix dtypes that run on the fp32 path (as the precision metrics count them)
FP32_PATHS = ("fp32", "fp32_matrix")  #: "no constraint" in the int64 recurrences


@dataclass
class StepGraph:
    rank: int
    step: int | None
    origin_ns: int  #: absolute time of relative 0 (the host step start, or the window start)
    ws: int  #: window start, relative
    we: int  #: window end, relative
    he: int  #: host step end, relative
    main_thread: int  #: thread code of the step's host range (-1: none)
    # host items (sorted by thread code, then start)
    h_start: np.ndarray
    h_dur: np.ndarray
    h_thread: np.ndarray
    h_kind: np.ndarray
    h_dep: np.ndarray  #: GPU item a sync waits for (-1)
    h_gap: np.ndarray  #: CPU time before the item since the previous one of its thread ends
    h_gap_cat: np.ndarray  #: category of that gap (the part not in h_gap_x)
    h_gap_x: np.ndarray  #: ns of the gap covered by input-loading or start-up ops
    h_gap_xcat: np.ndarray  #: their category (input or startup)
    h_after: np.ndarray  #: first call of a thread: the step thread's call it follows (-1)
    h_dtoh: np.ndarray  #: a call that launched a device-to-host copy (a scalar read back)
    h_starves: np.ndarray  #: a launch the GPU was idle waiting for
    h_cat: np.ndarray  #: category of the call itself
    h_name: np.ndarray
    # GPU items (sorted by stream, then start)
    g_start: np.ndarray
    g_dur: np.ndarray
    g_stream: np.ndarray
    g_launch: np.ndarray  #: host item that launched it (-1)
    g_wait: np.ndarray  #: GPU item a cudaStreamWaitEvent makes it wait for (-1)
    g_floor: np.ndarray  #: end of earlier work on its stream outside the window (NEG: none)
    g_cat: np.ndarray
    g_name: np.ndarray
    g_op: np.ndarray  #: launching CPU op
    g_cls: np.ndarray
    g_phase: np.ndarray  #: forward | backward | optimizer | unknown
    g_fp32_gemm: np.ndarray
    latency_ns: int  #: the rank's median launch latency (launch to start of an idle stream)
    latency_cap_ns: int
    extra: dict = field(default_factory=dict)

    @property
    def n(self) -> int:
        return len(self.h_start) + len(self.g_start)

    @property
    def measured_ns(self) -> int:
        return int(self.we - self.ws)

    def g_prev(self) -> np.ndarray:
        """Previous GPU item on the same stream (-1 for the first of each stream)."""
        p = np.arange(len(self.g_start)) - 1
        if len(p):
            first = np.r_[True, self.g_stream[1:] != self.g_stream[:-1]]
            p[first] = -1
        return p

    def h_prev(self) -> np.ndarray:
        p = np.arange(len(self.h_start)) - 1
        if len(p):
            first = np.r_[True, self.h_thread[1:] != self.h_thread[:-1]]
            p[first] = -1
        return p


def take(a: np.ndarray, i: np.ndarray, default: int) -> np.ndarray:
    """``a[i]`` where ``i >= 0``, else ``default`` (``a`` may be empty)."""
    if not len(a):
        return np.full(len(i), default, dtype=np.int64)
    return np.where(i >= 0, a[np.clip(i, 0, len(a) - 1)], default)


def covered_len(starts: np.ndarray, ends: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Length of each [a, b) covered by the union of intervals [starts, ends)."""
    if not len(starts) or not len(a):
        return np.zeros(len(a), dtype=np.int64)
    o = np.argsort(starts, kind="stable")
    s, e = starts[o], ends[o]
    # merge into disjoint intervals
    run = np.maximum.accumulate(e)
    new = np.r_[True, s[1:] > run[:-1]]
    ms = s[new]
    grp = np.cumsum(new) - 1
    me = np.zeros(len(ms), dtype=np.int64)
    np.maximum.at(me, grp, e)
    cum = np.r_[0, np.cumsum(me - ms)]

    def F(t: np.ndarray) -> np.ndarray:
        k = np.searchsorted(ms, t, side="right") - 1
        kk = np.clip(k, 0, None)
        inside = np.clip(np.minimum(t, me[kk]) - ms[kk], 0, None)
        return np.where(k >= 0, cum[kk] + inside, 0)

    return np.maximum(F(b) - F(a), 0)


def _covered(starts: np.ndarray, ends: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Whether each time ``t`` lies inside the union of intervals [starts, ends)."""
    if not len(starts) or not len(t):
        return np.zeros(len(t), dtype=bool)
    o = np.argsort(starts, kind="stable")
    s, e = starts[o], np.maximum.accumulate(ends[o])
    k = np.searchsorted(s, t, side="right") - 1
    return (k >= 0) & (t < e[np.clip(k, 0, None)])


def _prefix_argmax(values: np.ndarray) -> np.ndarray:
    """Index of the running maximum of ``values`` (the latest index that set it)."""
    if not len(values):
        return np.empty(0, np.int64)
    run = np.maximum.accumulate(values)
    idx = np.where(values == run, np.arange(len(values)), -1)
    return np.maximum.accumulate(idx)


def build(
    rank: int,
    window,  # StepWindow
    gpu: pd.DataFrame,  #: the rank's attributed GPU activities (Attribution.gpu rows)
    rt: pd.DataFrame,  #: the rank's runtime calls
    ops: pd.DataFrame,  #: the rank's CPU ops
    syncs: pd.DataFrame,  #: the rank's device-side sync rows (stream of a stream sync)
    main_thread: tuple[str, str] | None,
    latency_ns: int,
    rp: RankPrep | None = None,
) -> StepGraph:
    from traceinsight.analysis.critical_path.prep import prep, thread_codes

    hs, he = int(window.host_start_ns), int(window.host_end_ns)
    ws_abs, we_abs = int(window.start_ns), int(window.end_ns)
    origin = min(hs, ws_abs)
    rp = prep(rt, ops, None, gpu, syncs) if rp is None or not rp.gpu_cols else rp
    table = rp.table
    RC, GC = rp.rt_cols, rp.gpu_cols
    main = -1
    if main_thread is not None:
        main = thread_codes(np.array([main_thread[0]]), np.array([main_thread[1]]), table)[0]
    else:  # no step range: the thread with the most runtime-call time drives the window
        r_in = (RC["start"] >= hs) & (RC["start"] < he)
        if r_in.any():
            w = np.bincount(rp.rt_thread[r_in], weights=RC["dur"][r_in].astype(np.float64))
            main = int(np.argmax(w))

    # --- host items: top-level runtime calls launched in the host step ---------------------
    r_start = RC["start"]
    hsel = np.flatnonzero((r_start >= hs) & (r_start < max(he, hs + 1)))
    h_thread = rp.rt_thread[hsel]
    h_start = r_start[hsel] - origin
    o = np.lexsort((h_start, h_thread))
    hsel = hsel[o]
    h_thread, h_start = h_thread[o], h_start[o]
    h_dur = RC["dur"][hsel]
    h_name = RC["name"][hsel]
    h_corr = RC["corr"][hsel]
    h_kind = RC["kind"][hsel]
    h_cat = RC["cat"][hsel]
    # nested calls (a driver call inside its runtime call) are not separate host items
    if len(h_start):
        first = np.r_[True, h_thread[1:] != h_thread[:-1]]
        h_end = h_start + h_dur
        grp = np.cumsum(first) - 1
        big = np.int64(1 << 42)
        prev_max = np.maximum.accumulate(h_end + grp * big) - grp * big
        prev_max = np.r_[NEG, prev_max[:-1]]
        keep = first | (h_start >= prev_max)
        h_thread, h_start, h_dur, h_name, h_corr, h_kind, h_cat = (
            a[keep] for a in (h_thread, h_start, h_dur, h_name, h_corr, h_kind, h_cat)
        )
    h_kind, h_cat = np.array(h_kind), np.array(h_cat)
    nh = len(h_start)
    h_end = h_start + h_dur
    h_prev = np.arange(nh) - 1
    if nh:
        h_prev[np.r_[True, h_thread[1:] != h_thread[:-1]]] = -1
    prev_end = np.where(h_prev >= 0, h_end[np.clip(h_prev, 0, None)], 0)
    h_gap = np.maximum(h_start - prev_end, 0)

    # gap categories: the part of each gap covered by input-loading or start-up/compile CPU
    # ops of the same thread is that category, the rest is host and Python
    h_gap_cat = np.full(nh, CAT["host"], np.int64)
    h_gap_x = np.zeros(nh, np.int64)
    h_gap_xcat = np.full(nh, CAT["input"], np.int64)
    if nh and len(ops):
        g0 = h_start - h_gap + origin
        g1 = h_start + origin
        for flag, cat in ((rp.ops_startup, "startup"), (rp.ops_input, "input")):
            if not flag.any():
                continue
            for th in np.unique(rp.ops_thread[flag]):
                hm = np.flatnonzero(h_thread == th)
                if not len(hm):
                    continue
                sel = flag & (rp.ops_thread == th)
                cov = covered_len(rp.ops_start[sel], rp.ops_end[sel], g0[hm], g1[hm])
                more = cov > h_gap_x[hm]
                h_gap_x[hm[more]] = cov[more]
                h_gap_xcat[hm[more]] = CAT[cat]
    # the first call of another thread (autograd's backward thread) follows the step thread's
    # latest call before it: that thread started it
    h_after = np.full(nh, -1, np.int64)
    if nh and main >= 0:
        firsts = np.flatnonzero((h_prev < 0) & (h_thread != main))
        mi = np.flatnonzero(h_thread == main)
        if len(mi) and len(firsts):
            me = h_end[mi]
            k = np.searchsorted(np.maximum.accumulate(me), h_start[firsts], side="right") - 1
            ok = k >= 0
            h_after[firsts[ok]] = mi[k[ok]]
            gap = h_start[firsts[ok]] - h_end[mi[k[ok]]]
            h_gap[firsts[ok]] = np.maximum(gap, 0)
            h_gap_x[firsts[ok]] = np.minimum(h_gap_x[firsts[ok]], h_gap[firsts[ok]])
        # a thread other than the step's own, not started by it: its time before its first call
        # is not on the step's account
        h_gap_cat[firsts[h_after[firsts] < 0]] = CAT["unrecorded"]

    # --- GPU items: the step's activities ---------------------------------------------------
    if window.step is None:
        gsel = np.arange(len(GC["start"]))
    else:
        gsel = np.flatnonzero(GC["step"] == window.step)
    g_stream = GC["stream"][gsel]
    g_start = GC["start"][gsel] - origin
    o = np.lexsort((g_start, g_stream))
    gsel = gsel[o]
    g_stream, g_start = g_stream[o], g_start[o]
    g_dur = GC["dur"][gsel]
    g_end = g_start + g_dur
    cls = GC["cls"][gsel]
    g_cat = GC["cat"][gsel]
    g_name = GC["name"][gsel]
    g_fp32 = GC["fp32"][gsel]
    ng = len(gsel)
    # launch: correlation -> host item
    g_launch = np.full(ng, -1, np.int64)
    ok = ~np.isnan(h_corr)
    if ok.any() and ng:
        cvals, first_at = np.unique(h_corr[ok].astype(np.int64), return_index=True)
        pos_of = np.flatnonzero(ok)[first_at]  # the first call of a repeated correlation id
        idx = pd.Index(cvals)
        gc = GC["corr"][gsel]
        gok = ~np.isnan(gc)
        found = np.full(ng, -1, np.int64)
        found[gok] = idx.get_indexer(gc[gok].astype(np.int64))
        g_launch = np.where(found >= 0, pos_of[np.clip(found, 0, None)], -1)
    # earlier work on the stream outside the window (previous steps still running)
    g_floor = np.full(ng, NEG, np.int64)
    if ng:
        first = np.r_[True, g_stream[1:] != g_stream[:-1]]
        out = np.ones(len(GC["start"]), dtype=bool)
        out[gsel] = False
        os_, ost = GC["stream"][out], GC["start"][out] - origin
        oe = GC["end"][out] - origin
        for k in np.flatnonzero(first):
            m = (os_ == g_stream[k]) & (ost < g_start[k])
            if m.any():
                g_floor[k] = int(oe[m].max())

    # --- synchronisation edges -------------------------------------------------------------
    h_dep = np.full(nh, -1, np.int64)
    g_wait = np.full(ng, -1, np.int64)
    if nh and ng:
        has_l = g_launch >= 0
        lg = np.flatnonzero(has_l)
        l_t = h_start[g_launch[lg]]  # launch time of each launched GPU item
        lo = np.argsort(l_t, kind="stable")
        lg, l_t = lg[lo], l_t[lo]
        # device sync: the GPU item with the latest end among all launched before it
        am = _prefix_argmax(g_end[lg])
        sy = np.flatnonzero(h_kind == H_SYNC)
        if len(sy):
            nms = h_name[sy]
            is_stream = np.array([bool(STREAM_SYNC_RE.search(x)) for x in nms])
            is_event = np.array([bool(EVENT_SYNC_RE.search(x)) for x in nms])
            k = np.searchsorted(l_t, h_start[sy], side="left") - 1
            dev = ~is_stream & ~is_event & (k >= 0)
            h_dep[sy[dev]] = lg[am[k[dev]]]
            # stream sync: the stream named by the device-side sync row (else device-wide)
            st_of = rp.sync_stream
            for i in np.flatnonzero(is_stream):
                hi = sy[i]
                c = h_corr[hi]
                s = st_of.get(int(c), -1) if c == c else -1
                m = l_t < h_start[hi]
                if s >= 0:
                    m = m & (g_stream[lg] == s)
                if m.any():
                    cand = lg[m]
                    h_dep[hi] = cand[np.argmax(g_end[cand])]
        # event sync / stream wait: the work launched before the latest cudaEventRecord of
        # the thread (the record itself when the trace has none: PyTorch records just before)
        lthr = h_thread[g_launch[lg]]
        rec = np.flatnonzero(h_kind == H_RECORD)
        ev = np.flatnonzero(h_kind == H_WAIT)
        esync = np.flatnonzero(h_kind == H_SYNC)
        esync = esync[[bool(EVENT_SYNC_RE.search(str(h_name[i]))) for i in esync]]
        for ei in np.r_[ev, esync].astype(np.int64):
            th, t0 = h_thread[ei], h_start[ei]
            rs = rec[(h_thread[rec] == th) & (h_start[rec] < t0)]
            t_rec = h_start[rs[-1]] if len(rs) else t0
            mine = lthr == th
            if h_kind[ei] == H_WAIT:
                nxt = np.flatnonzero(mine & (l_t > t0))
                if not len(nxt):
                    continue
                k_next = lg[nxt[0]]
                cand = np.flatnonzero(mine & (l_t < t_rec) & (g_stream[lg] != g_stream[k_next]))
                if len(cand):
                    g_wait[k_next] = lg[cand[-1]]
            else:
                cand = np.flatnonzero(mine & (l_t < t_rec))
                if len(cand):
                    h_dep[ei] = lg[cand[-1]]
        # blocking copies: the host call returns when its copy is done
        cp = np.flatnonzero(h_kind == H_COPY_SYNC)
        pageable = GC["pageable"][gsel] & has_l
        if pageable.any():
            cp = np.union1d(cp, g_launch[pageable])
            h_kind[cp] = H_COPY_SYNC
            h_cat[cp] = CAT["sync"]
        if len(cp):
            lp = np.flatnonzero(has_l)
            ci = pd.Index(g_launch[lp]).get_indexer(cp) if len(lp) else np.full(len(cp), -1)
            okc = ci >= 0
            h_dep[cp[okc]] = lp[ci[okc]]
    # inferred cross-stream waits: an item that starts well after all its known dependencies,
    # right when work on another stream ends, waited for that work (an event the trace lost)
    inferred = 0
    if ng > 1:
        prev = np.arange(ng) - 1
        prev[np.r_[True, g_stream[1:] != g_stream[:-1]]] = -1
        pe = np.where(prev >= 0, g_end[np.clip(prev, 0, None)], g_floor)
        ls = np.where(g_launch >= 0, take(h_start, g_launch, 0) + latency_ns, NEG)
        known = np.maximum(pe, ls)
        late = (g_wait < 0) & (g_start - known > latency_ns)
        if late.any():
            eo = np.argsort(g_end, kind="stable")
            es = g_end[eo]
            cand = np.flatnonzero(late)
            j = np.searchsorted(es, g_start[cand], side="right") - 1
            okj = j >= 0
            cand, j = cand[okj], eo[j[okj]]
            near = (g_start[cand] - g_end[j] <= latency_ns) & (g_stream[j] != g_stream[cand])
            near &= g_end[j] > known[cand]
            g_wait[cand[near]] = j[near]
            inferred = int(near.sum())
    # launches that starved the GPU: a GPU item they launched found its stream idle and
    # started one launch latency after the call (its launch was what it waited for)
    h_starves = np.zeros(nh, dtype=bool)
    if nh and ng:
        pv = np.arange(ng) - 1
        pv[np.r_[True, g_stream[1:] != g_stream[:-1]]] = -1
        pe_ = np.where(pv >= 0, take(g_end, pv, NEG), g_floor)
        lst = take(h_start, g_launch, NEG)
        starved = (
            (g_launch >= 0)
            & (g_start - pe_ > QUEUED_NS)
            & (g_start - lst <= 4 * max(latency_ns, QUEUED_NS))
        )
        h_starves[g_launch[starved]] = True
    # scalar read-backs: calls that launched a device-to-host copy
    h_dtoh = np.zeros(nh, dtype=bool)
    if nh and ng:
        is_d2h = GC["d2h"][gsel] & (g_launch >= 0)
        h_dtoh[g_launch[is_d2h]] = True
    # a dependency that ended after the sync returned is not what it waited for
    bad = h_dep >= 0
    if bad.any():
        de = np.where(bad, g_end[np.clip(h_dep, 0, None)], NEG)
        h_dep[bad & (de > h_end)] = -1

    main_rel = main if main >= 0 and (h_thread == main).any() else -1
    return StepGraph(
        rank=rank,
        step=window.step,
        origin_ns=origin,
        ws=ws_abs - origin,
        we=we_abs - origin,
        he=he - origin,
        main_thread=int(main_rel),
        h_start=h_start,
        h_dur=h_dur,
        h_thread=h_thread,
        h_kind=h_kind,
        h_dep=h_dep,
        h_gap=h_gap,
        h_gap_cat=h_gap_cat,
        h_gap_x=h_gap_x,
        h_gap_xcat=h_gap_xcat,
        h_after=h_after,
        h_dtoh=h_dtoh,
        h_starves=h_starves,
        h_cat=h_cat,
        h_name=h_name,
        g_start=g_start,
        g_dur=g_dur,
        g_stream=g_stream,
        g_launch=g_launch,
        g_wait=g_wait,
        g_floor=g_floor,
        g_cat=g_cat,
        g_name=g_name,
        g_op=GC["op"][gsel],
        g_cls=cls,
        g_phase=GC["phase"][gsel],
        g_fp32_gemm=g_fp32,
        latency_ns=int(latency_ns),
        latency_cap_ns=int(max(LATENCY_CAP_FACTOR * latency_ns, LATENCY_MIN_CAP_NS)),
        extra={"inferred_waits": inferred},
    )
