"""The report's memory section as plain data: the ``[memory]``-event curves (one chart per
distinct curve: ranks with identical curves share one), the allocator snapshot (curves, the
segment map at the peak, what was live there with its frames, holes, OOMs, iterations) and
the memory-timeline categories. One capacity share is quoted everywhere (:func:`capacity_share`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from traceinsight.render import describe
from traceinsight.render.html.cells import table
from traceinsight.render.html.charts import CHARTS
from traceinsight.render.html.charts.segments import LEGEND as SEGMENT_LEGEND
from traceinsight.render.run_notes import capture_of, memory_empty_text
from traceinsight.result import DiagnosisResult
from traceinsight.util import fmt

MAX_MEMORY_CHARTS = 4
MAX_FRAMES_SHOWN = 12
#: what the memory section says without memory data (the hint: how the input's tool records it)
NO_MEMORY = "No [memory] events"
NO_MEMORY_WHY = (
    "{hint} to see allocated and reserved memory over time, or add an allocator snapshot "
    "(--memory-snapshot)."
)
CATEGORY_LEGEND = [
    "parameter",
    "optimizer_state",
    "gradient",
    "activation",
    "autograd_detail",
    "input",
    "temporary",
    "unknown",
]


def capacity_share(r: DiagnosisResult) -> tuple[str, str] | None:
    """(share, capacity) of the peak reserved memory, as every part of the report quotes it:
    the ``peak_reserved_capacity_pct`` metric and the capacity it was measured against."""
    mv = r.metrics.get("values", {})
    pct = mv.get("peak_reserved_capacity_pct")
    peak = (r.memory or {}).get("peak") or {}
    cap = peak.get("capacity_bytes") or mv.get("device_memory_bytes")
    if pct is None or not cap:
        return None
    return fmt.fmt_pct(pct), fmt.fmt_bytes(cap)


def memory_view(r: DiagnosisResult) -> dict[str, Any]:
    mem = r.memory or {}
    out = {
        "empty": "",
        "events": _events(r, mem),
        "snapshot": _snapshot(r, mem),
        "categories": _categories(mem),
    }
    if not (out["events"] or out["snapshot"] or out["categories"]):
        # [memory] events without totals are counted, as the rules say, never "no events"
        hint = describe.capture_hint(r, "memory")
        out["empty"] = memory_empty_text(mem, capture_of(r)) or f"{NO_MEMORY}: " + (
            NO_MEMORY_WHY.format(hint=hint)
            if hint
            else "add an allocator snapshot (--memory-snapshot)."
        )
    return out


# --- [memory] events ----------------------------------------------------------------------------


def _events(r: DiagnosisResult, mem: Mapping[str, Any]) -> dict[str, Any] | None:
    series = [s for s in mem.get("timeline") or [] if s.get("ts_ns")]
    if not series:
        return None
    peak = mem.get("peak") or {}
    cap = peak.get("capacity_bytes") or r.metrics.get("values", {}).get("device_memory_bytes")
    key = (peak.get("rank"), peak.get("device"))
    series = sorted(
        series,
        key=lambda s: (
            (s.get("rank"), s.get("device")) != key,
            -max(s.get("reserved") or [0]),
            s.get("rank") or 0,
        ),
    )
    groups: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []
    for s in series:  # ranks whose curves are identical share one chart
        same = next((g for g in groups if _same_curve(g[0], s)), None)
        if same:
            same[1].append(s)
        else:
            groups.append((s, [s]))
    charts, notes = [], []
    for s, members in groups[:MAX_MEMORY_CHARTS]:
        c = CHARTS["memory"].build(s, cap)
        c["caption"] = _who(members, len(groups) > 1 or len(members) > 1)
        charts.append(c)
    above = [c for c in charts if c["above_reserved"] and not c["reserved_missing"]]
    if above:
        worst = max(above, key=lambda c: c["above_reserved_max"])
        notes.append(
            f"Allocated lies above reserved at {sum(c['above_reserved'] for c in above)} "
            f"drawn points (by up to {fmt.fmt_bytes(worst['above_reserved_max'])}): "
            "the allocator cannot allocate more than it reserves, so the trace's totals "
            "are out of step (a device's events recorded on another thread, or totals "
            "from before the window); both curves are drawn as recorded."
        )
    if any(c["reserved_missing"] for c in charts):
        notes.append(
            "The trace records no Total Reserved (older PyTorch): only allocated memory "
            "is meaningful."
        )
    tops = mem.get("top_allocators") or []
    growth = mem.get("growth") or {}
    g_rows = []
    if growth.get("steps") and growth.get("allocated_at_step_end"):
        g_rows = [[s, b] for s, b in zip(growth["steps"], growth["allocated_at_step_end"])]
    share = capacity_share(r)
    return {
        "charts": charts,
        "notes": notes,
        "more": max(0, len(groups) - MAX_MEMORY_CHARTS),
        "identical": sum(len(m) - 1 for _, m in groups),
        "peak": {
            "rank": peak.get("rank"),
            "device": peak.get("device"),
            "allocated": fmt.fmt_bytes(peak.get("peak_allocated_bytes")),
            "reserved": fmt.fmt_bytes(peak.get("peak_reserved_bytes")),
            "gap": fmt.fmt_bytes(peak.get("gap_at_peak_bytes")),
            "capacity": share[1] if share else (fmt.fmt_bytes(cap) if cap else "unknown"),
            "capacity_pct": share[0] if share else "–",
        },
        "top": table(
            "tbl-allocators",
            [("op", "text"), ("allocated", "bytes"), ("allocations", "count")],
            [[t.get("op"), t.get("bytes"), t.get("allocations")] for t in tops],
            limit=10,
        )
        if tops
        else None,
        "growth": table(
            "tbl-growth",
            [("step", "text"), ("allocated at step end", "bytes")],
            g_rows,
            limit=10,
            sortable=False,
        )
        if g_rows
        else None,
        "slope": fmt.fmt_bytes(growth.get("slope")) if growth.get("slope") is not None else "",
    }


def _same_curve(a: dict[str, Any], b: dict[str, Any]) -> bool:
    ta, tb = a.get("ts_ns") or [], b.get("ts_ns") or []
    if (
        len(ta) != len(tb)
        or a.get("allocated") != b.get("allocated")
        or a.get("reserved") != b.get("reserved")
    ):
        return False
    return [t - ta[0] for t in ta] == [t - tb[0] for t in tb]


def _who(members: list[dict[str, Any]], label: bool) -> str:
    if not label:
        return ""
    ranks = ", ".join(str(m.get("rank")) for m in members[:12])
    more = f" (+{len(members) - 12})" if len(members) > 12 else ""
    devs = sorted({str(m.get("device")) for m in members})
    same = " (identical curves)" if len(members) > 1 else ""
    return f"rank{'s' if len(members) > 1 else ''} {ranks}{more} · device {', '.join(devs)}{same}"


# --- the allocator snapshot --------------------------------------------------------------------


def _snapshot(r: DiagnosisResult, mem: Mapping[str, Any]) -> dict[str, Any] | None:
    s = mem.get("snapshot")
    if not s:
        return None
    t, pk = s["totals"], s["peak"]
    cap = s.get("capacity_bytes")
    curve = s.get("curve")
    chart = None
    if curve and len(curve.get("x") or []) > 1:
        chart = CHARTS["snapshot_memory"].build(
            {
                "ts_ns": curve["x"],
                "allocated": curve["allocated"],
                "reserved": curve["reserved"],
                "rank": s["rank"],
                "device": s["device"],
            },
            cap,
            x_unit="ns" if curve.get("axis") == "ts_ns" else "actions",
            label=f"Allocator snapshot of rank {s['rank']} device "
            f"{s['device']}: allocated and reserved over its trace"
            + (
                f" (its first {curve['omitted']:,} actions contradict the end state and "
                "are left out)"
                if curve.get("omitted")
                else ""
            ),
        )["chart"]
    where = "at the snapshot" if pk.get("at_snapshot") else "at the peak of the trace"
    mt = pk.get("map_totals") or {}
    seg = CHARTS["segments"].build(
        s.get("segment_map") or {}, f"Segment map {where}", fmt.short_site
    )
    at_end = s.get("segment_map_snapshot")
    seg_end = (
        CHARTS["segments"].build(at_end, "Segment map at the snapshot", fmt.short_site)
        if at_end
        else None
    )
    lede = (
        f"Rank {s['rank']}, device {s['device']}, at the snapshot: "
        f"{fmt.fmt_bytes(t['reserved'])} reserved in {t['segments']} segments, "
        f"{fmt.fmt_bytes(t['allocated'])} allocated ({fmt.fmt_bytes(t['requested'])} "
        f"requested), {fmt.fmt_bytes(t['pending'])} awaiting their stream, "
        f"{fmt.fmt_bytes(t['free'])} free in the cache, of which "
        f"{fmt.fmt_bytes(t['stranded'])} stranded between live blocks; the largest free "
        f"block holds {fmt.fmt_bytes(t['largest_free'])}."
    )
    peak = (
        f"Peak of the trace: {fmt.fmt_bytes(pk['allocated'])} allocated, "
        f"{fmt.fmt_bytes(pk['reserved'])} reserved"
        + (
            f" ({fmt.fmt_pct(100 * pk['reserved_peak'] / cap)} of the "
            f"{fmt.fmt_bytes(cap)} capacity at the reserved peak)"
            if cap
            else ""
        )
        + f"; the segment map shows the state {where}: {fmt.fmt_bytes(mt.get('free'))} "
        f"free, {fmt.fmt_bytes(mt.get('stranded'))} of it stranded."
    )
    live = table(
        "tbl-snap-live",
        [("call site", "text"), ("bytes", "bytes"), ("allocations", "count")],
        [
            [fmt.short_site(x["call_site"]), x["bytes"], x["allocations"]]
            for x in pk.get("live") or []
        ],
        limit=10,
    )
    allocs = [
        {
            "size": fmt.fmt_bytes(a["bytes"]),
            "site": fmt.short_site(a["call_site"]),
            "frames": (a.get("frames") or "").split("\n")[:MAX_FRAMES_SHOWN],
        }
        for a in pk.get("top_allocations") or []
    ]
    holes = (
        table(
            "tbl-snap-holes",
            [
                ("call site", "text"),
                ("holes", "count"),
                ("stranded", "bytes"),
                ("largest", "bytes"),
            ],
            [
                [fmt.short_site(h["call_site"]), h["holes"], h["bytes"], h["largest"]]
                for h in s.get("holes") or []
            ],
            limit=10,
        )
        if s.get("holes")
        else None
    )
    ooms = (
        table(
            "tbl-snap-oom",
            [
                ("call site", "text"),
                ("request", "bytes"),
                ("free on device", "bytes"),
                ("free cached", "bytes"),
                ("largest free block", "bytes"),
                ("enough in total", "text"),
            ],
            [
                [
                    fmt.short_site(o["call_site"]),
                    o["request"],
                    o["device_free"],
                    o["free_cached"],
                    o["largest_free"],
                    "yes" if o["cached_enough"] else "no",
                ]
                for o in s.get("ooms") or []
            ],
            limit=10,
        )
        if s.get("ooms")
        else None
    )
    it = s.get("iterations") or {}
    troughs = (
        table(
            "tbl-snap-iter",
            [("iteration", "text"), ("allocated at its end", "bytes")],
            [[i + 1, b] for i, b in enumerate(it.get("trough_bytes") or [])],
            limit=12,
            sortable=False,
        )
        if it
        else None
    )
    settings = r.trace.get("allocator_settings") or {}
    return {
        "lede": lede,
        "peak": peak,
        "chart": chart,
        "segments": seg,
        "segments_end": seg_end,
        "legend": SEGMENT_LEGEND,
        "live": live,
        "allocations": allocs,
        "holes": holes,
        "ooms": ooms,
        "iterations": troughs,
        "growth": fmt.fmt_bytes(it.get("growth_bytes_per_iteration")) if it else "",
        "notes": list(s.get("notes") or []),
        "settings": ", ".join(f"{k}={v}" for k, v in sorted(settings.items()))[:300],
        "inputs": ", ".join(str(i.get("name")) for i in r.trace.get("memory_inputs") or []),
        "others": len(mem.get("snapshots") or []) - 1,
    }


# --- the memory-timeline export ----------------------------------------------------------------


def _categories(mem: Mapping[str, Any]) -> dict[str, Any] | None:
    views = mem.get("categories") or []
    if not views:
        return None
    v = views[0]
    pk = v["peak"]
    rows = [
        [c.replace("_", " "), b, 100.0 * b / pk["bytes"] if pk["bytes"] else None]
        for c, b in sorted(pk["by_category"].items(), key=lambda kv: -kv[1])
    ]
    return {
        "chart": CHARTS["memory_categories"].build(v) if len(v.get("x") or []) > 1 else None,
        "legend": [
            (c.replace("_", " "), f"cat-{c}") for c in CATEGORY_LEGEND if c in v["categories"]
        ],
        "peak": fmt.fmt_bytes(pk["bytes"]),
        "rank": v["rank"],
        "table": table(
            "tbl-categories",
            [("category", "text"), ("at the peak", "bytes"), ("share", "pct")],
            rows,
            sortable=False,
        ),
    }
