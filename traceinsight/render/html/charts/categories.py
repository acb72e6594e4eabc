"""What fills memory over time (torch.profiler memory-timeline export): one stacked area per
category, parameters at the bottom."""

from __future__ import annotations

from typing import Any

from traceinsight.render.html.charts.memory import byte_time_axes
from traceinsight.render.html.svg import Svg, path
from traceinsight.util import fmt


def categories_chart(v: dict[str, Any]) -> dict[str, Any]:
    """The stacked areas of one ``memory.categories`` view (``x``, ``series`` per category)."""
    xs = [float(x) for x in v.get("x") or []]
    cats = list(v.get("categories") or [])
    series = {c: [float(b) for b in v["series"][c]] for c in cats}
    W, H, L, R, T, B = 960, 250, 78, 16, 14, 38
    pw, ph = W - L - R, H - T - B
    n = len(xs)
    t0 = xs[0] if xs else 0.0
    span = (xs[-1] - t0) if n > 1 else 1.0
    span = span or 1.0
    tops = [sum(max(series[c][i], 0.0) for c in cats) for i in range(n)]
    vmax = max([*tops, 1.0]) * 1.08
    svg = Svg(W, H, f"Memory of rank {v.get('rank')} by category over time")

    def X(t: float) -> float:
        return L + pw * (t - t0) / span

    def Y(b: float) -> float:
        return T + ph - ph * b / vmax

    byte_time_axes(
        svg, (L, T, pw, ph), X, Y, vmax, t0, span, lambda tv: fmt.fmt_ns(tv) if tv else "0"
    )
    below = [0.0] * n
    for c in cats:
        above = [b + max(series[c][i], 0.0) for i, b in enumerate(below)]
        if n:
            pts = [(X(x), Y(a)) for x, a in zip(xs, above)]
            back = [(X(x), Y(b)) for x, b in zip(reversed(xs), reversed(below))]
            svg.path(
                path(pts + back) + "Z",
                f"cat-{c}",
                f"{c.replace('_', ' ')} (peak {fmt.fmt_bytes(max(series[c]))})",
            )
        below = above
    svg.line(L, T + ph, L + pw, T + ph, "axis-line")
    return svg.to_dict()
