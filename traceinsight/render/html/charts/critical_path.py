"""The critical path of the timeline's step: drawn over the GPU streams (a host row for host
time), and its breakdown by category as one bar. Reads ``result.critical_path`` and
``result.timeline`` only."""

from __future__ import annotations

from typing import Any

from traceinsight.render.critical_path import CATEGORY_STYLE, focus_step
from traceinsight.render.html.svg import Svg, ticks
from traceinsight.util import fmt
from traceinsight.util.kernelname import short_names

MAX_RECTS = 3000


def critical_path_chart(cp: dict[str, Any] | None, tl: dict[str, Any] | None) -> dict[str, Any]:
    row = focus_step(cp)
    if row is None:
        return {"empty": "No critical path for this run (no GPU work in a step window)."}
    span = float(row.get("measured_ns") or 1)
    lanes = []
    for ln in (tl or {}).get("lanes") or []:
        if ln.get("stream") is not None and ln.get("stream") not in lanes:
            lanes.append(ln.get("stream"))
    for sg in row["segments"]:
        if sg[3] is not None and sg[3] not in lanes:
            lanes.append(sg[3])
    W, L, R, T = 960, 150, 14, 26
    lane_h, gap = 18, 6
    pw = W - L - R
    rows = ["host", *lanes]
    H = T + len(rows) * (lane_h + gap) + 18
    svg = Svg(W, H, f"Critical path of step {row.get('step')} of rank {row.get('rank')}")
    px = pw / span
    for v in ticks(span, 8):
        x = L + v * px
        svg.line(x, T - 6, x, H - 18, "grid")
        svg.text(x, T - 10, fmt.fmt_ns(v) if v else "0", "axis", "middle")
    y_of = {}
    for i, name in enumerate(rows):
        y = T + i * (lane_h + gap)
        y_of[name] = y
        label = "host threads" if name == "host" else f"stream {name}"
        svg.text(L - 8, y + lane_h / 2 + 4, label, "axis lane-lbl", "end")
        svg.rect(L, y, pw, lane_h, "lane-bg", label)
    # the GPU work of the step, faint, under the path
    tl_lanes = {ln.get("stream"): ln for ln in (tl or {}).get("lanes") or []}
    n = 0
    for stream, ln in tl_lanes.items():
        if stream not in y_of:
            continue
        for it in (ln.get("items") or [])[: MAX_RECTS // max(1, len(tl_lanes))]:
            svg.rect(
                L + float(it[0]) * px,
                y_of[stream] + 5,
                max(0.5, float(it[1]) * px),
                lane_h - 10,
                "cp-under",
            )
            n += 1
    prev = None
    for sg in row["segments"][:MAX_RECTS]:
        off, dur, cat, lane = sg
        y = y_of["host" if lane is None else lane]
        x = L + float(off) * px
        w = max(0.8, float(dur) * px)
        label, _ = CATEGORY_STYLE.get(cat, (cat, ""))
        svg.rect(
            x, y + 1, w, lane_h - 2, f"cp-{cat}", f"{label}: {fmt.fmt_ns(dur)} at {fmt.fmt_ns(off)}"
        )
        if prev is not None and prev[1] != y:  # the path moves between host and a stream
            svg.line(prev[0], prev[1] + lane_h / 2, x, y + lane_h / 2, "cp-link")
        prev = (x + w, y)
        n += 1
    gpu = [str(t.get("name") or "") for t in row.get("top") or [] if t.get("kind") == "gpu"]
    short = short_names(gpu)  # kernels by the tables' short names, the full name on hover
    return {
        "empty": "",
        "chart": svg.to_dict(),
        "bar": breakdown_bar(row),
        "rank": row.get("rank"),
        "step": row.get("step"),
        "span": fmt.fmt_ns(span),
        "replayed": fmt.fmt_ns(row.get("replayed_ns")),
        "error": f"{float(row.get('replay_error_pct') or 0.0):+.1f}%",
        "rects": n,
        "top": [
            {
                "name": short.get(str(t.get("name") or ""), t.get("name")),
                "full": t.get("name"),
                "category": CATEGORY_STYLE.get(t.get("category"), (t.get("category"), ""))[0],
                "time": fmt.fmt_ns(t.get("ns")),
                "share": fmt.fmt_pct(t.get("pct")),
                "launched_by": t.get("launched_by") or "",
            }
            for t in row.get("top") or []
        ],
    }


def breakdown_bar(row: dict[str, Any]) -> dict[str, Any]:
    """The path by category as one stacked bar (shares of the measured step)."""
    span = float(row.get("measured_ns") or 1)
    W, H, L = 960, 44, 0
    svg = Svg(W, H, f"Critical path of step {row.get('step')} by category")
    x = float(L)
    for cat, (label, _) in CATEGORY_STYLE.items():
        ns = float((row.get("path_ns") or {}).get(cat) or 0)
        if ns <= 0:
            continue
        w = W * ns / span
        svg.rect(
            x,
            4,
            max(0.8, w),
            22,
            f"cp-{cat}",
            f"{label}: {fmt.fmt_ns(ns)} ({fmt.fmt_pct(100 * ns / span)})",
        )
        if w > 70:
            svg.text(x + 4, 19, f"{label} {fmt.fmt_pct(100 * ns / span)}", "cp-bar-lbl")
        x += w
    legend = [
        {
            "cat": c,
            "label": lab,
            "pct": fmt.fmt_pct(100 * float((row.get("path_ns") or {}).get(c) or 0) / span),
        }
        for c, (lab, _) in CATEGORY_STYLE.items()
        if (row.get("path_ns") or {}).get(c)
    ]
    return {"chart": svg.to_dict(), "legend": legend}


def css() -> str:
    """The category colours (added to the report's style sheet)."""
    return "\n".join(
        f".cp-{c} {{ fill: {col}; background: {col}; }}" for c, (_, col) in CATEGORY_STYLE.items()
    )
