"""When a recommendation applies: conditions on the run facts, and causes named by evidence.

A recommendation in a rule file may carry, beside its metric conditions (``if``):

* ``when: {FACT: VALUE, ...}``: given only when every fact holds. A value is a word (the
  fact equals it, or a list fact contains it), a list of words (any of them), ``true`` /
  ``false``, or a comparison on a share (``">= 10"``). A fact the trace cannot tell
  (``unknown``) does not hold: advice that needs a training run is not given to a run whose
  mode is unknown.
* ``unless: {FACT: VALUE, ...}``: withheld when any of them holds (an unknown fact does not).

FACT is a dotted run-fact name (:data:`traceinsight.analysis.run_facts.FLAT_NAMES`:
``mode``, ``engine``, ``vendor``, ``optimizer.impl``, ``matrix_dtypes.fp32_share``, ...).
A withheld recommendation is recorded in the finding's ``withheld`` list with the reason
(``not advised: optimizer.impl is foreach (aten::_foreach_add_ x6)``).

A rule may also list ``causes``: ``{match: REGEX, text: "...{culprit}...", when?, unless?}``.
The names in the first column of the finding's evidence tables (the host events, calls, ops or
frames it rests on, heaviest first) are matched against them; the first name that matches a
cause class gives the first recommendation, naming that event, before the generic advice.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from traceinsight.analysis.run_facts import FLAT_NAMES, UNKNOWN
from traceinsight.errors import ConfigError

_CMP = re.compile(r"^\s*(>=|<=|==|!=|>|<)\s*(-?\d+(?:\.\d+)?)\s*$")
_OPS = {
    ">=": float.__ge__,
    ">": float.__gt__,
    "<=": float.__le__,
    "<": float.__lt__,
    "==": float.__eq__,
    "!=": float.__ne__,
}
MAX_CULPRIT = 120  #: characters of an event name quoted in a recommendation


@dataclass(frozen=True)
class FactCond:
    """One run-fact condition: ``fact`` equals / contains one of ``words``, or compares."""

    fact: str
    words: tuple[str, ...] = ()
    op: str | None = None
    number: float | None = None

    def check(self, run: dict[str, Any]) -> bool | None:
        """True / False, or None when the trace cannot tell."""
        v = run.get(self.fact)
        if v is None or v == UNKNOWN:
            return None
        if self.op is not None:
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                return None
            return _OPS[self.op](float(v), float(self.number))  # type: ignore[arg-type]
        vals = v if isinstance(v, list) else [v]
        return any(_word(x) in self.words for x in vals)

    def text(self) -> str:
        if self.op is not None:
            return f"{self.fact} {self.op} {self.number:g}"
        return f"{self.fact} is {' or '.join(self.words)}"


def _word(x: Any) -> str:
    return ("true" if x else "false") if isinstance(x, bool) else str(x)


def parse_facts(raw: Any, where: str, source: str) -> tuple[FactCond, ...]:
    """``when`` / ``unless``: a mapping of fact names to values, checked here (one-line
    errors naming the file)."""
    if raw is None:
        return ()
    if not isinstance(raw, dict) or not raw:
        raise ConfigError(f"{where} is a mapping {{FACT: VALUE}}, got {raw!r}", path=source)
    out = []
    for name, val in raw.items():
        if name not in FLAT_NAMES:
            raise ConfigError(
                f"{where}: unknown run fact {name!r}",
                path=source,
                hint="run facts: " + ", ".join(FLAT_NAMES),
            )
        if isinstance(val, str) and _CMP.match(val):
            m = _CMP.match(val)
            assert m is not None
            if not name.endswith("_share"):
                raise ConfigError(
                    f"{where}: {name} is a word, not a share; compare it with a word",
                    path=source,
                )
            out.append(FactCond(name, (), m.group(1), float(m.group(2))))
            continue
        words = val if isinstance(val, list) else [val]
        if not words or any(
            not isinstance(w, (str, bool)) or (isinstance(w, str) and not w) for w in words
        ):
            raise ConfigError(
                f"{where}: {name} takes a word, a list of words, true/false or a comparison "
                f"such as '>= 10', got {val!r}",
                path=source,
            )
        if name.endswith("_share"):
            raise ConfigError(f"{where}: {name} is a share; compare it, e.g. '>= 10'", path=source)
        out.append(FactCond(name, tuple(_word(w) for w in words)))
    return tuple(out)


def withheld_reason(
    when: tuple[FactCond, ...],
    unless: tuple[FactCond, ...],
    run: dict[str, Any],
    facts: dict[str, Any],
) -> str | None:
    """Why a recommendation is not given (None: it is)."""
    for c in when:
        ok = c.check(run)
        if ok is None:
            return f"not advised: {c.fact} is unknown (it applies when {c.text()})"
        if not ok:
            return f"not advised: {_is(c, run)}{_because(c, facts)} (it applies when {c.text()})"
    for c in unless:
        if c.check(run):
            return f"not advised: {_is(c, run)}{_because(c, facts)}"
    return None


def _is(c: FactCond, run: dict[str, Any]) -> str:
    v = run.get(c.fact)
    if isinstance(v, (int, float)) and not isinstance(v, bool) and c.fact.endswith("_share"):
        return f"{c.fact} is {float(v):.0f}%"
    if isinstance(v, list):
        return f"{c.fact} is {', '.join(_word(x) for x in v) or 'none'}"
    return f"{c.fact} is {_word(v)}"


def _because(c: FactCond, facts: dict[str, Any]) -> str:
    f = facts.get(c.fact.split(".")[0]) or {}
    ev = str(f.get("evidence") or "")
    return f" ({ev[:160]})" if ev else ""


@dataclass(frozen=True)
class Cause:
    """A class of culprit named by evidence and the fix for that kind of cause."""

    name: str
    match: re.Pattern[str]
    text: str
    when: tuple[FactCond, ...] = ()
    unless: tuple[FactCond, ...] = ()


def parse_causes(raw: Any, source: str) -> list[Cause]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ConfigError("causes is a list of {name, match, text}", path=source)
    out = []
    for c in raw:
        if (
            not isinstance(c, dict)
            or set(c) - {"name", "match", "text", "when", "unless"}
            or not all(isinstance(c.get(k), str) and c.get(k) for k in ("name", "match", "text"))
        ):
            raise ConfigError(
                f"a cause is {{name, match: REGEX, text, when?, unless?}}, got {c!r}", path=source
            )
        if len(c["match"]) > 400:
            raise ConfigError(
                f"cause {c['name']!r}: match is longer than 400 characters", path=source
            )
        try:
            rx = re.compile(c["match"])
        except re.error as e:
            raise ConfigError(
                f"cause {c['name']!r}: match is no regex ({e})", path=source
            ) from None
        where = f"cause {c['name']!r}"
        out.append(
            Cause(
                c["name"],
                rx,
                c["text"],
                parse_facts(c.get("when"), f"{where} when", source),
                parse_facts(c.get("unless"), f"{where} unless", source),
            )
        )
    return out


def culprits(evidence: list[dict[str, Any]], n: int = 8) -> list[str]:
    """Event names the evidence tables lead with (first column, heaviest first)."""
    out: list[str] = []
    for e in evidence:
        if e.get("kind") != "table":
            continue
        for row in (e.get("rows") or [])[:n]:
            first = row[0] if isinstance(row, (list, tuple)) and row else None
            if isinstance(first, str) and first and first not in out:
                out.append(first)
    return out


def first_cause(
    causes: list[Cause], names: list[str], run: dict[str, Any]
) -> tuple[Cause, str] | None:
    """The cause class of the heaviest named culprit that has one (and applies to the run)."""
    for name in names:
        for c in causes:
            if c.match.search(name) and withheld_reason(c.when, c.unless, run, {}) is None:
                return c, name
    return None


def quote(name: str) -> str:
    """An event name as quoted in a recommendation: control characters out, bounded."""
    clean = "".join(ch if ch.isprintable() else " " for ch in name).replace("`", "'")
    if len(clean) > MAX_CULPRIT:
        clean = clean[: MAX_CULPRIT - 3] + "..."
    return f"`{clean}`"
