"""Step time per ProfilerStep, stacked by what the GPU did, with slow steps marked."""

from __future__ import annotations

import math
from typing import Any

from traceinsight.render.html.charts.breakdown import SEGMENTS
from traceinsight.render.html.svg import Svg, num, ticks
from traceinsight.util import fmt

#: a step slower than this factor x the median step is marked slow
SLOW_STEP_FACTOR = 1.25
#: past this many steps, consecutive steps are bucketed into one bar (their mean)
MAX_STEP_BARS = 160


#: colours of the per-rank lines (css classes rank-c0 .. rank-c7, then repeated)
RANK_COLOURS = 8


def step_chart(
    reps: list[dict[str, Any]],
    median: float,
    slow_ids: set[int],
    multi: bool,
    rank_compute: dict[Any, list[float | None]] | None = None,
) -> tuple[dict[str, Any], int]:
    """The chart and its bucket size. ``reps``: one per step, in order (``step``, ``rank``,
    ``row`` of its slowest rank, ``min`` / ``max`` wall over ranks); ``slow_ids``: ``id()`` of
    the slow ones; ``rank_compute``: per rank, its compute time in each step of ``reps``
    (None where it has no such step), drawn as one line per rank over all steps, so a rank
    that is slow in every step shows as a line apart, not as one bar."""
    threshold = SLOW_STEP_FACTOR * median
    # bucket consecutive steps when there are too many bars to draw
    size = max(1, math.ceil(len(reps) / MAX_STEP_BARS))
    buckets = [reps[i : i + size] for i in range(0, len(reps), size)]
    W, H, L, R, T, B = 960, (250 if len(reps) > 2 else 180), 72, 16, 18, 38
    if rank_compute:
        R = 64  # room for the rank labels right of the plot
    pw, ph = W - L - R, H - T - B
    vmax = max(x["max"] for x in reps) * 1.08 or 1.0
    svg = Svg(W, H, "Step time per step, stacked by what the GPU did")
    for v in ticks(vmax):
        y = T + ph - ph * v / vmax
        svg.line(L, y, L + pw, y, "grid")
        svg.text(L - 6, y + 4, fmt.fmt_ns(v), "axis", "end")
    slot = pw / len(buckets)
    bw = max(1.0, min(64.0, slot * 0.62))
    label_every = max(1, math.ceil(len(buckets) / 16))
    for i, bk in enumerate(buckets):
        x = L + slot * i + (slot - bw) / 2
        comp = {key: sum((b["row"].get(key) or 0) for b in bk) / len(bk) for key, _, _ in SEGMENTS}
        wall = sum(b["max"] for b in bk) / len(bk)
        top = max(b["max"] for b in bk)
        low = min(b["min"] for b in bk)
        name = (
            f"step {bk[0]['step']}"
            if len(bk) == 1
            else f"steps {bk[0]['step']}–{bk[-1]['step']} (mean of {len(bk)})"
        )
        is_slow = any(id(b) in slow_ids for b in bk)
        tip = [
            f"{name}: {fmt.fmt_ns(wall)}"
            + (f" (slowest rank {bk[0]['rank']})" if multi and len(bk) == 1 else "")
        ]
        tip += [f"{lab} {fmt.fmt_ns(comp[key])}" for key, lab, _ in SEGMENTS if comp[key]]
        if multi:
            tip.append(f"ranks: {fmt.fmt_ns(low)} – {fmt.fmt_ns(top)}")
        if is_slow:
            tip.append(f"SLOW: > {SLOW_STEP_FACTOR}× median {fmt.fmt_ns(median)}")
        title = "\n".join(tip)
        y = T + ph
        total = sum(comp.values()) or wall or 1
        scale = wall / total  # segments sum to the window; scale to the bar's wall
        for key, _, cls in SEGMENTS:
            h = ph * comp[key] * scale / vmax
            if h <= 0:
                continue
            y -= h
            svg.rect(x, y, bw, h, f"seg-{cls}", title)
        if is_slow:
            ytop = T + ph - ph * top / vmax
            svg.rect(x - 1, ytop, bw + 2, T + ph - ytop, "slow-outline", title)
            svg.path(f"M{num(x + bw / 2)} {num(ytop - 3)}l-4 -7h8z", "slow-mark", title)
        if multi and top > low:
            cx = x + bw / 2
            svg.line(cx, T + ph - ph * top / vmax, cx, T + ph - ph * low / vmax, "whisker", title)
        if i % label_every == 0:
            svg.text(x + bw / 2, T + ph + 14, str(bk[0]["step"]), "axis", "middle")
    ends: list[tuple[float, float, list[str], str]] = []  # label position, ranks, colour
    for k, (rank, vals) in enumerate(sorted((rank_compute or {}).items())):
        pts = []
        for i in range(len(buckets)):
            got = [v for v in vals[i * size : (i + 1) * size] if v is not None]
            if got:
                v = sum(got) / len(got)
                pts.append((L + slot * i + slot / 2, T + ph - ph * v / vmax))
        if not pts:
            continue
        if len(pts) == 1:  # one step: a short tick, so the rank still has a line
            x, y = pts[0]
            pts = [(x - bw / 2, y), (x + bw / 2, y)]
        known = [v for v in vals if v is not None]
        line_tip = (
            f"rank {rank}: compute per step, median "
            f"{fmt.fmt_ns(sorted(known)[len(known) // 2])} over {len(known)} steps"
        )
        svg.polyline(pts, f"rank-line rank-c{k % RANK_COLOURS}", line_tip, data_rank=str(rank))
        near = next((e for e in ends if abs(e[1] - pts[-1][1]) < 9), None)
        if near is not None:  # lines that end together share one label
            near[2].append(str(rank))
        else:
            ends.append((L + pw + 6, pts[-1][1] + 4, [str(rank)], f"rank-c{k % RANK_COLOURS}"))
    for x, y, names, colour in ends:
        label = "r" + ",".join(names[:4]) + ("…" if len(names) > 4 else "")
        svg.text(x, y, label, f"axis rank-lbl {colour}")
    if median:
        ym = T + ph - ph * median / vmax
        svg.line(L, ym, L + pw, ym, "median")
        svg.text(L + pw - 2, ym - 4, f"median {fmt.fmt_ns(median)}", "axis median-lbl", "end")
        yt = T + ph - ph * threshold / vmax
        if threshold < vmax:
            svg.line(L, yt, L + pw, yt, "threshold")
            svg.text(L + pw - 2, yt - 4, f"{SLOW_STEP_FACTOR}× median", "axis", "end")
    svg.line(L, T + ph, L + pw, T + ph, "axis-line")
    svg.text(
        L + pw / 2, H - 4, "ProfilerStep" + (" (bucketed)" if size > 1 else ""), "axis", "middle"
    )
    return svg.to_dict(), size
