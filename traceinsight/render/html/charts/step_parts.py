"""The step time breakdown (``result.overview.step_breakdown``): one stacked bar per step of
kernel, memcpy, memset, runtime, data loader, CPU exec and other (the TensorBoard plugin's
"Step Time Breakdown"). Reads the result only."""

from __future__ import annotations

import math
from typing import Any

from traceinsight.render.html.svg import Svg, ticks
from traceinsight.util import fmt

#: part -> (label, css class of its segment: the report's existing colours)
PARTS: dict[str, tuple[str, str]] = {
    "kernel": ("Kernel", "seg-compute"),
    "memcpy": ("Memcpy", "seg-memcpy"),
    "memset": ("Memset", "seg-memset"),
    "runtime": ("Runtime", "cp-launch"),
    "dataloader": ("DataLoader", "cp-input"),
    "cpu_exec": ("CPU Exec", "cp-host"),
    "other": ("Other", "seg-idle"),
}
MAX_BARS = 160


def step_parts_chart(sb: dict[str, Any] | None) -> dict[str, Any]:
    """The chart, or ``{"empty": why}``. With several ranks, each bar is one rank's step
    (rank-major); past :data:`MAX_BARS` consecutive bars are averaged."""
    rows = list((sb or {}).get("steps") or [])
    if not rows:
        return {"empty": "No step windows to break down."}
    size = max(1, math.ceil(len(rows) / MAX_BARS))
    buckets = [rows[i : i + size] for i in range(0, len(rows), size)]
    multi = len({r.get("rank") for r in rows}) > 1
    W, H, L, R, T, B = 960, 230, 72, 16, 14, 38
    pw, ph = W - L - R, H - T - B
    mean = [
        {p: sum(float(r.get(f"{p}_ns") or 0) for r in bk) / len(bk) for p in PARTS}
        for bk in buckets
    ]
    vmax = max(sum(m.values()) for m in mean) * 1.08 or 1.0
    svg = Svg(W, H, "Step time breakdown per step: kernel, memcpy, memset, runtime, ...")
    for v in ticks(vmax):
        y = T + ph - ph * v / vmax
        svg.line(L, y, L + pw, y, "grid")
        svg.text(L - 6, y + 4, fmt.fmt_ns(v), "axis", "end")
    slot = pw / len(buckets)
    bw = max(1.0, min(64.0, slot * 0.62))
    label_every = max(1, math.ceil(len(buckets) / 16))
    for i, (bk, m) in enumerate(zip(buckets, mean)):
        x = L + slot * i + (slot - bw) / 2
        first = bk[0]
        name = f"step {first.get('step')}" if first.get("step") is not None else "window"
        if multi:
            name = f"rank {first.get('rank')} {name}"
        if len(bk) > 1:
            name += f" (mean of {len(bk)})"
        total = sum(m.values())
        tip = f"{name}: {fmt.fmt_ns(total)}\n" + "\n".join(
            f"{lab} {fmt.fmt_ns(m[p])} ({fmt.fmt_pct(100 * m[p] / total if total else 0)})"
            for p, (lab, _) in PARTS.items()
            if m[p]
        )
        y = T + ph
        for p, (_, cls) in PARTS.items():
            h = ph * m[p] / vmax
            if h <= 0:
                continue
            y -= h
            svg.rect(x, y, bw, h, cls, tip)
        if i % label_every == 0:
            lab = str(first.get("step")) if first.get("step") is not None else "all"
            svg.text(x + bw / 2, T + ph + 16, lab, "axis", "middle")
    svg.text(L + pw / 2, H - 4, "step", "axis", "middle")
    return svg.to_dict()
