"""Memory metrics from a CUDA allocator snapshot (``diagnose TRACE --memory-snapshot SNAP``,
or a snapshot alone): fragmentation measured in the allocator's own segments and blocks,
the state at each OOM, memory over time and its growth across iterations.

The figures follow docs/FORMATS.md §2.3 (``analysis/snapshot.py`` computes them). They are set
only when the store holds a snapshot, so a trace without one reports exactly what it did
before; the rules' snapshot variants need them, their trace-based conditions do not.
"""

from __future__ import annotations

from typing import Any

from traceinsight.analysis import Analysis
from traceinsight.analysis.snapshot import snapshot_views
from traceinsight.metrics.registry import MetricSet, declare, declare_fact
from traceinsight.util.fmt import short_site

NEEDS = "a CUDA memory snapshot"
HINT = (
    "dump one with torch.cuda.memory._record_memory_history() ... "
    "torch.cuda.memory._dump_snapshot('snap.pickle'), then: diagnose TRACE "
    "--memory-snapshot snap.pickle"
)
MAX_VIEWS = 8

for _n, _u, _d in (
    ("snapshot_reserved_bytes", "bytes", "reserved bytes (Σ segment sizes) at the snapshot"),
    ("snapshot_allocated_bytes", "bytes", "bytes of allocated blocks at the snapshot"),
    (
        "snapshot_requested_bytes",
        "bytes",
        "bytes the callers asked for in the allocated blocks (before rounding)",
    ),
    ("snapshot_pending_free_bytes", "bytes", "bytes freed but awaiting their stream"),
    ("snapshot_free_bytes", "bytes", "free (inactive) cached bytes at the snapshot"),
    (
        "snapshot_stranded_bytes",
        "bytes",
        "free bytes inside segments that still hold a live block: empty_cache() cannot return them",
    ),
    ("snapshot_stranded_pct", "%", "stranded free bytes, % of reserved"),
    ("snapshot_releasable_bytes", "bytes", "free bytes in wholly free segments (cache)"),
    ("snapshot_largest_free_block_bytes", "bytes", "the largest free block"),
    ("snapshot_reserved_over_requested_ratio", "ratio", "reserved / requested at the snapshot"),
    ("snapshot_oom_events", "count", "out-of-memory actions in the snapshot's trace"),
    (
        "snapshot_oom_fragmented_events",
        "count",
        "OOMs where free device memory plus free "
        "cached bytes would have served the request, but no free block was large enough",
    ),
    ("snapshot_oom_request_bytes", "bytes", "the request of the last OOM"),
    ("snapshot_oom_device_free_bytes", "bytes", "what the driver reported free at the last OOM"),
    ("snapshot_oom_free_cached_bytes", "bytes", "free cached bytes at the last OOM"),
    ("snapshot_oom_largest_free_block_bytes", "bytes", "the largest free block at the last OOM"),
    ("snapshot_peak_allocated_bytes", "bytes", "peak allocated bytes over the snapshot's trace"),
    ("snapshot_peak_reserved_bytes", "bytes", "peak reserved bytes over the snapshot's trace"),
    (
        "snapshot_capacity_bytes",
        "bytes",
        "the GPU's memory: the trace's deviceProperties, else "
        "reserved plus free device memory at an OOM",
    ),
    ("snapshot_peak_capacity_pct", "%", "peak reserved bytes of the snapshot, % of capacity"),
    (
        "snapshot_iterations",
        "count",
        "iterations seen in the snapshot's trace (swings of the allocated curve)",
    ),
    (
        "snapshot_growth_bytes_per_iteration",
        "bytes",
        "growth of allocated bytes per iteration (trend of the troughs)",
    ),
    (
        "snapshot_growth_iterations_pct",
        "%",
        "share of iterations that ended with more allocated than the one before",
    ),
    ("snapshot_surviving_bytes", "bytes", "bytes allocated during the iterations and never freed"),
):
    declare(_n, _u, _d, needs=NEEDS, hint=HINT)

HISTORY_NEEDS = "a memory snapshot with its allocator history"
HISTORY_HINT = (
    "call torch.cuda.memory._record_memory_history(max_entries=100000) before the run, "
    "then _dump_snapshot: the history is what the allocator did, not only its end state"
)
#: metric -> (unit, meaning, key of the view's history)
HISTORY_METRICS = {
    "snapshot_history_peak_ratio": (
        "ratio",
        "reserved / allocated at the history's peak of allocated memory",
        "peak_ratio",
    ),
    "snapshot_history_peak_reserved_bytes": (
        "bytes",
        "reserved bytes at the history's peak of allocated memory",
        "peak_reserved",
    ),
    "snapshot_peak_largest_free_block_bytes": (
        "bytes",
        "the largest free block at the history's peak",
        "peak_largest_free",
    ),
    "snapshot_later_request_max_bytes": (
        "bytes",
        "the largest request (allocation or failed allocation) after the history's peak",
        "later_request_max",
    ),
    "snapshot_cache_flushes": (
        "count",
        "cache flushes in the history: runs of segment_free/segment_unmap (empty_cache(), or "
        "the allocator freeing its cache to retry a failed cudaMalloc)",
        "flushes",
    ),
    "snapshot_cache_flushed_bytes": ("bytes", "bytes the cache flushes returned", "flushed_bytes"),
    "snapshot_oom_retries": (
        "count",
        "failed allocations followed by an allocation at least as large (a retry)",
        "oom_retries",
    ),
    "snapshot_segments_despite_free": (
        "count",
        "segments reserved while the cache already held at least their size free",
        "segments_despite_free",
    ),
    "snapshot_segment_despite_free_bytes": (
        "bytes",
        "the largest segment reserved while at least its size sat free in the cache",
        "segment_despite_free_bytes",
    ),
    "snapshot_free_at_segment_bytes": (
        "bytes",
        "free cached bytes when that segment was reserved",
        "free_at_that_segment",
    ),
}
for _n, (_u, _d, _k) in HISTORY_METRICS.items():
    declare(_n, _u, _d, needs=HISTORY_NEEDS, hint=HISTORY_HINT)

for _n, _d in (
    ("snapshot_hole_site", "the call site whose freed blocks left the most stranded bytes"),
    ("snapshot_churn_site", "the call site allocating the most different sizes"),
    ("snapshot_peak_site", "the call site with the most bytes live at the peak"),
    (
        "snapshot_survivor_site",
        "the call site of the most bytes allocated during the iterations and never freed",
    ),
    ("snapshot_oom_site", "the call site of the allocation that failed"),
):
    declare_fact(_n, _d)


def compute(an: Analysis, ms: MetricSet) -> None:
    views = snapshot_views(an)
    if not views:
        return  # no snapshot: nothing set, nothing reported missing
    for v in views:
        _contradiction(an, v)
    view = max(
        views, key=lambda v: (len(v["ooms"]), v["totals"]["stranded"], v["peak"]["reserved_peak"])
    )
    t, peak = view["totals"], view["peak"]
    ms.set("snapshot_reserved_bytes", t["reserved"])
    ms.set("snapshot_allocated_bytes", t["allocated"])
    ms.set("snapshot_requested_bytes", t["requested"])
    ms.set("snapshot_pending_free_bytes", t["pending"])
    ms.set("snapshot_free_bytes", t["free"])
    ms.set("snapshot_stranded_bytes", t["stranded"])
    ms.set(
        "snapshot_stranded_pct",
        100.0 * t["stranded"] / t["reserved"] if t["reserved"] else None,
        why_missing="the snapshot holds no segments",
    )
    ms.set("snapshot_releasable_bytes", t["releasable"])
    ms.set("snapshot_largest_free_block_bytes", t["largest_free"])
    ms.set(
        "snapshot_reserved_over_requested_ratio",
        t["reserved"] / t["requested"] if t["requested"] else None,
        why_missing="no allocated block at the snapshot",
    )
    ooms = [o for v in views for o in v["ooms"]]
    ms.set("snapshot_oom_events", float(sum(_oom_count(v) for v in views)))
    ms.set("snapshot_oom_fragmented_events", float(sum(o["cached_enough"] for o in ooms)))
    last = view["ooms"][-1] if view["ooms"] else None
    why = "no OOM in the snapshot's trace"
    ms.set("snapshot_oom_request_bytes", last and last["request"], why_missing=why)
    ms.set("snapshot_oom_device_free_bytes", last and last["device_free"], why_missing=why)
    ms.set("snapshot_oom_free_cached_bytes", last and last["free_cached"], why_missing=why)
    ms.set("snapshot_oom_largest_free_block_bytes", last and last["largest_free"], why_missing=why)
    ms.set("snapshot_peak_allocated_bytes", peak["allocated"])
    ms.set("snapshot_peak_reserved_bytes", peak["reserved_peak"])
    cap = _capacity(an, view)
    ms.set(
        "snapshot_capacity_bytes",
        cap,
        why_missing="no deviceProperties (give the trace) and no OOM in the snapshot",
    )
    ms.set(
        "snapshot_peak_capacity_pct",
        100.0 * peak["reserved_peak"] / cap if cap else None,
        why_missing="the GPU's capacity is unknown",
    )
    it = view["iterations"]
    why_it = "fewer than 3 iterations in the snapshot's trace"
    ms.set("snapshot_iterations", len(it["troughs"]) if it else 0)
    ms.set(
        "snapshot_growth_bytes_per_iteration",
        it and it["growth_bytes_per_iteration"],
        why_missing=why_it,
    )
    ms.set("snapshot_growth_iterations_pct", it and it["grew_pct"], why_missing=why_it)
    ms.set(
        "snapshot_surviving_bytes",
        sum(s["bytes"] for s in it["survivors"]) if it else None,
        why_missing=why_it,
    )
    hist = view.get("history")
    for name, (_u, _d, key) in HISTORY_METRICS.items():
        ms.set(
            name,
            hist[key] if hist else None,
            why_missing="the snapshot holds no allocator history (device_traces)",
        )
    for v in views:
        ms.rank_set(v["rank"], "snapshot_reserved_bytes", v["totals"]["reserved"])
        ms.rank_set(v["rank"], "snapshot_stranded_bytes", v["totals"]["stranded"])
    ms.evidence["facts"] = {**ms.evidence.get("facts", {}), **_facts(view)}
    ms.evidence["memory_snapshot"] = {**view, "capacity_bytes": cap}
    ms.evidence["memory_snapshots"] = [_summary(v) for v in views[:MAX_VIEWS]]


def _oom_count(view: dict[str, Any]) -> int:
    return int(view.get("oom_count", len(view["ooms"])))


def _capacity(an: Analysis, view: dict[str, Any]) -> float | None:
    """The device's memory from the trace header of the snapshot's rank, else what an OOM saw
    (reserved + free device memory)."""
    for r in an.store.ranks:
        if r.get("rank") != view["rank"]:
            continue
        devs = [d for d in r.get("devices") or [] if d.get("totalGlobalMem")]
        mine = [d for d in devs if d.get("id") == view["device"]] or devs[:1]
        if mine:
            return float(mine[0]["totalGlobalMem"])
    seen = [o["reserved"] + o["device_free"] for o in view["ooms"] if o["device_free"] is not None]
    return float(max(seen)) if seen else None


def _facts(view: dict[str, Any]) -> dict[str, str]:
    def first(rows: list[dict[str, Any]] | None) -> str:
        return short_site(rows[0]["call_site"]) if rows else "–"

    it = view["iterations"] or {}
    oom = view["ooms"][-1] if view["ooms"] else {}
    return {
        "snapshot_hole_site": first(view["holes"]),
        "snapshot_churn_site": first([c for c in view["churn"] if c["sizes"] > 1]),
        "snapshot_peak_site": first(view["peak"]["live"]),
        "snapshot_survivor_site": first(it.get("survivors")),
        "snapshot_oom_site": short_site(oom.get("call_site")),
    }


def _summary(v: dict[str, Any]) -> dict[str, Any]:
    return {
        "rank": v["rank"],
        "device": v["device"],
        **{
            k: v["totals"][k]
            for k in (
                "reserved",
                "allocated",
                "requested",
                "pending",
                "free",
                "stranded",
                "releasable",
                "largest_free",
            )
        },
        "ooms": len(v["ooms"]),
    }


def _contradiction(an: Analysis, view: dict) -> None:
    """A diagnostic when the snapshot's history contradicts its end state (replayed back from
    the end, memory falls below zero): what is left out of the chart and the peak, and why."""
    c = view.get("contradiction")
    if not c:
        return
    an.attribution.diagnostics.add(
        "snapshot-history-contradicts",
        f"the allocator history of device {view['device']} contradicts the snapshot's end "
        f"state: replayed back from it, memory would fall {c['bytes']:,} bytes below zero, "
        f"so the first {c['omitted_actions']:,} of its {c['actions']:,} actions are left out "
        "of the memory-over-time chart and the history's peak (no level is clamped)",
        source=f"rank {view['rank']}",
        count=c["omitted_actions"],
        hint="the history does not match this snapshot (actions of another process or an "
        "earlier capture, or a trace with lost entries); dump the snapshot and its history "
        "together with torch.cuda.memory._dump_snapshot()",
    )
