"""The rules engine: declarative rules (``rules/*.yaml``) evaluated over a :class:`MetricSet`.

A rule names metrics, compares them with named thresholds (no ``eval``: comparisons are
structured), picks a severity from a ladder, estimates the share of step time it could
recover, formats its message from the measured values, and attaches evidence. Rule files are
validated on load (:mod:`.engine_load`): unknown keys, undeclared metrics, thresholds without
help or unit, message fields that do not exist are errors naming the file. A rule whose metrics
are missing is not evaluated and says which capture option would enable it; a rule that
crashes is recorded and the others still run.

A rule may carry ``variants``: other evidence for the same problem (a memory snapshot beside
the trace's ``[memory]`` events), each with its own conditions, severity ladder, message,
evidence and recommendations. Variants are tried in order; the first whose metrics are all
measured and whose ``applies_if`` holds decides (it fires, or the rule passed), so the better
evidence wins when it is there. Only when no variant can decide are the rule's own conditions
evaluated, exactly as without variants.

Advice and wording can depend on the run, in the rule's own texts and in every variant's alike:
a recommendation (or a part of the message) is a string or ``{text: "...", if: [conditions]}``,
given only when all its conditions hold (a condition on a metric that was not measured does not
hold), so training-only advice can require ``is_training == 1``. Whatever variant decided, the
rule's severity is then capped by the coverage it rests on: a high finding decided by a metric
resting on modelled work (MFU, the roofline split) whose coverage is below 50% is capped at
medium, and a rule may instead declare its own limits,
``confidence: {metric, min_for_high, min_for_medium}``: below those coverages its severity is
capped and the message says on how much of the run it rests. Texts may also quote text facts
(declared with ``declare_fact``, their strings in ``MetricSet.evidence["facts"]``), such as a
call site or the calls behind a stall.
"""

from __future__ import annotations

import string
import traceback
from dataclasses import dataclass
from typing import Any

from traceinsight.engine.advice import culprits, first_cause, quote, withheld_reason
from traceinsight.engine.docs import explain, rules_markdown  # noqa: F401 - the CLI and make docs use them
from traceinsight.engine.impacts import share_impacts
from traceinsight.engine.load import (  # noqa: F401 - the engine's public names
    CATEGORIES,
    OPS,
    Condition,
    Confidence,
    Rule,
    Text,
    Threshold,
    Variant,
    apply_override,
    format_value,
    load_rules,
    parse_rule,
)
from traceinsight.metrics import LOWER_BOUND_BELOW_PCT, REGISTRY, MetricSet
from traceinsight.metrics.registry import FACTS
from traceinsight.result import Finding, finding_sort_key
from traceinsight.util import capture_hints, fmt

# --- evaluation -----------------------------------------------------------------------------


def lower_bound_prefix(metric: str, values: dict[str, float | None]) -> str:
    """ "≥ " for a metric that only grows with its coverage (MFU, achieved FLOP/s) when that
    coverage is below :data:`LOWER_BOUND_BELOW_PCT`: the value shown is a lower bound."""
    info = REGISTRY.get(metric)
    if info is None or not info.lower_bound or not info.coverage:
        return ""
    cov = values.get(info.coverage)
    return "≥ " if cov is None or cov < LOWER_BOUND_BELOW_PCT else ""


def render_text(
    text: str,
    values: dict[str, float | None],
    thresholds: dict[str, float],
    rule: Rule,
    facts: dict[str, str] | None = None,
) -> str:
    """Fill ``{metric}`` / ``{threshold}`` / ``{fact}`` fields: plain fields are formatted by
    unit, fields with a format spec (``{x:.1f}``) use it on the raw number, facts are text. A
    lower-bound metric resting on too little modelled work is shown as ``≥ value``."""
    out = []
    for literal, fname, spec, _conv in string.Formatter().parse(text):
        out.append(literal)
        if fname is None:
            continue
        if fname in FACTS and fname not in values:
            out.append(str((facts or {}).get(fname) or "–"))
            continue
        if fname in values:
            v = values[fname]
            unit_name = fname
        else:
            v = thresholds.get(fname)
            unit_name = None
        if v is None:
            out.append("–")
        elif spec:
            out.append(format(v, spec))
        elif unit_name:
            out.append(lower_bound_prefix(unit_name, values) + format_value(unit_name, v))
        else:
            th = rule.thresholds[fname]
            out.append(fmt.format_threshold(v, th.unit))
    return "".join(out)


@dataclass
class RuleStatus:
    rule: str
    status: str  #: passed | not-applicable | not-evaluated
    reason: str | None = None
    hint: str | None = None
    #: the capture setting that would let it be evaluated (``util.capture_hints``), when the
    #: reason is one: the rules that need the same setting share one hint
    setting: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


@dataclass
class Evaluation:
    findings: list[Finding]
    statuses: list[RuleStatus]
    errors: list[dict[str, str]]


def evaluate(rules: list[Rule], ms: MetricSet, context: Any = None) -> Evaluation:
    findings, statuses, errors = [], [], []
    values = dict(ms.values)
    for rule in rules:
        if not rule.in_scope(values):  # a rule about another kind of run: not listed
            continue
        try:
            th = rule.threshold_values()
            outcome = _decide_by_variants(rule, values, th, ms, context)
            if outcome is None:
                outcome = _decide(rule, rule.base(), values, th, ms, context)
            if isinstance(outcome, Finding):
                findings.append(outcome)
            else:
                statuses.append(outcome)
        except Exception as e:  # a crashing rule is recorded, the others still run
            errors.append(
                {
                    "rule": rule.id,
                    "error": f"{type(e).__name__}: {e}",
                    "traceback": traceback.format_exc(limit=5),
                }
            )
    share_impacts(findings, rules, values)
    findings.sort(key=finding_sort_key)
    return Evaluation(findings, fold_settings(statuses, ms), errors)


#: why rules about GPU work are not evaluated on a run without it (one line, not one per metric)
NO_GPU_REASON = "the trace holds no GPU activity"
#: ... and on a memory file diagnosed alone
MEMORY_ONLY_REASON = "a memory file alone holds no profiler trace"


def fold_settings(statuses: list[RuleStatus], ms: MetricSet) -> list[RuleStatus]:
    """Not-evaluated statuses whose setting only follows from a more basic missing one take
    that one: a run without GPU activity needs GPU activity before tensor shapes, device
    peaks or GPU memory events; a memory file alone needs the profiler trace of its run (it
    is what the file could be combined with). A setting the capture already recorded gives
    no hint (the reason stands alone)."""
    cap = capture_hints.Capture.from_dict(ms.evidence.get("capture"))
    no_gpu = not ms.values.get("has_gpu")
    recorded = _recorded_settings(ms)
    for st in statuses:
        if st.status != "not-evaluated":
            continue
        if not st.setting:  # a metric's own hint: none naming PyTorch for a program without it
            if not cap.torch and capture_hints.names_pytorch(st.hint):
                st.hint = None
            continue
        if cap.memory_only:
            st.setting, st.reason = capture_hints.TRACE, MEMORY_ONLY_REASON
        elif no_gpu and st.setting in capture_hints.GPU_SETTINGS:
            st.setting, st.reason = capture_hints.GPU, NO_GPU_REASON
        if st.setting in recorded:
            st.setting = None
            st.hint = None
        else:
            st.hint = capture_hints.hint(st.setting, cap)
    return statuses


def _recorded_settings(ms: MetricSet) -> set[str]:
    """The settings the capture says it recorded (Kineto's capture flags)."""
    flags = ms.evidence.get("capture_flags") or {}
    out = set()
    if flags.get("profile_memory") is True:
        out.add(capture_hints.MEMORY)
    if flags.get("record_shapes") is True:
        out.add(capture_hints.SHAPES)
    return out


def _decide_by_variants(
    rule: Rule, values: dict[str, float | None], th: dict[str, float], ms: MetricSet, context: Any
) -> Finding | RuleStatus | None:
    """The finding of the first variant that can decide and fires; else a passed status if
    one could decide; None when none can (the rule's own conditions decide)."""
    passed: list[str] = []
    for v in rule.variants:
        if any(values.get(c.metric) is None for c in v.applies_if + v.fires_if):
            continue
        if not all(c.holds(values, th) for c in v.applies_if):
            continue
        out = _decide(rule, v, values, th, ms, context)
        if isinstance(out, Finding):
            return out
        passed.append(f"{v.name}: {out.reason}")
    return RuleStatus(rule.id, "passed", "; ".join(passed)) if passed else None


#: always-measured metrics that scope a rule to a kind of run: when one of a rule's applies_if
#: conditions on them is false, the rule is not applicable even if other metrics are missing
SCOPE_METRICS = frozenset({"is_serving"})


def _decide(
    rule: Rule,
    v: Variant,
    values: dict[str, float | None],
    th: dict[str, float],
    ms: MetricSet,
    context: Any,
) -> Finding | RuleStatus:
    """One variant (or the rule's own conditions) over the measured values; the rule's
    confidence cap applies whichever decided."""
    from traceinsight.engine.evidence.core import build_evidence

    absent = [c.metric for c in v.applies_if + v.fires_if if values.get(c.metric) is None]
    scoped = [c for c in v.applies_if if c.metric in SCOPE_METRICS]
    if absent and scoped and not all(c.holds(values, th) for c in scoped):
        # a rule scoped to a kind of run (a serving trace) does not apply to another kind,
        # whatever it could not measure
        return RuleStatus(
            rule.id,
            "not-applicable",
            "; ".join(c.text(th) for c in scoped if not c.holds(values, th)) + " is false",
        )
    if absent:
        m = absent[0]
        setting = ms.setting_of(m)
        return RuleStatus(
            rule.id,
            "not-evaluated",
            f"{m}: {ms.missing.get(m, 'not measured')}",
            None if setting else REGISTRY[m].hint,
            setting,
        )
    if not all(c.holds(values, th) for c in v.applies_if):
        return RuleStatus(
            rule.id,
            "not-applicable",
            "; ".join(c.text(th) for c in v.applies_if if not c.holds(values, th)) + " is false",
        )
    if not all(c.holds(values, th) for c in v.fires_if):
        return RuleStatus(
            rule.id,
            "passed",
            "; ".join(
                f"{c.metric} = {format_value(c.metric, values.get(c.metric))} "
                f"(fires at {c.op} {format_value(c.metric, c.limit(th))})"
                for c in v.fires_if
            ),
        )
    level, step = next(
        (lv, conds) for lv, conds in v.severity if all(c.holds(values, th) for c in conds)
    )
    capped = None
    if rule.confidence:
        level, capped = rule.confidence.cap(level, values, th)
    if level == "high" and rule.confidence is None:  # a stated confidence rules
        capped = _modelled_cap(v.fires_if + step, values)
        level = "medium" if capped else level
    impact = None  # rules about memory (not step time) estimate no time impact
    if rule.impact:
        x = values.get(rule.impact["metric"]) or 0.0
        impact = round(
            max(
                0.0,
                min(
                    float(rule.impact.get("max", 100.0)), x * float(rule.impact.get("factor", 1.0))
                ),
            ),
            2,
        )
    measured = [
        {
            "metric": c.metric,
            "value": values.get(c.metric),
            "display": format_value(c.metric, values.get(c.metric)),
            "op": c.op,
            "threshold": c.limit(th),
            "threshold_display": format_value(c.metric, c.limit(th)),
            "threshold_name": c.threshold,
            **_coverage_of(c.metric, values),
        }
        for c in v.fires_if
    ]
    title = "Measured vs threshold" + (f" ({v.when})" if v.name else "")
    evidence = [{"kind": "measurements", "title": title, "rows": measured}]
    evidence += build_evidence(v.evidence, ms, context)
    facts = ms.evidence.get("facts") or {}

    def text(t: str) -> str:
        return render_text(t, values, th, rule, facts)

    message = " ".join(text(t.text) for t in v.message if t.applies(values, th))
    if capped:
        message += " " + capped
    recommendations, withheld, cause = _advice(rule, v, values, th, ms, evidence, text)
    return Finding(
        rule=rule.id,
        severity=level,
        title=v.title or rule.title,
        category=rule.category,
        message=message,
        impact_pct=impact,
        value=values.get(v.value) if v.value else None,
        headline=text(v.headline) if v.headline else None,
        evidence=evidence,
        recommendations=recommendations,
        confidence=_confidence_of(rule, values, th, capped, [c.metric for c in v.fires_if + step]),
        withheld=withheld,
        cause=cause,
    )


def _advice(
    rule: Rule,
    v: Variant,
    values: dict[str, float | None],
    th: dict[str, float],
    ms: MetricSet,
    evidence: list[dict[str, Any]],
    text: Any,
) -> tuple[list[str], list[dict[str, str]], dict[str, str] | None]:
    """The recommendations given (the named cause's fix first), those withheld by the run
    facts with the reason, and the cause (class and culprit) when the evidence names one."""
    run = ms.evidence.get("run_values") or {}
    facts = ms.evidence.get("run") or {}
    cap = capture_hints.Capture.from_dict(ms.evidence.get("capture"))
    given: list[str] = []
    withheld: list[dict[str, str]] = []
    for r in v.recommendations:
        if not r.applies(values, th):
            continue
        why = withheld_reason(r.facts_when, r.facts_unless, run, facts) or _not_pytorch(
            r.text, cap, run
        )
        if why:
            withheld.append({"text": text(r.text), "reason": why})
        else:
            given.append(text(r.text))
    found = first_cause(rule.causes, culprits(evidence), run)
    if found is None:
        return given, withheld, None
    c, name = found
    why = _not_pytorch(c.text, cap, run)
    if why:
        withheld.append({"text": text(c.text).replace("{culprit}", quote(name)), "reason": why})
        return given, withheld, {"cause": c.name, "culprit": quote(name).strip("`")}
    first = text(c.text.replace("{culprit}", "{{culprit}}")).replace("{culprit}", quote(name))
    return [first, *given], withheld, {"cause": c.name, "culprit": quote(name).strip("`")}


def _not_pytorch(text: str, cap: capture_hints.Capture, run: dict[str, Any]) -> str | None:
    """Why advice naming PyTorch APIs is not given: the program is not known to use PyTorch
    (an Nsight capture without PyTorch ops or a PyTorch framework)."""
    if cap.torch or not capture_hints.names_pytorch(text):
        return None
    engine = str(run.get("engine") or "unknown")
    what = "a CUDA program" if engine == "cuda_program" else "not known to use PyTorch"
    return (
        f"not advised: it names PyTorch APIs and the program is {what} "
        "(an Nsight capture without PyTorch ops, NVTX ranges or frames)"
    )


def _modelled_cap(conds: list[Condition], values: dict[str, float | None]) -> str | None:
    """Why a high finding is capped at medium: a condition that decided it (firing or severity)
    is a metric resting on modelled work whose coverage is below LOWER_BOUND_BELOW_PCT (an MFU
    from a third of the FLOPs cannot make a finding high), or None."""
    for c in conds:
        info = REGISTRY.get(c.metric)
        if info is None or not info.coverage:
            continue
        cov = values.get(info.coverage)
        if cov is None or cov < LOWER_BOUND_BELOW_PCT:
            shown = "an unknown share" if cov is None else format_value(info.coverage, cov)
            need = fmt.fmt_pct(LOWER_BOUND_BELOW_PCT, 0)
            return (
                f"Severity capped at medium (would be high): {c.metric} rests on {shown} "
                f"modelled ({info.coverage}), below the {need} a high finding needs."
            )
    return None


def _coverage_of(metric: str, values: dict[str, float | None]) -> dict[str, Any]:
    """For a metric resting on modelled work: the metric giving its coverage and its value."""
    info = REGISTRY.get(metric)
    if info is None or not info.coverage:
        return {}
    return {
        "coverage_metric": info.coverage,
        "coverage_pct": values.get(info.coverage),
        "lower_bound": bool(info.lower_bound and lower_bound_prefix(metric, values)),
    }


def _confidence_of(
    rule: Rule,
    values: dict[str, float | None],
    th: dict[str, float],
    capped: str | None,
    metrics: list[str] | None = None,
) -> dict[str, Any]:
    """Every finding's confidence (:mod:`.confidence`), with the rule's stated one."""
    from traceinsight.engine.confidence import assess

    conf = assess(list(metrics or []), values, capped)
    if rule.confidence is None:
        return {**conf, "capped": capped}
    hi, med = rule.confidence.limits(th)
    return {
        "metric": rule.confidence.metric,
        "value": values.get(rule.confidence.metric),
        "min_for_high": hi,
        "min_for_medium": med,
        "capped": capped,
        **conf,
    }


if __name__ == "__main__":  # pragma: no cover
    print(rules_markdown(load_rules()))
