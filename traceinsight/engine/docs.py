"""Rule documentation: ``traceinsight rules --explain ID`` and the generated docs/RULES.md.

``python -m traceinsight.engine.evaluate > docs/RULES.md`` (``make docs``) writes the latter.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from traceinsight.analysis.run_facts import FLAT_NAMES
from traceinsight.metrics import REGISTRY

if TYPE_CHECKING:  # pragma: no cover
    from traceinsight.engine.load import Condition, Rule, Text


def explain(rule: Rule) -> str:
    """``traceinsight rules --explain ID``."""
    th = rule.threshold_values()
    lines = [
        f"{rule.id} — {rule.title}",
        f"category: {rule.category}   file: {Path(rule.source).name}",
        "",
    ]
    for k in ("symptom", "why", "fix"):
        lines.append(f"{k.capitalize()}: {rule.doc[k]}")
    lines.append("")
    if rule.scope:
        lines.append("Only for:     " + " and ".join(c.text(th) for c in rule.scope))
    if rule.applies_if:
        lines.append("Applies when: " + " and ".join(c.text(th) for c in rule.applies_if))
    lines.append("Fires when:   " + " and ".join(c.text(th) for c in rule.fires_if))
    for lv, conds in rule.severity:
        when = " and ".join(c.text(th) for c in conds) if conds else "otherwise"
        lines.append(f"  {lv:<6} {when}")
    if rule.impact:
        lines.append(
            f"Impact: {rule.impact['metric']} x {rule.impact.get('factor', 1)} "
            "(share of step time it could recover)"
            + (
                f", less the time of {', '.join(rule.impact['less'])} when they fire"
                if rule.impact.get("less")
                else ""
            )
        )
    if rule.confidence:
        hi, med = rule.confidence.limits(th)
        lines.append(
            f"Confidence: high needs {rule.confidence.metric} >= {hi:g}%, medium "
            f">= {med:g}%; below, the severity is capped"
        )
    for v in rule.variants:
        lines += ["", f"Variant {v.name} (tried first; {v.when}):"]
        if v.applies_if:
            lines.append("  Applies when: " + " and ".join(c.text(th) for c in v.applies_if))
        lines.append("  Fires when:   " + " and ".join(c.text(th) for c in v.fires_if))
        lines += [f"  - {r.describe(th)}" for r in v.recommendations]
    lines.append("")
    lines.append("Thresholds (override with --set " + f"{rule.id}.NAME=VALUE):")
    for t in rule.thresholds.values():
        cur = th[t.name]
        over = " (overridden)" if t.name in rule.overrides else ""
        lines.append(f"  {t.name} = {cur:g} {t.unit}{over} — {t.help}")
    lines.append("")
    lines.append("Metrics:")
    for m in rule.metrics():
        info = REGISTRY[m]
        lines.append(f"  {m} [{info.unit}] — {info.doc}")
    lines.append("")
    lines.append("Recommendations:")
    for r in rule.recommendations:
        lines.append(f"  - {r.describe(th)}")
    for c in rule.causes:
        lines.append(f"  * cause {c.name} ({c.match.pattern}): {c.text}")
    return "\n".join(lines)


def rules_markdown(rules: list[Rule]) -> str:
    """docs/RULES.md: every shipped rule with its thresholds (generated)."""
    out = [
        "# Diagnosis rules",
        "",
        "Generated from `rules/*.yaml` (`python -m traceinsight.engine.evaluate > docs/RULES.md`). "
        "Each rule is a YAML file: conditions over named metrics "
        "(`traceinsight rules --metrics`), "
        "thresholds with defaults, a severity ladder, an impact estimate (the share of step "
        "time the fix could recover; with `less: [rules]` it counts only the time those "
        "findings do not already explain, and all impacts add to at most 100%), evidence "
        "tables and recommendations. Override a "
        "threshold with `--set RULE.THRESHOLD=VALUE`; add or replace rules with `--rules DIR`.",
        "",
        'A recommendation, or a part of the message, is a string or `{text: "...", if: '
        "[conditions]}`: it is given only when its conditions hold (a condition on a metric "
        "that was not measured does not hold). Training-only advice (optimizers, GradScaler, "
        "gradient synchronisation and accumulation, FSDP/ZeRO, activation checkpointing) "
        "requires `is_training == 1`, so a forward-only run never receives it; precision "
        "advice requires the device's peak for that dtype (`device_bf16_tflops > 0`). A rule "
        "resting on modelled work states `confidence: {metric, min_for_high, "
        "min_for_medium}`: below those coverages its severity is capped and the message says "
        "on how much of the run it rests. Without one, a high finding decided by a metric "
        "resting on modelled work (MFU, the roofline split) with under 50% coverage is capped "
        "at medium. A rule may carry variants: other evidence for the same problem (a memory "
        "snapshot beside the trace's `[memory]` events) with their own conditions and texts; "
        "the first variant whose metrics are measured and whose `applies_if` holds decides, "
        "else the rule's own conditions do. Conditional advice and the confidence cap apply "
        "whichever decided. A rule with a `scope` is about one kind of run (`cpu_only == 1`: "
        "a run without GPU kernels, where the GPU rules cannot run): on other runs it is "
        "neither evaluated nor listed.",
        "",
        "Advice also states the runs it fits, on the run facts (`run` in the result, "
        "docs/RESULT.md): `when: {FACT: VALUE}` gives a recommendation only when every fact "
        "holds (an unknown fact does not), `unless: {FACT: VALUE}` withholds it when one does; "
        "a value is a word, a list of words (any of them) or a comparison on a share "
        '(`matrix_dtypes.fp32_share: ">= 10"`). A withheld recommendation is listed in the '
        "finding's `withheld` with the reason. A rule's `causes` map event names in its evidence "
        "(frames, ops, runtime calls) to the fix for that kind of cause; the first match leads "
        "the recommendations, naming the event. Gains are stated as typical ranges with their "
        "basis, never as a peak ratio.",
        "",
        "Run facts a condition may name:",
        "",
        *[f"- `{k}`: {v}" for k, v in FLAT_NAMES.items()],
        "",
        "| rule | category | what it finds |",
        "|---|---|---|",
    ]
    for r in sorted(rules, key=lambda r: (r.category, r.id)):
        out.append(f"| [`{r.id}`](#{r.id}) | {r.category} | {r.summary} |")
    out.append("")
    for r in sorted(rules, key=lambda r: r.id):
        th = r.threshold_values()
        out += [
            f"## {r.id}",
            "",
            f"**{r.title}.** {r.doc['symptom']}",
            "",
            f"*Why it matters:* {r.doc['why']}",
            "",
            f"*Fix:* {r.doc['fix']}",
            "",
        ]
        if r.scope:
            scope = " and ".join(f"`{c.text(th)}`" for c in r.scope)
            out.append(f"Only for runs where {scope} (other runs do not list it).")
        if r.applies_if:
            applies = " and ".join(f"`{c.text(th)}`" for c in r.applies_if)
            out.append(f"Applies when {applies}.")
        out.append("Fires when " + " and ".join(f"`{c.text(th)}`" for c in r.fires_if) + ".")
        out.append(_severity(r.severity, th))
        if r.impact:
            less = r.impact.get("less") or []
            out.append(
                f"Impact: `{r.impact['metric']}` x {r.impact.get('factor', 1)}"
                + (
                    f", less the time of {', '.join(f'`{x}`' for x in less)} when they "
                    "fire (one story per cause)"
                    if less
                    else ""
                )
                + "."
            )
        if r.confidence:
            hi, med = r.confidence.limits(th)
            out.append(
                f"Confidence: high needs `{r.confidence.metric} >= {hi:g}`, medium "
                f"`>= {med:g}`; below, the severity is capped and the message says why."
            )
        out += ["", "| threshold | default | meaning |", "|---|---|---|"]
        for t in r.thresholds.values():
            out.append(f"| `{t.name}` | {t.default:g} {t.unit} | {t.help} |")
        out += ["", "Recommendations:", "", *_recs(r.recommendations, th), *_causes(r), ""]
        for v in r.variants:
            out += [f"**Variant `{v.name}`** ({v.when}; tried before the conditions above)."]
            if v.applies_if:
                out.append(f"Applies when {_conds(v.applies_if, th)}.")
            out.append(f"Fires when {_conds(v.fires_if, th)}.")
            out.append(_severity(v.severity, th))
            out += ["", "Recommendations:", "", *_recs(v.recommendations, th), ""]
    return "\n".join(out)


def _severity(ladder: list[tuple[str, list[Condition]]], th: dict[str, float]) -> str:
    steps = [f"{lv} if {_conds(conds, th)}" if conds else f"{lv} otherwise" for lv, conds in ladder]
    return "Severity: " + "; ".join(steps) + "."


def _conds(conds: list[Condition], th: dict[str, float]) -> str:
    return " and ".join(f"`{c.text(th)}`" for c in conds)


def _recs(recs: list[Text], th: dict[str, float]) -> list[str]:
    out = []
    for x in recs:
        when = [f"`{c.text(th)}`" for c in x.when] + [f"`{c.text()}`" for c in x.facts_when]
        line = f"- {x.text}" + (f" *(when {' and '.join(when)})*" if when else "")
        if x.facts_unless:
            line += " *(not when " + " or ".join(f"`{c.text()}`" for c in x.facts_unless) + ")*"
        out.append(line)
    return out


def _causes(rule: Rule) -> list[str]:
    if not rule.causes:
        return []
    out = [
        "",
        "Causes named by the evidence (the first event of its tables that matches gives the "
        "first recommendation, naming it):",
        "",
    ]
    for c in rule.causes:
        extra = [f"`{x.text()}`" for x in c.when]
        cond = f" *(when {' and '.join(extra)})*" if extra else ""
        out.append(f"- **{c.name}** (`{c.match.pattern}`): {c.text}{cond}")
    return out
