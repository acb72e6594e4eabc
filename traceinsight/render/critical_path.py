"""Terminal text of the critical path: one row per step, the path's items for one step, and one
line per finding's impact."""

from __future__ import annotations

from typing import Any

from traceinsight.util.fmt import fmt_ns, fmt_pct, table
from traceinsight.util.kernelname import short_names
from traceinsight.util.safetext import for_terminal

#: category -> (label, colour)
CATEGORY_STYLE = {
    "compute": ("compute", "#1f6feb"),
    "communication": ("communication", "#d64545"),
    "copies": ("copies", "#2e9d6f"),
    "host": ("host and Python", "#8a63d2"),
    "launch": ("launch overhead", "#e08a00"),
    "input": ("input", "#1b2430"),
    "sync": ("synchronisation", "#c9a100"),
    "startup": ("start-up and compile", "#6b7785"),
    "unrecorded": ("unrecorded", "#c3cad3"),
}


def focus_step(cp: dict[str, Any] | None) -> dict[str, Any] | None:
    """The step row that carries the path's segments (the timeline's step)."""
    for r in (cp or {}).get("ranks") or []:
        for s in r.get("steps") or []:
            if s.get("segments"):
                return {"rank": r.get("rank"), **s}
    return None


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


def render_models(
    models: list, tops: list[list[dict[str, Any]]], detail: bool, categories: tuple[str, ...]
) -> str:
    """The ``critical-path`` command's table: ``models`` as the analysis made them (their
    ``graph``, ``path`` and ``replayed_ns``), ``categories`` in the analysis' order."""
    used = [c for c in categories if any(m.path.by_cat.get(c) for m in models)]
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
            short = short_names(str(r["name"]) for r in top if r.get("kind") == "gpu")
            out.append("")
            out.append(f"rank {m.graph.rank} step {m.graph.step}: top items on the path")
            out.append(
                table(
                    [
                        [
                            for_terminal(short.get(str(r["name"]), str(r["name"])))[:70],
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


def impact_line(imp: dict[str, Any]) -> str:
    """A finding's impact in words: its share, its time per step and how it is known."""
    how = "what-if" if imp.get("method") == "what-if" else "estimate"
    ns = imp.get("ns")
    per = f" ({fmt_ns(ns)} per step)" if ns else ""
    return (
        f"impact {float(imp.get('pct') or 0.0):.1f}%{per}, {how}: "
        f"{for_terminal(str(imp.get('target', '')))}"
    )


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


def critical_path_lines(cp: dict[str, Any] | None) -> list[str]:
    """Markdown: the path of the timeline's step by category, and the attainable step."""
    row = focus_step(cp)
    if row is None:
        return []
    span = float(row.get("measured_ns") or 1)
    parts = [
        f"{CATEGORY_STYLE[c][0]} {fmt_pct(100.0 * float(v) / span)}"
        for c, v in sorted((row.get("path_ns") or {}).items(), key=lambda kv: -kv[1])
        if c in CATEGORY_STYLE and float(v or 0) >= span / 2000
    ]
    lines = [
        f"**Critical path** of step {row.get('step')} (rank {row.get('rank')}, "
        f"{fmt_ns(row.get('measured_ns'))}): " + ", ".join(parts) + "."
    ]
    a = ((cp or {}).get("whatif") or {}).get("all") or {}
    if a.get("applied") and a.get("pct"):
        lines.append(
            f"With every finding fixed, a step would take about {fmt_ns(a.get('step_ns'))} "
            f"({fmt_pct(a.get('pct'))} less; what-if over every step)."
        )
    return [*lines, ""]
