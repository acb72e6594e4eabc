"""The critical path of a step on its recorded timeline.

Walked backward from the step's end: at each node the dependency that released it last is
followed (stream order, launch, event wait, or the GPU work a sync waited for), and the time
between is charged to a category. The segments cover the step window without gap or overlap,
so the path's length is the measured step and its category breakdown sums to it exactly.

Every node has two states (at its start, at its end); the next state and the segment each
state charges are computed for all states at once, then the path is a chase through an
integer array, and its segments are built from the visited states in one pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import pandas as pd

from traceinsight.analysis.critical_path.graph import CAT, CATEGORIES, NEG, StepGraph, take

HOST, GPU, NONE = 0, 1, 2
_UNREC = CAT["unrecorded"]


class Segment(NamedTuple):
    cat: int
    start: int  #: relative ns
    end: int
    node: int  #: HOST, GPU, or NONE (a gap not tied to an item)
    item: int  #: index of the host or GPU item (-1: none)


@dataclass
class CriticalPath:
    start: np.ndarray  #: segment starts, relative ns, in time order
    end: np.ndarray
    cat: np.ndarray
    node: np.ndarray
    index: np.ndarray
    by_cat: dict[str, int]

    @property
    def length(self) -> int:
        return int((self.end - self.start).sum())

    @property
    def segments(self) -> list[Segment]:
        return [
            Segment(int(c), int(a), int(b), int(n), int(i))
            for c, a, b, n, i in zip(
                self.cat, self.start, self.end, self.node, self.index, strict=False
            )
        ]


def _states(G: StepGraph):
    """Per state (``2 * node + at_end``; host nodes first, then GPU nodes): its time, the next
    state (-1: the walk ends there), the split point ``b`` and the categories of the later
    part [b, t] and the earlier part [t_next, b], the category of the rest of the window when
    the walk ends there, and the node kind and index each segment is tied to."""
    nh, ng = len(G.h_start), len(G.g_start)
    n = nh + ng
    T = np.zeros(2 * n, np.int64)
    nxt = np.full(2 * n, -1, np.int64)
    tn = np.zeros(2 * n, np.int64)  # time of the next state (or where the walk ends)
    b = np.zeros(2 * n, np.int64)
    c1 = np.full(2 * n, _UNREC, np.int64)
    c2 = np.full(2 * n, _UNREC, np.int64)
    term = np.full(2 * n, _UNREC, np.int64)
    kind = np.full(2 * n, NONE, np.int64)
    idx = np.full(2 * n, -1, np.int64)
    H = np.arange(nh)
    hs, he = G.h_start, G.h_start + G.h_dur
    # host end: the GPU work a sync waited for, else the call itself
    e = 2 * H + 1
    T[e] = he
    d = G.h_dep
    de = take(G.g_start + G.g_dur, d, NEG)
    waits = (d >= 0) & (de > hs)
    nxt[e] = np.where(waits, 2 * (nh + d) + 1, 2 * H)
    tn[e] = np.where(waits, de, hs)
    b[e] = tn[e]
    c1[e] = np.where(waits, CAT["sync"], G.h_cat)
    kind[e], idx[e] = HOST, H
    # host start: the gap since the previous call of the thread (or the call that started it)
    s = 2 * H
    T[s] = hs
    hp = G.h_prev()
    p = np.where(hp >= 0, hp, G.h_after)
    a = np.where(p >= 0, take(he, p, 0), hs - G.h_gap)
    x = np.minimum(G.h_gap_x, np.maximum(hs - a, 0))
    nxt[s] = np.where(p >= 0, 2 * p + 1, -1)
    tn[s] = a
    b[s] = a + x
    c1[s], c2[s] = G.h_gap_cat, G.h_gap_xcat
    term[s] = np.where((G.h_after < 0) & (hp < 0), _UNREC, G.h_gap_cat)
    kind[s], idx[s] = NONE, H
    # GPU end: the item itself
    K = np.arange(ng)
    gs, ge = G.g_start, G.g_start + G.g_dur
    e = 2 * (nh + K) + 1
    T[e] = ge
    nxt[e] = 2 * (nh + K)
    tn[e] = gs
    b[e] = gs
    c1[e] = G.g_cat
    kind[e], idx[e] = GPU, K
    # GPU start: the dependency that released it last
    s = 2 * (nh + K)
    T[s] = gs
    gp = G.g_prev()
    pe = np.where(gp >= 0, take(ge, gp, NEG), G.g_floor)
    li = G.g_launch
    ls = take(hs, li, NEG)
    lr = np.where(li >= 0, ls + np.minimum(G.latency_ns, gs - ls), NEG)
    wi = G.g_wait
    dw = take(ge, wi, NEG)
    best = np.maximum(np.maximum(pe, lr), dw)
    by_wait = (wi >= 0) & (best == dw)
    by_prev = ~by_wait & (gp >= 0) & (best == pe) & (pe >= lr)
    by_launch = ~by_wait & ~by_prev & (li >= 0) & (best == lr)
    nxt[s] = np.where(
        by_wait,
        2 * (nh + wi) + 1,
        np.where(by_prev, 2 * (nh + gp) + 1, np.where(by_launch, 2 * li, -1)),
    )
    excess = np.maximum(gs - ls - G.latency_cap_ns, 0)
    tn[s] = np.where(
        by_wait, dw, np.where(by_prev, pe, np.where(by_launch, ls, np.maximum(pe, G.ws)))
    )
    b[s] = np.where(by_launch, gs - excess, tn[s])
    late = gs - pe > G.latency_ns
    c1[s] = np.where(
        by_wait, CAT["sync"], np.where(by_prev, np.where(late, _UNREC, G.g_cat), _UNREC)
    )
    c2[s] = np.where(by_launch, CAT["launch"], c1[s])
    kind[s], idx[s] = GPU, K
    return T, nxt, tn, b, c1, c2, term, kind, idx


def walk(G: StepGraph) -> CriticalPath:
    ws, we = int(G.ws), int(G.we)
    nh, ng = len(G.h_start), len(G.g_start)
    T, nxt, tn, b, c1, c2, term, kind, idx = _states(G)
    # entry: the item that ends the step, and the time after it
    entry, entry_cat = -1, _UNREC
    if ng:
        k = int(np.argmax(G.g_start + G.g_dur))
        if int(G.g_start[k] + G.g_dur[k]) >= G.he:
            entry = 2 * (nh + k) + 1
    if entry < 0 and G.main_thread >= 0:
        main = np.flatnonzero(G.h_thread == G.main_thread)
        if len(main):
            entry, entry_cat = 2 * int(main[-1]) + 1, CAT["host"]
    seq: list[int] = []
    if entry >= 0:
        nx = nxt.tolist()
        tl = tn.tolist()
        st, t = entry, min(int(T[entry]), we)
        limit = 2 * (nh + ng) + 16
        while st >= 0 and t > ws and len(seq) < limit:
            seq.append(st)
            t = min(t, tl[st])
            st = nx[st]
    v = np.asarray(seq, dtype=np.int64)
    # running time: each state's segment ends where the previous one began
    t_entry = min(int(T[entry]), we) if entry >= 0 else ws
    lo = np.maximum(np.minimum.accumulate(np.minimum(tn[v], t_entry)) if len(v) else v, ws)
    hi = np.r_[t_entry, lo[:-1]] if len(v) else v
    mid = np.clip(b[v], lo, hi) if len(v) else v
    parts_s = [np.array([t_entry]), mid, lo]
    parts_e = [np.array([we]), hi, mid]
    parts_c = [np.array([entry_cat]), c1[v], c2[v]]
    parts_k = [np.array([NONE]), kind[v], kind[v]]
    parts_i = [np.array([-1]), idx[v], idx[v]]
    rest = int(lo[-1]) if len(v) else t_entry
    if rest > ws:  # the walk ended before the window's start
        last = int(v[-1]) if len(v) else -1
        parts_s.append(np.array([ws]))
        parts_e.append(np.array([rest]))
        parts_c.append(np.array([term[last] if last >= 0 and nxt[last] < 0 else _UNREC]))
        parts_k.append(np.array([NONE]))
        parts_i.append(np.array([-1]))
    start = np.concatenate(parts_s).astype(np.int64)
    end = np.concatenate(parts_e).astype(np.int64)
    cat = np.concatenate(parts_c).astype(np.int64)
    node = np.concatenate(parts_k).astype(np.int64)
    index = np.concatenate(parts_i).astype(np.int64)
    keep = end > start
    o = np.argsort(start[keep], kind="stable")
    start, end, cat, node, index = (a[keep][o] for a in (start, end, cat, node, index))
    ns = np.zeros(len(CATEGORIES), np.int64)
    np.add.at(ns, cat, end - start)
    return CriticalPath(
        start, end, cat, node, index, {c: int(ns[i]) for i, c in enumerate(CATEGORIES)}
    )


def top_items(G: StepGraph, cp: CriticalPath, n: int = 8) -> list[dict]:
    """The items with the most time on the path: GPU work by kernel name and launching op,
    host calls by name, gaps by category."""
    if not len(cp.start):
        return []
    dur = cp.end - cp.start
    gpu = cp.node == GPU
    host = cp.node == HOST
    name = np.array([CATEGORIES[c] for c in cp.cat], dtype=object)
    by = np.full(len(dur), "", dtype=object)
    kind = np.full(len(dur), "gap", dtype=object)
    if gpu.any():
        name[gpu] = G.g_name[cp.index[gpu]]
        by[gpu] = G.g_op[cp.index[gpu]]
        kind[gpu] = "gpu"
    if host.any():
        name[host] = G.h_name[cp.index[host]]
        kind[host] = "host"
    df = pd.DataFrame({"kind": kind, "name": name, "by": by, "cat": cp.cat, "ns": dur})
    df["name"] = df["name"].astype(str)
    df["by"] = df["by"].fillna("").astype(str)
    agg = df.groupby(["kind", "name", "by", "cat"], sort=False)["ns"].sum()
    agg = agg.sort_values(ascending=False, kind="stable").head(n)
    total = max(cp.length, 1)
    return [
        {
            "kind": k[0],
            "name": k[1],
            "launched_by": k[2] or None,
            "category": CATEGORIES[int(k[3])],
            "ns": int(v),
            "pct": 100.0 * int(v) / total,
        }
        for k, v in agg.items()
    ]
