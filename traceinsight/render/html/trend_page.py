"""The HTML page of ``traceinsight trend``: one small line chart per figure across the runs,
the runs whose configuration changed marked on every chart, and the table of runs.

The view is plain data (the template holds loops only); the charts are :class:`Svg` shapes, so
every text from a result (run labels, device names, versions) goes through autoescape.
"""

from __future__ import annotations

from typing import Any

from traceinsight.render.html.environment import render_page
from traceinsight.render.html.svg import Svg, ticks
from traceinsight.render.trend import figure_text

#: geometry of one figure's chart
W, H, L, R, T, B = 460, 200, 64, 16, 14, 34


def figure_chart(fig: dict[str, Any], runs: list[dict[str, Any]]) -> dict[str, Any]:
    """A line through each run's value of ``fig`` (gaps where a run lacks it), the y axis from
    zero (so a small change reads small), and a dashed marker at each run whose configuration
    changed from the run before, its changes as the tooltip."""
    name, unit = fig["name"], fig["unit"]
    svg = Svg(W, H, f"{fig['label']} per run")
    pw, ph = W - L - R, H - T - B
    vals = [r["values"].get(name) for r in runs]
    have = [float(v) for v in vals if v is not None]
    vmax = (max(have) if have else 0.0) * 1.1 or 1.0
    for v in ticks(vmax):
        y = T + ph - ph * v / vmax
        svg.line(L, y, L + pw, y, "grid")
        svg.text(L - 6, y + 4, figure_text(v, unit), "axis", "end")
    n = len(runs)

    def x_of(i: int) -> float:
        return L + (pw * i / (n - 1) if n > 1 else pw / 2)

    label_every = max(1, (n + 11) // 12)
    for i, r in enumerate(runs):
        x = x_of(i)
        if r.get("changes"):
            svg.line(x, T, x, T + ph, "trend-change", title="\n".join(r["changes"]))
        if i % label_every == 0 or i == n - 1:
            svg.text(x, H - B + 16, str(r["index"]), "axis", "middle")
    segment: list[tuple[float, float]] = []
    segments: list[list[tuple[float, float]]] = []
    for i, v in enumerate(vals):
        if v is None:
            if segment:
                segments.append(segment)
            segment = []
            continue
        segment.append((x_of(i), T + ph - ph * float(v) / vmax))
    if segment:
        segments.append(segment)
    for seg in segments:
        if len(seg) > 1:
            svg.polyline(seg, "trend-line")
    for i, (r, v) in enumerate(zip(runs, vals, strict=True)):
        if v is not None:
            y = T + ph - ph * float(v) / vmax
            svg.circle(x_of(i), y, 3.5, "trend-pt", title=f"{r['label']}: {figure_text(v, unit)}")
    if not have:
        svg.text(L + pw / 2, T + ph / 2, "not recorded in these runs", "axis-title", "middle")
    svg.text(L + pw / 2, H - 4, "run", "axis-title", "middle")
    return svg.to_dict()


def build_trend_view(trend: dict[str, Any], gate_line: str | None = None) -> dict[str, Any]:
    """Everything the trend template shows, as plain data."""
    figures = trend.get("figures") or []
    runs = trend.get("runs") or []
    return {
        "title": f"Trend over {len(runs)} run{'s' if len(runs) != 1 else ''}",
        "tool": trend.get("tool") or {"name": "traceinsight", "version": ""},
        "verdict": "ok",
        "gate": gate_line or "",
        "charts": [
            {"name": f["name"], "label": f["label"], "svg": figure_chart(f, runs)} for f in figures
        ],
        "headers": [f["label"] for f in figures],
        "rows": [
            {
                "index": r["index"],
                "label": r["label"],
                "values": [figure_text(r["values"].get(f["name"]), f["unit"]) for f in figures],
                "changes": list(r.get("changes") or []),
            }
            for r in runs
        ],
        "config": [
            {"index": r["index"], "label": r["label"], "items": sorted(r["config"].items())}
            for r in runs
        ],
    }


def render_trend_html(trend: dict[str, Any], gate_line: str | None = None) -> str:
    """The trend (``traceinsight.compare.trend.build_trend``) as one self-contained page."""
    view = build_trend_view(trend, gate_line)
    payload = {"schema": "traceinsight.trend-report", "version": 1, "tool": view["tool"]}
    return render_page("trend.html", view, payload)
