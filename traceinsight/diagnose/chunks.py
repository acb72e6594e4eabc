"""A trace too large to analyse whole: every step, analysed in step chunks, its sums merged.

A store over the memory limit is analysed one run of steps at a time
(:mod:`traceinsight.store.window`): step chunks of about the size that fits
(:func:`traceinsight.store.window.chunks`), then the trace's last steps that fit (the window,
whose analysis the diagnosis keeps). Each chunk's analysis is dropped before the next is read
(one chunk's analysis in memory at a time); what is kept of it are exact sums over the rows it
*owns* (:class:`StepFigures`):

- its step-table rows (:class:`traceinsight.metrics.steps.StepStat`, exact integers);
- its step windows' time breakdown (:class:`traceinsight.analysis.breakdown.WindowBreakdown`:
  busy, idle, compute, communication, copy and memset time), so the per-rank totals are sums;
- the kernel, op, layer, module-type, annotation and class rollups as sums
  (:class:`traceinsight.analysis.rollups.RollupSums`: time and counts per name, a kernel's
  durations as value counts, so means, medians and deviations are recomputed exactly);
- the idle split by cause of its step windows (all of them, and the representative ones) and
  the compute kernel time by layer, op and class of its representative windows (the step
  basis).

A chunk owns the GPU rows of its kept steps (by the step the analysis gives each row) and the
CPU ops and step-less GPU rows starting between its first kept step's host start and the next
chunk's: each row is counted once. :func:`merge_into` puts the chunks' step rows into the
window's analysis; :func:`finish` adds the window's own steps and gives the merged breakdown,
rollups and step basis, which equal the whole store's analysis exactly (ns). The diagnosis
computes them before the metrics (``an.cache[WHOLE_STEPS]``), so the metrics of GPU time
(busy, idle and its causes, compute, communication, copies) and of kernels cover every step
too. What rests on the window's steps only (the findings' other evidence: calls, gaps, launch
latency; the timeline, the critical path, the per-rank summary, roofline) is named in the
``analysis-window`` diagnostic.

A chunk's edges are not the trace's: a step chunk that does not start the trace marks no
step as warm-up or pre-trace work (only the trace's first steps can be), and the steps it
reads past its kept ones (the GPU work queued behind the host) are dropped.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

    from traceinsight.analysis import Analysis
    from traceinsight.analysis.breakdown import Breakdown, WindowBreakdown
    from traceinsight.analysis.rollups import RollupSums
    from traceinsight.metrics.steps import StepStat
    from traceinsight.store.core import TraceStore

__all__ = ["ChunkedSteps", "StepFigures", "analyse_chunks", "finish", "merge_into", "restrict"]

#: exclusions only a trace's first steps can carry
LEADING = ("warm-up", "pre-trace work")


@dataclass
class StepFigures:
    """Exact sums over the rows some runs of steps own (see the module docstring)."""

    windows: list[WindowBreakdown] = field(default_factory=list)
    rollups: RollupSums | None = None
    idle_ns: dict[str, int] = field(default_factory=dict)  #: every step window, by cause
    idle_rep_ns: dict[str, int] = field(default_factory=dict)  #: representative windows
    #: compute kernel time of the step windows by layer / op / class: all, representative
    basis: dict[str, dict[str, int]] = field(default_factory=dict)
    basis_rep: dict[str, dict[str, int]] = field(default_factory=dict)
    windows_all: int = 0  #: attribution windows (the rollups' ``windows``)

    def add(self, o: StepFigures) -> None:
        self.windows.extend(o.windows)
        if self.rollups is None:
            self.rollups = o.rollups
        elif o.rollups is not None:
            self.rollups.add(o.rollups)
        for mine, theirs in ((self.idle_ns, o.idle_ns), (self.idle_rep_ns, o.idle_rep_ns)):
            for k, v in theirs.items():
                mine[k] = mine.get(k, 0) + v
        for mine_b, theirs_b in ((self.basis, o.basis), (self.basis_rep, o.basis_rep)):
            for part, d in theirs_b.items():
                tgt = mine_b.setdefault(part, {})
                for k, v in d.items():
                    tgt[k] = tgt.get(k, 0) + v
        self.windows_all += o.windows_all


@dataclass
class ChunkedSteps:
    """The step-table rows of the chunks, each row's host end (rank, step) -> ns, and the sums
    of the figures the chunks own."""

    stats: list[StepStat] = field(default_factory=list)
    host_end: dict[tuple[int, int | None], int] = field(default_factory=dict)
    steps: frozenset[int] = frozenset()  #: the step numbers the chunks cover
    figures: StepFigures = field(default_factory=StepFigures)
    own_from_ns: int | None = None  #: where the window's own step-less rows and CPU ops begin
    chunks: int = 0


def owned_figures(
    an: Analysis,
    keep: frozenset[int],
    lo_ns: int | None,
    hi_ns: int | None,
    stats: list[StepStat],
) -> StepFigures:
    """The sums of the rows of ``an`` that the run of steps ``keep`` (step numbers) owns: the
    GPU rows of its steps, and the step-less GPU rows and CPU ops starting in [``lo_ns``,
    ``hi_ns``) (None: open). ``stats`` are its step rows (their exclusions say which windows
    are representative)."""
    import numpy as np

    from traceinsight.analysis import by_rank
    from traceinsight.analysis.idle import IdleSplit, idle_split
    from traceinsight.analysis.rollups import RollupSums

    attr = an.attribution
    g, ops = attr.gpu, attr.ops
    step = g["step"]
    in_keep = step.isin(list(keep)).to_numpy()
    start = g["start_ns"].to_numpy(np.int64)
    free = step.isna().to_numpy().copy()
    if lo_ns is not None:
        free &= start >= lo_ns
    if hi_ns is not None:
        free &= start < hi_ns
    og = g[in_keep | free]
    os_ = ops["start_ns"].to_numpy(np.int64)
    own_ops = np.ones(len(ops), dtype=bool)
    if lo_ns is not None:
        own_ops &= os_ >= lo_ns
    if hi_ns is not None:
        own_ops &= os_ < hi_ns
    out = StepFigures()
    out.rollups = RollupSums.of(attr, og, ops[own_ops])

    def kept(w: Any) -> bool:
        return w.step is not None and w.step in keep

    out.windows = [w for w in an.breakdown.steps if kept(w)]
    out.windows_all = sum(1 for w in attr.steps if kept(w))
    rep = {(x.rank, x.step) for x in stats if x.excluded is None}
    total, total_rep = IdleSplit(), IdleSplit()
    for r in sorted({w.rank for w in attr.steps}):
        wins = [w for w in attr.steps if w.rank == r and kept(w)]
        if not wins:
            continue
        rows = by_rank.rows(g, r)
        split, _ = idle_split(an, r, rows, wins, top=None)
        total.add(split)
        rw = [w for w in wins if (w.rank, w.step) in rep]
        if len(rw) == len(wins):
            total_rep.add(split)
        elif rw:
            total_rep.add(idle_split(an, r, rows, rw, top=None)[0])
    out.idle_ns, out.idle_rep_ns = dict(total.ns), dict(total_rep.ns)
    # the step basis: compute kernels of the step windows, all and the representative ones
    import pandas as pd

    step_i = pd.to_numeric(og["step"], errors="coerce").fillna(-1).to_numpy(np.int64)
    at = pd.MultiIndex.from_arrays([og["rank"].to_numpy(np.int64), step_i])
    is_rep = at.isin(pd.MultiIndex.from_tuples(sorted(rep))) if rep else np.zeros(len(og), bool)
    compute = (og["kind"] == "kernel").to_numpy() & (og["cls"] != "communication").to_numpy()
    out.basis = _basis(og[compute & (step_i >= 0)])
    out.basis_rep = _basis(og[compute & is_rep])
    return out


def _basis(comp: pd.DataFrame) -> dict[str, dict[str, int]]:
    """Compute kernel time by layer, top-level op and class (the step basis' splits)."""
    from traceinsight.util.vocab import NO_MODULE

    mods = comp["module"].astype(object)
    mods = mods.where(mods.notna(), NO_MODULE)
    dur = comp["dur_ns"]
    return {
        "by_layer_ns": _sums(dur.groupby(mods.to_numpy()).sum()),
        "by_op_ns": _sums(dur.groupby(comp["top_op"].astype(str).to_numpy()).sum()),
        "by_class_ns": _sums(dur.groupby(comp["cls"].astype(str).to_numpy()).sum()),
        "compute_kernel_sum_ns": {"": int(dur.sum())},
    }


def _sums(s: pd.Series) -> dict[str, int]:
    return {str(k): int(v) for k, v in s.items()}


def analyse_chunks(store: TraceStore) -> ChunkedSteps | None:
    """The chunks' step rows and owned figures of a windowed ``store``; None when it has no
    step chunks."""
    from traceinsight.analysis import Analysis
    from traceinsight.metrics.steps import step_stats
    from traceinsight.store.window import WindowedStore
    from traceinsight.util.memory import release

    parts = getattr(store, "step_chunks", ())
    if not isinstance(store, WindowedStore) or not parts:
        return None
    out = ChunkedSteps(steps=frozenset(n for c in parts for n in c.keep), chunks=len(parts))
    for c in parts:
        sub = WindowedStore(store.path, store.meta, window=store.window, bounds=(c.lo_ns, c.hi_ns))
        an = Analysis(sub)
        mine = []
        for s in step_stats(an):
            if s.step not in c.keep:
                continue
            if c.lo_ns is not None and s.excluded in LEADING:
                s.excluded = s.why = None
            mine.append(s)
        out.stats.extend(mine)
        for w in an.attribution.steps:
            if w.step is not None and w.step in c.keep:
                out.host_end[(w.rank, w.step)] = w.host_end_ns
        out.figures.add(owned_figures(an, c.keep, c.own_lo_ns, c.own_hi_ns, mine))
        out.own_from_ns = c.own_hi_ns
        del an, sub, mine
        gc.collect()  # the chunk's frames hold reference cycles (cached analyses)
        release()
    return out


def merge_into(an: Analysis, chunked: ChunkedSteps) -> None:
    """Make ``an``'s step table every step: the chunks' rows, then the window's rows of the
    steps after them (ordered by rank and start, as a whole trace's)."""
    from traceinsight.metrics.steps import step_stats

    own = [s for s in step_stats(an) if s.step not in chunked.steps]
    an.cache["step_stats"] = sorted(chunked.stats + own, key=lambda s: (s.rank, s.start_ns))
    an.cache["step_host_end"] = dict(chunked.host_end)


@dataclass
class Merged:
    """The whole trace's figures of a store analysed in step chunks."""

    breakdown: Breakdown
    figures: StepFigures


def finish(an: Analysis, chunked: ChunkedSteps) -> Merged:
    """The chunks' figures and those of the window's own steps (``an``, after
    :func:`merge_into`): the whole trace's breakdown, rollups and step basis sums."""
    from traceinsight.analysis.breakdown import Breakdown, rank_total
    from traceinsight.metrics.steps import step_stats

    own_steps = frozenset(
        w.step for w in an.attribution.steps if w.step is not None and w.step not in chunked.steps
    )
    own_stats = [s for s in step_stats(an) if s.step in own_steps]
    figs = StepFigures()
    figs.add(chunked.figures)
    if own_steps or chunked.own_from_ns is not None:
        figs.add(owned_figures(an, own_steps, chunked.own_from_ns, None, own_stats))
    wins = sorted(figs.windows, key=lambda w: (w.rank, w.start_ns))
    ranks: dict[int, list[WindowBreakdown]] = {}
    for w in wins:
        ranks.setdefault(w.rank, []).append(w)
    bd = Breakdown(wins, {r: rank_total(r, ps) for r, ps in sorted(ranks.items())})
    figs.windows = wins
    return Merged(bd, figs)


def restrict(an: Analysis, keep: frozenset[int], own_from_ns: int | None) -> StepFigures:
    """Make ``an`` (of a chosen range's store, which holds the step before the range too) the
    analysis of the steps ``keep``: its step windows, GPU rows, breakdown and step table those
    of the chosen steps only, each as the whole trace's analysis measures it (the first one's
    window starts where its predecessor's GPU work ended). Returns the sums of the rows the
    range owns (its rollups: the CPU ops of the step before it are left out there too)."""
    import dataclasses

    from traceinsight.analysis.breakdown import Breakdown, rank_total
    from traceinsight.metrics.steps import step_stats

    attr = an.attribution
    stats = []
    for s in step_stats(an):
        if s.step not in keep:
            continue
        if own_from_ns is not None and s.excluded in LEADING:
            s.excluded = s.why = None
        stats.append(s)
    figs = owned_figures(an, keep, own_from_ns, None, stats)
    g = attr.gpu
    own = g["step"].isin(list(keep)).to_numpy().copy()
    if own_from_ns is not None:
        own |= g["step"].isna().to_numpy() & (g["start_ns"].to_numpy() >= own_from_ns)
    else:
        own |= g["step"].isna().to_numpy()
    wins = [w for w in attr.steps if w.step is None or w.step in keep]
    an.__dict__["attribution"] = dataclasses.replace(attr, gpu=g[own], steps=wins)
    ranks: dict[int, list[WindowBreakdown]] = {}
    for w in figs.windows:
        ranks.setdefault(w.rank, []).append(w)
    an.breakdown = Breakdown(
        list(figs.windows), {r: rank_total(r, ps) for r, ps in sorted(ranks.items())}
    )
    an.cache["step_stats"] = stats
    an.cache.pop("rank_summaries", None)  # of the store's rows, the step before included
    return figs
