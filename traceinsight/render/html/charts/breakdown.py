"""GPU time per rank (compute, exposed communication and copies, idle) and kernel time by class."""

from __future__ import annotations

from typing import Any

from traceinsight.render.html.cells import css_ident
from traceinsight.render.html.svg import Svg
from traceinsight.util import fmt

#: GPU time breakdown segments: (key in the breakdown row, label, css class)
SEGMENTS = (
    ("compute_ns", "compute", "compute"),
    ("comm_exposed_ns", "comm exposed", "comm"),
    ("memcpy_exposed_ns", "memcpy exposed", "memcpy"),
    ("memset_exposed_ns", "memset exposed", "memset"),
    ("idle_ns", "idle", "idle"),
)


#: past this many ranks the chart draws one thin bar per rank (no per-row labels)
COMPACT_FROM = 64


def rank_chart(shown: list[dict[str, Any]]) -> dict[str, Any]:
    """One stacked bar per rank's step windows, with the communication hidden under compute
    (every rank: past ``COMPACT_FROM`` ranks in the compact form)."""
    if len(shown) > COMPACT_FROM:
        return _compact(shown)
    W, L, R, T = 960, 78, 150, 8
    row_h, gap = (22, 10) if len(shown) <= 16 else (14, 4)
    pw = W - L - R
    H = T + len(shown) * (row_h + gap) + 4
    svg = Svg(W, H, "GPU time per rank: compute, exposed communication and copies, idle")
    for i, w in enumerate(shown):
        wall = float(w.get("wall_ns") or 0) or 1.0
        y = T + i * (row_h + gap)
        svg.text(L - 8, y + row_h / 2 + 4, f"rank {w.get('rank')}", "axis", "end")
        x = float(L)
        for key, lab, cls in SEGMENTS:
            v = float(w.get(key) or 0)
            if v <= 0:
                continue
            ww = pw * v / wall
            pct = 100 * v / wall
            svg.rect(
                x,
                y,
                ww,
                row_h,
                f"seg-{cls}",
                f"rank {w.get('rank')} · {lab} {fmt.fmt_pct(pct)} ({fmt.fmt_ns(v)})",
            )
            if ww > 54 and row_h >= 18:
                svg.text(x + 5, y + row_h / 2 + 4, fmt.fmt_pct(pct, 0), f"seg-lbl seg-lbl-{cls}")
            x += ww
        hidden = float(w.get("comm_hidden_ns") or 0)
        if hidden > 0:
            hw = pw * min(hidden, float(w.get("compute_ns") or 0) or hidden) / wall
            tip = (
                f"rank {w.get('rank')} · communication hidden under compute: "
                f"{fmt.fmt_ns(hidden)} ({fmt.fmt_pct(100 * hidden / wall)} of the window)"
            )
            svg.rect(L, y + row_h - 4, hw, 4, "seg-hidden", tip)
            svg.text(
                L + pw + 8,
                y + row_h / 2 + 4,
                f"comm hidden {fmt.fmt_pct(100 * hidden / wall)}",
                "axis hidden-lbl",
            )
        else:
            svg.text(L + pw + 8, y + row_h / 2 + 4, fmt.fmt_ns(wall), "axis")
    return svg.to_dict()


def _compact(ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """Many ranks: one bar a few pixels (or one pixel) high per rank in rank order, a rank
    label every few rows, and one tooltip per bar with its parts (hidden communication
    included)."""
    W, L, R, T = 960, 78, 150, 8
    n = len(ranks)
    row_h = max(1.0, min(6.0, 1200.0 / n))
    pw = W - L - R
    H = int(T + n * row_h + 24)
    svg = Svg(
        W, H, f"GPU time per rank, {n} ranks: compute, exposed communication and copies, idle"
    )
    every = max(1, round(16.0 / row_h))
    for i, w in enumerate(ranks):
        wall = float(w.get("wall_ns") or 0) or 1.0
        y = T + i * row_h
        if i % every == 0:
            svg.text(L - 8, y + min(row_h, 10.0), f"rank {w.get('rank')}", "axis", "end")
        x = float(L)
        parts = []
        for key, lab, cls in SEGMENTS:
            v = float(w.get(key) or 0)
            if v <= 0:
                continue
            ww = pw * v / wall
            svg.rect(x, y, ww, row_h, f"seg-{cls}")
            parts.append(f"{lab} {fmt.fmt_pct(100 * v / wall)}")
            x += ww
        hidden = float(w.get("comm_hidden_ns") or 0)
        if hidden > 0:
            parts.append(f"comm hidden {fmt.fmt_pct(100 * hidden / wall)}")
        # one transparent bar over the row carries the tooltip
        svg.rect(
            L,
            y,
            pw,
            row_h,
            "hit",
            f"rank {w.get('rank')} · {fmt.fmt_ns(wall)} · " + ", ".join(parts),
        )
    svg.text(L + pw + 8, T + 10, f"{n} ranks, rank order", "axis")
    svg.text(L + pw + 8, T + 26, "hover a bar for its parts", "axis")
    return svg.to_dict()


def class_chart(cls_rows: list[dict[str, Any]], tot: float) -> dict[str, Any]:
    """One bar of kernel time split by class (rows in display order, ``tot`` their sum)."""
    W = 960
    csvg = Svg(W, 30, "Kernel time by class, all ranks")
    x = 0.0
    for c in cls_rows:
        v = float(c.get("total_ns") or 0)
        ww = W * v / tot
        if ww <= 0:
            continue
        name = str(c.get("cls"))
        csvg.rect(
            x,
            0,
            ww,
            30,
            f"cls-{css_ident(name)}",
            f"{name}: {fmt.fmt_pct(100 * v / tot)} of GPU time ({fmt.fmt_ns(v)}, "
            f"{fmt.fmt_num(c.get('kernels'), 0)} kernels)",
        )
        lbl = f"{name} {fmt.fmt_pct(100 * v / tot, 0)}"
        if ww > 14 + 7 * len(lbl):
            csvg.text(x + 6, 19, lbl, "seg-lbl")
        x += ww
    return csvg.to_dict()
