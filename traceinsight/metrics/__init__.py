"""Metrics: named, documented measurements that rules refer to.

Every metric is declared once in :data:`REGISTRY` (name, unit, meaning, and what capture
option it needs); :func:`compute_metrics` measures them all for an :class:`Analysis` and returns
a :class:`MetricSet`: run-level values, per-rank values, evidence tables, and for every metric
that could not be measured the reason and the capture option that would enable it.

Unit suffixes follow the project convention: ``_ns``, ``_bytes``, ``_pct`` (0-100), ``_ratio``,
``_per_step``, ``_count``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
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


REGISTRY: dict[str, MetricInfo] = {}
#: a lower-bound metric whose coverage is below this is shown as "≥ value"
LOWER_BOUND_BELOW_PCT = 50.0


def declare(name: str, unit: str, doc: str, *, needs: str | None = None,
            hint: str | None = None, coverage: str | None = None,
            lower_bound: bool = False) -> None:
    if name in REGISTRY:  # pragma: no cover - a programming error
        raise ValueError(f"metric {name} declared twice")
    REGISTRY[name] = MetricInfo(name, unit, doc, needs, hint, coverage, lower_bound)


def coverage_table(values: dict[str, float | None]) -> dict[str, dict]:
    """For every measured metric resting on modelled work: its coverage metric and value, and
    whether the value is shown as a lower bound (the result's ``metrics.coverage``)."""
    out = {}
    for name, v in values.items():
        info = REGISTRY.get(name)
        if v is None or info is None or not info.coverage:
            continue
        cov = values.get(info.coverage)
        out[name] = {"metric": info.coverage, "coverage_pct": cov,
                     "lower_bound": bool(info.lower_bound
                                         and (cov is None or cov < LOWER_BOUND_BELOW_PCT))}
    return out


@dataclass
class MetricSet:
    values: dict[str, float | None] = field(default_factory=dict)
    per_rank: dict[int, dict[str, float | None]] = field(default_factory=dict)
    evidence: dict[str, Any] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)  #: metric -> why it is missing

    def set(self, name: str, value: float | None, *, why_missing: str | None = None) -> None:
        if name not in REGISTRY:  # pragma: no cover - a programming error
            raise KeyError(f"undeclared metric {name}")
        if value is not None:
            value = float(value)
            if value != value:  # NaN
                value = None
        self.values[name] = value
        if value is None:
            info = REGISTRY[name]
            self.missing[name] = why_missing or (f"needs {info.needs}" if info.needs else "not measurable")

    def get(self, name: str) -> float | None:
        return self.values.get(name)

    def rank_set(self, rank: int, name: str, value: float | None) -> None:
        if value is not None:
            value = float(value)
            if value != value:
                value = None
        self.per_rank.setdefault(rank, {})[name] = value


# the metric groups declare their metrics on import
from . import comm, copies, memory, mode, precision, roofline, timing  # noqa: E402,F401
from .compute import compute_metrics  # noqa: E402

__all__ = ["LOWER_BOUND_BELOW_PCT", "REGISTRY", "MetricInfo", "MetricSet", "compute_metrics",
           "coverage_table", "declare"]
