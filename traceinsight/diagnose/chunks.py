"""The step table of a trace too large to analyse whole: every step, analysed in step chunks.

A store over the memory limit is diagnosed on a window of its last steps
(:mod:`traceinsight.store.window`). The steps before it are analysed here, one chunk of about
the window's size after the other (:func:`traceinsight.store.window.chunks`), each chunk's
analysis dropped before the next is read: only its step-table rows
(:class:`traceinsight.metrics.steps.StepStat`, exact integers) are kept. They replace the
window's own rows for the same steps, so the step statistics (count, percentiles, mean,
jitter, slow steps) cover every step while the heavier figures come from the window.

A chunk's edges are not the trace's: a step chunk that does not start the trace marks no
step as warm-up or pre-trace work (only the trace's first steps can be), and the steps it
reads past its kept ones (the GPU work queued behind the host) are dropped.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from traceinsight.analysis import Analysis
    from traceinsight.metrics.steps import StepStat
    from traceinsight.store.core import TraceStore

__all__ = ["ChunkedSteps", "analyse_chunks", "merge_into"]

#: exclusions only a trace's first steps can carry
LEADING = ("warm-up", "pre-trace work")


@dataclass
class ChunkedSteps:
    """The step-table rows of the chunks and each row's host end (rank, step) -> ns."""

    stats: list[StepStat] = field(default_factory=list)
    host_end: dict[tuple[int, int | None], int] = field(default_factory=dict)
    steps: frozenset[int] = frozenset()  #: the step numbers the chunks cover


def analyse_chunks(store: TraceStore) -> ChunkedSteps | None:
    """The chunks' step rows of a windowed ``store``; None when it has no step chunks."""
    from traceinsight.analysis import Analysis
    from traceinsight.metrics.steps import step_stats
    from traceinsight.store.window import WindowedStore
    from traceinsight.util.memory import release

    parts = getattr(store, "step_chunks", ())
    if not isinstance(store, WindowedStore) or not parts:
        return None
    out = ChunkedSteps(steps=frozenset(n for c in parts for n in c.keep))
    for c in parts:
        sub = WindowedStore(store.path, store.meta, window=store.window, bounds=(c.lo_ns, c.hi_ns))
        an = Analysis(sub)
        for s in step_stats(an):
            if s.step not in c.keep:
                continue
            if c.lo_ns is not None and s.excluded in LEADING:
                s.excluded = s.why = None
            out.stats.append(s)
        for w in an.attribution.steps:
            if w.step is not None and w.step in c.keep:
                out.host_end[(w.rank, w.step)] = w.host_end_ns
        del an, sub
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
