"""The GPU streams of one representative step: kernels by class, idle time as density.

Large inputs are capped: lanes past :data:`MAX_LANES` are merged into one, items closer than a
pixel are merged (at most about :data:`TIMELINE_MAX_RECTS` rectangles in all).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from traceinsight.render.html.cells import css_ident
from traceinsight.render.html.svg import Svg, num, ticks
from traceinsight.util import fmt
from traceinsight.util.vocab import CLASSES

MAX_LANES = 24
TIMELINE_MAX_RECTS = 5000


def timeline_chart(tl: dict[str, Any]) -> dict[str, Any]:
    """The chart and its facts (span, idle share, counts, classes present) of ``result.timeline``
    (which has at least one lane with items)."""
    span = float(tl.get("span_ns") or 1)
    names = [str(n) for n in tl.get("names") or []]
    lanes = sorted(tl["lanes"], key=lambda ln: (-len(ln.get("items") or []),))
    lanes = sorted(
        lanes[:MAX_LANES],
        key=lambda ln: (ln.get("device") is None, ln.get("device") or 0, ln.get("stream") or 0),
    )
    dropped = tl["lanes"][MAX_LANES:] if len(tl["lanes"]) > MAX_LANES else []
    if len(tl["lanes"]) > MAX_LANES:
        kept = {id(ln) for ln in lanes}
        rest = [it for ln in tl["lanes"] if id(ln) not in kept for it in ln.get("items") or []]
        lanes = [*lanes, {"device": None, "stream": None, "items": sorted(rest), "other": True}]
    W, L, R, T = 960, 150, 14, 26
    lane_h, gap = 20, 6
    pw = W - L - R
    n_rows = len(lanes) + 1
    H = T + n_rows * (lane_h + gap) + 18
    svg = Svg(W, H, f"GPU streams during step {tl.get('step')} of rank {tl.get('rank')}")
    px = pw / span
    for v in ticks(span, 8):
        x = L + v * px
        svg.line(x, T - 6, x, H - 18, "grid")
        svg.text(x, T - 10, fmt.fmt_ns(v) if v else "0", "axis", "middle")
    # idle row: where no stream of the rank is busy
    busy = _union(
        (float(it[0]), float(it[0]) + float(it[1]))
        for lane in lanes
        for it in lane.get("items") or []
    )
    gaps, prev = [], 0.0
    for s, e in busy:
        if s > prev:
            gaps.append((prev, s))
        prev = max(prev, e)
    if prev < span:
        gaps.append((prev, span))
    y = float(T)
    svg.text(L - 8, y + lane_h / 2 + 4, "GPU idle", "axis lane-lbl", "end")
    svg.rect(L, y, pw, lane_h, "lane-busy", "GPU busy (any stream)")
    idle_total = sum(e - s for s, e in gaps)
    _idle_bins(svg, gaps, span, L, y, pw, lane_h)
    n_rects = 0
    budget = max(200, TIMELINE_MAX_RECTS // max(1, len(lanes)))
    for li, lane in enumerate(lanes):
        y = T + (li + 1) * (lane_h + gap)
        items = lane.get("items") or []
        if lane.get("other"):
            label = f"{len(dropped)} more streams"
        else:
            dev = lane.get("device")
            label = (f"GPU {dev} · " if dev is not None else "") + f"stream {lane.get('stream')}"
        svg.text(L - 8, y + lane_h / 2 + 4, label, "axis lane-lbl", "end")
        kern_ns = sum(float(it[1]) for it in items)
        svg.rect(
            L,
            y,
            pw,
            lane_h,
            "lane-bg",
            f"{label}: {sum(int(it[4]) if len(it) > 4 else 1 for it in items):,} activities, "
            f"busy {fmt.fmt_ns(kern_ns)} of {fmt.fmt_ns(span)}",
        )
        merged = _merge_pixels(items, px, budget)
        for m in merged:
            n_rects += 1
            svg.rect(
                L + m["s"] * px,
                y + 1,
                max(0.6, (m["e"] - m["s"]) * px),
                lane_h - 2,
                f"cls-{css_ident(m['cls'])}",
                _item_title(m, names),
            )
    present = sorted(
        {css_ident(str(it[2])) for lane in lanes for it in lane.get("items") or []},
        key=lambda c: CLASSES.index(c),
    )
    return {
        "chart": svg.to_dict(),
        "rank": tl.get("rank"),
        "step": tl.get("step"),
        "span": fmt.fmt_ns(span),
        "idle": fmt.fmt_pct(100 * idle_total / span),
        "idle_gaps": len(gaps),
        "lanes": len(lanes),
        "rects": n_rects,
        "legend": present,
        "items": sum(len(lane.get("items") or []) for lane in lanes),
    }


def _idle_bins(
    svg: Svg, gaps: list[tuple[float, float]], span: float, x0: float, y: float, pw: float, h: float
) -> None:
    """Idle time as density: the plot is cut into 2-px bins, each shaded by the share of it the
    GPU was idle (gaps far below a pixel stay visible); runs of equal shade are one rectangle."""
    n = max(1, int(pw // 2))
    width = span / n
    idle = [0.0] * n
    for s, e in gaps:
        i = min(n - 1, int(s // width))
        while s < e and i < n:
            be = (i + 1) * width
            idle[i] += min(e, be) - s
            s = be
            i += 1
    levels = [min(10, round(10 * v / width)) for v in idle]
    i = 0
    while i < n:
        lv, j = levels[i], i
        while j + 1 < n and levels[j + 1] == lv:
            j += 1
        if lv > 0:
            t0, t1 = i * width, (j + 1) * width
            frac = sum(idle[i : j + 1]) / (t1 - t0)
            svg.rect(
                x0 + pw * i / n,
                y,
                pw * (j + 1 - i) / n,
                h,
                "idle-gap",
                f"idle {fmt.fmt_pct(100 * frac, 0)} of +{fmt.fmt_ns(t0)} … +{fmt.fmt_ns(t1)}",
                fill_opacity=num(0.12 + 0.88 * lv / 10, 2),
            )
        i = j + 1


def _union(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(a, b) for a, b in out]


def _merge_pixels(items: list[list[Any]], px: float, budget: int) -> list[dict[str, Any]]:
    """Merge neighbours closer than half a pixel (and sub-pixel runs of mixed classes), so a lane
    draws at most a few rectangles per pixel column; widen the merge until under ``budget``."""
    its = sorted(items, key=lambda it: float(it[0]))
    tol = 0.5
    while True:
        out: list[dict[str, Any]] = []
        for it in its:
            s, d = float(it[0]), float(it[1])
            cls, idx = str(it[2]), int(it[3]) if len(it) > 3 and it[3] is not None else -1
            cnt = int(it[4]) if len(it) > 4 and it[4] else 1
            e = s + d
            if out:
                m = out[-1]
                close = (s - m["e"]) * px < tol
                tiny = (m["e"] - m["s"]) * px < 2 * tol and d * px < 2 * tol
                if close and (m["cls"] == cls or tiny):
                    m["e"] = max(m["e"], e)
                    m["n"] += cnt
                    m["by"][cls] += d
                    m["names"].add(idx)
                    m["busy"] += d
                    if m["by"][cls] > m["by"][m["cls"]]:
                        m["cls"] = cls
                    continue
            by: dict[str, float] = defaultdict(float)
            by[cls] += d
            out.append(
                {
                    "s": s,
                    "e": e,
                    "cls": cls,
                    "n": cnt,
                    "by": by,
                    "names": {idx},
                    "busy": d,
                    "idx": idx,
                }
            )
        if len(out) <= budget or tol > 64:
            return out
        tol *= 2


def _tip_name(name: str) -> str:
    return fmt.shorten(fmt.short_kernel_name(name), 120)


def _item_title(m: dict[str, Any], names: list[str]) -> str:
    when = f"+{fmt.fmt_ns(m['s'])} … +{fmt.fmt_ns(m['e'])}"
    if m["n"] == 1 and len(m["names"]) == 1:
        idx = m["idx"]
        name = _tip_name(names[idx]) if 0 <= idx < len(names) else "?"
        return f"{name}\n{m['cls']} · {fmt.fmt_ns(m['e'] - m['s'])} · {when}"
    mix = sorted(m["by"].items(), key=lambda kv: -kv[1])
    busy = m["busy"] or 1.0
    parts = ", ".join(f"{c} {100 * v / busy:.0f}%" for c, v in mix[:3])
    tops = [_tip_name(names[i]) for i in sorted(m["names"])[:3] if 0 <= i < len(names)]
    return f"{m['n']:,} activities merged ({parts}) · busy {fmt.fmt_ns(m['busy'])} · {when}" + (
        "\n" + "\n".join(tops) if tops else ""
    )
