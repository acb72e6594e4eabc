"""Cross-rank metrics: the collectives matched across ranks and the straggler's profile.

The per-rank summaries come from the ranks' own partitions (``rank=N/``, analysed one task
per rank on a Dask cluster, ``distributed.py``, and cached in each partition) when a scheduler
is given, else from the whole store's analysis; ``analysis/collectives.py`` reduces them.
"""

from __future__ import annotations

from typing import Any

from traceinsight.analysis import Analysis
from traceinsight.analysis.collectives import cross_rank, straggler_profile
from traceinsight.metrics.rank_summary import RankTask, summaries, summarize_partition
from traceinsight.metrics.registry import MetricSet, declare
from traceinsight.store import partitions
from traceinsight.util.distributed import current

declare(
    "straggler_slow_steps_pct",
    "%",
    "share of the steps in which the straggler rank is "
    "the slowest rank (its time outside exposed communication)",
    needs="traces of 2 or more ranks with ProfilerSteps",
    hint="pass the folder with every rank's trace",
)
declare(
    "collective_wait_pct",
    "%",
    "time ranks wait inside matched collectives for the last "
    "rank to arrive, % of their summed step time",
    needs="traces of 2 or more ranks with communication kernels",
)
declare(
    "ranks_clock_offset_ns",
    "ns",
    "largest clock offset between ranks, from aligning the ends of matched collectives",
    needs="traces of 2 or more ranks with collectives",
)

NAMES = ("straggler_slow_steps_pct", "collective_wait_pct", "ranks_clock_offset_ns")


def rank_summaries(an: Analysis, ms: MetricSet | None = None) -> list[dict[str, Any]]:
    """Every rank's summary: with a Dask scheduler, from each rank's partition (one task per
    rank on the cluster, cached in the partition); else from ``an``, the whole store's
    analysis this process has made anyway (the same summaries, without analysing each rank
    twice)."""
    store = an.store
    parts = partitions.names(store.meta)
    runner = current()
    if parts and store.path.is_dir() and runner.scheduler:
        tasks = [RankTask(str(store.path / name), runner.fresh) for name in parts]
        return [s for found in runner.map(summarize_partition, tasks) for s in found]
    return summaries(an, ms)


def compute(an: Analysis, ms: MetricSet) -> None:
    if len(an.store.ranks) < 2:
        for n in NAMES:
            ms.set(n, None, why_missing="needs traces of 2 or more ranks")
        return
    sums = rank_summaries(an, ms)
    cross = cross_rank(sums)
    ms.evidence["cross_rank"] = cross
    if cross is None:
        for n in NAMES:
            ms.set(n, None, why_missing="needs traces of 2 or more ranks")
        return
    named = ms.values.get("straggler_rank")
    prof = (
        straggler_profile(cross, sums, int(named)) if named is not None else cross.get("straggler")
    )
    ms.evidence["straggler"] = prof
    ms.set(
        "straggler_slow_steps_pct",
        100.0 * prof["slowest_steps"] / prof["steps"] if prof and prof["steps"] else None,
        why_missing="needs ProfilerStep markers",
    )
    total_wait = sum(g["wait_ns"] for g in cross.get("groups", []))
    total_step = sum((w or 0) for row in cross["heatmaps"]["wall_ns"] for w in row)
    ms.set(
        "collective_wait_pct",
        100.0 * total_wait / total_step if total_step and cross["matching"]["matched"] else None,
        why_missing="no collectives matched across ranks",
    )
    ms.set(
        "ranks_clock_offset_ns",
        float(cross["max_clock_offset_ns"]) if cross["matching"]["matched"] else None,
        why_missing="no collectives matched across ranks",
    )
