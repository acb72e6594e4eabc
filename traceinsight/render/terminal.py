"""Terminal rendering of a :class:`DiagnosisResult`: headline, findings, breakdown."""

from __future__ import annotations

import textwrap
from typing import Any

import click

from .. import fmt
from ..result import DiagnosisResult

SEV_STYLE = {"high": ("HIGH", "red"), "medium": ("MED ", "yellow"), "low": ("LOW ", "cyan"),
             "info": ("INFO", "white")}


def format_cell(v: Any, kind: str) -> str:
    if v is None:
        return "–"
    if kind == "ns":
        return fmt.fmt_ns(v)
    if kind == "bytes":
        return fmt.fmt_bytes(v)
    if kind == "pct":
        return fmt.fmt_pct(v)
    if kind == "count":
        return fmt.fmt_num(v, 0)
    if kind == "ratio":
        return f"{v:.2f}"
    if kind == "rate_flops":
        return fmt.fmt_rate(v, "FLOP/s")
    if kind == "rate_bytes":
        return fmt.fmt_rate(v, "B/s")
    return str(v)


def render_table(t: dict[str, Any], indent: str = "", max_rows: int = 5, width: int | None = None) -> str:
    cols = t["columns"]
    rows = []
    for r in t["rows"][:max_rows]:
        cells = []
        for c, v in zip(cols, r):
            s = format_cell(v, c["format"])
            if c["format"] == "kernel" or c["name"] == "kernel":
                s = fmt.short_kernel_name(s)
            cells.append(s)
        rows.append(cells)
    align = "".join("l" if c["format"] in ("text", "kernel", "op", "dims", "class") else "r"
                    for c in cols)
    text = fmt.table(rows, [c["name"] for c in cols], align=align,
                     max_width=(width or fmt.terminal_width()) - len(indent), flex=0)
    out = [indent + t["title"]] + [indent + line for line in text.splitlines()]
    if len(t["rows"]) > max_rows:
        out.append(indent + f"… {len(t['rows']) - max_rows} more in the report")
    if t.get("note"):
        out.append(indent + t["note"])
    return "\n".join(out)


def _wrap(text: str, indent: str, width: int) -> str:
    return "\n".join(textwrap.wrap(" ".join(text.split()), width=width - len(indent),
                                   initial_indent=indent, subsequent_indent=indent))


def bar(parts: list[tuple[str, float]], width: int = 50) -> str:
    chars = {"compute": "█", "comm exposed": "▓", "copies": "▒", "idle": "░"}
    out = ""
    for name, pct in parts:
        out += chars.get(name, "#") * int(round(width * pct / 100.0))
    return out[:width].ljust(width, " ")


def render(result: DiagnosisResult, *, color: bool = False, verbose: bool = False,
           width: int | None = None) -> str:
    width = width or fmt.terminal_width()
    st = (lambda s, **k: click.style(s, **k)) if color else (lambda s, **k: s)
    t = result.trace
    devs = ", ".join(t.get("devices") or []) or "GPU not recorded"
    n = len(t.get("ranks", []))
    srcs = ", ".join(s["name"] for s in t.get("sources", [])[:3])
    if len(t.get("sources", [])) > 3:
        srcs += f" (+{len(t['sources']) - 3})"
    lines = [st(f"traceinsight diagnose — {srcs}", bold=True),
             f"{n} rank{'s' if n != 1 else ''} · {devs} · {t.get('mode') or 'unknown'} run", ""]
    lines.append(_wrap(st(result.headline, bold=True), "", width))
    lines.append("")
    fs = result.findings
    if fs:
        lines.append(st(f"Findings ({len(fs)}), by estimated share of step time they could recover", bold=True))
        for f in fs:
            label, colour = SEV_STYLE.get(f.severity, (f.severity.upper(), "white"))
            head = f"[{label}] {f.rule} — {f.title}"
            imp = (f"impact {f.impact_pct:.1f}%" if f.impact_pct is not None
                   else "impact not estimated")
            pad = max(2, width - len(head) - len(imp) - 1)
            lines.append(st(f"[{label}]", fg=colour, bold=True) + head[len(label) + 2:] + " " * pad + imp)
            lines.append(_wrap(f.message, "       ", width))
            for ev in f.evidence:
                if ev.get("kind") == "measurements":
                    parts = [f"{r['metric']} {r['display']} ({r['op']} {r['threshold_display']})"
                             for r in ev["rows"]]
                    lines.append(_wrap("evidence: " + "; ".join(parts), "       ", width))
                elif ev.get("kind") == "table" and (verbose or ev is _main_table(f)):
                    lines.append(render_table(ev, indent="       ", max_rows=5 if verbose else 3,
                                              width=width))
            recs = f.recommendations if verbose else f.recommendations[:2]
            for r in recs:
                lines.append(_wrap("→ " + r, "       ", width))
            if not verbose and len(f.recommendations) > 2:
                lines.append(f"       (+{len(f.recommendations) - 2} more recommendations: --verbose or the report)")
            lines.append("")
    else:
        lines.append("No findings.")
        lines.append("")
    lines += _breakdown_lines(result, width)
    rules = result.rules
    skipped = [r for r in rules if r.get("status") == "not-evaluated"]
    passed = [r for r in rules if r.get("status") == "passed"]
    lines.append(f"Rules: {len(fs)} fired, {len(passed)} passed, "
                 f"{len([r for r in rules if r.get('status') == 'not-applicable'])} not applicable, "
                 f"{len(skipped)} not evaluated.")
    for r in skipped:
        hint = f" ({r['hint']})" if r.get("hint") and r["hint"] not in r.get("reason", "") else ""
        lines.append(_wrap(f"  - {r['rule']}: {r.get('reason', '')}{hint}", "    ", width).replace("    - ", "  - ", 1))
    for e in result.rule_errors:
        lines.append(st(f"  ! rule {e['rule']} crashed: {e['error']}", fg="red"))
    warn = [d for d in result.diagnostics if d.get("severity") in ("warning", "error")]
    if warn:
        lines.append("")
        lines.append(st(f"Data quality ({len(warn)})", bold=True))
        for d in warn[:8]:
            cnt = f" [{d['count']:,}]" if d.get("count") else ""
            src = f"{d['source']}: " if d.get("source") else ""
            lines.append(_wrap(f"! {src}{d['message']}{cnt}", "  ", width))
        if len(warn) > 8:
            lines.append(f"  … {len(warn) - 8} more in the report")
    return "\n".join(lines).rstrip() + "\n"


def _main_table(f) -> dict | None:
    """The table shown in the compact view: the first one that is not the generic breakdown."""
    tables = [e for e in f.evidence if e.get("kind") == "table"]
    for t in tables:
        if not t["title"].startswith("GPU time breakdown"):
            return t
    return tables[0] if tables else None


def _breakdown_lines(result: DiagnosisResult, width: int) -> list[str]:
    ranks = result.breakdown.get("ranks") or []
    if not ranks:
        return []
    wall = sum(r["wall_ns"] for r in ranks) or 1
    parts = [("compute", 100 * sum(r["compute_ns"] for r in ranks) / wall),
             ("comm exposed", 100 * sum(r["comm_exposed_ns"] for r in ranks) / wall),
             ("copies", 100 * sum(r["memcpy_exposed_ns"] + r["memset_exposed_ns"] for r in ranks) / wall),
             ("idle", 100 * sum(r["idle_ns"] for r in ranks) / wall)]
    out = ["GPU time (step windows" + (", all ranks)" if len(ranks) > 1 else ")")]
    out.append("  " + bar(parts, min(50, width - 4)))
    out.append("  " + "  ".join(f"{n} {fmt.fmt_pct(p)}" for n, p in parts))
    srs = [r for r in result.summary.get("ranks", []) if r.get("step_time_ns")]
    if srs:
        q = srs[0]["step_time_ns"]
        steps = sum(r["steps"] for r in srs)
        out.append(f"  steps: {steps} (rank {srs[0]['rank']}: p50 {fmt.fmt_ns(q['p50'])}, "
                   f"p90 {fmt.fmt_ns(q['p90'])}, max {fmt.fmt_ns(q['max'])})")
        left = [f"step {x['step']} ({x['reason']})" for r in srs
                for x in r.get("steps_excluded") or []]
        if left:
            out.append(f"  left out of the step statistics: {', '.join(left[:8])}")
    else:
        out.append("  steps: none marked (the whole GPU span is one window)")
    mv = result.metrics.get("values", {})
    extra = []
    if mv.get("mfu_pct") is not None:
        c = (result.metrics.get("coverage") or {}).get("mfu_pct") or {}
        extra.append(f"MFU {'≥ ' if c.get('lower_bound') else ''}{fmt.fmt_pct(mv['mfu_pct'])}"
                     + (f" ({fmt.fmt_pct(c['coverage_pct'], 0)} of kernel time modelled)"
                        if c.get("coverage_pct") is not None else ""))
    if mv.get("peak_reserved_bytes") is not None:
        extra.append(f"peak memory {fmt.fmt_bytes(mv['peak_reserved_bytes'])} reserved / "
                     f"{fmt.fmt_bytes(mv.get('peak_allocated_bytes'))} allocated")
    cov = result.extra.get("coverage", {})
    if cov.get("coverage_pct") is not None:
        extra.append(f"kernels linked to a launch {fmt.fmt_pct(cov['coverage_pct'])}")
    if extra:
        out.append("  " + " · ".join(extra))
    out.append("")
    return out
