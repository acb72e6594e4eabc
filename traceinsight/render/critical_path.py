"""Terminal text of the critical path: one row per step, the path's items for one step, and one
line per finding's impact."""

from __future__ import annotations

from typing import Any

from traceinsight.util.fmt import fmt_ns, fmt_pct, table
from traceinsight.util.safetext import for_terminal

SHORT = {
    "compute": "compute",
    "communication": "comm",
    "copies": "copies",
    "host": "host",
    "launch": "launch",
    "input": "input",
    "sync": "sync",
    "startup": "startup",
    "unrecorded": "unrec.",
}


def render_models(models: list, tops: list[list[dict[str, Any]]], detail: bool) -> str:
    from traceinsight.analysis.critical_path.graph import CATEGORIES

    used = [c for c in CATEGORIES if any(m.path.by_cat.get(c) for m in models)]
    rows = []
    for m in models:
        G = m.graph
        meas = G.measured_ns or 1
        rows.append(
            [
                str(G.rank),
                "-" if G.step is None else str(G.step),
                fmt_ns(G.measured_ns),
                fmt_ns(m.replayed_ns),
                f"{m.error_pct:+.1f}%",
                *[fmt_pct(100.0 * m.path.by_cat.get(c, 0) / meas) for c in used],
            ]
        )
    out = [
        "Critical path per step (share of the measured step; the path's length is the step)",
        table(rows, ["rank", "step", "measured", "replayed", "error", *[SHORT[c] for c in used]]),
    ]
    if detail:
        for m, top in zip(models, tops, strict=False):
            out.append("")
            out.append(f"rank {m.graph.rank} step {m.graph.step}: top items on the path")
            out.append(
                table(
                    [
                        [
                            for_terminal(r["name"])[:70],
                            SHORT.get(r["category"], r["category"]),
                            fmt_ns(r["ns"]),
                            fmt_pct(r["pct"]),
                            for_terminal(r["launched_by"] or "")[:40],
                        ]
                        for r in top
                    ],
                    ["item", "category", "time", "share", "launched by"],
                    align="llrrl",
                    flex=0,
                )
            )
    return "\n".join(out)


def impact_lines(findings: list[dict[str, Any]]) -> list[str]:
    """One line per finding with an impact: what its fix would win and how that is known."""
    lines = []
    for f in findings:
        imp = f.get("impact")
        if not imp or imp.get("pct") is None:
            continue
        how = "what-if" if imp.get("method") == "what-if" else "estimate"
        target = for_terminal(str(imp.get("target", "")))
        lines.append(
            f"  {for_terminal(str(f.get('rule', '?'))):22s} {imp['pct']:5.1f}%"
            f"  {fmt_ns(imp.get('ns'))} per step ({how}: {target})"
        )
    return lines
