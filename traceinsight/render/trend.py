"""Terminal rendering of ``traceinsight trend``: one row per run, one column per figure, the
configuration changes marked (``*``) and listed under the table. The trend itself is the dict
of ``traceinsight.compare.trend.build_trend``; this module only formats it, in 100 columns."""

from __future__ import annotations

from typing import Any

from traceinsight.util import fmt
from traceinsight.util.safetext import for_terminal

#: the table fits this many columns (the run label is the column that shrinks)
WIDTH = 100
#: a figure's column header is cut to this many characters (a long metric name)
HEADER_MAX = 14


def figure_text(v: float | None, unit: str) -> str:
    """A figure's value in its unit (``–`` where the run does not have it)."""
    if v is None:
        return "–"
    if unit == "ns":
        return fmt.fmt_ns(v)
    if unit == "pct":
        return fmt.fmt_pct(v)
    if unit == "bytes":
        return fmt.fmt_bytes(v)
    return fmt.fmt_num(v)


def _table(runs: list[dict[str, Any]], figures: list[dict[str, Any]]) -> str:
    headers = ["#", "run", *(fmt.shorten(f["label"], HEADER_MAX) for f in figures), "cfg"]
    rows = [
        [
            str(r["index"]),
            r["label"],
            *(figure_text(r["values"].get(f["name"]), f["unit"]) for f in figures),
            "*" if r.get("changes") else "",
        ]
        for r in runs
    ]
    align = "rl" + "r" * len(figures) + "l"
    return fmt.table(rows, headers, align=align, max_width=WIDTH, flex=1)


def _tables(runs: list[dict[str, Any]], figures: list[dict[str, Any]]) -> list[str]:
    """As many tables as it takes to fit WIDTH: the figures in groups, each table with the run
    column (a single figure per table is the least; its label column shrinks to fit)."""
    out, rest = [], list(figures)
    while rest:
        k = len(rest)
        while k > 1 and max(len(ln) for ln in _table(runs, rest[:k]).splitlines()) > WIDTH:
            k -= 1
        out.append(_table(runs, rest[:k]))
        rest = rest[k:]
    return out or [_table(runs, [])]


def render_trend(trend: dict[str, Any], gate_line: str | None = None) -> str:
    """The table of runs (split in two or more when the figures would not fit 100 columns),
    the configuration changes between consecutive runs and the gate's line when one was asked
    for."""
    figures = trend.get("figures") or []
    runs = trend.get("runs") or []
    first = runs[0]["config"] if runs else {}
    setup = [f"{k} {v}" for k, v in first.items() if k in ("device", "world size", "dtypes")]
    head = f"{len(runs)} run{'s' if len(runs) != 1 else ''} in the order given; first: "
    lines = [fmt.shorten(head + ", ".join(setup), WIDTH)]
    for table in _tables(runs, figures):
        lines += ["", table]
    changed = [r for r in runs if r.get("changes")]
    if changed:
        lines += ["", "* configuration changed from the run before:"]
        for r in changed:
            lines.append(f"  {r['index']} {fmt.shorten(r['label'], 40)}:")
            lines += [f"      {fmt.shorten(c, WIDTH - 6)}" for c in r["changes"]]
    if gate_line:
        lines += ["", fmt.shorten(gate_line, WIDTH)]
    return for_terminal("\n".join(lines)) + "\n"
