"""The rules engine: declarative rules (``rules/*.yaml``) evaluated over a :class:`MetricSet`.

A rule names metrics, compares them with named thresholds (no ``eval``: comparisons are
structured), picks a severity from a ladder, estimates the share of step time it could
recover, formats its message from the measured values, and attaches evidence. Rule files are
validated on load: unknown keys, undeclared metrics, thresholds without help or unit, message
fields that do not exist are errors naming the file. A rule whose metrics are missing is not
evaluated and says which capture option would enable it; a rule that crashes is recorded and
the others still run.

Advice and wording can depend on the run: a recommendation (or a part of the message) is a
string or ``{text: "...", if: [conditions]}``, given only when all its conditions hold (a
condition on a metric that was not measured does not hold), so training-only advice can
require ``is_training == 1``. A high finding decided by a metric resting on modelled work (MFU,
the roofline split) whose coverage is below 50% is capped at medium. A rule whose evidence
rests on modelled work can instead declare its own limits,
``confidence: {metric, min_for_high, min_for_medium}``: below those coverages its severity is
capped and the message says on how much of the run it rests. Text fields may also name text
facts (metrics declared with unit ``text``, their strings in ``MetricSet.evidence["text"]``),
such as the calls behind a stall.
"""

from __future__ import annotations

import operator
import re
import string
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

from . import fmt
from .errors import ConfigError
from .metrics import LOWER_BOUND_BELOW_PCT, REGISTRY, MetricSet
from .resources import data_dir
from .result import SEVERITIES, SEVERITY_RANK, Finding, finding_sort_key
from .rules_doc import explain, rules_markdown  # noqa: F401 - the CLI and make docs use them

_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
CATEGORIES = ("compute", "memory", "comm", "host", "input", "precision", "jitter", "data", "gpu")
OPS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt,
    "==": operator.eq, "!=": operator.ne,
}
RULE_KEYS = {"id", "title", "category", "summary", "applies_if", "fires_if", "severity",
             "thresholds", "impact", "value", "message", "headline", "evidence",
             "recommendations", "confidence", "doc"}
CONFIDENCE_KEYS = {"metric", "min_for_high", "min_for_medium"}
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
class Text:
    """A recommendation or message part, given only when all of ``when`` hold."""

    text: str
    when: tuple[Condition, ...] = ()

    def applies(self, values: dict[str, float | None], thresholds: dict[str, float]) -> bool:
        return all(c.holds(values, thresholds) for c in self.when)

    def describe(self, thresholds: dict[str, float]) -> str:
        if not self.when:
            return self.text
        return self.text + " (when " + " and ".join(c.text(thresholds) for c in self.when) + ")"


@dataclass(frozen=True)
class Confidence:
    """The coverage a rule's evidence rests on, and the coverage each severity needs."""

    metric: str
    min_for_high: float | str  #: a number or a threshold name
    min_for_medium: float | str

    def limits(self, thresholds: dict[str, float]) -> tuple[float, float]:
        def get(x: float | str) -> float:
            return thresholds[x] if isinstance(x, str) else float(x)
        return get(self.min_for_high), get(self.min_for_medium)

    def cap(self, level: str, values: dict[str, float | None],
            thresholds: dict[str, float]) -> tuple[str, str | None]:
        """The severity after the cap, and the reason when it was lowered."""
        cov = values.get(self.metric)
        hi, med = self.limits(thresholds)
        allowed = "high" if cov is not None and cov >= hi else \
            "medium" if cov is not None and cov >= med else "low"
        if SEVERITY_RANK[level] >= SEVERITY_RANK[allowed]:
            return level, None
        need = hi if allowed == "medium" else med
        shown = "an unknown share" if cov is None else format_value(self.metric, cov)
        doc = REGISTRY[self.metric].doc
        return allowed, (f"Severity capped at {allowed} (would be {level}): the finding rests on "
                         f"{shown} ({self.metric}: {doc}), below the {fmt.fmt_pct(need, 0)} "
                         f"needed for {'high' if allowed == 'medium' else 'medium'}.")


@dataclass(frozen=True)
class Threshold:
    name: str
    default: float
    unit: str
    help: str


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
    message: list[Text]
    headline: str | None
    evidence: list[Any]
    recommendations: list[Text]
    doc: dict[str, str]
    source: str
    confidence: Confidence | None = None
    overrides: dict[str, float] = field(default_factory=dict)

    def threshold_values(self) -> dict[str, float]:
        return {k: self.overrides.get(k, t.default) for k, t in self.thresholds.items()}

    def metrics(self) -> list[str]:
        names = [c.metric for c in self.applies_if + self.fires_if]
        for _, conds in self.severity:
            names += [c.metric for c in conds]
        if self.impact:
            names.append(self.impact["metric"])
        if self.confidence:
            names.append(self.confidence.metric)
        for t in self.message + self.recommendations:
            names += [c.metric for c in t.when]
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


def _texts(raw: Any, what: str, source: str, thresholds: dict[str, Any]) -> list[Text]:
    """``recommendations`` / ``message``: a string, or a list of strings and
    ``{text: ..., if: [conditions]}`` entries."""
    items = [raw] if isinstance(raw, str) and what == "message" else raw
    if not isinstance(items, list) or not items:
        raise ConfigError(f"{what} must be a non-empty list of strings or {{text, if}} entries",
                          path=source)
    out = []
    for item in items:
        if isinstance(item, str):
            out.append(Text(item))
            continue
        if not isinstance(item, dict) or set(item) - {"text", "if"} or \
                not isinstance(item.get("text"), str) or not isinstance(item.get("if"), list) \
                or not item["if"]:
            raise ConfigError(f"{what}: an entry is a string or {{text: \"...\", if: [conditions]}}"
                              f", got {item!r}", path=source)
        out.append(Text(item["text"], tuple(_cond(c, f"{source}: {what}", thresholds)
                                            for c in item["if"])))
    return out


def _confidence(raw: Any, source: str, thresholds: dict[str, Any]) -> Confidence | None:
    if raw is None:
        return None
    if not isinstance(raw, dict) or set(raw) != CONFIDENCE_KEYS:
        raise ConfigError("confidence is {metric: <coverage metric, %>, min_for_high: N, "
                          "min_for_medium: N} (numbers or threshold names)", path=source)
    if raw["metric"] not in REGISTRY or REGISTRY[raw["metric"]].unit != "%":
        raise ConfigError(f"confidence.metric must be a declared % metric, got {raw['metric']!r}",
                          path=source)
    for k in ("min_for_high", "min_for_medium"):
        v = raw[k]
        if (isinstance(v, str) and v not in thresholds) or not isinstance(v, (str, int, float)):
            raise ConfigError(f"confidence.{k} must be a number or a threshold name, got {v!r}",
                              path=source)
    return Confidence(raw["metric"], *(x if isinstance(x, str) else float(x) for x in
                                       (raw["min_for_high"], raw["min_for_medium"])))


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
    rid = data["id"]
    if not isinstance(rid, str) or not _ID_RE.match(rid):
        raise ConfigError(f"id must be lower-case words joined by '-', got {rid!r}", path=source)
    if data["category"] not in CATEGORIES:
        raise ConfigError(f"category must be one of {', '.join(CATEGORIES)}", path=source)
    th_raw = data["thresholds"] or {}
    thresholds = {}
    for name, t in th_raw.items():
        if not isinstance(t, dict) or set(t) - {"default", "unit", "help"} or \
                not {"default", "unit", "help"} <= set(t):
            raise ConfigError(f"threshold {name!r} needs default, unit and help", path=source)
        if not isinstance(t["default"], (int, float)):
            raise ConfigError(f"threshold {name!r}: default must be a number", path=source)
        thresholds[name] = Threshold(name, float(t["default"]), str(t["unit"]), str(t["help"]))
    where = f"{source}"
    fires = [_cond(c, where, th_raw) for c in data["fires_if"]]
    applies = [_cond(c, where, th_raw) for c in data.get("applies_if", []) or []]
    ladder = []
    for step in data.get("severity", []) or []:
        if not isinstance(step, dict) or step.get("level") not in SEVERITIES or \
                set(step) - {"level", "when"}:
            raise ConfigError(f"severity steps are {{level: high|medium|low|info, when: [...]}}",
                              path=source)
        ladder.append((step["level"], [_cond(c, where, th_raw) for c in step.get("when", []) or []]))
    if not ladder or ladder[-1][1]:
        ladder.append(("low", []))
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
        message=_texts(data["message"], "message", source, th_raw), headline=data.get("headline"),
        evidence=list(data.get("evidence") or []),
        recommendations=_texts(data["recommendations"], "recommendations", source, th_raw),
        doc={k: str(v) for k, v in (data.get("doc") or {}).items()}, source=source,
        confidence=_confidence(data.get("confidence"), source, th_raw))
    for k in ("symptom", "why", "fix"):
        if not rule.doc.get(k):
            raise ConfigError(f"doc.{k} is missing", path=source)
    texts = [t.text for t in rule.message + rule.recommendations]
    for text in [rule.headline or "", *texts]:
        for _, fname, _, _ in string.Formatter().parse(text):
            if fname and fname not in REGISTRY and fname not in thresholds:
                raise ConfigError(f"text field {{{fname}}} is neither a metric nor a threshold",
                                  path=source)
    from . import evidence_idle  # noqa: F401 - registers the idle-cause providers
    from .evidence import PROVIDERS

    for ev in rule.evidence:
        name = ev if isinstance(ev, str) else (next(iter(ev)) if isinstance(ev, dict) and len(ev) == 1 else None)
        if name not in PROVIDERS:
            raise ConfigError(f"unknown evidence {ev!r}", path=source,
                              hint=f"one of {', '.join(sorted(PROVIDERS))}")
    return rule


def load_rules(extra_dirs: list[Path] | None = None, overrides: list[str] | None = None) -> list[Rule]:
    """The shipped rules, then the user's (same id replaces), with ``--set`` overrides applied."""
    rules: dict[str, Rule] = {}
    dirs = [data_dir("rules")] + [Path(d) for d in (extra_dirs or [])]
    for d in dirs:
        if not d.is_dir():
            raise ConfigError("rules folder not found", path=d)
        for f in sorted(d.glob("*.yaml")):
            try:
                data = yaml.load(f.read_text(encoding="utf-8"), Loader=_YAML_LOADER)
            except yaml.YAMLError as e:
                raise ConfigError(f"invalid YAML: {str(e).splitlines()[0]}", path=f)
            rule = parse_rule(data, str(f))
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
        rules[rid].overrides[name] = float(val)
    except ValueError:
        raise ConfigError(f"--set {item!r}: {val!r} is not a number")


# --- evaluation -----------------------------------------------------------------------------

def format_value(metric: str, v: float | None) -> str:
    """A metric's value as text by its registry unit (:func:`fmt.format_metric`)."""
    return fmt.format_metric(v, REGISTRY[metric].unit if metric in REGISTRY else "")


def lower_bound_prefix(metric: str, values: dict[str, float | None]) -> str:
    """"≥ " for a metric that only grows with its coverage (MFU, achieved FLOP/s) when that
    coverage is below :data:`LOWER_BOUND_BELOW_PCT`: the value shown is a lower bound."""
    info = REGISTRY.get(metric)
    if info is None or not info.lower_bound or not info.coverage:
        return ""
    cov = values.get(info.coverage)
    return "≥ " if cov is None or cov < LOWER_BOUND_BELOW_PCT else ""


def render_text(text: str, values: dict[str, float | None], thresholds: dict[str, float],
                rule: Rule) -> str:
    """Fill ``{metric}`` / ``{threshold}`` fields: plain fields are formatted by unit, fields with
    a format spec (``{x:.1f}``) use it on the raw number. A lower-bound metric resting on too
    little modelled work is shown as ``≥ value``."""
    out = []
    for literal, fname, spec, _conv in string.Formatter().parse(text):
        out.append(literal)
        if fname is None:
            continue
        if fname in values:
            v = values[fname]
            unit_name = fname
        else:
            v = thresholds.get(fname)
            unit_name = None
        if v is None:
            out.append("–")
        elif isinstance(v, str):  # a text fact (unit "text"), e.g. the calls behind a stall
            out.append(v)
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

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


@dataclass
class Evaluation:
    findings: list[Finding]
    statuses: list[RuleStatus]
    errors: list[dict[str, str]]


def evaluate(rules: list[Rule], ms: MetricSet, context: Any = None) -> Evaluation:
    from .evidence import build_evidence

    findings, statuses, errors = [], [], []
    values = dict(ms.values)
    #: what messages show: the values and the text facts (metrics of unit "text")
    shown: dict[str, Any] = {**values, **(ms.evidence.get("text") or {})}
    for rule in rules:
        try:
            th = rule.threshold_values()
            needed = [c.metric for c in rule.applies_if + rule.fires_if]
            absent = [m for m in needed if values.get(m) is None]
            if absent:
                m = absent[0]
                info = REGISTRY[m]
                statuses.append(RuleStatus(rule.id, "not-evaluated",
                                           f"{m}: {ms.missing.get(m, 'not measured')}", info.hint))
                continue
            if not all(c.holds(values, th) for c in rule.applies_if):
                statuses.append(RuleStatus(rule.id, "not-applicable",
                                           "; ".join(c.text(th) for c in rule.applies_if
                                                     if not c.holds(values, th)) + " is false"))
                continue
            if not all(c.holds(values, th) for c in rule.fires_if):
                statuses.append(RuleStatus(rule.id, "passed", "; ".join(
                    f"{c.metric} = {format_value(c.metric, values.get(c.metric))} "
                    f"(fires at {c.op} {format_value(c.metric, c.limit(th))})" for c in rule.fires_if)))
                continue
            level, step = next((lv, conds) for lv, conds in rule.severity
                               if all(c.holds(values, th) for c in conds))
            capped = None
            if rule.confidence:
                level, capped = rule.confidence.cap(level, values, th)
            if level == "high" and rule.confidence is None:  # a stated confidence rules
                capped = _modelled_cap(rule.fires_if + step, values)
                level = "medium" if capped else level
            impact = None  # rules about memory (not step time) estimate no time impact
            if rule.impact:
                v = values.get(rule.impact["metric"]) or 0.0
                impact = round(max(0.0, min(float(rule.impact.get("max", 100.0)),
                                            v * float(rule.impact.get("factor", 1.0)))), 2)
            measured = [{"metric": c.metric, "value": values.get(c.metric),
                         "display": format_value(c.metric, values.get(c.metric)),
                         "op": c.op, "threshold": c.limit(th),
                         "threshold_display": format_value(c.metric, c.limit(th)),
                         "threshold_name": c.threshold, **_coverage_of(c.metric, values)}
                        for c in rule.fires_if]
            evidence = [{"kind": "measurements", "title": "Measured vs threshold", "rows": measured}]
            evidence += build_evidence(rule.evidence, ms, context)
            message = " ".join(render_text(t.text, shown, th, rule) for t in rule.message
                               if t.applies(values, th))
            if capped:
                message += " " + capped
            findings.append(Finding(
                rule=rule.id, severity=level, title=rule.title, category=rule.category,
                message=message,
                impact_pct=impact,
                value=values.get(rule.value) if rule.value else None,
                headline=render_text(rule.headline, shown, th, rule) if rule.headline else None,
                evidence=evidence,
                recommendations=[render_text(r.text, shown, th, rule)
                                 for r in rule.recommendations if r.applies(values, th)],
                confidence=_confidence_of(rule, values, th, capped)))
        except Exception as e:  # noqa: BLE001 - a crashing rule is recorded, others still run
            errors.append({"rule": rule.id, "error": f"{type(e).__name__}: {e}",
                           "traceback": traceback.format_exc(limit=5)})
    findings.sort(key=finding_sort_key)
    return Evaluation(findings, statuses, errors)


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
            return (f"Severity capped at medium (would be high): {c.metric} rests on {shown} "
                    f"modelled ({info.coverage}), below the {need} a high finding needs.")
    return None


def _coverage_of(metric: str, values: dict[str, float | None]) -> dict[str, Any]:
    """For a metric resting on modelled work: the metric giving its coverage and its value."""
    info = REGISTRY.get(metric)
    if info is None or not info.coverage:
        return {}
    return {"coverage_metric": info.coverage, "coverage_pct": values.get(info.coverage),
            "lower_bound": bool(info.lower_bound and lower_bound_prefix(metric, values))}


def _confidence_of(rule: Rule, values: dict[str, float | None], th: dict[str, float],
                   capped: str | None) -> dict[str, Any] | None:
    if rule.confidence is None:
        return {"capped": capped} if capped else None
    hi, med = rule.confidence.limits(th)
    return {"metric": rule.confidence.metric, "value": values.get(rule.confidence.metric),
            "min_for_high": hi, "min_for_medium": med, "capped": capped}


if __name__ == "__main__":  # pragma: no cover
    print(rules_markdown(load_rules()))
