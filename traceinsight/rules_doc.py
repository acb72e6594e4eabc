"""Rule documentation: ``traceinsight rules --explain ID`` and the generated docs/RULES.md.

``python -m traceinsight.engine > docs/RULES.md`` (``make docs``) writes the latter.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .metrics import REGISTRY

if TYPE_CHECKING:  # pragma: no cover
    from .engine import Rule


def explain(rule: Rule) -> str:
    """``traceinsight rules --explain ID``."""
    th = rule.threshold_values()
    lines = [f"{rule.id} — {rule.title}",
             f"category: {rule.category}   file: {Path(rule.source).name}", ""]
    for k in ("symptom", "why", "fix"):
        lines.append(f"{k.capitalize()}: {rule.doc[k]}")
    lines.append("")
    if rule.applies_if:
        lines.append("Applies when: " + " and ".join(c.text(th) for c in rule.applies_if))
    lines.append("Fires when:   " + " and ".join(c.text(th) for c in rule.fires_if))
    for lv, conds in rule.severity:
        when = " and ".join(c.text(th) for c in conds) if conds else "otherwise"
        lines.append(f"  {lv:<6} {when}")
    if rule.impact:
        lines.append(f"Impact: {rule.impact['metric']} x {rule.impact.get('factor', 1)} "
                     "(share of step time it could recover)")
    if rule.confidence:
        hi, med = rule.confidence.limits(th)
        lines.append(f"Confidence: high needs {rule.confidence.metric} >= {hi:g}%, medium "
                     f">= {med:g}%; below, the severity is capped")
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
    return "\n".join(lines)


def rules_markdown(rules: list[Rule]) -> str:
    """docs/RULES.md: every shipped rule with its thresholds (generated)."""
    out = ["# Diagnosis rules", "",
           "Generated from `rules/*.yaml` (`python -m traceinsight.engine > docs/RULES.md`). "
           "Each rule is a YAML file: conditions over named metrics "
           "(`traceinsight rules --metrics`), "
           "thresholds with defaults, a severity ladder, an impact estimate (the share of step "
           "time the fix could recover), evidence tables and recommendations. Override a "
           "threshold with `--set RULE.THRESHOLD=VALUE`; add or replace rules with `--rules DIR`.",
           "",
           "A recommendation, or a part of the message, is a string or `{text: \"...\", if: "
           "[conditions]}`: it is given only when its conditions hold (a condition on a metric "
           "that was not measured does not hold). Training-only advice (optimizers, GradScaler, "
           "gradient synchronisation and accumulation, FSDP/ZeRO, activation checkpointing) "
           "requires `is_training == 1`, so a forward-only run never receives it; precision "
           "advice requires the device's peak for that dtype (`device_bf16_tflops > 0`). A rule "
           "resting on modelled work states `confidence: {metric, min_for_high, "
           "min_for_medium}`: below those coverages its severity is capped and the message says "
           "on how much of the run it rests. Without one, a high finding decided by a metric "
           "resting on modelled work (MFU, the roofline split) with under 50% coverage is capped "
           "at medium.",
           "", "| rule | category | what it finds |", "|---|---|---|"]
    for r in sorted(rules, key=lambda r: (r.category, r.id)):
        out.append(f"| [`{r.id}`](#{r.id}) | {r.category} | {r.summary} |")
    out.append("")
    for r in sorted(rules, key=lambda r: r.id):
        th = r.threshold_values()
        out += [f"## {r.id}", "", f"**{r.title}.** {r.doc['symptom']}", "",
                f"*Why it matters:* {r.doc['why']}", "", f"*Fix:* {r.doc['fix']}", ""]
        if r.applies_if:
            applies = " and ".join(f"`{c.text(th)}`" for c in r.applies_if)
            out.append(f"Applies when {applies}.")
        out.append("Fires when " + " and ".join(f"`{c.text(th)}`" for c in r.fires_if) + ".")
        ladder = []
        for lv, conds in r.severity:
            ladder.append(f"{lv} if " + " and ".join(f"`{c.text(th)}`" for c in conds) if conds
                          else f"{lv} otherwise")
        out.append("Severity: " + "; ".join(ladder) + ".")
        if r.impact:
            out.append(f"Impact: `{r.impact['metric']}` x {r.impact.get('factor', 1)}.")
        if r.confidence:
            hi, med = r.confidence.limits(th)
            out.append(f"Confidence: high needs `{r.confidence.metric} >= {hi:g}`, medium "
                       f"`>= {med:g}`; below, the severity is capped and the message says why.")
        out += ["", "| threshold | default | meaning |", "|---|---|---|"]
        for t in r.thresholds.values():
            out.append(f"| `{t.name}` | {t.default:g} {t.unit} | {t.help} |")
        recs = [f"- {x.text}" + (" *(when " + " and ".join(f"`{c.text(th)}`" for c in x.when)
                                 + ")*" if x.when else "") for x in r.recommendations]
        out += ["", "Recommendations:", "", *recs, ""]
    return "\n".join(out)
