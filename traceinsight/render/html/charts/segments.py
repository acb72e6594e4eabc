"""The allocator's segment map at one moment: one bar per segment (largest first), each on its
own scale so the holes of a small segment show as well as a large one's; blocks coloured by
state: allocated, pending free (freed, awaiting its stream), free and stranded (in a segment
that still holds a live block), free in a wholly free segment (releasable cache)."""

from __future__ import annotations

from typing import Any

from traceinsight.render.html.svg import Svg
from traceinsight.util import fmt

ROW, GAP, LABEL_W = 16, 5, 150
STATE_CLASS = {"allocated": "blk-alloc", "pending_free": "blk-pending"}
LEGEND = [
    ("allocated", "blk-alloc"),
    ("pending free (awaiting its stream)", "blk-pending"),
    ("free, stranded between live blocks", "blk-stranded"),
    ("free, whole segment (cache)", "blk-cached"),
]


def segment_chart(segmap: dict[str, Any], label: str, short: Any = str) -> dict[str, Any]:
    """The SVG of ``segmap`` (``segments``: address, bytes, pool, blocks of
    ``[offset, bytes, state, call site]``); ``short`` shortens call sites for tooltips."""
    segs = segmap.get("segments") or []
    W = 960
    H = 22 + len(segs) * (ROW + GAP) + (18 if segmap.get("more_segments") else 0)
    pw = W - LABEL_W - 12
    svg = Svg(W, H, label)
    y = 10.0
    for s in segs:
        size = float(s["bytes"]) or 1.0
        blocks = s.get("blocks") or []
        busy = any(b[2] != "inactive" for b in blocks)
        svg.text(
            LABEL_W - 8,
            y + ROW - 4,
            f"{fmt.fmt_bytes(s['bytes'])} {s.get('pool', '')}",
            "axis",
            "end",
        )
        svg.rect(LABEL_W, y, pw, ROW, "blk-bg")
        for off, nbytes, state, site in blocks:
            x = LABEL_W + pw * float(off) / size
            w = max(pw * float(nbytes) / size, 0.6)
            cls = STATE_CLASS.get(state) or ("blk-stranded" if busy else "blk-cached")
            what = {"allocated": "allocated", "pending_free": "pending free"}.get(
                state, "free (stranded)" if busy else "free (whole segment)"
            )
            where = f" at {short(site)}" if site else ""
            svg.rect(
                x,
                y,
                w,
                ROW,
                cls,
                f"{what} {fmt.fmt_bytes(nbytes)}{where} (offset {fmt.fmt_bytes(off)})",
            )
        if s.get("more_blocks"):
            svg.text(LABEL_W + pw - 2, y + ROW - 4, f"+{s['more_blocks']} blocks", "axis", "end")
        y += ROW + GAP
    if segmap.get("more_segments"):
        svg.text(
            LABEL_W,
            y + 10,
            f"{segmap['more_segments']} smaller segments not drawn "
            f"({fmt.fmt_bytes(segmap.get('more_bytes'))})",
            "axis",
        )
    return svg.to_dict()
