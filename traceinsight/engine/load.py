"""Loading and validating rule files (``rules/*.yaml``) for :mod:`traceinsight.engine.evaluate`.

A rule file is one mapping: conditions over declared metrics (structured, no ``eval``), named
thresholds with unit and help, a severity ladder, texts (message, headline, recommendations),
evidence providers, the docs, and optionally ``confidence`` and ``variants``. Everything is
checked on load in one path, for the rule's own conditions and for every variant alike:
unknown keys, undeclared metrics, thresholds without help or unit, text fields that are
neither a metric, a threshold nor a declared text fact, unknown evidence, conditional texts
(``{text, if: [conditions]}``) with bad conditions; each error names the file.
"""

from __future__ import annotations

import math
import operator
import re
import string
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from traceinsight.engine.advice import Cause, FactCond, parse_causes, parse_facts
from traceinsight.errors import ConfigError
from traceinsight.metrics import REGISTRY
from traceinsight.metrics.registry import FACTS
from traceinsight.result import SEVERITIES, SEVERITY_RANK
from traceinsight.util import fmt, safeyaml
from traceinsight.util.resources import data_dir

CATEGORIES = ("compute", "memory", "comm", "host", "input", "precision", "jitter", "data", "gpu")
OPS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge,
    ">": operator.gt,
    "<=": operator.le,
    "<": operator.lt,
    "==": operator.eq,
    "!=": operator.ne,
}
RULE_KEYS = {
    "id",
    "title",
    "category",
    "summary",
    "scope",
    "applies_if",
    "fires_if",
    "severity",
    "thresholds",
    "impact",
    "value",
    "message",
    "headline",
    "evidence",
    "recommendations",
    "confidence",
    "doc",
    "variants",
    "causes",
}
VARIANT_KEYS = {
    "name",
    "title",
    "when",
    "applies_if",
    "fires_if",
    "severity",
    "thresholds",
    "value",
    "message",
    "headline",
    "evidence",
    "recommendations",
}
VARIANT_REQUIRED = {"name", "when", "fires_if", "message", "recommendations"}
CONFIDENCE_KEYS = {"metric", "min_for_high", "min_for_medium"}
REQUIRED = {
    "id",
    "title",
    "category",
    "fires_if",
    "thresholds",
    "message",
    "recommendations",
    "doc",
}
_ID_RE = re.compile(r"^[a-z][a-z0-9-]*$")


def format_value(metric: str, v: float | None) -> str:
    """A metric's value as text by its registry unit (:func:`fmt.format_metric`)."""
    return fmt.format_metric(v, REGISTRY[metric].unit if metric in REGISTRY else "")


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
    #: run-fact conditions (:mod:`.advice`): all must hold / none may hold
    facts_when: tuple[FactCond, ...] = ()
    facts_unless: tuple[FactCond, ...] = ()

    def applies(self, values: dict[str, float | None], thresholds: dict[str, float]) -> bool:
        return all(c.holds(values, thresholds) for c in self.when)

    def describe(self, thresholds: dict[str, float]) -> str:
        parts = [c.text(thresholds) for c in self.when] + [c.text() for c in self.facts_when]
        out = self.text + (" (when " + " and ".join(parts) + ")" if parts else "")
        if self.facts_unless:
            out += " (not when " + " or ".join(c.text() for c in self.facts_unless) + ")"
        return out


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

    def cap(
        self, level: str, values: dict[str, float | None], thresholds: dict[str, float]
    ) -> tuple[str, str | None]:
        """The severity after the cap, and the reason when it was lowered."""
        cov = values.get(self.metric)
        hi, med = self.limits(thresholds)
        allowed = (
            "high"
            if cov is not None and cov >= hi
            else "medium"
            if cov is not None and cov >= med
            else "low"
        )
        if SEVERITY_RANK[level] >= SEVERITY_RANK[allowed]:
            return level, None
        need = hi if allowed == "medium" else med
        shown = "an unknown share" if cov is None else format_value(self.metric, cov)
        doc = REGISTRY[self.metric].doc
        return allowed, (
            f"Severity capped at {allowed} (would be {level}): the finding rests on "
            f"{shown} ({self.metric}: {doc}), below the {fmt.fmt_pct(need, 0)} "
            f"needed for {'high' if allowed == 'medium' else 'medium'}."
        )


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
    message: list[Text]
    headline: str | None
    evidence: list[Any]
    recommendations: list[Text]

    def metrics(self) -> list[str]:
        names = [c.metric for c in self.applies_if + self.fires_if]
        for _, conds in self.severity:
            names += [c.metric for c in conds]
        for t in self.message + self.recommendations:
            names += [c.metric for c in t.when]
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
    message: list[Text]
    headline: str | None
    evidence: list[Any]
    recommendations: list[Text]
    doc: dict[str, str]
    source: str
    confidence: Confidence | None = None
    overrides: dict[str, float] = field(default_factory=dict)
    variants: list[Variant] = field(default_factory=list)
    #: the kind of run the rule is about (``cpu_only == 1``): outside it the rule is neither
    #: evaluated nor listed (empty: every run)
    scope: list[Condition] = field(default_factory=list)

    def in_scope(self, values: dict[str, float | None]) -> bool:
        """Whether the run is of the kind the rule is about (every scope metric measured and
        every scope condition holding)."""
        th = self.threshold_values()
        return all(values.get(c.metric) is not None and c.holds(values, th) for c in self.scope)

    #: culprit classes named by evidence, each with its fix (:mod:`.advice`)
    causes: list[Cause] = field(default_factory=list)

    def threshold_values(self) -> dict[str, float]:
        return {k: self.overrides.get(k, t.default) for k, t in self.thresholds.items()}

    def base(self) -> Variant:
        """The rule's own conditions and texts, as a variant."""
        return Variant(
            "",
            "",
            None,
            self.applies_if,
            self.fires_if,
            self.severity,
            self.value,
            self.message,
            self.headline,
            self.evidence,
            self.recommendations,
        )

    def metrics(self) -> list[str]:
        names = self.base().metrics()
        if self.impact:
            names.append(self.impact["metric"])
        if self.confidence:
            names.append(self.confidence.metric)
        for v in self.variants:
            names += v.metrics()
        return list(dict.fromkeys(names))


# --- loading --------------------------------------------------------------------------------


def _cond(raw: Any, where: str, thresholds: dict[str, Any]) -> Condition:
    if not isinstance(raw, dict) or set(raw) - {"metric", "op", "threshold", "value"}:
        raise ConfigError(f"{where}: a condition is {{metric, op, threshold | value}}, got {raw!r}")
    m, op = raw.get("metric"), raw.get("op")
    if m not in REGISTRY:
        raise ConfigError(
            f"{where}: unknown metric {m!r}",
            hint="`traceinsight rules --metrics` lists the metrics",
        )
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
    items = [raw] if isinstance(raw, str) and what.endswith("message") else raw
    if not isinstance(items, list) or not items:
        raise ConfigError(
            f"{what} must be a non-empty list of strings or {{text, if}} entries", path=source
        )
    out = []
    for item in items:
        if isinstance(item, str):
            out.append(Text(item))
            continue
        if (
            not isinstance(item, dict)
            or set(item) - {"text", "if", "when", "unless"}
            or not isinstance(item.get("text"), str)
            or ("if" in item and (not isinstance(item["if"], list) or not item["if"]))
            or not set(item) & {"if", "when", "unless"}
        ):
            raise ConfigError(
                f'{what}: an entry is a string or {{text: "...", if: [conditions], '
                f"when: {{FACT: VALUE}}, unless: {{FACT: VALUE}}}}, got {item!r}",
                path=source,
            )
        out.append(
            Text(
                item["text"],
                tuple(_cond(c, f"{source}: {what}", thresholds) for c in item.get("if") or []),
                parse_facts(item.get("when"), f"{what} when", source),
                parse_facts(item.get("unless"), f"{what} unless", source),
            )
        )
    return out


def _confidence(raw: Any, source: str, thresholds: dict[str, Any]) -> Confidence | None:
    if raw is None:
        return None
    if not isinstance(raw, dict) or set(raw) != CONFIDENCE_KEYS:
        raise ConfigError(
            "confidence is {metric: <coverage metric, %>, min_for_high: N, "
            "min_for_medium: N} (numbers or threshold names)",
            path=source,
        )
    if raw["metric"] not in REGISTRY or REGISTRY[raw["metric"]].unit != "%":
        raise ConfigError(
            f"confidence.metric must be a declared % metric, got {raw['metric']!r}", path=source
        )
    for k in ("min_for_high", "min_for_medium"):
        v = raw[k]
        if (
            (isinstance(v, str) and v not in thresholds)
            or not isinstance(v, (str, int, float))
            or isinstance(v, bool)
        ):
            raise ConfigError(
                f"confidence.{k} must be a number or a threshold name, got {v!r}", path=source
            )
    return Confidence(
        raw["metric"],
        *(
            x if isinstance(x, str) else float(x)
            for x in (raw["min_for_high"], raw["min_for_medium"])
        ),
    )


def _threshold(name: str, t: Any, source: str) -> Threshold:
    if (
        not isinstance(t, dict)
        or set(t) - {"default", "unit", "help"}
        or not {"default", "unit", "help"} <= set(t)
    ):
        raise ConfigError(f"threshold {name!r} needs default, unit and help", path=source)
    if not isinstance(t["default"], (int, float)):
        raise ConfigError(f"threshold {name!r}: default must be a number", path=source)
    return Threshold(name, float(t["default"]), str(t["unit"]), str(t["help"]))


def _ladder(
    raw: list[Any], where: str, th: dict[str, Any], source: str
) -> list[tuple[str, list[Condition]]]:
    ladder = []
    for step in raw:
        if (
            not isinstance(step, dict)
            or step.get("level") not in SEVERITIES
            or set(step) - {"level", "when"}
        ):
            raise ConfigError(
                "severity steps are {level: high|medium|low|info, when: [...]}", path=source
            )
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
        raise ConfigError(
            f"variant {raw.get('name')!r}: unknown keys {sorted(unknown)}, "
            f"missing keys {sorted(missing)}",
            path=source,
            hint=f"allowed: {', '.join(sorted(VARIANT_KEYS))}",
        )
    if not isinstance(raw["fires_if"], list) or not raw["fires_if"]:
        raise ConfigError(
            f"variant {raw['name']!r}: fires_if must be a non-empty list", path=source
        )
    value = raw.get("value")
    if value is not None and value not in REGISTRY:
        raise ConfigError(
            f"variant {raw['name']!r}: value names an unknown metric {value!r}", path=source
        )
    what = f"variant {raw['name']!r}"
    return Variant(
        name=str(raw["name"]),
        when=str(raw["when"]),
        title=raw.get("title"),
        applies_if=[_cond(c, where, th) for c in raw.get("applies_if") or []],
        fires_if=[_cond(c, where, th) for c in raw["fires_if"]],
        severity=_ladder(raw.get("severity") or [], where, th, source),
        value=value,
        message=_texts(raw["message"], f"{what} message", source, th),
        headline=raw.get("headline"),
        evidence=list(raw.get("evidence") or []),
        recommendations=_texts(raw["recommendations"], f"{what} recommendations", source, th),
    )


def parse_rule(data: Any, source: str) -> Rule:
    if not isinstance(data, dict):
        raise ConfigError("a rule file holds one mapping", path=source)
    unknown = set(data) - RULE_KEYS
    if unknown:
        raise ConfigError(
            f"unknown keys {sorted(unknown)}",
            path=source,
            hint=f"allowed: {', '.join(sorted(RULE_KEYS))}",
        )
    missing = REQUIRED - set(data)
    if missing:
        raise ConfigError(f"missing keys {sorted(missing)}", path=source)
    for key in ("fires_if", "recommendations"):
        if not isinstance(data[key], list) or not data[key]:
            raise ConfigError(
                f"{key} must be a non-empty list, got {type(data[key]).__name__}",
                path=source,
                hint="compare it with a shipped rule (rules/*.yaml)",
            )
    rid = data["id"]
    if not isinstance(rid, str) or not _ID_RE.match(rid):
        raise ConfigError(f"id must be lower-case words joined by '-', got {rid!r}", path=source)
    if data["category"] not in CATEGORIES:
        raise ConfigError(f"category must be one of {', '.join(CATEGORIES)}", path=source)
    th_raw = data["thresholds"] or {}
    thresholds = {name: _threshold(name, t, source) for name, t in th_raw.items()}
    where = f"{source}"
    variants_raw = data.get("variants") or []
    if not isinstance(variants_raw, list):
        raise ConfigError("variants is a list of mappings", path=source)
    for raw in variants_raw:
        for name, t in ((raw.get("thresholds") or {}) if isinstance(raw, dict) else {}).items():
            if name in thresholds:
                raise ConfigError(f"variant threshold {name!r} is defined twice", path=source)
            thresholds[name] = _threshold(name, t, source)
    th_all = {**th_raw, **{n: {} for n in thresholds}}
    impact = data.get("impact")
    if impact is not None and (
        not isinstance(impact, dict)
        or impact.get("metric") not in REGISTRY
        or set(impact) - {"metric", "factor", "max", "less"}
        or not all(isinstance(x, str) for x in impact.get("less") or [])
    ):
        raise ConfigError(
            "impact is {metric: <declared metric>, factor: 0..1, max: pct, "
            "less: [ids of rules whose time it shares]}",
            path=source,
        )
    value = data.get("value")
    if value is not None and value not in REGISTRY:
        raise ConfigError(f"value names an unknown metric {value!r}", path=source)
    rule = Rule(
        id=rid,
        title=str(data["title"]),
        category=data["category"],
        summary=str(data.get("summary") or data["title"]),
        applies_if=[_cond(c, where, th_raw) for c in data.get("applies_if", []) or []],
        fires_if=[_cond(c, where, th_raw) for c in data["fires_if"]],
        severity=_ladder(data.get("severity", []) or [], where, th_raw, source),
        thresholds=thresholds,
        impact=impact,
        value=value,
        message=_texts(data["message"], "message", source, th_raw),
        headline=data.get("headline"),
        evidence=list(data.get("evidence") or []),
        recommendations=_texts(data["recommendations"], "recommendations", source, th_raw),
        doc={k: str(v) for k, v in (data.get("doc") or {}).items()},
        source=source,
        confidence=_confidence(data.get("confidence"), source, th_all),
        variants=[_variant(raw, where, th_all, source) for raw in variants_raw],
        scope=[_cond(c, where, th_raw) for c in data.get("scope") or []],
        causes=parse_causes(data.get("causes"), source),
    )
    for k in ("symptom", "why", "fix"):
        if not rule.doc.get(k):
            raise ConfigError(f"doc.{k} is missing", path=source)
    _check_texts_and_evidence(rule, thresholds, source)
    return rule


def _check_texts_and_evidence(rule: Rule, thresholds: dict[str, Threshold], source: str) -> None:
    """Every text field of the rule and its variants names a metric, a threshold or a fact
    (with a bounded format spec); every evidence entry names a provider."""
    from traceinsight.engine.evidence.core import PROVIDERS

    for v in [rule.base(), *rule.variants]:
        texts = [t.text for t in v.message + v.recommendations]
        texts += [c.text.replace("{culprit}", "") for c in rule.causes]
        for text in [v.headline or "", *texts]:
            for _, fname, spec, _ in string.Formatter().parse(text):
                safeyaml.check_format_spec(spec, fname or "", source)
                if (
                    fname
                    and fname not in REGISTRY
                    and fname not in thresholds
                    and fname not in FACTS
                ):
                    raise ConfigError(
                        f"text field {{{fname}}} is neither a metric, a threshold nor a fact",
                        path=source,
                    )
        for ev in v.evidence:
            one = isinstance(ev, dict) and len(ev) == 1
            name = ev if isinstance(ev, str) else (next(iter(ev)) if one else None)
            if name not in PROVIDERS:
                raise ConfigError(
                    f"unknown evidence {ev!r}",
                    path=source,
                    hint=f"one of {', '.join(sorted(PROVIDERS))}",
                )


def load_rules(
    extra_dirs: list[Path] | None = None, overrides: list[str] | None = None
) -> list[Rule]:
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
            except ConfigError as e:  # every rule-file error points at the format
                e.hint = e.hint or "compare it with a shipped rule (rules/*.yaml, docs/RULES.md)"
                raise
            except (TypeError, AttributeError, KeyError, ValueError) as e:
                raise ConfigError(
                    f"malformed rule ({type(e).__name__}: {e})",
                    path=f,
                    hint="compare it with a shipped rule (rules/*.yaml)",
                ) from None
            rules[rule.id] = rule
    for item in overrides or []:
        apply_override(rules, item)
    return list(rules.values())


def apply_override(rules: dict[str, Rule], item: str) -> None:
    m = re.match(r"^([a-z0-9-]+)\.([A-Za-z0-9_]+)=(.+)$", item.strip())
    if not m:
        raise ConfigError(
            f"--set {item!r}: expected RULE.THRESHOLD=NUMBER",
            hint="e.g. --set comm-bound.min_exposed_comm_pct=20",
        )
    rid, name, val = m.groups()
    example = "give a finite number, e.g. --set comm-bound.min_exposed_comm_pct=20"
    if rid not in rules:
        raise ConfigError(
            f"--set {item!r}: no rule {rid!r}", hint="`traceinsight rules` lists them"
        )
    if name not in rules[rid].thresholds:
        raise ConfigError(
            f"--set {item!r}: rule {rid} has no threshold {name!r}",
            hint=f"its thresholds: {', '.join(rules[rid].thresholds)}",
        )
    try:
        number = float(val)
    except ValueError:
        raise ConfigError(f"--set {item!r}: {val!r} is not a number", hint=example) from None
    if not math.isfinite(number):
        raise ConfigError(f"--set {item!r}: {val!r} is not a finite number", hint=example)
    rules[rid].overrides[name] = number
