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

from traceinsight.analysis import by_rank
from traceinsight.analysis import intervals as iv
from traceinsight.analysis.attribution import Attribution, StepWindow

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


class RankRows:
    """One rank's attributed GPU rows as arrays: what the window breakdowns read (built once
    per rank, so a window costs array operations over the rank's rows, not table selections)."""

    def __init__(self, g: pd.DataFrame) -> None:
        self.s = g["start_ns"].to_numpy(np.int64)
        self.e = g["end_ns"].to_numpy(np.int64)
        self.dur = g["dur_ns"].to_numpy(np.int64)
        kind = g["kind"].astype(object).to_numpy()
        self.kernel = kind == "kernel"
        self.memcpy = kind == "memcpy"
        self.memset = kind == "memset"
        cls = g["cls"]
        self.comm = (cls == "communication").to_numpy(dtype=bool, na_value=False)
        # kernel classes in the order a groupby over the column lists them
        if isinstance(cls.dtype, pd.CategoricalDtype):
            self.cls_code = cls.cat.codes.to_numpy(np.int64)
            self.cls_name = [str(c) for c in cls.cat.categories]
        else:
            codes, uniq = pd.factorize(cls, sort=True)
            self.cls_code, self.cls_name = codes.astype(np.int64), [str(c) for c in uniq]
        self.step = g["step"]
        # rows by start time, so a window's rows are found by binary search, not a scan
        self.order = np.argsort(self.s, kind="stable")
        self.sorted_s = self.s[self.order]
        self.max_dur = int((self.e - self.s).max()) if len(self.s) else 0
        self._steps: dict[Any, np.ndarray] | None = None

    def in_step(self, step: int | None) -> np.ndarray:
        """Rows (positions, ascending) of step ``step``; all rows for the whole-trace window."""
        if step is None:
            return np.arange(len(self.s))
        if self._steps is None:
            self._steps = (
                self.step.groupby(self.step, sort=False, dropna=True).indices
                if len(self.step)
                else {}
            )
        return self._steps.get(step, np.empty(0, dtype=np.int64))

    def overlapping(self, s: int, e: int) -> np.ndarray:
        """Rows (positions, ascending) overlapping [s, e): the candidates, started before
        ``e`` and at most the longest activity before ``s``, found by binary search."""
        lo = np.searchsorted(self.sorted_s, s - self.max_dur, side="left")
        hi = np.searchsorted(self.sorted_s, e, side="left")
        near = np.sort(self.order[lo:hi])
        return near[(self.e[near] > s) & (self.s[near] < e)]


def _u(r: RankRows, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return iv.union(r.s[rows], r.e[rows])


def window_breakdown(r: RankRows, w: StepWindow, in_step: np.ndarray) -> WindowBreakdown:
    """Breakdown of one rank's attributed GPU rows ``r`` inside window ``w``; the kernel
    counts are of the rows ``in_step`` (positions: the step's, or all for a whole-trace
    window)."""
    s, e = w.start_ns, w.end_ns
    sel = r.overlapping(s, e)
    kern = sel[r.kernel[sel]]
    is_comm = r.comm[kern]
    C = iv.clip(_u(r, kern[~is_comm]), s, e)
    M = iv.clip(_u(r, kern[is_comm]), s, e)
    Y = iv.clip(_u(r, sel[r.memcpy[sel]]), s, e)
    S = iv.clip(_u(r, sel[r.memset[sel]]), s, e)
    allu = iv.clip(_u(r, sel), s, e)
    CM = iv.union(np.concatenate((C[0], M[0])), np.concatenate((C[1], M[1])))
    CMY = iv.union(np.concatenate((CM[0], Y[0])), np.concatenate((CM[1], Y[1])))
    busy = iv.length(allu)
    by_class = {}
    codes = r.cls_code[kern]
    for code in np.unique(codes):
        if code >= 0:
            by_class[r.cls_name[code]] = iv.length(iv.clip(_u(r, kern[codes == code]), s, e))
    k_dur = r.dur[in_step][r.kernel[in_step]]
    return WindowBreakdown(
        rank=w.rank,
        step=w.step,
        start_ns=s,
        end_ns=e,
        wall_ns=e - s,
        busy_ns=busy,
        idle_ns=(e - s) - busy,
        compute_ns=iv.length(C),
        comm_ns=iv.length(M),
        comm_exposed_ns=iv.length(iv.subtract(M, C)),
        comm_hidden_ns=iv.length(iv.intersect(M, C)),
        memcpy_ns=iv.length(Y),
        memcpy_exposed_ns=iv.length(iv.subtract(Y, CM)),
        memset_ns=iv.length(S),
        memset_exposed_ns=iv.length(iv.subtract(S, CMY)),
        kernel_sum_ns=int(k_dur.sum()),
        kernels=len(k_dur),
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
    keys = (
        "wall_ns",
        "busy_ns",
        "idle_ns",
        "compute_ns",
        "comm_ns",
        "comm_exposed_ns",
        "comm_hidden_ns",
        "memcpy_ns",
        "memcpy_exposed_ns",
        "memset_ns",
        "memset_exposed_ns",
        "kernel_sum_ns",
        "kernels",
    )
    tot = {k: sum(getattr(p, k) for p in parts) for k in keys}
    by_class: dict[str, int] = {}
    for p in parts:
        for k, v in p.by_class_ns.items():
            by_class[k] = by_class.get(k, 0) + v
    host = [p.host_ns for p in parts if p.host_ns is not None]
    return WindowBreakdown(
        rank=rank,
        step=None,
        start_ns=min(p.start_ns for p in parts),
        end_ns=max(p.end_ns for p in parts),
        host_ns=sum(host) if host else None,
        by_class_ns=by_class,
        **tot,
    )


def rank_total(rank: int, parts: list[WindowBreakdown]) -> WindowBreakdown:
    """One rank's breakdown: the sums over its windows ``parts``."""
    return _sum(rank, parts)


def breakdown(attr: Attribution) -> Breakdown:
    steps: list[WindowBreakdown] = []
    ranks: dict[int, WindowBreakdown] = {}
    g_all = attr.gpu
    per_rank: dict[int, list[StepWindow]] = {}
    for w in attr.steps:
        per_rank.setdefault(w.rank, []).append(w)
    for rank in sorted(per_rank):
        rows = RankRows(by_rank.rows(g_all, rank))
        parts = [window_breakdown(rows, w, rows.in_step(w.step)) for w in per_rank[rank]]
        steps.extend(parts)
        if parts:
            ranks[rank] = _sum(rank, parts)
    return Breakdown(steps, ranks)


def joined(parts: list[Breakdown]) -> Breakdown:
    """The breakdowns of rank partitions (in rank order) as the whole store's: a rank's
    windows and total are its own, whichever partition measured them."""
    steps = [w for b in parts for w in b.steps]
    ranks = {r: t for b in parts for r, t in b.ranks.items()}
    return Breakdown(steps, dict(sorted(ranks.items())))
