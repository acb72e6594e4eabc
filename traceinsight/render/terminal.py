"""Terminal rendering of a :class:`DiagnosisResult` (headline, findings, breakdown) and of a
compare (:func:`render_compare`)."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from typing import Any

import click

from traceinsight.render import describe, model_notes, overview_text, run_notes
from traceinsight.render.critical_path import impact_line
from traceinsight.result import DiagnosisResult
from traceinsight.util import fmt
from traceinsight.util.kernelname import short_names
from traceinsight.util.safetext import for_terminal

SEV_STYLE = {
    "high": ("HIGH", "red"),
    "medium": ("MED ", "yellow"),
    "low": ("LOW ", "cyan"),
    "info": ("INFO", "white"),
}


def render_table(
    t: dict[str, Any], indent: str = "", max_rows: int = 5, width: int | None = None
) -> str:
    """An evidence table (its first ``max_rows`` rows), cells formatted by their column format."""
    cols = t["columns"]
    kcols = [i for i, c in enumerate(cols) if c["format"] == "kernel" or c["name"] == "kernel"]
    short = short_names(str(r[i]) for r in t["rows"] for i in kcols if r[i] is not None)
    rows = []
    for r in t["rows"][:max_rows]:
        cells = []
        for i, (c, v) in enumerate(zip(cols, r)):
            s = fmt.format_cell(v, c["format"])
            if i in kcols and v is not None:
                s = short[str(v)]
            cells.append(s)
        rows.append(cells)
    align = "".join(
        "l" if c["format"] in ("text", "kernel", "op", "dims", "class") else "r" for c in cols
    )
    names = [i for i, a in enumerate(align) if a == "l"] or [0]
    text = fmt.table(
        rows,
        [c["name"] for c in cols],
        align=align,
        max_width=(width or fmt.terminal_width()) - len(indent),
        flex=names,  # every name column gives way, the widest first: their widths balance
        middle=kcols,
    )
    out = [indent + t["title"]] + [indent + line for line in text.splitlines()]
    if len(t["rows"]) > max_rows:
        out.append(indent + f"… {len(t['rows']) - max_rows} more in the report")
    if t.get("note"):
        out.append(indent + t["note"])
    return "\n".join(out)


def _wrap(text: str, indent: str, width: int) -> str:
    return "\n".join(
        textwrap.wrap(
            " ".join(text.split()),
            width=width - len(indent),
            initial_indent=indent,
            subsequent_indent=indent,
        )
    )


def bar(parts: list[tuple[str, float]], width: int = 50) -> str:
    chars = {"compute": "█", "comm exposed": "▓", "copies": "▒", "idle": "░"}
    out = ""
    for name, pct in parts:  # a share outside 0-100% never draws more than the bar
        out += chars.get(name, "#") * round(width * min(max(pct, 0.0), 100.0) / 100.0)
    return out[:width].ljust(width, " ")


def render(
    result: DiagnosisResult, *, color: bool = False, verbose: bool = False, width: int | None = None
) -> str:
    width = width or fmt.terminal_width()
    st = (lambda s, **k: click.style(s, **k)) if color else (lambda s, **k: s)
    t = result.trace
    devs = describe.device_line(result)
    n = len(t.get("ranks", []))
    srcs = ", ".join(s["name"] for s in t.get("sources", [])[:3])
    if len(t.get("sources", [])) > 3:
        srcs += f" (+{len(t['sources']) - 3})"
    mode = describe.run_mode(result) or "unknown"
    lines = [
        st(f"traceinsight diagnose — {srcs}", bold=True),
        _wrap(f"{n} rank{'s' if n != 1 else ''} · {devs} · {mode} run", "", width),
    ]
    run = describe.run_summary(result)
    if run:
        lines.append(_wrap("run: " + run, "     ", width))
    cap = run_notes.capture_text(result)
    if cap:
        lines.append(_wrap("capture: " + cap, "     ", width))
    lines.append("")
    host = result.host or {}
    if host.get("headline"):  # a CPU-only run: the host view's verdict, then why no GPU rules
        lines.append(_wrap(st(host["headline"], bold=True), "", width))
        lines.append(_wrap(result.headline, "", width))
    else:
        lines.append(_wrap(st(result.headline, bold=True), "", width))
    lines.append("")
    fs = result.findings
    if fs:
        lines.append(
            st(
                f"Findings ({len(fs)}), by estimated share of step time they could recover",
                bold=True,
            )
        )
        for f in fs:
            label, colour = SEV_STYLE.get(f.severity, (f.severity.upper(), "white"))
            head = f"[{label}] {f.rule} — {f.title}"
            imp = (
                f"impact {f.impact_pct:.1f}%"
                if f.impact_pct is not None
                else "impact not estimated"
            )
            pad = max(2, width - len(head) - len(imp) - 1)
            lines.append(
                st(f"[{label}]", fg=colour, bold=True) + head[len(label) + 2 :] + " " * pad + imp
            )
            lines.append(_wrap(f.message, "       ", width))
            if f.impact and f.impact.get("target"):  # how the impact is known
                lines.append(_wrap(impact_line(f.impact), "       ", width))
            for ev in f.evidence:
                if ev.get("kind") == "measurements":
                    parts = [
                        f"{r['metric']} {r['display']} ({r['op']} {r['threshold_display']})"
                        for r in ev["rows"]
                    ]
                    lines.append(_wrap("evidence: " + "; ".join(parts), "       ", width))
                    conf = describe.confidence_text(f.confidence)
                    if conf:
                        lines.append(_wrap(conf, "       ", width))
                elif ev.get("kind") == "table" and (verbose or ev is _main_table(f)):
                    lines.append(
                        render_table(
                            ev, indent="       ", max_rows=5 if verbose else 3, width=width
                        )
                    )
            recs = f.recommendations if verbose else f.recommendations[:2]
            for rec in recs:
                lines.append(_wrap("→ " + rec, "       ", width))
            if not verbose and len(f.recommendations) > 2:
                lines.append(
                    f"       (+{len(f.recommendations) - 2} more recommendations: "
                    "--verbose or the report)"
                )
            if verbose:
                for w in f.withheld:
                    lines.append(_wrap(f"✗ {w.get('reason')}: {w.get('text')}", "       ", width))
            lines.append("")
    else:
        lines.append("No findings.")
        lines.append("")
    lines += describe.host_lines(result, width)
    lines += _breakdown_lines(result, width)
    lines += overview_text.terminal_lines(dict(result.overview) if result.overview else None, width)
    lines += _serving_lines(result, width, st)
    rules = result.rules
    skipped = [r for r in rules if r.get("status") == "not-evaluated"]
    passed = [r for r in rules if r.get("status") == "passed"]
    lines.append(
        f"Rules: {len(fs)} fired, {len(passed)} passed, "
        f"{sum(1 for r in rules if r.get('status') == 'not-applicable')} not applicable, "
        f"{len(skipped)} not evaluated."
    )
    for grp in describe.not_evaluated(rules):
        hint = f" ({grp['hint']})" if grp["hint"] else ""
        lines.append(
            _wrap(f"  - {', '.join(grp['rules'])}: {grp['reason']}{hint}", "    ", width).replace(
                "    - ", "  - ", 1
            )
        )
    for e in result.rule_errors:
        lines.append(st(f"  ! rule {e['rule']} crashed: {e['error']}", fg="red"))
    warn = [
        d
        for d in result.diagnostics
        if d.get("severity") in ("warning", "error") and d.get("code") not in describe.DEVICE_CODES
    ]  # the device line says those
    if warn:
        lines.append("")
        lines.append(st(f"Data quality ({len(warn)})", bold=True))
        for d in warn[:8]:
            src = f"{d['source']}: " if d.get("source") else ""
            lines.append(_wrap(f"! {src}{run_notes.diagnostic_text(d)}", "  ", width))
        if len(warn) > 8:
            lines.append(f"  … {len(warn) - 8} more in the report")
    return for_terminal("\n".join(lines).rstrip() + "\n", keep_sgr=color)


def _serving_lines(result: DiagnosisResult, width: int, st: Any) -> list[str]:
    from traceinsight.render import serving

    sv = result.serving
    if not sv:
        return []
    out = [st("Serving (engine steps)", bold=True), _wrap(serving.summary_line(sv), "  ", width)]
    rows = serving.phase_rows(sv)
    if rows:
        tbl = fmt.table(rows, serving.PHASE_HEADERS, align="lrrrrrrrr")
        out += ["  " + x for x in tbl.splitlines()]
    out += [_wrap(x, "  ", width) for x in serving.roofline_lines(sv)]
    out += [_wrap(serving.basis_note(sv), "  ", width), ""]
    return out


def _main_table(f) -> dict | None:
    """The table shown in the compact view: the first one that is not the generic breakdown."""
    tables = [e for e in f.evidence if e.get("kind") == "table"]
    for t in tables:
        if not t["title"].startswith("GPU time breakdown"):
            return t
    return tables[0] if tables else None


def _breakdown_lines(result: DiagnosisResult, width: int) -> list[str]:
    ranks = result.breakdown.get("ranks") or []
    if not ranks or not describe.has_gpu(result):  # no GPU bar at "idle 100%" for a CPU run
        return []
    wall = sum(r["wall_ns"] for r in ranks) or 1
    parts = [
        ("compute", 100 * sum(r["compute_ns"] for r in ranks) / wall),
        ("comm exposed", 100 * sum(r["comm_exposed_ns"] for r in ranks) / wall),
        (
            "copies",
            100 * sum(r["memcpy_exposed_ns"] + r["memset_exposed_ns"] for r in ranks) / wall,
        ),
        ("idle", 100 * sum(r["idle_ns"] for r in ranks) / wall),
    ]
    out = ["GPU time (step windows" + (", all ranks)" if len(ranks) > 1 else ")")]
    out.append("  " + bar(parts, min(50, width - 4)))
    out.append("  " + "  ".join(f"{n} {fmt.fmt_pct(p)}" for n, p in parts))
    srs = [r for r in result.summary.get("ranks", []) if r.get("step_time_ns")]
    if srs:
        q: Mapping[str, Any] = (
            srs[0].get("step_time_representative_ns") or srs[0]["step_time_ns"] or {}
        )
        out.append(
            f"  {describe.steps_text(result)} (rank {srs[0]['rank']}"
            + (
                f", over its {srs[0]['steps_representative']} representative"
                if srs[0].get("steps_representative", srs[0].get("steps")) != srs[0].get("steps")
                else ""
            )
            + f": p50 {fmt.fmt_ns(q['p50'])}, p90 {fmt.fmt_ns(q['p90'])}, "
            f"max {fmt.fmt_ns(q['max'])})"
        )
        left = [
            f"step {x['step']} ({x['reason']})" for r in srs for x in r.get("steps_excluded") or []
        ]
        if left:
            out.append(f"  left out of the step statistics: {', '.join(left[:8])}")
        kept = [f"step {x['step']} ({x['detail']})" for r in srs for x in r.get("steps_kept") or []]
        if kept:
            out.append(
                _wrap("  kept in the step statistics: " + "; ".join(kept[:3]), "    ", width)
            )
    else:
        sl = result.rollups.get("slice") or {}
        if sl.get("span_ns"):
            rate = sl.get("kernel_ns_per_s")
            line = (
                f"  steps: none marked — a {fmt.fmt_ns(sl['span_ns'])} time slice: kernel time "
                f"{fmt.fmt_ns(rate)} per second"
            )
            for u in (sl.get("units") or [])[:2]:
                line += (
                    f"; {fmt.fmt_ns(u['kernel_ns_per_instance'])} per {u['unit']} "
                    f"({u['instances']:,} instances)"
                )
            out.append(_wrap(line, "    ", width))
            if sl.get("hint"):
                out.append(_wrap(f"  for step statistics, {sl['hint']}", "    ", width))
        else:
            out.append("  steps: none marked (the whole GPU span is one window)")
    mv = result.metrics.get("values", {})
    extra = []
    if mv.get("mfu_pct") is not None:
        c: Mapping[str, Any] = (result.metrics.get("coverage") or {}).get("mfu_pct") or {}
        extra.append(
            f"MFU {'≥ ' if c.get('lower_bound') else ''}{fmt.fmt_pct(mv['mfu_pct'])}"
            + (
                f" ({fmt.fmt_pct(c['coverage_pct'], 0)} of kernel time modelled)"
                if c.get("coverage_pct") is not None
                else ""
            )
        )
    if mv.get("peak_reserved_bytes") is not None:
        extra.append(
            f"peak memory {fmt.fmt_bytes(mv['peak_reserved_bytes'])} reserved / "
            f"{fmt.fmt_bytes(mv.get('peak_allocated_bytes'))} allocated"
        )
    cov = result.extra.get("coverage", {})
    if cov.get("coverage_pct") is not None:
        extra.append(f"kernels linked to a launch {fmt.fmt_pct(cov['coverage_pct'])}")
    if extra:
        out.append(_wrap(" · ".join(extra), "  ", width))
    suffix = model_notes.mfu_suffix(result) if mv.get("mfu_pct") is not None else ""
    if suffix:
        out.append(_wrap(f"  FLOP model (MFU, roofline): {suffix}", "    ", width))
    hint = describe.viewer_hint(result)
    if hint:
        out.append(_wrap(f"{describe.viewer_title(result)}: {hint}", "  ", width))
    out.append("")
    return out


# --- compare ----------------------------------------------------------------------------------


def render_compare(c: dict[str, Any], n: int = 12, width: int | None = None) -> str:
    """The terminal view of a compare (the dict of ``traceinsight.compare.explain.compare``):
    step time,
    the top ``n`` contributors with signed deltas, findings that changed, new / gone names."""
    width = width or fmt.terminal_width()
    a, b = c["before"], c["after"]
    lines = [
        f"traceinsight compare — {describe.run_name(a)}  →  {describe.run_name(b)}",
        f"before: {a['ranks']} rank(s) · {', '.join(a['devices']) or 'GPU not recorded'}",
        f"after:  {b['ranks']} rank(s) · {', '.join(b['devices']) or 'GPU not recorded'}",
        "",
        c["headline"],
        "",
    ]
    lines += _comparability_lines(c.get("comparability"), width)
    st = c["step_time"]
    per = c.get("per") or "step"  # "second": a time slice on a side, every part per second
    rows = []
    for q in ("p50", "p90", "max", "mean") if per == "step" else ():
        va, vb = st["before"][q], st["after"][q]
        d = None if va is None or vb is None else vb - va
        rows.append(
            [
                f"step time {q}",
                fmt.fmt_ns(va),
                fmt.fmt_ns(vb),
                fmt.signed_ns(d),
                fmt.signed_pct(100 * d / va) if d is not None and va else "–",
            ]
        )
    if c["throughput"] and per == "step":
        t = c["throughput"]
        rows.append(
            [
                "steps / s",
                f"{t['before_steps_per_s']:.2f}",
                f"{t['after_steps_per_s']:.2f}",
                f"x{t['ratio']:.3f}",
                fmt.signed_pct(t["delta_pct"]),
            ]
        )
    for r in c["breakdown"]:
        if r["delta_ns"] is None:
            continue
        va, vb = r["before_ns"], r["after_ns"]
        rows.append(
            [
                f"  {r['part']} / {'s' if per == 'second' else 'step'}",
                fmt.fmt_ns(va),
                fmt.fmt_ns(vb),
                fmt.signed_ns(r["delta_ns"]),
                fmt.signed_pct(100 * r["delta_ns"] / va) if va else "–",
            ]
        )
    lines.append(fmt.table(rows, ["", "before", "after", "delta", "%"], align="lrrrr"))
    lines.append("")
    from traceinsight.render.serving import compare_lines as serving_lines

    if c.get("serving"):
        lines += [*serving_lines(c), ""]
    if per == "second":
        lines.append(
            "Contributors per second of capture (each side's parts sum to 1 s; no step "
            f"markers, so no step time), compute split by {c['explained_by']}:"
        )
    else:
        lines.append(
            "Contributors to the change of mean step time over the representative steps "
            f"({fmt.fmt_ns(c['before_step_ns'])} → {fmt.fmt_ns(c['after_step_ns'])}, "
            f"{fmt.signed_ns(c['total_delta_ns'])}), "
            f"compute split by {c['explained_by']}:"
        )
    if not (c.get("comparability") or {}).get("comparable", True):
        lines.append("  (not comparable: names pair only where identical on both sides; see above)")
    contrib = c["contributors"]
    top = contrib[:n]
    rest = contrib[n:]
    scale = max([abs(x["delta_ns"]) for x in top] + [1])
    rows = []
    for x in top:
        bar_len = round(12 * abs(x["delta_ns"]) / scale)
        barc = ("+" if x["delta_ns"] > 0 else "−") * bar_len
        rows.append(
            [
                x["kind"],
                x["name"],
                fmt.fmt_ns(x["before_ns"]),
                fmt.fmt_ns(x["after_ns"]),
                fmt.signed_ns(x["delta_ns"]),
                barc,
            ]
        )
    if rest:
        rd = sum(x["delta_ns"] for x in rest)
        rows.append(["", f"[{len(rest)} others]", "", "", fmt.signed_ns(rd), ""])
    lines.append(
        fmt.table(
            rows,
            ["kind", "name", "before", "after", "delta", ""],
            align="llrrrl",
            flex=1,
            max_width=width,
        )
    )
    for note in c.get("notes") or []:  # what an unassigned idle cause is, what would split it
        lines.append(_wrap(f"Note: {note['text']}", "", width))
    lines.append("")
    f = c["findings"]
    if f["appeared"] or f["disappeared"] or f["changed"]:
        lines.append("Findings:")
        for x in f["appeared"]:
            lines.append(f"  + {x['rule']} appeared ({x['severity']}): {x['title']}")
        for x in f["disappeared"]:
            lines.append(f"  − {x['rule']} gone (was {x['severity']})")
        for x in f["changed"]:
            lines.append(f"  ~ {x['rule']}: {x['before']} → {x['after']} ({x['direction']})")
        lines.append("")
    for label, key in (
        ("New kernels", "new_kernels"),
        ("Gone kernels", "gone_kernels"),
        ("New ops", "new_ops"),
        ("Gone ops", "gone_ops"),
    ):
        names = c[key]
        if names:
            short = short_names(names) if "kernel" in key else {x: x for x in names}
            shown = ", ".join(fmt.shorten_middle(short[x], 60) for x in names[:4])
            more = f" (+{len(names) - 4})" if len(names) > 4 else ""
            lines.append(f"{label} ({len(names)}): {shown}{more}")
    for d in c["diagnostics"]:
        lines.append(f"! {d['message']}")
    return for_terminal("\n".join(lines).rstrip() + "\n")


def _comparability_lines(comp: dict[str, Any] | None, width: int) -> list[str]:
    """The comparability block: blocking and caution differences with what they invalidate,
    the normalisation, the layer pairing and what could not be checked."""
    if not comp:
        return []

    def wrap(text: str) -> str:
        return "\n".join(
            textwrap.wrap(
                " ".join(text.split()), width=width - 4, initial_indent="", subsequent_indent="    "
            )
        )

    lines = []
    diffs = comp.get("differences") or []
    for sev, title, mark in (("blocking", "Not comparable", "✗"), ("caution", "Caution", "!")):
        rows = [d for d in diffs if d.get("severity") == sev]
        if rows:
            lines.append(f"{title}:")
            for d in rows:
                lines.append(
                    "  "
                    + wrap(
                        f"{mark} {d.get('what')}: {d.get('detail') or ''} — "
                        f"invalidates {d.get('invalidates')}"
                    ).replace("\n", "\n  ")
                )
    if not diffs:
        lines.append(
            "Comparable: same device, world size, model shape, dtype and compile mode "
            "as far as both results tell."
        )
    n = comp.get("normalised")
    if n:
        per = {"flop": "modelled FLOP", "token": "token"}.get(n["by"], n.get("unit") or n["by"])
        if n.get("delta_pct") is None:
            lines.append(
                wrap(
                    f"Rate: {per} ({n['basis']}): {fmt.fmt_ns(n['before'])} → "
                    f"{fmt.fmt_ns(n['after'])}."
                )
            )
        else:
            lines.append(
                wrap(f"Normalised per {per} ({n['basis']}): {fmt.signed_pct(n['delta_pct'])}.")
                if n["by"] in ("flop", "token")
                else wrap(f"Normalised: {per} ({n['basis']}): {fmt.signed_pct(n['delta_pct'])}.")
            )
    p = comp.get("pairing")
    if p:
        names = [f"+{x}" for x in p["added"][:3]] + [f"−{x}" for x in p["removed"][:3]]
        lines.append(
            wrap(
                f"Layers paired by {p['by']}: {p['paired']} paired, "
                f"{p['added_count']} added, {p['removed_count']} removed"
                + (f" ({', '.join(names)})" if names else "")
                + "."
            )
        )
    un = comp.get("unchecked") or []
    if un:
        lines.append(
            wrap("Not checked: " + "; ".join(f"{u['what']} ({u['why']})" for u in un) + ".")
        )
    return [*lines, ""]
