"""The metric registry: every metric is declared once (name, unit, meaning, what capture
option it needs), and a :class:`MetricSet` holds the values measured for one run.

The metric groups (``metrics.GROUPS``: mode, timing, memory, memory snapshot, copies, comm,
cross-rank, roofline, precision) declare their metrics here; each :class:`MetricInfo` keeps the
module that declared it, and each :class:`MetricGroup` names the modules whose metrics it
computes (``tests/test_metrics_contract.py`` holds them together). Text facts (what a message
quotes: a call site, the calls behind a stall) are declared with :func:`declare_fact` and set
with :meth:`MetricSet.set_fact`; rules name them like metrics, but they are never conditions.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any


@dataclass(frozen=True, slots=True)
class MetricInfo:
    name: str
    unit: str
    doc: str
    needs: str | None = None  #: what the trace must contain (shown when the metric is missing)
    hint: str | None = None  #: how to record a trace that has it
    coverage: str | None = None  #: the % metric saying how much of the run this value rests on
    lower_bound: bool = False  #: the value only grows as coverage rises (modelled FLOPs, MFU)
    module: str = ""  #: the module that declared it (one of a group's ``modules``)
    #: the capture setting that records it (``util.capture_hints``: the hint is phrased for the
    #: input's tool); ``hint`` is then ignored
    setting: str | None = None


@dataclass(frozen=True)
class MetricGroup:
    """One group of metrics, run by ``compute_metrics`` in the order of ``metrics.GROUPS``."""

    name: str  #: shown in ``metric_errors`` when the group fails
    #: ``compute(analysis, metric_set)``, or ``(analysis, metric_set, options)`` with ``options``
    compute: Callable[..., Any]
    #: the modules whose declared metrics this group computes
    modules: tuple[ModuleType, ...]
    options: bool = False  #: ``compute`` takes the ``RooflineOptions``


REGISTRY: dict[str, MetricInfo] = {}
#: a lower-bound metric whose coverage is below this is shown as "≥ value"
LOWER_BOUND_BELOW_PCT = 50.0
#: text facts rule messages may quote (a call site to look at): name -> meaning. Their values
#: are strings in ``MetricSet.evidence["facts"]``.
FACTS: dict[str, str] = {}


def declare(
    name: str,
    unit: str,
    doc: str,
    *,
    needs: str | None = None,
    hint: str | None = None,
    coverage: str | None = None,
    lower_bound: bool = False,
    setting: str | None = None,
) -> None:
    """Add a metric to :data:`REGISTRY` (once per name)."""
    if name in REGISTRY:  # pragma: no cover - a programming error
        raise ValueError(f"metric {name} declared twice")
    module = str(sys._getframe(1).f_globals.get("__name__", ""))  # the declaring module
    REGISTRY[name] = MetricInfo(
        name, unit, doc, needs, hint, coverage, lower_bound, module, setting
    )


def coverage_table(values: dict[str, float | None]) -> dict[str, dict]:
    """For every measured metric resting on modelled work: its coverage metric and value, and
    whether the value is shown as a lower bound (the result's ``metrics.coverage``)."""
    out = {}
    for name, v in values.items():
        info = REGISTRY.get(name)
        if v is None or info is None or not info.coverage:
            continue
        cov = values.get(info.coverage)
        out[name] = {
            "metric": info.coverage,
            "coverage_pct": cov,
            "lower_bound": bool(info.lower_bound and (cov is None or cov < LOWER_BOUND_BELOW_PCT)),
        }
    return out


def declare_fact(name: str, doc: str) -> None:
    """Add a text fact to :data:`FACTS` (once per name)."""
    if name in FACTS or name in REGISTRY:  # pragma: no cover - a programming error
        raise ValueError(f"fact {name} declared twice")
    FACTS[name] = doc


@dataclass
class MetricSet:
    """Run-level values, per-rank values, evidence tables, and why each missing metric is."""

    values: dict[str, float | None] = field(default_factory=dict)
    per_rank: dict[int, dict[str, float | None]] = field(default_factory=dict)
    evidence: dict[str, Any] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)  #: metric -> why it is missing
    #: metric -> the capture setting that would record it, where the reason it is missing is
    #: not the metric's declared one (steps missing for a memory metric)
    settings: dict[str, str] = field(default_factory=dict)

    def set(
        self,
        name: str,
        value: float | None,
        *,
        why_missing: str | None = None,
        setting: str | None = None,
    ) -> None:
        if name not in REGISTRY:  # pragma: no cover - a programming error
            raise KeyError(f"undeclared metric {name}")
        if value is not None:
            value = float(value)
            if math.isnan(value):
                value = None
        self.values[name] = value
        if value is None:
            info = REGISTRY[name]
            self.missing[name] = why_missing or (
                f"needs {info.needs}" if info.needs else "not measurable"
            )
            if setting is not None:  # "" : missing for a reason no capture setting changes
                self.settings[name] = setting

    def setting_of(self, name: str) -> str | None:
        """The capture setting that would record a missing metric (None: not a capture
        setting, e.g. a command-line option the metric's own hint names)."""
        if name in self.settings:
            return self.settings[name] or None
        info = REGISTRY.get(name)
        return info.setting if info else None

    def get(self, name: str) -> float | None:
        return self.values.get(name)

    def set_fact(self, name: str, text: str) -> None:
        """A text fact (declared with :func:`declare_fact`) in ``evidence["facts"]``."""
        if name not in FACTS:  # pragma: no cover - a programming error
            raise KeyError(f"undeclared fact {name}")
        self.evidence.setdefault("facts", {})[name] = text

    def rank_set(self, rank: int, name: str, value: float | None) -> None:
        if value is not None:
            value = float(value)
            if math.isnan(value):
                value = None
        self.per_rank.setdefault(rank, {})[name] = value
