"""Cross-rank metrics: the collectives matched across ranks and the straggler's profile.

The per-rank summaries come from the ranks' own partitions (``rank=N/``, analysed one task
per rank on a Dask cluster, ``distributed.py``, and cached in each partition) when a scheduler
is given, else from the whole store's analysis; ``analysis/collectives.py`` reduces them.
"""

from __future__ import annotations

from typing import Any

from traceinsight.analysis import Analysis
from traceinsight.analysis.collective_waits import before_arrival, exposed_waits, matched_waits
from traceinsight.analysis.collectives import cross_rank, straggler_profile
from traceinsight.metrics.rank_summary import RankTask, summaries, summarize_partition
from traceinsight.metrics.registry import MetricSet, declare, declare_fact
from traceinsight.store import partitions
from traceinsight.util import capture_hints
from traceinsight.util.distributed import current
from traceinsight.util.fmt import fmt_pct

declare(
    "straggler_slow_steps_pct",
    "%",
    "share of the steps in which the straggler rank is "
    "the slowest rank (its time outside exposed communication)",
    needs="traces of 2 or more ranks with ProfilerSteps",
    setting=capture_hints.RANKS,
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

declare(
    "collective_wait_share_pct",
    "%",
    "share of the matched collectives' kernel time (all ranks) spent waiting for the last "
    "rank to arrive; the rest is transfer",
    needs="traces of 2 or more ranks with collectives matched across them",
    setting=capture_hints.RANKS,
)
declare(
    "collective_wait_exposed_pct",
    "%",
    "waiting for the last rank inside matched collectives while no compute kernel runs, % of "
    "step time (all ranks): the arrival skew's cost",
    needs="traces of 2 or more ranks with collectives matched across them",
    setting=capture_hints.RANKS,
)
declare(
    "exposed_comm_transfer_pct",
    "%",
    "exposed communication that is transfer: exposed_comm_pct less the exposed waiting for "
    "late ranks (with one rank, where waiting cannot be told apart, exposed_comm_pct)",
    needs="communication kernels",
)
declare(
    "straggler_caused_wait_pct",
    "%",
    "share of all waiting in matched collectives that the straggler rank causes (it arrived last)",
    needs="traces of 2 or more ranks with collectives matched across them",
)
for _part in ("compute", "host", "input"):
    declare(
        f"straggler_before_{_part}_pct",
        "%",
        f"share of the time the others waited for the straggler that it spent in {_part} "
        "(compute kernels; host: its GPU idle waiting for the CPU; input: data loading)",
        needs="traces of 2 or more ranks with collectives matched across them",
    )
declare_fact(
    "straggler_before_arrival",
    "what the straggler rank was doing while the others waited for it, largest part first",
)

NAMES = ("straggler_slow_steps_pct", "collective_wait_pct", "ranks_clock_offset_ns")
WAIT_NAMES = (
    "collective_wait_share_pct",
    "collective_wait_exposed_pct",
    "straggler_caused_wait_pct",
    "straggler_before_compute_pct",
    "straggler_before_host_pct",
    "straggler_before_input_pct",
)
#: how the parts of what the straggler did read in the texts
BEFORE_TEXT = {
    "compute": "computing (GPU kernels)",
    "host": "its GPU idle waiting for the CPU (host work, launches, syncs)",
    "input": "loading input (its GPU idle in the data loader)",
    "device wait": "GPU work queued behind other streams",
    "other GPU work": "other GPU work (copies, other communication)",
    "unknown": "GPU idle for no recorded reason",
}


def rank_summaries(an: Analysis, ms: MetricSet | None = None) -> list[dict[str, Any]]:
    """Every rank's summary: those the partitions' attribution workers computed (each from
    its rank's partition, saved there); else, with a Dask scheduler, from each rank's
    partition (one task per rank on the cluster, cached in the partition); else from ``an``,
    the whole store's analysis this process has made anyway (the same summaries, without
    analysing each rank twice)."""
    store = an.store
    parts = partitions.names(store.meta)
    runner = current()
    done = an.cache.get("rank_summaries")  # computed by the partitions' attribution workers
    if done is not None:
        return done
    if parts and store.path.is_dir() and runner.scheduler:
        tasks = [RankTask(str(store.path / name), runner.fresh) for name in parts]
        return [s for found in runner.map(summarize_partition, tasks) for s in found]
    return summaries(an, ms)


def compute(an: Analysis, ms: MetricSet) -> None:
    ms.set(
        "exposed_comm_transfer_pct",
        ms.values.get("exposed_comm_pct"),
        why_missing=ms.missing.get("exposed_comm_pct", "no GPU activity"),
    )
    if len(an.store.ranks) < 2:
        for n in NAMES + WAIT_NAMES:
            ms.set(n, None, why_missing="needs traces of 2 or more ranks")
        return
    sums = rank_summaries(an, ms)
    cross = cross_rank(sums)
    ms.evidence["cross_rank"] = cross
    if cross is None:
        for n in NAMES + WAIT_NAMES:
            ms.set(n, None, why_missing="needs traces of 2 or more ranks")
        return
    waited = bool(cross.get("wait_caused_ns"))
    named = ms.values.get("straggler_rank")
    if waited or named is None:  # the last arrival the others waited for
        prof = cross.get("straggler")
    else:
        prof = straggler_profile(cross, sums, int(named))
    ms.evidence["straggler"] = prof
    _waits(an, ms, sums, cross, prof)
    ms.set(
        "straggler_slow_steps_pct",
        100.0 * prof["slowest_steps"] / prof["steps"] if prof and prof["steps"] else None,
        why_missing="the trace has no step markers",
        setting=capture_hints.STEPS,
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


def _waits(
    an: Analysis,
    ms: MetricSet,
    sums: list[dict[str, Any]],
    cross: dict[str, Any],
    prof: dict[str, Any] | None,
) -> None:
    """Waiting apart from transfer; with waiting, the straggler is the last arrival: its rank,
    the share of the collectives it reached last, the waiting (exposed) it stands for and what
    it was doing meanwhile."""
    why = "no collectives matched across ranks"
    waits = matched_waits(sums)
    if not len(waits):
        for n in WAIT_NAMES:
            ms.set(n, None, why_missing=why)
        return
    total = int(waits["dur_ns"].sum())
    ms.set(
        "collective_wait_share_pct", 100.0 * int(waits["wait_ns"].sum()) / total if total else None
    )
    exposed = exposed_waits(an, waits)
    wall = sum(b.wall_ns for b in an.breakdown.ranks.values())
    exp_pct = 100.0 * int(exposed.sum()) / wall if wall else None
    ms.set("collective_wait_exposed_pct", exp_pct, why_missing="no step time")
    exposed_comm = ms.values.get("exposed_comm_pct")
    if exp_pct is not None and exposed_comm is not None:
        ms.set("exposed_comm_transfer_pct", max(0.0, exposed_comm - exp_pct))
    caused = cross.get("wait_caused_ns") or {}
    if not caused or prof is None:
        for n in WAIT_NAMES[2:]:
            ms.set(n, None, why_missing="no rank arrived last with others waiting")
        return
    rank = int(prof["rank"])
    ms.set("straggler_rank", float(rank))
    ms.set("straggler_wait_pct", exp_pct)  # the straggler verdict owns the waiting
    with_last = int((waits.drop_duplicates("key")["last_rank"] >= 0).sum())
    mine = int(cross.get("last_arrivals", {}).get(str(rank), 0))
    ms.set("last_arrival_share_pct", 100.0 * mine / with_last if with_last else None)
    ms.set("straggler_caused_wait_pct", 100.0 * caused.get(str(rank), 0) / sum(caused.values()))
    before = before_arrival(an, waits, rank)
    prof["before_arrival"] = before
    parts = (before or {}).get("parts_ns") or {}
    spent = sum(parts.values())
    for part in ("compute", "host", "input"):
        ms.set(
            f"straggler_before_{part}_pct",
            100.0 * parts.get(part, 0) / spent if spent else None,
            why_missing="the straggler's timeline before it arrived is empty",
        )
    if spent:
        shown = sorted((k for k in parts if parts[k] >= spent / 100), key=lambda k: -parts[k])[:3]
        ms.set_fact(
            "straggler_before_arrival",
            "; ".join(f"{BEFORE_TEXT[k]} {fmt_pct(100.0 * parts[k] / spent, 0)}" for k in shown),
        )
