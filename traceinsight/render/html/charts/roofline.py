"""The roofline: achieved FLOP/s against arithmetic intensity, log-log, with the device's roofs."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from traceinsight.render.html.svg import Svg, num, path
from traceinsight.util import fmt


def roofline_chart(
    pts: list[dict[str, Any]], bandwidth: Any, peaks_by_dtype: dict[str, Any]
) -> dict[str, Any]:
    """One circle per modelled op (area by device time), the memory roof and one flat roof per
    distinct peak. ``pts`` have positive ``ai`` and ``flops_per_s``."""
    bw = float(bandwidth or 0)
    peaks: dict[float, list[str]] = defaultdict(list)
    for k, v in (peaks_by_dtype or {}).items():
        if v:
            peaks[float(v)].append(str(k))
    W, H, L, R, T, B = 960, 440, 100, 170, 16, 46
    pw, ph = W - L - R, H - T - B
    xs = [math.log10(p["ai"]) for p in pts] + ([math.log10(v / bw) for v in peaks] if bw else [])
    ys = [math.log10(p["flops_per_s"]) for p in pts] + [math.log10(v) for v in peaks]
    x0, x1 = math.floor(min(xs) - 0.3), math.ceil(max(xs) + 0.3)
    y0, y1 = math.floor(min(ys) - 0.3), math.ceil(max(ys) + 0.2)
    if x1 - x0 < 3:
        x1 = x0 + 3
    if y1 - y0 < 3:
        y0 = y1 - 3

    def X(v: float) -> float:
        return L + pw * (v - x0) / (x1 - x0)

    def Y(v: float) -> float:
        return T + ph - ph * (v - y0) / (y1 - y0)

    svg = Svg(W, H, "Roofline: achieved FLOP/s against arithmetic intensity, log-log")
    for e in range(x0, x1 + 1):
        svg.line(X(e), T, X(e), T + ph, "grid")
        svg.text(X(e), T + ph + 16, _pow10(e), "axis", "middle")
    for e in range(y0, y1 + 1):
        svg.line(L, Y(e), L + pw, Y(e), "grid")
        svg.text(L - 6, Y(e) + 4, fmt.fmt_rate(10.0**e, "FLOP/s"), "axis", "end")
    svg.rect(L, T, pw, ph, "plot-frame")
    top = max(peaks) if peaks else None
    if bw and top:
        # memory roof: FLOP/s = AI x bandwidth, up to the highest ridge
        xa = max(x0, y0 - math.log10(bw))
        xb = math.log10(top / bw)
        svg.path(
            path([(X(xa), Y(xa + math.log10(bw))), (X(xb), Y(xb + math.log10(bw)))]),
            "roof-bw",
            f"memory bandwidth roof: {fmt.fmt_rate(bw, 'B/s')}",
        )
        ang = -math.degrees(
            math.atan2(Y(xa + 1 + math.log10(bw)) - Y(xa + math.log10(bw)), X(xa + 1) - X(xa))
        )
        lx = X(xa) + 0.18 * (X(xb) - X(xa))
        ly = Y(math.log10(bw) + xa + 0.18 * (xb - xa)) - 8
        svg.text(
            lx,
            ly,
            f"{fmt.fmt_rate(bw, 'B/s')}",
            "roof-lbl",
            "start",
            transform=f"rotate({num(-ang)} {num(lx)} {num(ly)})",
        )
    for v, keys in sorted(peaks.items()):
        xr = math.log10(v / bw) if bw else x0
        xr = min(max(xr, x0), x1)
        svg.path(
            path([(X(xr), Y(math.log10(v))), (X(x1), Y(math.log10(v)))]),
            "roof-peak",
            f"{'/'.join(keys)} peak: {fmt.fmt_rate(v, 'FLOP/s')}"
            + (f"; ridge at {v / bw:.0f} FLOP/byte" if bw else ""),
        )
        svg.text(
            X(x1) + 6,
            Y(math.log10(v)) + 4,
            f"{'/'.join(keys)} {fmt.fmt_rate(v, 'FLOP/s')}",
            "roof-lbl",
        )
    tmax = max(float(p.get("device_ns") or 0) for p in pts) or 1.0
    for p in sorted(pts, key=lambda p: -float(p.get("device_ns") or 0)):
        rad = 3.0 + 11.0 * math.sqrt(float(p.get("device_ns") or 0) / tmax)
        bound = "memory" if p.get("bound") == "memory" else "compute"
        dims = f" {fmt.compact_dims(p['dims'])}" if p.get("dims") else ""
        title = (
            f"{p.get('op')}{dims} · {p.get('dtype') or '?'}\n{fmt.fmt_num(p.get('calls'), 0)} "
            f"calls · {fmt.fmt_ns(p.get('device_ns'))}\nAI {p['ai']:.3g} FLOP/byte · "
            f"{fmt.fmt_rate(p['flops_per_s'], 'FLOP/s')} · {bound}-bound"
            + "".join(
                f"\n{k}: {p[key]}"
                for k, key in (("assumed", "assumption"), ("inferred", "inferred"))
                if p.get(key)
            )
        )
        svg.circle(
            X(math.log10(p["ai"])), Y(math.log10(p["flops_per_s"])), rad, f"pt-{bound}", title
        )
    svg.text(L + pw / 2, H - 8, "Arithmetic intensity (FLOP / byte)", "axis axis-title", "middle")
    svg.text(
        14,
        T + ph / 2,
        "Achieved FLOP/s",
        "axis axis-title",
        "middle",
        transform=f"rotate(-90 14 {num(T + ph / 2)})",
    )
    return svg.to_dict()


def _pow10(e: int) -> str:
    v = 10.0**e
    if e < 0:
        return f"{v:g}"
    if e < 3:
        return f"{int(v)}"
    return {3: "1k", 4: "10k", 5: "100k", 6: "1M", 7: "10M", 8: "100M"}.get(e, f"1e{e}")
