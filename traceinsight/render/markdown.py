"""A compact Markdown ticket body of a :class:`DiagnosisResult`.

Headline, findings (severity, title, message, top recommendation, impact), the top layers (or
operators when the trace has no module hierarchy) and a per-rank summary table. No HTML and no
links: prose is backslash-escaped (``<``, ``>``, ``*``, ``[``, ``|`` ...), names are code spans, so
no Markdown renderer turns a kernel or op name into markup.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from traceinsight.render import describe
from traceinsight.render.critical_path import critical_path_lines
from traceinsight.result import DiagnosisResult, finding_sort_key
from traceinsight.util import fmt
from traceinsight.util.vocab import is_more_row

SEV_LABEL = {"high": "HIGH", "medium": "MEDIUM", "low": "LOW", "info": "INFO"}
TOP_N = 8

_PROSE = re.compile(r"([\\`*\[\]<>|#~])")
_UNDERSCORE = re.compile(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")


def esc(text: Any) -> str:
    """Prose for Markdown: one line, the characters that could become markup escaped."""
    s = " ".join(str(text).split())
    s = _PROSE.sub(r"\\\1", s)
    return _UNDERSCORE.sub(r"\\_", s)


def code(text: Any, width: int = 90) -> str:
    """A name as a code span (its content is never markup); ``|`` escaped for GFM tables."""
    s = fmt.shorten(" ".join(str(text).split()), width)
    longest = max((len(m) for m in re.findall(r"`+", s)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if s.startswith("`") or s.endswith("`") or not s.strip() else ""
    return f"{fence}{pad}{s}{pad}{fence}".replace("|", "\\|")


def _table(headers: Sequence[str], rows: list[list[str]], align: str) -> list[str]:
    sep = ["---:" if a == "r" else "---" for a in align]
    out = ["| " + " | ".join(headers) + " |", "| " + " | ".join(sep) + " |"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


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
            if f.recommendations:
                lines.append(f"   Fix: {esc(f.recommendations[0])}")
        lines.append("")
    else:
        lines += ["**No findings**: no rule fired.", ""]
    lines += critical_path_lines(r.critical_path)

    # a CPU-only run: its host view, not GPU tables at "idle 100%"
    lines += _host(r) if host.get("headline") else [*_top(r), *_summary(r)]
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
        lines += [
            f"Data quality: {len(errs)} warning{'s' if len(errs) != 1 else ''} "
            f"(first: {esc(fmt.shorten(str(errs[0].get('message', '')), 160))}).",
            "",
        ]
    return "\n".join(lines).rstrip() + "\n"


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
            *_table(["op", "calls", "self", "of step", "total"], rows, "lrrrr"),
            "",
        ]
    for n in h.get("notes") or []:
        out += [f"- **{esc(n['title'])}**: {esc(n['text'])} Fix: {esc(n['advice'])}"]
    return [*out, ""] if h.get("notes") else out


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
            *_table(["layer", "forward", "backward", "total", "share"], rows, "lrrrr"),
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
                *_table(["operator", "calls", "device self", "share"], rows, "lrrr"),
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
        q = s.get("step_time_ns") or {}
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
        *_table(
            ["rank", "kernel time", "busy / idle", "steps", "step p50", "peak memory (reserved)"],
            rows,
            "rrrrrr",
        ),
    ]
    if len(ranks) > 32:
        out.append("")
        out.append(f"(+{len(ranks) - 32} more ranks in the HTML report)")
    return [*out, ""]


# --- compare ----------------------------------------------------------------------------------

COMPARE_TOP_N = 10


def render_compare_markdown(c: dict[str, Any]) -> str:
    """A compact ticket body of a compare (the dict of
    ``traceinsight.compare.explain.compare``): the
    headline, step time before / after, the top contributors with signed deltas, findings that
    changed and new / gone counts. No HTML and no links; names are code spans."""
    a, b = c.get("before") or {}, c.get("after") or {}
    lines: list[str] = [f"### {esc(c.get('headline') or 'compare')}", ""]

    def side(s: dict[str, Any], tag: str) -> str:
        name = code(describe.run_name(s) if s.get("sources") or s.get("label") else tag, 60)
        devs = ", ".join(dict.fromkeys(str(d) for d in s.get("devices") or []))
        n = s.get("ranks") or 0
        return (
            f"{tag} {name} ({esc(devs) if devs else 'no GPU recorded'}, "
            f"{n} rank{'s' if n != 1 else ''})"
        )

    tool = c.get("tool") or {}
    lines += [
        f"{side(a, 'before')} → {side(b, 'after')} · compute split by "
        f"{esc(c.get('explained_by') or '?')} · traceinsight {esc(tool.get('version', '?'))}",
        "",
    ]
    lines += _comparability(c.get("comparability"))

    st = c.get("step_time") or {}
    sa, sb = st.get("before") or {}, st.get("after") or {}
    rows = []
    for q in ("p50", "p90", "max", "mean"):
        va, vb = sa.get(q), sb.get(q)
        if va is None and vb is None:
            continue
        d = None if va is None or vb is None else vb - va
        rows.append(
            [
                f"step time {q}",
                fmt.fmt_ns(va),
                fmt.fmt_ns(vb),
                fmt.signed_ns(d),
                fmt.signed_pct(100.0 * d / va) if d is not None and va else "–",
            ]
        )
    t = c.get("throughput")
    if t:
        rows.append(
            [
                "steps / s",
                f"{t['before_steps_per_s']:.4g}",
                f"{t['after_steps_per_s']:.4g}",
                f"×{t['ratio']:.3f}",
                fmt.signed_pct(t.get("delta_pct")),
            ]
        )
    if rows:
        lines += [*_table(["", "before", "after", "delta", "%"], rows, "lrrrr"), ""]
    else:
        lines += ["No GPU step windows on one side: step times cannot be compared.", ""]

    contrib = [x for x in c.get("contributors") or [] if x.get("delta_ns")]
    if contrib:
        total = c.get("total_delta_ns") or 0
        lines += [
            f"**Top contributors** to the change of the mean step "
            f"({fmt.fmt_ns(c.get('before_step_ns'))} → {fmt.fmt_ns(c.get('after_step_ns'))}, "
            f"{fmt.signed_ns(total)}; they add up exactly), per step:",
            "",
        ]
        top, rest = contrib[:COMPARE_TOP_N], contrib[COMPARE_TOP_N:]
        rows = [
            [
                esc(x.get("kind")),
                code(x.get("name"), 70),
                fmt.fmt_ns(x.get("before_ns")),
                fmt.fmt_ns(x.get("after_ns")),
                fmt.signed_ns(x.get("delta_ns")),
            ]
            for x in top
        ]
        if rest:
            rows.append(
                ["", f"{len(rest)} others", "", "", fmt.signed_ns(sum(x["delta_ns"] for x in rest))]
            )
        lines += [*_table(["kind", "name", "before", "after", "delta"], rows, "llrrr"), ""]
    elif c.get("contributors"):
        lines += ["No contributor changed: both sides spend the same time per step on each.", ""]

    f = c.get("findings") or {}
    items = []
    for x in f.get("appeared") or []:
        sev = SEV_LABEL.get(x.get("severity"), esc(str(x.get("severity"))).upper())
        imp = (
            f" (impact ≈ {fmt.fmt_pct(x['impact_pct'])})" if x.get("impact_pct") is not None else ""
        )
        items.append(
            f"- appeared: **{sev}** {code(x.get('rule'))} {esc(x.get('title') or '')}{imp}"
        )
    for x in f.get("disappeared") or []:
        sev = SEV_LABEL.get(x.get("severity"), esc(str(x.get("severity"))).upper())
        items.append(
            f"- disappeared: {code(x.get('rule'))} {esc(x.get('title') or '')} (was {sev})"
        )
    for x in f.get("changed") or []:
        before = SEV_LABEL.get(x.get("before"), "?")
        after = SEV_LABEL.get(x.get("after"), "?")
        items.append(
            f"- changed: {code(x.get('rule'))} {before} → {after} ({esc(x.get('direction') or '')})"
        )
    same = len(f.get("unchanged") or [])
    if items:
        lines += ["**Findings** that changed:", "", *items]
        if same:
            lines.append(f"- unchanged: {same}")
        lines.append("")
    else:
        lines += [
            f"**Findings**: no change ({same} rule{'s' if same != 1 else ''} fired on both "
            "sides alike)."
            if same
            else "**Findings**: no rule fired on either side.",
            "",
        ]

    counts = [
        f"{label} {len(c.get(key) or [])}{'+' if len(c.get(key) or []) >= 200 else ''}"
        for key, label in (
            ("new_kernels", "new kernels"),
            ("gone_kernels", "gone kernels"),
            ("new_ops", "new ops"),
            ("gone_ops", "gone ops"),
        )
    ]
    lines += ["By name: " + " · ".join(counts) + ".", ""]
    diags = [d for d in c.get("diagnostics") or [] if d.get("severity") in ("error", "warning")]
    for d in diags[:3]:
        lines.append(f"Note: {esc(fmt.shorten(str(d.get('message', '')), 160))}")
    if diags:
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def _comparability(comp: dict[str, Any] | None) -> list[str]:
    """Whether the runs can be compared: the differences with what they invalidate, the
    normalisation, the layer pairing and what could not be checked."""
    if not comp:
        return []
    diffs = comp.get("differences") or []
    out: list[str] = []
    if not diffs:
        out.append(
            "**Comparable**: same device, world size, model shape, dtype and compile mode "
            "as far as both results tell."
        )
    else:
        lead = (
            "**Not comparable**: the runs do different work, so the change of step time says "
            "nothing about the code."
            if not comp.get("comparable")
            else "**Caution**: the same work on a different set-up or with few steps; the numbers "
            "compare the systems, not only the code."
        )
        rows = [
            [
                esc(d.get("severity")),
                esc(d.get("what")),
                code(d.get("before"), 40),
                code(d.get("after"), 40),
                esc(d.get("invalidates")),
            ]
            for d in diffs
        ]
        out += [lead, "", *_table(["", "what", "before", "after", "invalidates"], rows, "lllll")]
    n = comp.get("normalised")
    extra = []
    if n:
        unit = "modelled FLOP" if n.get("by") == "flop" else "token"
        extra.append(
            f"Normalised per {unit} ({esc(n.get('basis'))}): {fmt.signed_pct(n.get('delta_pct'))}."
        )
    p = comp.get("pairing")
    if p:
        extra.append(
            f"Layers paired by {esc(p.get('by'))} only: {p.get('paired')} paired, "
            f"{p.get('added_count')} added, {p.get('removed_count')} removed."
        )
    un = comp.get("unchecked") or []
    if un:
        extra.append(
            "Not checked: "
            + "; ".join(f"{esc(u.get('what'))} ({esc(u.get('why'))})" for u in un)
            + "."
        )
    if extra:
        out += ["", *extra] if diffs else extra
    return [*out, ""]
