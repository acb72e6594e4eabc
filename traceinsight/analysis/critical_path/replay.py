"""Replay a step graph: durations as given, start times from the dependencies alone.

Each host thread and each GPU stream is a chain ``end_i = max(end_{i-1} + a_i, b_i) + c_i``
(``a``: the time between items, ``b``: the readiness from other chains, ``c``: the duration),
solved for all chains at once with a grouped cumulative sum and maximum (exact int64). The
cross-chain edges (launches, syncs, event waits) are resolved by iterating host chains and GPU
chains until nothing moves: one round per host-GPU round trip on the longest path.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from traceinsight.analysis.critical_path.graph import NEG, QUEUED_NS, StepGraph, take

_BIG = np.int64(1 << 43)
MAX_ROUNDS = 4000


def _chain(groups: np.ndarray, a: np.ndarray, c: np.ndarray, b: np.ndarray, anchor: int):
    """``end_i = max(end_{i-1} + a_i, b_i) + c_i`` per group (``groups`` sorted), with
    ``end_{-1} = anchor``. Returns the ends."""
    n = len(a)
    if not n:
        return np.empty(0, np.int64)
    first = np.r_[True, groups[1:] != groups[:-1]]
    gid = np.cumsum(first) - 1
    x = a + c
    cs = np.cumsum(x)
    base = (cs - x)[first]  # cumsum before each group's first item
    C = cs - base[gid]
    v = np.maximum(b, NEG) + c - C
    M = np.maximum.accumulate(v + gid * _BIG) - gid * _BIG
    return C + np.maximum(M, anchor)


@dataclass
class ReplayInputs:
    """What a replay varies: a what-if changes some of these arrays."""

    h_gap: np.ndarray
    h_t: np.ndarray  #: host item time after its readiness (a sync: its tail after the wait)
    h_dep: np.ndarray
    g_dur: np.ndarray
    g_gap: np.ndarray  #: scheduling gap after the previous item of a queued GPU item
    g_lat: np.ndarray  #: launch latency
    g_wait: np.ndarray
    g_pin: np.ndarray  #: fixed earliest start (no launch in the window: its recorded start)

    def copy(self) -> ReplayInputs:
        return ReplayInputs(*(np.array(getattr(self, f)) for f in self.__dataclass_fields__))


def inputs(G: StepGraph) -> ReplayInputs:
    """The graph's recorded timing, as replay inputs."""
    h_end = G.h_start + G.h_dur
    dep = G.h_dep
    has = dep >= 0
    g_end = G.g_start + G.g_dur
    de = take(g_end, dep, NEG)
    h_t = np.where(has, h_end - np.maximum(G.h_start, de), G.h_dur)
    prev = G.g_prev()
    pe = np.where(prev >= 0, take(g_end, prev, NEG), G.g_floor)
    gap = G.g_start - pe
    queued = (prev >= 0) & (gap <= QUEUED_NS)
    g_gap = np.where(queued, np.maximum(gap, 0), 0)
    ls = take(G.h_start, G.g_launch, 0)
    rec_lat = np.maximum(G.g_start - ls, 0)
    g_lat = np.where(
        queued, np.minimum(rec_lat, G.latency_ns), np.minimum(rec_lat, G.latency_cap_ns)
    )
    g_pin = np.where(G.g_launch >= 0, NEG, G.g_start)
    return ReplayInputs(
        G.h_gap.copy(), h_t, dep.copy(), G.g_dur.copy(), g_gap, g_lat, G.g_wait.copy(), g_pin
    )


@dataclass
class Replay:
    h_end: np.ndarray
    g_end: np.ndarray
    end: int  #: replayed step end, relative
    rounds: int
    converged: bool


def replay(G: StepGraph, x: ReplayInputs) -> Replay:
    nh, ng = len(G.h_start), len(G.g_start)
    He = np.full(nh, NEG, np.int64)
    Ge = np.full(ng, NEG, np.int64)
    hp = G.h_prev()
    gfloor = G.g_floor
    hdep_ok = x.h_dep >= 0
    hdep = np.clip(x.h_dep, 0, None)
    gl_ok = G.g_launch >= 0
    gl = np.clip(G.g_launch, 0, None)
    gw_ok = x.g_wait >= 0
    gw = np.clip(x.g_wait, 0, None)
    after_ok = G.h_after >= 0
    after = np.clip(G.h_after, 0, None)
    has_after = bool(after_ok.any())
    gap0 = np.where(after_ok, 0, x.h_gap)  # a thread started by another: from its start
    rounds, converged = 0, False
    for rounds in range(1, MAX_ROUNDS + 1):  # noqa: B007 - the count is reported
        q = np.where(hdep_ok, Ge[hdep] if ng else NEG, NEG)
        if has_after:
            q = np.maximum(q, np.where(after_ok, He[after] + x.h_gap, NEG))
        He2 = _chain(G.h_thread, gap0, x.h_t, q, 0)
        if nh:
            hs = np.where(hp >= 0, He2[np.clip(hp, 0, None)], 0) + gap0
            if has_after:
                hs = np.maximum(hs, np.where(after_ok, He2[after] + x.h_gap, NEG))
        else:
            hs = np.empty(0, np.int64)
        r = np.maximum(np.where(gl_ok, hs[gl] + x.g_lat if nh else NEG, NEG), x.g_pin)
        r = np.maximum(r, gfloor)
        r = np.maximum(r, np.where(gw_ok, Ge[gw] if ng else NEG, NEG))
        Ge2 = _chain(G.g_stream, x.g_gap, x.g_dur, r, NEG)
        if np.array_equal(He2, He) and np.array_equal(Ge2, Ge):
            converged = True
            break
        He, Ge = He2, Ge2
    end = G.ws
    if ng:
        end = max(end, int(Ge.max()))
    he = G.he
    if G.main_thread >= 0 and nh:
        m = np.flatnonzero(G.h_thread == G.main_thread)
        last = m[-1]
        rec_end = int(G.h_start[last] + G.h_dur[last])
        he = int(He[last]) + max(G.he - rec_end, 0)
    end = max(end, he)
    return Replay(He, Ge, int(end), rounds, converged)


def replayed_ns(G: StepGraph, rp: Replay) -> int:
    return int(rp.end - G.ws)
