"""GPU time breakdown per rank and per step window.

Within a window W (a GPU-aware step window, or the whole trace without step markers), with
unions of intervals merged across the rank's streams:

- busy = |kernels ∪ memcpy ∪ memset|; idle = |W| - busy
- compute = |C| where C = non-communication kernels
- comm = |M| (communication kernels); comm_hidden = |M ∩ C|; comm_exposed = |M - C|;
  comm_overlap_pct = comm_hidden / comm (0 without communication), stated in every row
- memcpy_exposed = |Y - C - M|; memset_exposed = |S - C - M - Y|

so that compute + comm_exposed + memcpy_exposed + memset_exposed + idle = |W| exactly (the
stacked bar of the report). Device-side synchronisation events are not GPU work and are
excluded. Raw per-class sums (plain sum of durations, overlap counted twice) are reported
beside the unions.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from . import intervals as iv
from .attribution import Attribution, StepWindow

PARTS = ("compute", "comm_exposed", "memcpy_exposed", "memset_exposed", "idle")


@dataclass
class WindowBreakdown:
    rank: int
    step: int | None
    start_ns: int
    end_ns: int
    wall_ns: int
    busy_ns: int
    idle_ns: int
    compute_ns: int
    comm_ns: int
    comm_exposed_ns: int
    comm_hidden_ns: int
    memcpy_ns: int
    memcpy_exposed_ns: int
    memset_ns: int
    memset_exposed_ns: int
    kernel_sum_ns: int  #: plain sum of kernel durations launched in the window
    kernels: int
    host_ns: int | None = None  #: the host-side ProfilerStep duration
    by_class_ns: dict[str, int] = field(default_factory=dict)  #: union per kernel class

    @property
    def comm_overlap_pct(self) -> float:
        """Share of communication time hidden under compute (0 without communication)."""
        return 100.0 * self.comm_hidden_ns / self.comm_ns if self.comm_ns else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "comm_overlap_pct": self.comm_overlap_pct}

    def pct(self, part: str) -> float:
        return 100.0 * getattr(self, f"{part}_ns") / self.wall_ns if self.wall_ns else 0.0


def _u(df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    return iv.union(df["start_ns"].to_numpy(np.int64), df["end_ns"].to_numpy(np.int64))


def window_breakdown(g: pd.DataFrame, w: StepWindow, *,
                     step_rows: pd.DataFrame | None = None) -> WindowBreakdown:
    """Breakdown of rank activity ``g`` (attributed GPU rows of one rank) inside window ``w``."""
    s, e = w.start_ns, w.end_ns
    sel = g[(g["end_ns"] > s) & (g["start_ns"] < e)]  # all of them when given overlapping rows
    kern = sel[sel["kind"] == "kernel"]
    comm_mask = kern["cls"] == "communication"
    C = iv.clip(_u(kern[~comm_mask]), s, e)
    M = iv.clip(_u(kern[comm_mask]), s, e)
    Y = iv.clip(_u(sel[sel["kind"] == "memcpy"]), s, e)
    S = iv.clip(_u(sel[sel["kind"] == "memset"]), s, e)
    allu = iv.clip(_u(sel), s, e)
    CM = iv.union(np.concatenate((C[0], M[0])), np.concatenate((C[1], M[1])))
    CMY = iv.union(np.concatenate((CM[0], Y[0])), np.concatenate((CM[1], Y[1])))
    busy = iv.length(allu)
    by_class = {}
    for cls, grp in kern.groupby("cls", observed=True):
        by_class[str(cls)] = iv.length(iv.clip(_u(grp), s, e))
    in_step = step_rows if step_rows is not None else kern
    return WindowBreakdown(
        rank=w.rank, step=w.step, start_ns=s, end_ns=e, wall_ns=e - s,
        busy_ns=busy, idle_ns=(e - s) - busy,
        compute_ns=iv.length(C), comm_ns=iv.length(M),
        comm_exposed_ns=iv.length(iv.subtract(M, C)),
        comm_hidden_ns=iv.length(iv.intersect(M, C)),
        memcpy_ns=iv.length(Y), memcpy_exposed_ns=iv.length(iv.subtract(Y, CM)),
        memset_ns=iv.length(S), memset_exposed_ns=iv.length(iv.subtract(S, CMY)),
        kernel_sum_ns=int(in_step.loc[in_step["kind"] == "kernel", "dur_ns"].sum()),
        kernels=int((in_step["kind"] == "kernel").sum()),
        host_ns=(w.host_end_ns - w.host_start_ns) if w.step is not None else None,
        by_class_ns=by_class,
    )


@dataclass
class Breakdown:
    steps: list[WindowBreakdown]  #: one per step window (or one whole-trace window) per rank
    ranks: dict[int, WindowBreakdown]  #: per rank, summed over its windows

    def step_frame(self) -> pd.DataFrame:
        return pd.DataFrame([s.to_dict() for s in self.steps])


def _sum(rank: int, parts: list[WindowBreakdown]) -> WindowBreakdown:
    keys = ("wall_ns", "busy_ns", "idle_ns", "compute_ns", "comm_ns", "comm_exposed_ns",
            "comm_hidden_ns", "memcpy_ns", "memcpy_exposed_ns", "memset_ns", "memset_exposed_ns",
            "kernel_sum_ns", "kernels")
    tot = {k: sum(getattr(p, k) for p in parts) for k in keys}
    by_class: dict[str, int] = {}
    for p in parts:
        for k, v in p.by_class_ns.items():
            by_class[k] = by_class.get(k, 0) + v
    host = [p.host_ns for p in parts if p.host_ns is not None]
    return WindowBreakdown(rank=rank, step=None, start_ns=min(p.start_ns for p in parts),
                           end_ns=max(p.end_ns for p in parts), host_ns=sum(host) if host else None,
                           by_class_ns=by_class, **tot)


def breakdown(attr: Attribution) -> Breakdown:
    steps: list[WindowBreakdown] = []
    ranks: dict[int, WindowBreakdown] = {}
    g_all = attr.gpu
    by_rank = g_all.groupby("rank", sort=False).indices if len(g_all) else {}
    for rank in sorted(set(w.rank for w in attr.steps)):
        pos = by_rank.get(rank)
        g = g_all if pos is not None and len(pos) == len(g_all) else \
            g_all.iloc[pos if pos is not None else []]
        wins = [w for w in attr.steps if w.rank == rank]
        find = _Finder(g)
        parts = []
        for w in wins:
            rows = find.step(w.step) if w.step is not None else g
            parts.append(window_breakdown(find.overlapping(w.start_ns, w.end_ns), w,
                                          step_rows=rows))
        steps.extend(parts)
        if parts:
            ranks[rank] = _sum(rank, parts)
    return Breakdown(steps, ranks)


class _Finder:
    """The rows of one rank's activities overlapping a window, or of one step, without a
    scan of every row per window (windows x rows grows fast on long traces)."""

    def __init__(self, g: pd.DataFrame) -> None:
        self.g = g
        start = g["start_ns"].to_numpy(np.int64)
        self.order = np.argsort(start, kind="stable")
        self.starts = start[self.order]
        self.ends = g["end_ns"].to_numpy(np.int64)
        self.max_dur = int((self.ends - start).max()) if len(g) else 0
        self.steps = g.groupby("step", sort=False, dropna=True).indices if len(g) else {}

    def overlapping(self, s: int, e: int) -> pd.DataFrame:
        """Rows with end > s and start < e, in their original order."""
        lo = np.searchsorted(self.starts, s - self.max_dur, side="left")
        hi = np.searchsorted(self.starts, e, side="left")
        cand = np.sort(self.order[lo:hi])
        return self.g.iloc[cand[self.ends[cand] > s]]

    def step(self, step: int) -> pd.DataFrame:
        pos = self.steps.get(step)
        return self.g.iloc[pos if pos is not None else []]
