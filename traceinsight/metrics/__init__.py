"""Metrics: named, documented measurements that rules refer to.

Every metric is declared once in :data:`REGISTRY` (name, unit, meaning, and what capture
option it needs; see :mod:`.registry`); :func:`compute_metrics` measures them all for an
:class:`Analysis` and returns a :class:`MetricSet`: run-level values, per-rank values, evidence
tables, and for every metric that could not be measured the reason and the capture option that
would enable it.

Unit suffixes follow the project convention: ``_ns``, ``_bytes``, ``_pct`` (0-100), ``_ratio``,
``_per_step``, ``_count``.
"""

from __future__ import annotations

import traceback

from traceinsight.analysis import Analysis

# the metric groups declare their metrics in the registry on import
from traceinsight.metrics import (
    comm,
    copies,
    memory,
    mode,
    precision,
    ranks,
    roofline,
    snapshot,
    timing,
)
from traceinsight.metrics.options import RooflineOptions
from traceinsight.metrics.registry import (
    LOWER_BOUND_BELOW_PCT,
    REGISTRY,
    MetricInfo,
    MetricSet,
    coverage_table,
    declare,
)

__all__ = [
    "LOWER_BOUND_BELOW_PCT",
    "REGISTRY",
    "MetricInfo",
    "MetricSet",
    "compute_metrics",
    "coverage_table",
    "declare",
]


def compute_metrics(an: Analysis, options: RooflineOptions | None = None) -> MetricSet:
    """Run every metric group over ``an``; a group that fails is recorded, not fatal."""
    ms = MetricSet()

    def _roofline() -> None:
        roofline.compute(an, ms, options or RooflineOptions())

    groups = (
        ("mode", lambda: mode.compute(an, ms, options)),
        ("timing", lambda: timing.compute(an, ms)),
        ("memory", lambda: memory.compute(an, ms)),
        ("memory snapshot", lambda: snapshot.compute(an, ms)),
        ("copies", lambda: copies.compute(an, ms)),
        ("communication", lambda: comm.compute(an, ms)),
        ("cross-rank", lambda: ranks.compute(an, ms)),
        ("roofline", _roofline),
        ("precision", lambda: precision.compute(an, ms, options)),
        ("run facts", lambda: mode.compute_facts(an, ms, options)),
    )
    errors = []
    for name, fn in groups:
        try:
            fn()
        except Exception as e:  # one broken group must not hide the others
            errors.append(
                {
                    "group": name,
                    "error": f"{type(e).__name__}: {e}",
                    "traceback": traceback.format_exc(limit=6),
                }
            )
    ms.evidence["metric_errors"] = errors
    return ms
