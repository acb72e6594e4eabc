"""The host section of the report for a run without GPU kernels (``DiagnosisResult.host``):
the split of step time as one stacked bar, the top CPU ops by self and total time, host time
per nn.Module type and per user annotation (what they mean is said by the rules of
``rules/cpu-*.yaml``, shown as findings)."""

from __future__ import annotations

from typing import Any

from traceinsight.render.html.cells import table
from traceinsight.render.html.charts import CHARTS
from traceinsight.render.html.charts.host import PARTS
from traceinsight.result import DiagnosisResult
from traceinsight.util import fmt


def host_view(r: DiagnosisResult) -> dict[str, Any] | None:
    """The view of the host section, or None for a run with GPU kernels."""
    h = r.host or {}
    if not h or not h.get("headline"):
        return None
    split = [p for p in h.get("split") or [] if p.get("part") in PARTS]
    ops = h.get("ops") or []
    mods = h.get("modules") or []
    ann = h.get("annotations") or []
    st = h.get("steps") or {}
    return {
        "headline": str(h["headline"]),
        "basis": (
            "the step windows (ProfilerStep markers)"
            if st.get("basis") == "ProfilerStep"
            else "the traced span (no ProfilerStep markers)"
        ),
        "chart": CHARTS["host"].build(split),
        "legend": [(f"{p['part']} {fmt.fmt_pct(p['pct'])}", PARTS[p["part"]]) for p in split],
        "ops": table(
            "tbl-host-ops",
            [
                ("op", "op"),
                ("calls", "count"),
                ("self", "ns"),
                ("self, of step", "share"),
                ("total", "ns"),
                ("total, of step", "pct"),
            ],
            [
                [x["name"], x["calls"], x["self_ns"], x["self_pct"], x["total_ns"], x["total_pct"]]
                for x in ops
            ],
            limit=12,
        )
        if ops
        else None,
        "modules": table(
            "tbl-host-modules",
            [
                ("module type", "text"),
                ("instances", "count"),
                ("calls", "count"),
                ("host time", "ns"),
                ("of step", "share"),
            ],
            [[x["type"], x["instances"], x["calls"], x["total_ns"], x["pct"]] for x in mods],
            limit=12,
        )
        if mods
        else None,
        "annotations": table(
            "tbl-host-annotations",
            [("annotation", "op"), ("calls", "count"), ("host time", "ns"), ("of step", "share")],
            [[x["name"], x["calls"], x["total_ns"], x["pct"]] for x in ann],
            limit=10,
        )
        if ann
        else None,
    }
