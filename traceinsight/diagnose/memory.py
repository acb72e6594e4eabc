"""The memory-snapshot parts of a diagnosis: the result's ``memory.snapshot`` and
``memory.categories`` sections, what the trace section says about memory inputs, and the
headline of a memory-only run (a snapshot or timeline export diagnosed without a trace)."""

from __future__ import annotations

from typing import Any

from traceinsight.analysis import Analysis
from traceinsight.analysis.memcategories import categories_view
from traceinsight.metrics import MetricSet
from traceinsight.result import SEVERITY_RANK, Finding
from traceinsight.store.core import TraceStore
from traceinsight.util import fmt

#: tables a trace fills; a store with none of their rows holds memory inputs only
TRACE_TABLES = (
    "gpu_activities",
    "runtime_calls",
    "cpu_ops",
    "ranges",
    "python_frames",
    "memory_events",
    "flows",
    "other_events",
)
MEMORY_TABLES = ("memory_segments", "memory_actions", "memory_categories")


def is_memory_only(store: TraceStore) -> bool:
    counts = store.row_counts
    return any(counts.get(t) for t in MEMORY_TABLES) and not any(
        counts.get(t) for t in TRACE_TABLES
    )


def trace_extra(store: TraceStore) -> dict[str, Any]:
    """``trace`` keys about memory inputs: the files joined to each rank, whether the run is
    memory-only, the allocator settings a snapshot recorded."""
    inputs: list[dict[str, Any]] = []
    settings: dict[str, Any] = {}
    for r in store.ranks:
        mem = r.get("memory") or {}
        for f in mem.get("inputs") or []:
            inputs.append(
                {
                    "rank": r.get("rank"),
                    "name": f.get("name"),
                    "format": f.get("format"),
                    "sha256": f.get("sha256"),
                    "layout": f.get("layout"),
                }
            )
        settings.update(mem.get("allocator") or {})
    if not inputs:
        return {}
    return {
        "memory_only": is_memory_only(store),
        "memory_inputs": inputs,
        "allocator_settings": settings,
    }


def section(an: Analysis, ms: MetricSet, memory: dict[str, Any] | None) -> dict[str, Any] | None:
    """``memory`` (the ``[memory]``-event section, or None) with the snapshot and category
    views added when the store holds them."""
    snap = ms.evidence.get("memory_snapshot")
    cats = categories_view(an.store)
    if not snap and not cats:
        return memory
    out = dict(memory or {})
    if snap:
        keys = (
            "rank",
            "device",
            "totals",
            "curve",
            "peak",
            "segment_map",
            "segment_map_snapshot",
            "holes",
            "churn",
            "ooms",
            "oom_count",
            "iterations",
            "capacity_bytes",
            "notes",
        )
        out["snapshot"] = {k: snap.get(k) for k in keys}
        out["snapshots"] = ms.evidence.get("memory_snapshots") or []
    if cats:
        out["categories"] = cats
    return out


def headline(findings: list[Finding], ms: MetricSet, memory: dict[str, Any] | None) -> str:
    """What a memory-only diagnosis found, in one sentence."""
    v = ms.values
    if v.get("snapshot_reserved_bytes") is not None:
        ctx = (
            f"{fmt.fmt_bytes(v['snapshot_reserved_bytes'])} reserved, "
            f"{fmt.fmt_bytes(v.get('snapshot_allocated_bytes'))} allocated at the snapshot"
        )
    else:
        ctx = ""
    major = [f for f in findings if SEVERITY_RANK[f.severity] <= SEVERITY_RANK["medium"]]
    if major:
        top = major[0]
        text = top.headline or f"{top.rule}: {top.title.lower()}"
        more = [f.rule for f in major[1:3]]
        tail = f"; also {', '.join(more)}" if more else ""
        return f"Memory snapshot: {text}" + (f" ({ctx})" if ctx else "") + f"{tail}."
    if ctx:
        return (
            f"Memory snapshot: no memory problem found ({ctx}; "
            f"{fmt.fmt_bytes(v.get('snapshot_stranded_bytes'))} stranded free)."
        )
    cats = (memory or {}).get("categories") or []
    if cats:
        pk = cats[0]["peak"]
        name, size = max(pk["by_category"].items(), key=lambda kv: kv[1], default=("", 0))
        share = fmt.fmt_pct(100.0 * size / pk["bytes"]) if pk["bytes"] else "–"
        return (
            f"Memory timeline: memory peaks at {fmt.fmt_bytes(pk['bytes'])}; the largest "
            f"category is {name.replace('_', ' ')} ({share})."
        )
    return "Memory input without data to diagnose."
