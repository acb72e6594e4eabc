"""The compare's Markdown ticket body. Its own module, below both renderers that show it: the
``compare --markdown`` output and the HTML compare report, which embeds the same text for its
copy button (the HTML renderer never imports the Markdown one)."""

from __future__ import annotations

from typing import Any

from traceinsight.render import describe
from traceinsight.render.mdtext import SEV_LABEL, code, esc, md_table
from traceinsight.util import fmt
from traceinsight.util.safetext import for_terminal

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
    if c.get("serving"):
        from traceinsight.render.serving import compare_lines

        sl = compare_lines(c)
        lines += [f"**{esc(sl[0])}**", *(f"- {esc(x.strip())}" for x in sl[1:]), ""]

    st = c.get("step_time") or {}
    sa, sb = st.get("before") or {}, st.get("after") or {}
    rows = []
    per_s = c.get("per") == "second"  # a time slice on a side: no step time, rates per second
    for q in ("p50", "p90", "max", "mean") if not per_s else ():
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
    if t and not per_s:
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
        lines += [*md_table(["", "before", "after", "delta", "%"], rows, "lrrrr"), ""]
    elif per_s:
        lines += ["A time slice on a side: no step time; every part is per second of capture.", ""]
    else:
        lines += ["No GPU step windows on one side: step times cannot be compared.", ""]

    contrib = [x for x in c.get("contributors") or [] if x.get("delta_ns")]
    if contrib:
        total = c.get("total_delta_ns") or 0
        lines += [
            "**Top contributors** per second of capture (each side's parts sum to 1 s):"
            if per_s
            else f"**Top contributors** to the change of the mean step of the representative "
            f"steps ({fmt.fmt_ns(c.get('before_step_ns'))} → "
            f"{fmt.fmt_ns(c.get('after_step_ns'))}, {fmt.signed_ns(total)}; they add up "
            "exactly), per step:",
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
        lines += [*md_table(["kind", "name", "before", "after", "delta"], rows, "llrrr"), ""]
        for note in c.get("notes") or []:
            lines += [f"_Note_: {esc(note.get('text'))}", ""]
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
    return for_terminal("\n".join(lines).rstrip() + "\n")


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
        out += [lead, "", *md_table(["", "what", "before", "after", "invalidates"], rows, "lllll")]
    n = comp.get("normalised")
    extra = []
    if n:
        unit = {"flop": "modelled FLOP", "token": "token"}.get(str(n.get("by")))
        change = (
            fmt.signed_pct(n.get("delta_pct"))
            if n.get("delta_pct") is not None
            else f"{fmt.fmt_ns(n.get('before'))} → {fmt.fmt_ns(n.get('after'))}"
        )
        what = f"per {unit}" if unit else f"by {esc(n.get('unit'))}"
        extra.append(f"Normalised {what} ({esc(n.get('basis'))}): {change}.")
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
