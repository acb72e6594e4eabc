"""The critical path of a step on its recorded timeline.

Walked backward from the step's end: at each node the dependency that released it last is
followed (stream order, launch, event wait, or the GPU work a sync waited for), and the time
between is charged to a category. The segments cover the step window without gap or overlap,
so the path's length is the measured step and its category breakdown sums to it exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from traceinsight.analysis.critical_path.graph import CAT, CATEGORIES, NEG, StepGraph

HOST, GPU, NONE = 0, 1, 2


class Segment(NamedTuple):
    cat: int
    start: int  #: relative ns
    end: int
    node: int  #: NONE: a gap not tied to an item
    index: int


@dataclass
class CriticalPath:
    segments: list[Segment]  #: in time order
    by_cat: dict[str, int]

    @property
    def length(self) -> int:
        return sum(s.end - s.start for s in self.segments)


def walk(G: StepGraph) -> CriticalPath:
    ws, we = int(G.ws), int(G.we)
    hs = G.h_start.tolist()
    he = (G.h_start + G.h_dur).tolist()
    hprev = G.h_prev().tolist()
    hdep = G.h_dep.tolist()
    hcat = G.h_cat.tolist()
    hgapcat = G.h_gap_cat.tolist()
    hgapx = G.h_gap_x.tolist()
    hgapxcat = G.h_gap_xcat.tolist()
    hgap = G.h_gap.tolist()
    hafter = G.h_after.tolist()
    gs = G.g_start.tolist()
    ge = (G.g_start + G.g_dur).tolist()
    gprev = G.g_prev().tolist()
    gl = G.g_launch.tolist()
    gw = G.g_wait.tolist()
    gfloor = G.g_floor.tolist()
    gcat = G.g_cat.tolist()
    lat = int(G.latency_ns)
    cap = int(G.latency_cap_ns)
    segs: list[Segment] = []
    t = we  # the current time: everything after it is on the path already

    def emit(cat: int, a: int, node: int, idx: int) -> int:
        """Charge [a, t] (clipped to the window) to ``cat``; return the new time."""
        nonlocal t
        a = max(min(a, t), ws)
        if t > a:
            segs.append(Segment(cat, a, t, node, idx))
        t = a
        return t

    # entry: the item that ends the step
    state: tuple[int, int, bool] | None = None  # (node kind, index, at its end)
    g_last = int(np.argmax(G.g_start + G.g_dur)) if len(gs) else -1
    main = np.flatnonzero(G.h_thread == G.main_thread) if G.main_thread >= 0 else []
    if g_last >= 0 and ge[g_last] >= G.he:
        emit(CAT["unrecorded"], ge[g_last], NONE, -1)
        state = (GPU, g_last, True)
    elif len(main):
        last = int(main[-1])
        emit(CAT["host"], he[last], NONE, -1)
        state = (HOST, last, True)
    steps = 0
    limit = 4 * (len(hs) + len(gs)) + 16
    while state is not None and t > ws and steps < limit:
        steps += 1
        kind, i, at_end = state
        if kind == GPU:
            if at_end:
                emit(gcat[i], gs[i], GPU, i)
                state = (GPU, i, False)
                continue
            # which dependency released it last
            p = gprev[i]
            pe = ge[p] if p >= 0 else gfloor[i]
            li = gl[i]
            ls = hs[li] if li >= 0 else NEG
            lr = ls + min(lat, gs[i] - ls) if li >= 0 else NEG
            wi = gw[i]
            de = ge[wi] if wi >= 0 else NEG
            best = max(pe, lr, de)
            if best == NEG:
                emit(CAT["unrecorded"], ws, NONE, -1)
                state = None
            elif best == de and wi >= 0:
                emit(CAT["sync"], de, GPU, i)
                state = (GPU, wi, True)
            elif best == pe and p >= 0 and pe >= lr:
                emit(CAT["unrecorded"] if gs[i] - pe > lat else gcat[i], pe, GPU, i)
                state = (GPU, p, True)
            elif best == lr and li >= 0:
                excess = gs[i] - ls - cap
                if excess > 0:
                    emit(CAT["unrecorded"], gs[i] - excess, GPU, i)
                emit(CAT["launch"], ls, GPU, i)
                state = (HOST, li, False)
            else:  # released by earlier work outside the window
                emit(CAT["unrecorded"], pe, NONE, -1)
                state = None
        else:
            if at_end:
                d = hdep[i]
                if d >= 0 and ge[d] > hs[i]:
                    emit(CAT["sync"], ge[d], HOST, i)
                    state = (GPU, d, True)
                else:
                    emit(hcat[i], hs[i], HOST, i)
                    state = (HOST, i, False)
                continue
            p = hprev[i] if hprev[i] >= 0 else hafter[i]
            a = he[p] if p >= 0 else hs[i] - hgap[i]
            x = min(hgapx[i], max(hs[i] - a, 0))
            emit(hgapcat[i], a + x, NONE, i)  # the gap: host time after the input/start-up part
            emit(hgapxcat[i], a, NONE, i)
            if p >= 0:
                state = (HOST, p, True)
            else:
                emit(
                    CAT["unrecorded"] if G.h_after[i] < 0 and hprev[i] < 0 else hgapcat[i],
                    ws,
                    NONE,
                    i,
                )
                state = None
    if t > ws:
        emit(CAT["unrecorded"], ws, NONE, -1)
    segs.reverse()
    by = {c: 0 for c in CATEGORIES}
    for s in segs:
        by[CATEGORIES[s.cat]] += s.end - s.start
    return CriticalPath(segs, by)


def top_items(G: StepGraph, cp: CriticalPath, n: int = 8) -> list[dict]:
    """The items with the most time on the path: GPU work by kernel name and launching op,
    host calls by name, gaps by category."""
    acc: dict[tuple, int] = {}
    for s in cp.segments:
        if s.node == GPU:
            key = ("gpu", str(G.g_name[s.index]), str(G.g_op[s.index] or ""), s.cat)
        elif s.node == HOST:
            key = ("host", str(G.h_name[s.index]), "", s.cat)
        else:
            key = ("gap", CATEGORIES[s.cat], "", s.cat)
        acc[key] = acc.get(key, 0) + (s.end - s.start)
    rows = sorted(acc.items(), key=lambda kv: -kv[1])[:n]
    total = max(cp.length, 1)
    return [
        {
            "kind": k[0],
            "name": k[1],
            "launched_by": k[2] or None,
            "category": CATEGORIES[k[3]],
            "ns": int(v),
            "pct": 100.0 * v / total,
        }
        for k, v in rows
    ]
