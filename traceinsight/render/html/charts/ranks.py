"""Ranks: rank x step heatmaps, distributions with the outliers named, top and bottom ranks,
matched collectives per process group and the clock offsets (the result's ``cross_rank``).

Built for hundreds of ranks: every rank is drawn (no cap), one row per rank, at least one pixel
tall; cells of neighbouring ranks in the same step that fall in the same colour band are drawn
as one rectangle (with one tooltip naming the ranks), so a 1,024-rank job stays a few hundred
kilobytes of markup. Colours are eight bands from zero to the largest value of each map,
lighter to darker, so two ranks a few per cent apart share a colour; the smallest and largest
value and their spread are written under the map.
"""

from __future__ import annotations

from typing import Any

from traceinsight.render.html.cells import table
from traceinsight.render.html.svg import Svg
from traceinsight.util import fmt

#: the heatmaps: (key of cross_rank["heatmaps"], title)
MAPS = (
    ("wall_ns", "step time"),
    ("idle_ns", "GPU idle"),
    ("comm_exposed_ns", "exposed communication"),
)
#: eight bands, light to dark (sequential blues); None: the rank has no such step
PALETTE = ("#eef3fb", "#d4e2f4", "#b3cbea", "#8aaedc", "#6190cc", "#3f73b8", "#26579b", "#143c74")
MISSING = "#f1f1f1"
MAX_ROWS_LABELLED = 40
#: height of one band of the colour key (px)
KEY_BAND = 12


def ranks_view(cross: dict[str, Any] | None) -> dict[str, Any] | None:
    """The ranks section of the report (None: a single-rank run)."""
    if not cross or len(cross.get("ranks") or []) < 2:
        return None
    ranks = list(cross["ranks"])
    steps = list(cross.get("steps") or [])
    from traceinsight.render.html.charts import CHARTS  # the registry imports this module

    heat = cross.get("heatmaps") or {}
    build = CHARTS["rank_heatmap"].build
    maps = [
        {
            "title": title,
            "heading": title[:1].upper() + title[1:],  # "GPU idle", never "Gpu idle"
            "chart": build(heat.get(key) or [], ranks, steps, title),
        }
        for key, title in MAPS
        if heat.get(key) and steps
    ]
    match = cross.get("matching") or {}
    offsets = cross.get("clock_offsets_ns") or {}
    return {
        "count": len(ranks),
        "steps": len(steps),
        "maps": maps,
        "matched": int(match.get("matched") or 0),
        "records": int(match.get("records") or 0),
        "matched_by": ", ".join(f"{k} ({v})" for k, v in (match.get("by") or {}).items()),
        "max_offset": fmt.fmt_ns(cross.get("max_clock_offset_ns") or 0),
        "straggler": _straggler_line(cross.get("straggler")),
        "distributions": _distributions(cross.get("distributions") or []),
        "top": _rank_table("tbl-ranks-top", cross.get("top_ranks") or []),
        "bottom": _rank_table("tbl-ranks-bottom", cross.get("bottom_ranks") or []),
        "groups": _groups(cross.get("groups") or []),
        "collectives": _collectives(cross.get("collectives") or []),
        "offsets": table(
            "tbl-rank-offsets",
            [("rank", "text"), ("clock offset", "ns")],
            [[int(r), int(v)] for r, v in offsets.items()],
            limit=16,
        ),
    }


def heatmap(
    rows: list[list[int | None]], ranks: list[int], steps: list[int], title: str
) -> dict[str, Any]:
    """One rank x step heatmap: a row per rank, a column per step."""
    n = max(1, len(ranks))
    row_h = max(1.0, min(16.0, 640.0 / n))
    W, L, T = 960, 70, 22
    pw = W - L - 110
    cw = pw / max(1, len(steps))
    key_h = len(PALETTE) * KEY_BAND
    # the plot or the colour key, whichever is taller, then the two lines of text
    H = int(T + max(n * row_h, key_h + 6) + 44)
    svg = Svg(W, H, f"{title} per rank and step")
    vals = [v for row in rows for v in row if v is not None]
    lo, hi = (min(vals), max(vals)) if vals else (0, 0)
    top = max(hi, 0) or 1  # the scale starts at zero: a band is an eighth of the largest value

    def band(v: int | None) -> int:
        if v is None:
            return -1
        return max(0, min(len(PALETTE) - 1, int(v / top * len(PALETTE))))

    every = max(1, len(steps) // 12)
    for j, st in enumerate(steps):
        if j % every == 0:
            svg.text(L + j * cw + cw / 2, T - 6, str(st), "axis", "middle")
    label_every = max(1, -(-n // MAX_ROWS_LABELLED))
    for i, r in enumerate(ranks):
        if i % label_every == 0:
            svg.text(L - 6, T + i * row_h + min(row_h, 12) / 2 + 4, f"rank {r}", "axis", "end")
    for j, st in enumerate(steps):
        i = 0
        while i < n:  # a run of ranks whose cells share a band: one rectangle
            b = band(rows[i][j] if i < len(rows) and j < len(rows[i]) else None)
            k = i + 1
            while k < n and band(rows[k][j] if j < len(rows[k]) else None) == b:
                k += 1
            cells = [c for c in (rows[x][j] for x in range(i, k)) if c is not None]
            who = f"rank {ranks[i]}" if k - i == 1 else f"ranks {ranks[i]}–{ranks[k - 1]}"
            if cells:
                lo_c, hi_c = min(cells), max(cells)
                what = (
                    fmt.fmt_ns(lo_c) if lo_c == hi_c else f"{fmt.fmt_ns(lo_c)}–{fmt.fmt_ns(hi_c)}"
                )
            else:
                what = "no such step"
            svg.rect(
                L + j * cw,
                T + i * row_h,
                cw - (1 if cw > 4 else 0),
                (k - i) * row_h,
                "heat",
                f"{who} · step {st} · {title} {what}",
                fill=PALETTE[b] if b >= 0 else MISSING,
            )
            i = k
    x0, y0 = L + pw + 14, T
    for b, color in enumerate(PALETTE):  # the colour key, light (zero) to dark (the largest)
        svg.rect(x0, y0 + b * KEY_BAND, KEY_BAND, KEY_BAND, "heat-key", fill=color)
    svg.text(x0 + 16, y0 + 10, "0", "axis heat-key-lo")
    svg.text(x0 + 16, y0 + key_h, fmt.fmt_ns(top), "axis heat-key-hi")
    svg.text(
        L,
        H - 24,
        f"{title}: {len(ranks)} ranks × {len(steps)} steps; darker is longer, the scale from 0 "
        f"to {fmt.fmt_ns(top)} in {len(PALETTE)} bands",
        "axis",
    )
    svg.text(L, H - 8, spread_line(lo, hi) if vals else "no values", "axis heat-spread")
    return svg.to_dict()


def spread_line(lo: int, hi: int) -> str:
    """The range of a heatmap's values and their spread, absolute and relative to the largest
    (``615 ms – 619 ms: spread 4.00 ms, 0.6% of the largest``)."""
    if lo == hi:
        return f"every cell {fmt.fmt_ns(hi)}: no spread"
    rel = f", {fmt.fmt_pct(100.0 * (hi - lo) / hi, 1)} of the largest" if hi > 0 else ""
    return f"{fmt.fmt_ns(lo)} – {fmt.fmt_ns(hi)}: spread {fmt.fmt_ns(hi - lo)}{rel}"


def _straggler_line(p: dict[str, Any] | None) -> str:
    if not p:
        return ""
    if not p.get("slowest_steps"):
        return "No rank is clearly slower than the others in any step."
    cause = p.get("cause") or "no single part"
    return (
        f"Rank {p['rank']} is the slowest in {p['slowest_steps']} of {p['steps']} steps "
        f"({p['pattern']}): {fmt.fmt_ns(p['own_ns'])} of its own work per step against "
        f"{fmt.fmt_ns(p['typical_own_ns'])} for the other ranks (median), mostly {cause}; "
        f"it is last to arrive at {p['last_arrivals']} of {p['matched_collectives']} matched "
        "collectives."
    )


def _distributions(dist: list[dict[str, Any]]) -> dict[str, Any]:
    rows = [
        [
            d["label"],
            d["min"],
            d["p25"],
            d["p50"],
            d["p75"],
            d["max"],
            ", ".join(f"rank {o['rank']} ({fmt.fmt_ns(o['value'])})" for o in d["outliers"])
            + (
                f" and {d['outlier_count'] - len(d['outliers'])} more"
                if d["outlier_count"] > len(d["outliers"])
                else ""
            ),
        ]
        for d in dist
    ]
    return table(
        "tbl-rank-dist",
        [
            ("per rank, median over steps", "text"),
            ("min", "ns"),
            ("p25", "ns"),
            ("median", "ns"),
            ("p75", "ns"),
            ("max", "ns"),
            ("outliers (above median + 3 MAD)", "text"),
        ],
        rows,
        sortable=False,
    )


_RANK_COLS = [
    ("rank", "text"),
    ("step", "ns"),
    ("own work", "ns"),
    ("compute", "ns"),
    ("GPU idle", "ns"),
    ("exposed comm", "ns"),
    ("waiting in collectives", "ns"),
    ("times last", "count"),
    ("clock offset", "ns"),
]


def _rank_table(tid: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    return table(
        tid,
        _RANK_COLS,
        [
            [
                r["rank"],
                r["step_ns"],
                r["own_ns"],
                r["compute_ns"],
                r["idle_ns"],
                r["comm_exposed_ns"],
                r["wait_ns"],
                r["last_arrivals"],
                r["clock_offset_ns"],
            ]
            for r in rows
        ],
    )


def _groups(groups: list[dict[str, Any]]) -> dict[str, Any]:
    rows = [
        [
            g["group"] + (f" ({g['description']})" if g.get("description") else ""),
            g["ranks"],
            ", ".join(g["kinds"]),
            g["collectives"],
            g["bytes"],
            g["transfer_ns"],
            g["wait_ns"],
            g["skew_p50_ns"],
            g["skew_max_ns"],
            g["busbw_p50_bytes_per_s"],
        ]
        for g in groups
    ]
    return table(
        "tbl-rank-groups",
        [
            ("process group", "text"),
            ("ranks", "count"),
            ("collectives", "text"),
            ("matched", "count"),
            ("bytes", "bytes"),
            ("transfer", "ns"),
            ("wait", "ns"),
            ("skew p50", "ns"),
            ("skew max", "ns"),
            ("bus bandwidth p50", "rate_bytes"),
        ],
        rows,
    )


def _collectives(colls: list[dict[str, Any]]) -> dict[str, Any]:
    rows = [
        [
            c["group"],
            c["collective"],
            c["step"],
            c["ranks"],
            c["skew_ns"],
            c["last_rank"],
            c["transfer_ns"],
            c["wait_ns"],
            c["bytes"],
            c["algbw_bytes_per_s"],
            c["busbw_bytes_per_s"],
        ]
        for c in colls
    ]
    return table(
        "tbl-rank-colls",
        [
            ("group", "text"),
            ("collective", "text"),
            ("step", "text"),
            ("ranks", "count"),
            ("arrival skew", "ns"),
            ("last", "text"),
            ("transfer", "ns"),
            ("wait", "ns"),
            ("message", "bytes"),
            ("algbw", "rate_bytes"),
            ("busbw", "rate_bytes"),
        ],
        rows,
        limit=12,
    )
