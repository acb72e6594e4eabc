"""The host chart of a run without GPU kernels: the split of step time as one stacked bar."""

from __future__ import annotations

from typing import Any

from traceinsight.render.html.svg import Svg
from traceinsight.util import fmt

#: the parts of step time, in the result's order, with their css class
PARTS = {
    "framework ops": "host-ops",
    "Python and other host work": "host-py",
    "data loading": "host-dl",
    "synchronisation": "host-sync",
}


def host_chart(split: list[dict[str, Any]]) -> dict[str, Any]:
    """One stacked bar of the step time, labelled where a part is wide enough."""
    W, H, L, R = 960, 46, 0, 0
    svg = Svg(W, H, "Host step time: framework ops, Python, data loading, synchronisation")
    x = float(L)
    pw = W - L - R
    for p in split:
        w = pw * max(0.0, float(p.get("pct") or 0)) / 100.0
        if w <= 0:
            continue
        title = f"{p['part']}: {fmt.fmt_pct(p['pct'])} ({fmt.fmt_ns(p.get('ns'))})"
        svg.rect(x, 4, w, H - 8, PARTS[p["part"]], title)
        if w > 90:
            svg.text(x + 6, H / 2 + 4, f"{p['part']} {fmt.fmt_pct(p['pct'], 0)}", "seg-lbl")
        x += w
    return svg.to_dict()
