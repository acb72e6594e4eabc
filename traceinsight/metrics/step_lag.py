"""The GPU's lag behind the host: a steady lag is a queue depth (the host is ahead), which is
healthy, not step-to-step variation. The first step window starts at its host start while the
others start where the previous step's GPU work ended, so a first window can carry the lag;
the step statistics measure the variation without it (:mod:`.steps`)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from traceinsight.metrics.steps import StepStat

LAG_MIN_PCT = 5.0  #: a GPU lag under this share of the median step is no lag
LAG_MIN_NS = 1_000_000
LAG_SPREAD_PCT = 10.0  #: a lag varying by more than this share of the median step is not steady


def gpu_lag(stats: list[StepStat], host_end: dict[tuple[int, int | None], int]) -> int:
    """How far one rank's GPU runs behind its host when that lag is steady: the median over
    the steps after the first of (window end − host end), when it is ``LAG_MIN_PCT`` of the
    median step and 1 ms or more and varies by at most ``LAG_SPREAD_PCT`` of the median step;
    else 0. A steady lag is a queue depth (the host is ahead), not step-to-step variation."""
    later = [s for s in stats[1:] if s.gpu_ns is not None]
    if len(stats) < 3 or len(later) < 2:
        return 0
    lag = np.array([s.start_ns + s.wall_ns - host_end[(s.rank, s.step)] for s in later])
    med_lag, med_wall = float(np.median(lag)), float(np.median([s.wall_ns for s in later]))
    if (
        med_lag < max(LAG_MIN_NS, LAG_MIN_PCT / 100.0 * med_wall)
        or float(lag.max() - lag.min()) > LAG_SPREAD_PCT / 100.0 * med_wall
    ):
        return 0
    return int(med_lag)


def edge_lag(stats: list[StepStat], lag: int) -> int:
    """The lag the rank's first window carries: its excess over the median later step, when
    that excess is the steady lag (within ``LAG_SPREAD_PCT`` of a step, or 1 ms) and the step
    ran the same work (its kernel time within ``LAG_SPREAD_PCT`` of the median). A first
    window that only holds its own longer work (a host that ran ahead before the queue
    filled) carries no lag."""
    if not lag or len(stats) < 3:
        return 0
    first, later = stats[0], stats[1:]
    med_wall = float(np.median([s.wall_ns for s in later]))
    med_k = float(np.median([s.kernel_ns for s in later]))
    tol = max(LAG_MIN_NS, LAG_SPREAD_PCT / 100.0 * med_wall)
    if abs(first.wall_ns - med_wall - lag) > tol:
        return 0
    if med_k <= 0 or abs(first.kernel_ns - med_k) > LAG_SPREAD_PCT / 100.0 * med_k:
        return 0
    return lag


def without_lag(s: StepStat, rank_stats: list[StepStat], lag: int) -> StepStat:
    """The rank's first step with the lag its window carries taken out (never below its host
    time); any other step as it is."""
    if not lag or s is not rank_stats[0]:
        return s
    return replace(s, wall_ns=max(s.host_ns, s.wall_ns - lag))
