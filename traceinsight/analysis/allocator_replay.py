"""Replaying a memory snapshot's allocator trace: memory over time, the state at any moment.

``device_traces`` is a ring buffer of the last actions before the snapshot, so the levels are
anchored at the end, where the snapshot's state is exact, and walked back: allocated memory
(what ``torch.cuda.memory_allocated()`` reports) rises at ``alloc`` and falls at
``free_requested``; reserved memory rises at ``segment_alloc`` / ``segment_map`` and falls at
``segment_free`` / ``segment_unmap``. The state at an earlier moment (which allocations were
live, which segments existed, what was free in them) is the end state with the later actions
undone, one by one, in reverse.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import pandas as pd

#: (action -> change of allocated bytes, change of reserved bytes), as signs of ``size``
ALLOCATED = {"alloc": 1, "free_requested": -1, "free": -1}
RESERVED = {"segment_alloc": 1, "segment_map": 1, "segment_free": -1, "segment_unmap": -1}
SMALL_SEGMENT = 2 << 20
MAX_POINTS = 600


@dataclass
class Replay:
    """One device's trace with its levels after each action."""

    actions: pd.DataFrame  #: the device's memory_actions, in trace order
    allocated: np.ndarray  #: allocated bytes after each action
    reserved: np.ndarray  #: reserved bytes after each action
    time_axis: str  #: ts_ns | seq (PyTorch 2.0 traces carry no time)
    mismatch_bytes: int = 0  #: how far the trace and the end state disagree (0: they agree)
    #: the first action from which every level is possible (>= 0): the levels before it
    #: contradict the end state (replayed back from it they fall below zero), and are
    #: neither drawn nor searched for the peak
    consistent_from: int = 0

    @cached_property
    def x(self) -> np.ndarray:
        col = "ts_ns" if self.time_axis == "ts_ns" else "seq"
        return self.actions[col].to_numpy(np.int64)

    @property
    def peak_index(self) -> int | None:
        k = self.consistent_from
        return k + int(np.argmax(self.allocated[k:])) if len(self.allocated) else None


@dataclass
class State:
    """The allocator at one moment: live and pending blocks, segments."""

    live: dict[int, tuple[int, str | None, str | None]]  #: addr -> (bytes, call site, frames)
    pending: dict[int, int]  #: addr -> bytes freed but awaiting their stream
    segments: dict[int, tuple[int, str]]  #: addr -> (bytes, pool)
    notes: list[str] = field(default_factory=list)


def replay(actions: pd.DataFrame, end_allocated: int, end_reserved: int) -> Replay:
    """The levels after each action of one device (``actions`` in trace order, ``addr`` -1 and
    ``size_bytes`` 0 where the trace has none)."""
    kind = actions["action"].astype(str).to_numpy()
    size = actions["size_bytes"].to_numpy(np.int64)
    d_alloc = np.array([ALLOCATED.get(k, 0) for k in kind], np.int64) * size
    d_res = np.array([RESERVED.get(k, 0) for k in kind], np.int64) * size
    alloc = end_allocated - d_alloc.sum() + np.cumsum(d_alloc)
    res = end_reserved - d_res.sum() + np.cumsum(d_res)
    low = min(int(alloc.min()) if len(alloc) else 0, int(res.min()) if len(res) else 0)
    impossible = np.flatnonzero((alloc < 0) | (res < 0))
    ts = actions["ts_ns"]
    axis = "ts_ns" if len(ts) and ts.notna().all() else "seq"
    return Replay(
        actions.reset_index(drop=True),
        alloc,
        res,
        axis,
        mismatch_bytes=-low if low < 0 else 0,
        consistent_from=int(impossible[-1]) + 1 if len(impossible) else 0,
    )


def curve(rp: Replay, n: int = MAX_POINTS) -> dict[str, Any]:
    """At most ``n`` points of allocated and reserved (each bucket keeps its maxima), from
    :attr:`Replay.consistent_from` on: levels that contradict the end state are left out,
    never clamped (``omitted`` counts the actions before the first point drawn)."""
    k = rp.consistent_from
    x, a, r = rp.x[k:], rp.allocated[k:], rp.reserved[k:]
    if len(x) > n:
        edges = np.linspace(x[0], x[-1], n + 1)
        b = np.clip(np.searchsorted(edges, x, side="right") - 1, 0, n - 1)
        df = (
            pd.DataFrame({"b": b, "x": x, "a": a, "r": r})
            .groupby("b")
            .agg(x=("x", "max"), a=("a", "max"), r=("r", "max"))
        )
        x, a, r = (df[c].to_numpy(np.int64) for c in ("x", "a", "r"))
    return {
        "axis": rp.time_axis,
        "x": x.tolist(),
        "allocated": a.tolist(),
        "reserved": r.tolist(),
        "omitted": k,
    }


def state_at(
    rp: Replay, k: int, blocks: list[dict[str, Any]], segments: list[dict[str, Any]]
) -> State:
    """The allocator right after action ``k`` (the last action, or -1 without a trace: the
    snapshot's own state). ``blocks`` and ``segments`` are the snapshot's rows."""
    live = {
        b["address"]: (b["size_bytes"], b["call_site"], b["frames"])
        for b in blocks
        if b["state"] == "allocated" and b["address"] is not None
    }
    pending = {
        b["address"]: b["size_bytes"]
        for b in blocks
        if b["state"] == "pending_free" and b["address"] is not None
    }
    segs = {
        s["address"]: (s["total_bytes"], str(s["pool"]))
        for s in segments
        if s["address"] is not None
    }
    a = rp.actions
    kinds = a["action"].astype(str).to_numpy()
    addrs = a["addr"].to_numpy(np.int64)  # -1: none
    sizes = a["size_bytes"].to_numpy(np.int64)
    sites, frames = a["call_site"].to_numpy(), a["frames"].to_numpy()
    for i in range(len(a) - 1, k, -1):  # undo the actions after k, latest first
        kind, addr, size = kinds[i], int(addrs[i]), int(sizes[i])
        if addr < 0:
            continue
        if kind == "alloc":
            live.pop(addr, None)
        elif kind in ("free_requested", "free"):
            live[addr] = (size, _text(sites[i]), _text(frames[i]))
            pending.pop(addr, None)
        elif kind == "free_completed":
            pending[addr] = size
        elif kind in ("segment_alloc", "segment_map"):
            segs.pop(addr, None)
        elif kind in ("segment_free", "segment_unmap"):
            segs[addr] = (size, "small" if size <= SMALL_SEGMENT else "large")
    return State(live, pending, segs)


def segment_map(st: State) -> list[dict[str, Any]]:
    """Each segment with its blocks in address order: allocated, pending_free and the
    inactive gaps between them (offset, bytes, state, call site)."""
    starts = sorted(st.segments)
    used: dict[int, list[tuple[int, int, str, str | None]]] = {s: [] for s in starts}
    for addr, (size, site, _frames) in st.live.items():
        seg = _owner(starts, st.segments, addr)
        if seg is not None:
            used[seg].append((addr, size, "allocated", site))
    for addr, size in st.pending.items():
        seg = _owner(starts, st.segments, addr)
        if seg is not None:
            used[seg].append((addr, size, "pending_free", None))
    out = []
    for s in starts:
        total, pool = st.segments[s]
        blocks: list[list[Any]] = []
        pos = s
        for addr, size, state, site in sorted(used[s]):
            if addr > pos:
                blocks.append([pos - s, addr - pos, "inactive", None])
            blocks.append([addr - s, size, state, site])
            pos = max(pos, addr + size)
        if pos < s + total:
            blocks.append([pos - s, s + total - pos, "inactive", None])
        out.append({"address": s, "bytes": total, "pool": pool, "blocks": blocks})
    return out


def map_totals(segs: list[dict[str, Any]]) -> dict[str, int]:
    """Reserved, allocated, pending, free, stranded (free in segments holding a live or
    pending block) and the largest free block of a segment map."""
    out = {"reserved": 0, "allocated": 0, "pending": 0, "free": 0, "stranded": 0, "largest_free": 0}
    for s in segs:
        out["reserved"] += s["bytes"]
        free = [b[1] for b in s["blocks"] if b[2] == "inactive"]
        busy = any(b[2] != "inactive" for b in s["blocks"])
        out["allocated"] += sum(b[1] for b in s["blocks"] if b[2] == "allocated")
        out["pending"] += sum(b[1] for b in s["blocks"] if b[2] == "pending_free")
        out["free"] += sum(free)
        out["stranded"] += sum(free) if busy else 0
        out["largest_free"] = max([out["largest_free"], *free])
    return out


def _owner(starts: list[int], segs: dict[int, tuple[int, str]], addr: int) -> int | None:
    i = bisect.bisect_right(starts, addr) - 1
    if i >= 0 and addr < starts[i] + segs[starts[i]][0]:
        return starts[i]
    return None


def _text(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def iterations(levels: np.ndarray, min_swing: float = 0.25) -> dict[str, Any] | None:
    """Iterations as the allocated curve's swings: a fall of at least ``min_swing`` of its
    range after a peak ends an iteration at its trough (a zigzag). The troughs, their trend
    per iteration (least squares) and the share of iterations that ended higher than the one
    before. None below three troughs."""
    if len(levels) < 3:
        return None
    lo, hi = float(levels.min()), float(levels.max())
    thr = max(min_swing * (hi - lo), 1.0)
    if hi - lo <= 0:
        return None
    troughs: list[int] = []
    peak_i, trough_i = 0, 0
    rising = True  # looking for a peak
    for i, v in enumerate(levels):
        if rising:
            if v > levels[peak_i]:
                peak_i = i
            elif levels[peak_i] - v >= thr:
                rising, trough_i = False, i
        else:
            if v < levels[trough_i]:
                trough_i = i
            elif v - levels[trough_i] >= thr:
                troughs.append(trough_i)
                rising, peak_i = True, i
    if not rising:
        troughs.append(trough_i)  # the trace ended after a fall
    if len(troughs) < 3:
        return None
    vals = levels[troughs].astype(np.float64)
    slope = float(np.polyfit(np.arange(len(vals), dtype=np.float64), vals, 1)[0])
    return {
        "troughs": troughs,
        "trough_bytes": vals.astype(np.int64).tolist(),
        "growth_bytes_per_iteration": slope,
        "grew_pct": 100.0 * float((np.diff(vals) > 0).mean()),
    }


FLUSH = ("segment_free", "segment_unmap")


def history(rp: Replay, peak: dict[str, Any], ooms: list[dict[str, Any]]) -> dict[str, Any]:
    """What the allocator's trace shows beyond its end state: the state at the history's peak
    (reserved against allocated, the largest free block against the largest request that
    followed), cache flushes (runs of ``segment_free`` / ``segment_unmap``: ``empty_cache()``
    or the allocator's own free-and-retry after a failed ``cudaMalloc``), allocations retried
    after an OOM (a later ``alloc`` at least as large as the failed request), and segments
    reserved while the cache already held at least their size free (reserved − allocated
    just before the ``segment_alloc``; the largest such is named)."""
    kinds = rp.actions["action"].astype(str).to_numpy()
    sizes = rp.actions["size_bytes"].to_numpy(np.int64)
    n = len(kinds)
    k = peak["index"]
    later = sizes[k + 1 :][np.isin(kinds[k + 1 :], ("alloc", "oom"))] if n else sizes[:0]
    flush = np.isin(kinds, FLUSH)
    starts = flush & ~np.concatenate(([False], flush[:-1]))
    oom_idx = np.flatnonzero(kinds == "oom")
    retried = 0
    for j, i in enumerate(oom_idx):
        stop = oom_idx[j + 1] if j + 1 < len(oom_idx) else n
        seg = slice(i + 1, stop)
        retried += int(((kinds[seg] == "alloc") & (sizes[seg] >= sizes[i])).any())
    prev_free = np.concatenate(([0], (rp.reserved - rp.allocated)[:-1])) if n else sizes[:0]
    despite = np.flatnonzero(
        np.isin(kinds, ("segment_alloc", "segment_map")) & (prev_free >= sizes) & (sizes > 0)
    )
    big = int(despite[np.argmax(sizes[despite])]) if len(despite) else None
    return {
        "peak_reserved": peak["reserved"],
        "peak_allocated": peak["allocated"],
        "peak_ratio": peak["reserved"] / peak["allocated"] if peak["allocated"] else None,
        "peak_largest_free": peak["map_totals"]["largest_free"],
        "later_request_max": int(later.max()) if len(later) else 0,
        "flushes": int(starts.sum()),
        "flushed_bytes": int(sizes[flush].sum()),
        "oom_retries": retried,
        "segments_despite_free": len(despite),
        "segment_despite_free_bytes": int(sizes[big]) if big is not None else 0,
        "free_at_that_segment": int(prev_free[big]) if big is not None else 0,
        "ooms": len(oom_idx),
        "oom_failed_cached": sum(bool(o["cached_enough"]) for o in ooms),
    }
