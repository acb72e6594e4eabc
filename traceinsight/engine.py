"""The rules engine: declarative rules (``rules/*.yaml``) evaluated over a :class:`MetricSet`.

A rule names metrics, compares them with named thresholds (no ``eval``: comparisons are
structured), picks a severity from a ladder, estimates the share of step time it could
recover, formats its message from the measured values, and attaches evidence. Rule files are
validated on load: unknown keys, undeclared metrics, thresholds without help or unit, message
fields that do not exist are errors naming the file. A rule whose metrics are missing is not
evaluated and says which capture option would enable it; a rule that crashes is recorded and
the others still run.

A rule may carry ``variants``: other evidence for the same problem (a memory snapshot beside
the trace's ``[memory]`` events), each with its own conditions, severity ladder, message,
evidence and recommendations. Variants are tried in order; the first whose metrics are all
measured and whose ``applies_if`` holds decides (it fires, or the rule passed), so the better
evidence wins when it is there. Only when no variant can decide are the rule's own conditions
evaluated, exactly as without variants. Messages may quote text facts (a call site, declared
with ``declare_fact``) besides metrics and thresholds.
"""

from __future__ import annotations

import math
import operator
import re
import string
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

from . import fmt, safeyaml
from .errors import ConfigError
from .metrics import REGISTRY, MetricSet
from .metrics.registry import FACTS
from .resources import data_dir
from .result import SEVERITIES, SEVERITY_RANK, Finding, finding_sort_key

_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
CATEGORIES = ("compute", "memory", "comm", "host", "input", "precision", "jitter", "data", "gpu")
OPS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt,
    "==": operator.eq, "!=": operator.ne,
}
RULE_KEYS = {"id", "title", "category", "summary", "applies_if", "fires_if", "severity",
             "thresholds", "impact", "value", "message", "headline", "evidence",
             "recommendations", "doc", "variants"}
VARIANT_KEYS = {"name", "title", "when", "applies_if", "fires_if", "severity", "thresholds",
                "value", "message", "headline", "evidence", "recommendations"}
VARIANT_REQUIRED = {"name", "when", "fires_if", "message", "recommendations"}
REQUIRED = {"id", "title", "category", "fires_if", "thresholds", "message", "recommendations", "doc"}
_ID_RE = re.compile(r"^[a-z][a-z0-9-]*$")


@dataclass(frozen=True)
class Condition:
    metric: str
    op: str
    threshold: str | None = None
    value: float | None = None

    def limit(self, thresholds: dict[str, float]) -> float:
        return thresholds[self.threshold] if self.threshold else float(self.value)  # type: ignore[arg-type]

    def holds(self, values: dict[str, float | None], thresholds: dict[str, float]) -> bool:
        v = values.get(self.metric)
        return v is not None and OPS[self.op](v, self.limit(thresholds))

    def text(self, thresholds: dict[str, float]) -> str:
        return f"{self.metric} {self.op} {format_value(self.metric, self.limit(thresholds))}"


@dataclass(frozen=True)
class Threshold:
    name: str
    default: float
    unit: str
    help: str


@dataclass
class Variant:
    """One way a rule can be decided: conditions, severity ladder and what the finding says.
    A rule's own conditions form its base variant (``name`` empty)."""

    name: str
    when: str  #: what evidence it reads, for the docs
    title: str | None
    applies_if: list[Condition]
    fires_if: list[Condition]
    severity: list[tuple[str, list[Condition]]]
    value: str | None
    message: str
    headline: str | None
    evidence: list[Any]
    recommendations: list[str]

    def metrics(self) -> list[str]:
        names = [c.metric for c in self.applies_if + self.fires_if]
        for _, conds in self.severity:
            names += [c.metric for c in conds]
        return names


@dataclass
class Rule:
    id: str
    title: str
    category: str
    summary: str
    applies_if: list[Condition]
    fires_if: list[Condition]
    severity: list[tuple[str, list[Condition]]]
    thresholds: dict[str, Threshold]
    impact: dict[str, Any] | None
    value: str | None
    message: str
    headline: str | None
    evidence: list[Any]
    recommendations: list[str]
    doc: dict[str, str]
    source: str
    overrides: dict[str, float] = field(default_factory=dict)
    variants: list[Variant] = field(default_factory=list)

    def threshold_values(self) -> dict[str, float]:
        return {k: self.overrides.get(k, t.default) for k, t in self.thresholds.items()}

    def base(self) -> Variant:
        """The rule's own conditions and texts, as a variant."""
        return Variant("", "", None, self.applies_if, self.fires_if, self.severity, self.value,
                       self.message, self.headline, self.evidence, self.recommendations)

    def metrics(self) -> list[str]:
        names = self.base().metrics()
        if self.impact:
            names.append(self.impact["metric"])
        for v in self.variants:
            names += v.metrics()
        return list(dict.fromkeys(names))


# --- loading --------------------------------------------------------------------------------

def _cond(raw: Any, where: str, thresholds: dict[str, Any]) -> Condition:
    if not isinstance(raw, dict) or set(raw) - {"metric", "op", "threshold", "value"}:
        raise ConfigError(f"{where}: a condition is {{metric, op, threshold | value}}, got {raw!r}")
    m, op = raw.get("metric"), raw.get("op")
    if m not in REGISTRY:
        raise ConfigError(f"{where}: unknown metric {m!r}",
                          hint="`traceinsight rules --metrics` lists the metrics")
    if op not in OPS:
        raise ConfigError(f"{where}: op must be one of {' '.join(OPS)}, got {op!r}")
    if ("threshold" in raw) == ("value" in raw):
        raise ConfigError(f"{where}: give exactly one of threshold (a name) or value (a number)")
    if "threshold" in raw and raw["threshold"] not in thresholds:
        raise ConfigError(f"{where}: threshold {raw['threshold']!r} is not defined in thresholds")
    if "value" in raw and not isinstance(raw["value"], (int, float)):
        raise ConfigError(f"{where}: value must be a number")
    return Condition(m, op, raw.get("threshold"), float(raw["value"]) if "value" in raw else None)


def parse_rule(data: Any, source: str) -> Rule:
    if not isinstance(data, dict):
        raise ConfigError("a rule file holds one mapping", path=source)
    unknown = set(data) - RULE_KEYS
    if unknown:
        raise ConfigError(f"unknown keys {sorted(unknown)}", path=source,
                          hint=f"allowed: {', '.join(sorted(RULE_KEYS))}")
    missing = REQUIRED - set(data)
    if missing:
        raise ConfigError(f"missing keys {sorted(missing)}", path=source)
    for key in ("fires_if", "recommendations"):
        if not isinstance(data[key], list) or not data[key]:
            raise ConfigError(f"{key} must be a non-empty list, got {type(data[key]).__name__}",
                              path=source, hint="compare it with a shipped rule (rules/*.yaml)")
    rid = data["id"]
    if not isinstance(rid, str) or not _ID_RE.match(rid):
        raise ConfigError(f"id must be lower-case words joined by '-', got {rid!r}", path=source)
    if data["category"] not in CATEGORIES:
        raise ConfigError(f"category must be one of {', '.join(CATEGORIES)}", path=source)
    th_raw = data["thresholds"] or {}
    thresholds = {}
    for name, t in th_raw.items():
        thresholds[name] = _threshold(name, t, source)
    where = f"{source}"
    variants_raw = data.get("variants") or []
    if not isinstance(variants_raw, list):
        raise ConfigError("variants is a list of mappings", path=source)
    for raw in variants_raw:
        for name, t in ((raw.get("thresholds") or {}) if isinstance(raw, dict) else {}).items():
            if name in th_raw or name in thresholds:
                raise ConfigError(f"variant threshold {name!r} is defined twice", path=source)
            thresholds[name] = _threshold(name, t, source)
    th_all = {**th_raw, **{n: {} for n in thresholds}}
    fires = [_cond(c, where, th_raw) for c in data["fires_if"]]
    applies = [_cond(c, where, th_raw) for c in data.get("applies_if", []) or []]
    ladder = _ladder(data.get("severity", []) or [], where, th_raw, source)
    impact = data.get("impact")
    if impact is not None:
        if not isinstance(impact, dict) or impact.get("metric") not in REGISTRY or \
                set(impact) - {"metric", "factor", "max"}:
            raise ConfigError("impact is {metric: <declared metric>, factor: 0..1, max: pct}",
                              path=source)
    value = data.get("value")
    if value is not None and value not in REGISTRY:
        raise ConfigError(f"value names an unknown metric {value!r}", path=source)
    rule = Rule(
        id=rid, title=str(data["title"]), category=data["category"],
        summary=str(data.get("summary") or data["title"]), applies_if=applies, fires_if=fires,
        severity=ladder, thresholds=thresholds, impact=impact, value=value,
        message=str(data["message"]), headline=data.get("headline"),
        evidence=list(data.get("evidence") or []),
        recommendations=[str(r) for r in data["recommendations"]],
        doc={k: str(v) for k, v in (data.get("doc") or {}).items()}, source=source,
        variants=[_variant(raw, where, th_all, source) for raw in variants_raw])
    for k in ("symptom", "why", "fix"):
        if not rule.doc.get(k):
            raise ConfigError(f"doc.{k} is missing", path=source)
    from .evidence import PROVIDERS

    for v in [rule.base(), *rule.variants]:
        for text in [v.message, v.headline or "", *v.recommendations]:
            for _, fname, spec, _ in string.Formatter().parse(text):
                safeyaml.check_format_spec(spec, fname or "", source)
                if fname and fname not in REGISTRY and fname not in thresholds \
                        and fname not in FACTS:
                    raise ConfigError(f"text field {{{fname}}} is neither a metric, a threshold "
                                      "nor a fact", path=source)
        for ev in v.evidence:
            one = isinstance(ev, dict) and len(ev) == 1
            name = ev if isinstance(ev, str) else (next(iter(ev)) if one else None)
            if name not in PROVIDERS:
                raise ConfigError(f"unknown evidence {ev!r}", path=source,
                                  hint=f"one of {', '.join(sorted(PROVIDERS))}")
    return rule


def _threshold(name: str, t: Any, source: str) -> Threshold:
    if not isinstance(t, dict) or set(t) - {"default", "unit", "help"} or \
            not {"default", "unit", "help"} <= set(t):
        raise ConfigError(f"threshold {name!r} needs default, unit and help", path=source)
    if not isinstance(t["default"], (int, float)):
        raise ConfigError(f"threshold {name!r}: default must be a number", path=source)
    return Threshold(name, float(t["default"]), str(t["unit"]), str(t["help"]))


def _ladder(raw: list[Any], where: str, th: dict[str, Any],
            source: str) -> list[tuple[str, list[Condition]]]:
    ladder = []
    for step in raw:
        if not isinstance(step, dict) or step.get("level") not in SEVERITIES or \
                set(step) - {"level", "when"}:
            raise ConfigError("severity steps are {level: high|medium|low|info, when: [...]}",
                              path=source)
        ladder.append((step["level"], [_cond(c, where, th) for c in step.get("when", []) or []]))
    if not ladder or ladder[-1][1]:
        ladder.append(("low", []))
    return ladder


def _variant(raw: Any, where: str, th: dict[str, Any], source: str) -> Variant:
    if not isinstance(raw, dict):
        raise ConfigError("a variant is a mapping", path=source)
    unknown = set(raw) - VARIANT_KEYS
    missing = VARIANT_REQUIRED - set(raw)
    if unknown or missing:
        raise ConfigError(f"variant {raw.get('name')!r}: unknown keys {sorted(unknown)}, "
                          f"missing keys {sorted(missing)}", path=source,
                          hint=f"allowed: {', '.join(sorted(VARIANT_KEYS))}")
    value = raw.get("value")
    if value is not None and value not in REGISTRY:
        raise ConfigError(f"variant {raw['name']!r}: value names an unknown metric {value!r}",
                          path=source)
    return Variant(
        name=str(raw["name"]), when=str(raw["when"]), title=raw.get("title"),
        applies_if=[_cond(c, where, th) for c in raw.get("applies_if") or []],
        fires_if=[_cond(c, where, th) for c in raw["fires_if"]],
        severity=_ladder(raw.get("severity") or [], where, th, source), value=value,
        message=str(raw["message"]), headline=raw.get("headline"),
        evidence=list(raw.get("evidence") or []),
        recommendations=[str(r) for r in raw["recommendations"]])


def load_rules(extra_dirs: list[Path] | None = None, overrides: list[str] | None = None) -> list[Rule]:
    """The shipped rules, then the user's (same id replaces), with ``--set`` overrides applied."""
    rules: dict[str, Rule] = {}
    dirs = [data_dir("rules")] + [Path(d) for d in (extra_dirs or [])]
    for d in dirs:
        if not d.is_dir():
            raise ConfigError("rules folder not found", path=d)
        for f in sorted(d.glob("*.yaml")):
            data = safeyaml.load(f)  # bounded: no aliases, capped size, UTF-8
            try:
                rule = parse_rule(data, str(f))
            except (TypeError, AttributeError, KeyError, ValueError) as e:
                raise ConfigError(f"malformed rule ({type(e).__name__}: {e})", path=f,
                                  hint="compare it with a shipped rule (rules/*.yaml)") from None
            rules[rule.id] = rule
    for item in overrides or []:
        apply_override(rules, item)
    return list(rules.values())


def apply_override(rules: dict[str, Rule], item: str) -> None:
    m = re.match(r"^([a-z0-9-]+)\.([A-Za-z0-9_]+)=(.+)$", item.strip())
    if not m:
        raise ConfigError(f"--set {item!r}: expected RULE.THRESHOLD=NUMBER",
                          hint="e.g. --set comm-bound.min_exposed_comm_pct=20")
    rid, name, val = m.groups()
    if rid not in rules:
        raise ConfigError(f"--set {item!r}: no rule {rid!r}", hint="`traceinsight rules` lists them")
    if name not in rules[rid].thresholds:
        raise ConfigError(f"--set {item!r}: rule {rid} has no threshold {name!r}",
                          hint=f"its thresholds: {', '.join(rules[rid].thresholds)}")
    try:
        number = float(val)
    except ValueError:
        raise ConfigError(f"--set {item!r}: {val!r} is not a number",
                          hint="give a finite number, e.g. --set comm-bound.min_exposed_comm_pct=20"
                          ) from None
    if not math.isfinite(number):
        raise ConfigError(f"--set {item!r}: {val!r} is not a finite number",
                          hint="give a finite number, e.g. --set comm-bound.min_exposed_comm_pct=20")
    rules[rid].overrides[name] = number


# --- evaluation -----------------------------------------------------------------------------

def format_value(metric: str, v: float | None) -> str:
    """A metric's value as text by its registry unit (:func:`fmt.format_metric`)."""
    return fmt.format_metric(v, REGISTRY[metric].unit if metric in REGISTRY else "")


def render_text(text: str, values: dict[str, float | None], thresholds: dict[str, float],
                rule: Rule, facts: dict[str, str] | None = None) -> str:
    """Fill ``{metric}`` / ``{threshold}`` / ``{fact}`` fields: plain fields are formatted by
    unit, fields with a format spec (``{x:.1f}``) use it on the raw number, facts are text."""
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
            out.append(format_value(unit_name, v))
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
        try:
            th = rule.threshold_values()
            outcome = _decide_by_variants(rule, values, th, ms, context)
            if outcome is None:
                outcome = _decide(rule, rule.base(), values, th, ms, context)
            if isinstance(outcome, Finding):
                findings.append(outcome)
            else:
                statuses.append(outcome)
        except Exception as e:  # noqa: BLE001 - a crashing rule is recorded, others still run
            errors.append({"rule": rule.id, "error": f"{type(e).__name__}: {e}",
                           "traceback": traceback.format_exc(limit=5)})
    findings.sort(key=finding_sort_key)
    return Evaluation(findings, statuses, errors)


def _decide_by_variants(rule: Rule, values: dict[str, float | None], th: dict[str, float],
                        ms: MetricSet, context: Any) -> Finding | RuleStatus | None:
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


def _decide(rule: Rule, v: Variant, values: dict[str, float | None], th: dict[str, float],
            ms: MetricSet, context: Any) -> Finding | RuleStatus:
    """One variant (or the rule's own conditions) over the measured values."""
    from .evidence import build_evidence

    absent = [c.metric for c in v.applies_if + v.fires_if if values.get(c.metric) is None]
    if absent:
        m = absent[0]
        return RuleStatus(rule.id, "not-evaluated", f"{m}: {ms.missing.get(m, 'not measured')}",
                          REGISTRY[m].hint)
    if not all(c.holds(values, th) for c in v.applies_if):
        return RuleStatus(rule.id, "not-applicable", "; ".join(
            c.text(th) for c in v.applies_if if not c.holds(values, th)) + " is false")
    if not all(c.holds(values, th) for c in v.fires_if):
        return RuleStatus(rule.id, "passed", "; ".join(
            f"{c.metric} = {format_value(c.metric, values.get(c.metric))} "
            f"(fires at {c.op} {format_value(c.metric, c.limit(th))})" for c in v.fires_if))
    level = next(lv for lv, conds in v.severity if all(c.holds(values, th) for c in conds))
    impact = None  # rules about memory (not step time) estimate no time impact
    if rule.impact:
        x = values.get(rule.impact["metric"]) or 0.0
        impact = round(max(0.0, min(float(rule.impact.get("max", 100.0)),
                                    x * float(rule.impact.get("factor", 1.0)))), 2)
    measured = [{"metric": c.metric, "value": values.get(c.metric),
                 "display": format_value(c.metric, values.get(c.metric)),
                 "op": c.op, "threshold": c.limit(th),
                 "threshold_display": format_value(c.metric, c.limit(th)),
                 "threshold_name": c.threshold}
                for c in v.fires_if]
    title = "Measured vs threshold" + (f" ({v.when})" if v.name else "")
    evidence = [{"kind": "measurements", "title": title, "rows": measured}]
    evidence += build_evidence(v.evidence, ms, context)
    facts = ms.evidence.get("facts") or {}

    def text(t: str) -> str:
        return render_text(t, values, th, rule, facts)

    return Finding(
        rule=rule.id, severity=level, title=v.title or rule.title, category=rule.category,
        message=text(v.message), impact_pct=impact,
        value=values.get(v.value) if v.value else None,
        headline=text(v.headline) if v.headline else None, evidence=evidence,
        recommendations=[text(r) for r in v.recommendations])


def explain(rule: Rule) -> str:
    """``traceinsight rules --explain ID``."""
    th = rule.threshold_values()
    lines = [f"{rule.id} — {rule.title}", f"category: {rule.category}   file: {Path(rule.source).name}", ""]
    for k in ("symptom", "why", "fix"):
        lines.append(f"{k.capitalize()}: {rule.doc[k]}")
    lines.append("")
    if rule.applies_if:
        lines.append("Applies when: " + " and ".join(c.text(th) for c in rule.applies_if))
    lines.append("Fires when:   " + " and ".join(c.text(th) for c in rule.fires_if))
    for lv, conds in rule.severity:
        lines.append(f"  {lv:<6} " + (" and ".join(c.text(th) for c in conds) if conds else "otherwise"))
    if rule.impact:
        lines.append(f"Impact: {rule.impact['metric']} x {rule.impact.get('factor', 1)} "
                     "(share of step time it could recover)")
    for v in rule.variants:
        lines += ["", f"Variant {v.name} (tried first; {v.when}):"]
        if v.applies_if:
            lines.append("  Applies when: " + " and ".join(c.text(th) for c in v.applies_if))
        lines.append("  Fires when:   " + " and ".join(c.text(th) for c in v.fires_if))
        lines += [f"  - {r}" for r in v.recommendations]
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
        lines.append(f"  - {r}")
    return "\n".join(lines)


def rules_markdown(rules: list[Rule]) -> str:
    """docs/RULES.md: every shipped rule with its thresholds (generated)."""
    out = ["# Diagnosis rules", "",
           "Generated from `rules/*.yaml` (`python -m traceinsight.engine > docs/RULES.md`). "
           "Each rule is a YAML file: conditions over named metrics (`traceinsight rules --metrics`), "
           "thresholds with defaults, a severity ladder, an impact estimate (the share of step "
           "time the fix could recover), evidence tables and recommendations. Override a "
           "threshold with `--set RULE.THRESHOLD=VALUE`; add or replace rules with `--rules DIR`.",
           "", "| rule | category | what it finds |", "|---|---|---|"]
    for r in sorted(rules, key=lambda r: (r.category, r.id)):
        out.append(f"| [`{r.id}`](#{r.id}) | {r.category} | {r.summary} |")
    out.append("")
    for r in sorted(rules, key=lambda r: r.id):
        th = r.threshold_values()
        out += [f"## {r.id}", "", f"**{r.title}.** {r.doc['symptom']}", "",
                f"*Why it matters:* {r.doc['why']}", "", f"*Fix:* {r.doc['fix']}", ""]
        if r.applies_if:
            out.append("Applies when " + " and ".join(f"`{c.text(th)}`" for c in r.applies_if) + ".")
        out.append("Fires when " + " and ".join(f"`{c.text(th)}`" for c in r.fires_if) + ".")
        ladder = []
        for lv, conds in r.severity:
            ladder.append(f"{lv} if " + " and ".join(f"`{c.text(th)}`" for c in conds) if conds
                          else f"{lv} otherwise")
        out.append("Severity: " + "; ".join(ladder) + ".")
        if r.impact:
            out.append(f"Impact: `{r.impact['metric']}` x {r.impact.get('factor', 1)}.")
        out += ["", "| threshold | default | meaning |", "|---|---|---|"]
        for t in r.thresholds.values():
            out.append(f"| `{t.name}` | {t.default:g} {t.unit} | {t.help} |")
        out += ["", "Recommendations:", ""] + [f"- {x}" for x in r.recommendations] + [""]
        for v in r.variants:
            out += [f"**Variant `{v.name}`** ({v.when}; tried before the conditions above)."]
            if v.applies_if:
                out.append("Applies when " + " and ".join(f"`{c.text(th)}`"
                                                          for c in v.applies_if) + ".")
            out.append("Fires when " + " and ".join(f"`{c.text(th)}`" for c in v.fires_if) + ".")
            out += ["", "Recommendations:", ""] + [f"- {x}" for x in v.recommendations] + [""]
    return "\n".join(out)


if __name__ == "__main__":  # pragma: no cover
    print(rules_markdown(load_rules()))
