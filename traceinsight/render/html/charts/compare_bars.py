"""The compare report's mean step per side, stacked by what the GPU did: before above, after
below, on one time axis, with the change of the total."""

from __future__ import annotations

from typing import Any

from traceinsight.render.html.cells import tone
from traceinsight.render.html.svg import Svg, ticks
from traceinsight.util import fmt
from traceinsight.util.fmt import signed_ns, signed_pct

#: breakdown parts of a compare (``part`` -> label, css segment class)
COMPARE_PARTS = (
    ("compute", "compute", "compute"),
    ("comm exposed", "comm exposed", "comm"),
    ("memcpy exposed", "memcpy exposed", "memcpy"),
    ("memset exposed", "memset exposed", "memset"),
    ("idle", "idle", "idle"),
)


def compare_bars(
    rows: dict[str, dict[str, Any]], tot: dict[str, float], sides: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """``rows``: breakdown row by part (``before_ns`` / ``after_ns``); ``tot``: each side's sum;
    ``sides``: the compare's ``before`` / ``after`` (their devices label the bars)."""
    vmax = max(tot.values()) or 1.0
    W, L, R, T = 960, 150, 190, 26
    bar_h, gap = 34, 16
    pw = W - L - R
    H = T + 2 * bar_h + gap + 30
    svg = Svg(W, H, "Mean step per side, stacked by what the GPU did: before above, after below")

    def X(v: float) -> float:
        return L + pw * v / vmax

    for v in ticks(vmax, 6):
        svg.line(X(v), T - 6, X(v), T + 2 * bar_h + gap + 4, "grid")
        svg.text(X(v), T - 10, fmt.fmt_ns(v) if v else "0", "axis", "middle")
    for i, side in enumerate(("before", "after")):
        y = T + i * (bar_h + gap)
        total = tot[side] or 1.0
        dev = ", ".join(dict.fromkeys(str(d) for d in sides[side].get("devices") or []))
        svg.text(L - 10, y + bar_h / 2, side, "axis side-lbl", "end")
        svg.text(
            L - 10, y + bar_h / 2 + 14, fmt.shorten(dev or "no GPU recorded", 24), "axis", "end"
        )
        x = float(L)
        for part, lab, cls in COMPARE_PARTS:
            v = float((rows.get(part) or {}).get(f"{side}_ns") or 0)
            if v <= 0:
                continue
            ww = pw * v / vmax
            svg.rect(
                x,
                y,
                ww,
                bar_h,
                f"seg-{cls}",
                f"{side}: {lab} {fmt.fmt_ns(v)} per step ({fmt.fmt_pct(100 * v / total)})",
            )
            lbl = fmt.fmt_ns(v)
            if ww > 16 + 6.5 * len(lbl):
                svg.text(x + 6, y + bar_h / 2 + 4, lbl, f"seg-lbl seg-lbl-{cls}")
            x += ww
        svg.text(X(tot[side]) + 8, y + bar_h / 2 + 4, fmt.fmt_ns(tot[side]), "axis bd-total")
    d = tot["after"] - tot["before"]
    pct = 100.0 * d / tot["before"] if tot["before"] else None
    yb = T + bar_h + gap + bar_h / 2 + 4
    svg.text(
        W - 4,
        yb,
        f"{signed_ns(d)} ({signed_pct(pct)})",
        f"axis bd-delta tone-{tone(d, pct) or 'none'}",
        "end",
    )
    return svg.to_dict()
