"""The compare waterfall: from the before step to the after step, one bar per contributor's
change per step (the top ones by size; the rest summed into one "others" bar). The bars add up
exactly to the change of the mean step."""

from __future__ import annotations

import math
from typing import Any

from traceinsight.render.html.svg import Svg, nice_step, num, ticks_between
from traceinsight.util import fmt
from traceinsight.util.fmt import signed_ns

#: contributors drawn one bar each in the waterfall; the rest are summed into one "others" bar
WATERFALL_TOP = 15


def waterfall_rows(c: dict[str, Any], top: int = WATERFALL_TOP) -> list[dict[str, Any]]:
    """The waterfall's bars in order: ``start`` (before step), one ``contrib`` per top changed
    contributor (by |delta|), ``others`` (the sum of the rest, when more than one is left), ``end``
    (after step). Each has ``from``/``to`` levels; the deltas add up to ``total_delta_ns``."""
    a0 = int(c.get("before_step_ns") or 0)
    b0 = int(c.get("after_step_ns") or 0)
    changed = [x for x in c.get("contributors") or [] if x.get("delta_ns")]
    changed.sort(key=lambda x: (-abs(x["delta_ns"]), str(x.get("kind")), str(x.get("name"))))
    shown, rest = changed[:top], changed[top:]
    if len(rest) == 1:
        shown, rest = changed, []
    rows: list[dict[str, Any]] = [
        {"role": "start", "kind": "", "name": "before: mean step", "from": 0, "to": a0, "delta": a0}
    ]
    level = a0
    for x in shown:
        d = int(x["delta_ns"])
        rows.append(
            {
                "role": "contrib",
                "kind": str(x.get("kind") or ""),
                "name": str(x.get("name") or ""),
                "from": level,
                "to": level + d,
                "delta": d,
                "before": x.get("before_ns"),
                "after": x.get("after_ns"),
            }
        )
        level += d
    if rest:
        d = sum(int(x["delta_ns"]) for x in rest)
        rows.append(
            {
                "role": "others",
                "kind": "",
                "name": f"{len(rest)} others",
                "from": level,
                "to": level + d,
                "delta": d,
                "count": len(rest),
                "before": sum(int(x.get("before_ns") or 0) for x in rest),
                "after": sum(int(x.get("after_ns") or 0) for x in rest),
            }
        )
        level += d
    rows.append(
        {"role": "end", "kind": "", "name": "after: mean step", "from": 0, "to": b0, "delta": b0}
    )
    return rows


def waterfall_chart(
    rows: list[dict[str, Any]], a0: int, b0: int, total: int
) -> tuple[dict[str, Any], float | None]:
    """The chart of :func:`waterfall_rows` and where its axis starts when it is zoomed in (the
    levels are far from 0), else None."""
    levels = [a0, b0] + [r["to"] for r in rows if r["role"] in ("contrib", "others")]
    hi, lo = float(max(levels)), float(min(levels))
    span = (hi - lo) or max(hi * 0.01, 1.0)
    x0 = lo - 0.12 * span
    zoom = x0 > 0.25 * hi
    if zoom:
        x0 = math.floor(x0 / nice_step(span * 1.3, 6)) * nice_step(span * 1.3, 6)
        x1 = hi + 0.06 * span
    else:
        x0, x1 = 0.0, hi * 1.03
    W, L, R, T, K = 960, 380, 96, 30, 84
    row_h, gap = 20, 8
    pw = W - L - R
    H = T + len(rows) * (row_h + gap) + 6
    svg = Svg(
        W,
        H,
        f"Waterfall from the before step ({fmt.fmt_ns(a0)}) to the after step "
        f"({fmt.fmt_ns(b0)}): one bar per contributor's change per step",
    )

    def X(v: float) -> float:
        return L + pw * (min(max(v, x0), x1) - x0) / (x1 - x0)

    for v in ticks_between(x0, x1, 6):
        svg.line(X(v), T - 6, X(v), H - 4, "grid")
        svg.text(X(v), T - 10, fmt.fmt_ns(v) if v else "0", "axis", "middle")
    name_chars = int((L - K - 14) / 6.3)
    for i, r in enumerate(rows):
        y = T + i * (row_h + gap)
        role = r["role"]
        ty = y + row_h / 2 + 4
        if role in ("start", "end"):
            cls = "wf-total"
            val = fmt.fmt_ns(r["to"])
            title = f"{r['name']}: {fmt.fmt_ns(r['to'])} per step (rank and step window mean)" + (
                f"; the axis starts at {fmt.fmt_ns(x0)}" if zoom else ""
            )
            svg.text(L - 8, ty, r["name"], "wf-name wf-total-lbl", "end")
        else:
            up = r["delta"] > 0
            cls = ("wf-others-" if role == "others" else "wf-") + ("up" if up else "down")
            val = signed_ns(r["delta"])
            share = f"{100.0 * r['delta'] / total:.0f}% of the change" if total else ""
            if role == "others":
                title = (
                    f"{r['count']} other contributors, summed: {signed_ns(r['delta'])} per "
                    f"step ({fmt.fmt_ns(r['before'])} → {fmt.fmt_ns(r['after'])})"
                    + (f"; {share}" if share else "")
                )
                svg.text(L - 8, ty, f"[{r['name']}]", "wf-name wf-others-lbl", "end")
            else:
                title = (
                    f"{r['kind']}: {r['name']}\n{fmt.fmt_ns(r['before'])} → "
                    f"{fmt.fmt_ns(r['after'])} per step: {signed_ns(r['delta'])}"
                    + (f" ({share})" if share else "")
                    + f"\nrunning: {fmt.fmt_ns(r['from'])} → {fmt.fmt_ns(r['to'])}"
                )
                svg.text(4, ty, r["kind"], "axis wf-kind")
                short = (
                    _tail_path(r["name"], name_chars)
                    if r["kind"] == "layer"
                    else fmt.shorten(r["name"], name_chars)
                )
                svg.text(L - 8, ty, short, "wf-name", "end")
        xa, xb = X(min(r["from"], r["to"])), X(max(r["from"], r["to"]))
        if role in ("start", "end"):
            xa = X(x0)
        w = max(xb - xa, 1.5)
        if role not in ("start", "end") and xb - xa < 1.5:
            xa -= (1.5 - (xb - xa)) / 2
        svg.rect(
            xa, y, w, row_h, f"wf-bar {cls}", title, data_role=role, data_delta=str(r["delta"])
        )
        if zoom and role in ("start", "end"):
            zig = f"l-5 {num(row_h + 2)}"
            svg.path(f"M{num(L + 9)} {num(y - 1)}{zig}M{num(L + 14)} {num(y - 1)}{zig}", "wf-break")
        svg.text(W - 4, ty, val, f"wf-val {cls}-val", "end")
        if i + 1 < len(rows):
            xc = X(r["to"])
            svg.line(xc, y + row_h, xc, y + row_h + gap, "wf-conn")
    return svg.to_dict(), (x0 if zoom else None)


def _tail_path(name: str, width: int) -> str:
    """A module path cut from the left (``…/Block_3/Attention_3``): the tail tells layers apart."""
    name = " ".join(str(name).split())
    if len(name) <= width:
        return name
    parts = name.split("/")
    out = parts[-1]
    for p in reversed(parts[:-1]):
        if len(out) + len(p) + 3 > width:
            break
        out = p + "/" + out
    return "…/" + out if len(out) + 2 <= width else fmt.shorten(parts[-1], width)
