"""A compact Markdown ticket body of a :class:`DiagnosisResult`.

Headline, findings (severity, title, message, top recommendation, impact), the top layers (or
operators when the trace has no module hierarchy) and a per-rank summary table. No HTML and no
links: prose is backslash-escaped (``<``, ``>``, ``*``, ``[``, ``|`` ...), names are code spans, so
no Markdown renderer turns a kernel or op name into markup.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from traceinsight.render import describe, model_notes, run_notes
from traceinsight.render.critical_path import critical_path_lines
from traceinsight.render.mdtext import SEV_LABEL, code, esc, md_table
from traceinsight.render.overview_text import markdown_lines as overview_lines
from traceinsight.result import DiagnosisResult, finding_sort_key
from traceinsight.util import fmt
from traceinsight.util.safetext import for_terminal
from traceinsight.util.vocab import is_more_row

TOP_N = 8


def render_markdown(result: DiagnosisResult) -> str:
    r = result
    t = r.trace or {}
    host = r.host or {}
    lines: list[str] = [f"### {esc(host.get('headline') or r.headline)}", ""]
    if host.get("headline"):  # a CPU-only run: its verdict above, why no GPU rules here
        lines += [esc(r.headline), ""]
    srcs = [str(s.get("name", "")) for s in t.get("sources") or []]
    n = len(t.get("ranks") or [])
    facts = []
    if srcs:
        facts.append(code(srcs[0], 60) + (f" (+{len(srcs) - 1} files)" if len(srcs) > 1 else ""))
    facts.append(f"{n} rank{'s' if n != 1 else ''}")
    facts.append(esc(describe.device_name(r)))
    if describe.run_mode(r):
        facts.append(str(describe.run_mode(r)))
    steps = (r.metrics.get("values") or {}).get("steps")
    if steps:
        facts.append(f"{int(steps)} step{'s' if int(steps) != 1 else ''}")
    facts.append(f"primary: {code(r.primary)}")
    facts.append(f"traceinsight {esc(r.tool.get('version', '?'))}")
    lines += [" · ".join(facts), ""]
    run = describe.run_summary(r)
    if run:
        lines += [f"Run: {esc(run)}", ""]
    left = [
        f"{'rank ' + str(s['rank']) + ' ' if n > 1 else ''}step {x['step']} "
        f"({esc(str(x['reason']))})"
        for s in (r.summary or {}).get("ranks") or []
        for x in s.get("steps_excluded") or []
    ]
    if left:
        lines += ["Left out of the step statistics: " + ", ".join(left[:8]) + ".", ""]

    fs = sorted(r.findings, key=finding_sort_key)
    if fs:
        lines += [f"**Findings ({len(fs)})**, by the share of step time they could recover:", ""]
        for i, f in enumerate(fs, 1):
            imp = f" — impact ≈ {fmt.fmt_pct(f.impact_pct)} of step time" if f.impact_pct else ""
            if f.impact_pct and f.impact and f.impact.get("method") == "what-if":
                imp += f" (what-if: {esc(str(f.impact.get('target') or ''))})"
            lines.append(
                f"{i}. **{SEV_LABEL.get(f.severity, esc(f.severity).upper())}** "
                f"{code(f.rule)} {esc(f.title)}{imp}"
            )
            lines.append(f"   {esc(f.message)}")
            conf = describe.confidence_text(f.confidence)
            if conf:
                lines.append(f"   _{esc(conf)}_")
            if f.recommendations:
                lines.append(f"   Fix: {esc(f.recommendations[0])}")
            if f.withheld:
                lines.append(
                    f"   Not advised here ({len(f.withheld)}): "
                    + "; ".join(list(dict.fromkeys(esc(_reason(w)) for w in f.withheld))[:2])
                    + ("; ..." if len({_reason(w) for w in f.withheld}) > 2 else "")
                )
        lines.append("")
    else:
        lines += ["**No findings**: no rule fired.", ""]
    lines += critical_path_lines(r.critical_path)

    lines += _run(r)
    # a CPU-only run: its host view, not GPU tables at "idle 100%"
    lines += _host(r) if host.get("headline") else [*_top(r), *_summary(r)]
    lines += overview_lines(dict(r.overview) if r.overview else None)
    lines += _serving(r)
    groups = describe.not_evaluated(r.rules or [])
    if groups:
        parts = [f"{', '.join(g['rules'])} ({g['hint'] or g['reason']})" for g in groups]
        lines += ["Not evaluated: " + esc("; ".join(parts)) + ".", ""]
    errs = [
        d
        for d in r.diagnostics or []
        if d.get("severity") in ("error", "warning") and d.get("code") not in describe.DEVICE_CODES
    ]
    if errs:
        lines += [f"**Data quality**: {len(errs)} warning{'s' if len(errs) != 1 else ''}:", ""]
        lines += [
            f"- {esc(str(d['source'])) + ': ' if d.get('source') else ''}"
            f"{esc(fmt.shorten(run_notes.diagnostic_text(d), 700))}"
            for d in errs[:8]
        ]
        if len(errs) > 8:
            lines.append(f"- … {len(errs) - 8} more in the HTML report")
        lines.append("")
    return for_terminal("\n".join(lines).rstrip() + "\n")


def _reason(w: dict) -> str:
    """A withheld recommendation's reason, short: what the run does, without the evidence."""
    text = str(w.get("reason", "")).removeprefix("not advised: ")
    return re.sub(r" \(.*$", "", text)[:100]


def _run(r: DiagnosisResult) -> list[str]:
    """The run facts: what the trace shows the run already does, with the evidence."""
    rows = [
        [esc(label), esc(value), code(ev, 100) if ev else "–", esc(conf)]
        for label, value, ev, conf in describe.run_rows(r)
    ]
    if not rows:
        return []
    head = "**Run**: what the trace shows the run already does (advice is conditioned on it):"
    cap = run_notes.capture_text(r)
    return [
        head,
        "",
        *md_table(["fact", "value", "evidence", "confidence"], rows, "llll"),
        "",
        *([f"Capture flags: {esc(cap)}.", ""] if cap else []),
    ]


def _serving(r: DiagnosisResult) -> list[str]:
    from traceinsight.render import serving

    sv = r.serving
    if not sv:
        return []
    out = ["**Serving** (engine steps): " + esc(serving.summary_line(sv)), ""]
    rows = serving.phase_rows(sv)
    if rows:
        out += md_table(serving.PHASE_HEADERS, [[esc(c) for c in row] for row in rows], "lrrrrrrrr")
        out.append("")
    out += [esc(x.strip()) + "  " for x in serving.roofline_lines(sv)]
    out += [esc(serving.basis_note(sv)), ""]
    return out


def _host(r: DiagnosisResult) -> list[str]:
    """A CPU-only run: where step time went and the top CPU ops by self time."""
    h = r.host or {}
    split = ", ".join(f"{esc(p['part'])} {fmt.fmt_pct(p['pct'])}" for p in h.get("split") or [])
    out = [f"**Host time** of the steps: {split}.", ""]
    rows = [
        [
            code(x["name"], 70),
            fmt.fmt_num(x["calls"], 0),
            fmt.fmt_ns(x["self_ns"]),
            fmt.fmt_pct(x["self_pct"]),
            fmt.fmt_ns(x["total_ns"]),
        ]
        for x in (h.get("ops") or [])[:TOP_N]
    ]
    if rows:
        out += [
            "**Top CPU ops** by self time:",
            "",
            *md_table(["op", "calls", "self", "of step", "total"], rows, "lrrrr"),
            "",
        ]
    return out


def _top(r: DiagnosisResult) -> list[str]:
    ro = r.rollups or {}
    layers = [x for x in ro.get("layers") or [] if not is_more_row(x.get("module"))]
    if ro.get("has_modules") and layers:
        top = sorted(layers, key=lambda x: -(x.get("total_ns") or 0))
        # prefer leaves-ish rows: skip a parent whose share equals its only child's is not knowable
        rows = [
            [
                code(x.get("module"), 70),
                fmt.fmt_ns(x.get("forward_ns")),
                fmt.fmt_ns(x.get("backward_ns")),
                fmt.fmt_ns(x.get("total_ns")),
                fmt.fmt_pct(x.get("share_pct")),
            ]
            for x in top[:TOP_N]
        ]
        return [
            "**Top layers** by device time:",
            "",
            *md_table(["layer", "forward", "backward", "total", "share"], rows, "lrrrr"),
            "",
        ]
    ops = [x for x in ro.get("ops") or [] if not is_more_row(x.get("name"))]
    if ops:
        top = sorted(ops, key=lambda x: -(x.get("device_self_ns") or 0))
        rows = [
            [
                code(x.get("name"), 70),
                fmt.fmt_num(x.get("calls"), 0),
                fmt.fmt_ns(x.get("device_self_ns")),
                fmt.fmt_pct(x.get("share_pct")),
            ]
            for x in top[:TOP_N]
            if x.get("device_self_ns")
        ]
        if rows:
            return [
                "**Top operators** by device time (no module hierarchy recorded):",
                "",
                *md_table(["operator", "calls", "device self", "share"], rows, "lrrr"),
                "",
            ]
    return []


def _summary(r: DiagnosisResult) -> list[str]:
    ranks = (r.summary or {}).get("ranks") or []
    if not ranks:
        return []
    rows = []
    for s in ranks[:32]:
        win = s.get("window_ns")
        busy = 100.0 * s["gpu_busy_ns"] / win if win and s.get("gpu_busy_ns") is not None else None
        idle = 100.0 * s["gpu_idle_ns"] / win if win and s.get("gpu_idle_ns") is not None else None
        q = s.get("step_time_representative_ns") or s.get("step_time_ns") or {}
        peak = s.get("peak_reserved_bytes")
        rows.append(
            [
                str(s.get("rank")),
                fmt.fmt_ns(s.get("kernel_time_ns")),
                f"{fmt.fmt_pct(busy, 0)} / {fmt.fmt_pct(idle, 0)}",
                str(s.get("steps") if s.get("steps") is not None else "–"),
                fmt.fmt_ns(q.get("p50")),
                fmt.fmt_bytes(peak) if peak is not None else "–",
            ]
        )
    out = [
        "**Summary** per rank:",
        "",
        *md_table(
            ["rank", "kernel time", "busy / idle", "steps", "step p50", "peak memory (reserved)"],
            rows,
            "rrrrrr",
        ),
    ]
    if len(ranks) > 32:
        out.append("")
        out.append(f"(+{len(ranks) - 32} more ranks in the HTML report)")
    return [*out, "", *_flop_model(r)]


def _flop_model(r: DiagnosisResult) -> list[str]:
    """MFU with what its FLOP model assumed, inferred and excluded."""
    mv = r.metrics.get("values") or {}
    if mv.get("mfu_pct") is None:
        return []
    c: Mapping[str, Any] = (r.metrics.get("coverage") or {}).get("mfu_pct") or {}
    cov = c.get("coverage_pct")
    head = f"**MFU** {'≥ ' if c.get('lower_bound') else ''}{fmt.fmt_pct(mv['mfu_pct'])}" + (
        f" ({fmt.fmt_pct(cov, 0)} of kernel time modelled)" if cov is not None else ""
    )
    notes = model_notes.model_notes(r)
    return [head + (":" if notes else "."), *(f"- {esc(x)}" for x in notes), ""]
