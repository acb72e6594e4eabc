"""Metrics: named, documented measurements that rules refer to.

Every metric is declared once in :data:`REGISTRY` (name, unit, meaning, and what capture
option it needs; see :mod:`.registry`) by a module of one of the :data:`GROUPS`, the one list
of metric groups; :func:`compute_metrics` runs the groups in that order and measures them for an
:class:`Analysis` and returns a :class:`MetricSet`: run-level values, per-rank values, evidence
tables, and for every metric that could not be measured the reason and the capture option that
would enable it.

Unit suffixes follow the project convention: ``_ns``, ``_bytes``, ``_pct`` (0-100), ``_ratio``,
``_per_step``, ``_count``.
"""

from __future__ import annotations

import traceback

from traceinsight.analysis import Analysis
from traceinsight.errors import ConfigError
from traceinsight.metrics import (
    comm,
    completeness,
    copies,
    host,
    idle_metrics,
    memory,
    mode,
    overview,
    precision,
    ranks,
    roofline,
    serving,
    snapshot,
    steps,
    timing,
)
from traceinsight.metrics.options import RooflineOptions
from traceinsight.metrics.registry import (
    LOWER_BOUND_BELOW_PCT,
    REGISTRY,
    MetricGroup,
    MetricInfo,
    MetricSet,
    coverage_table,
    declare,
)

__all__ = [
    "GROUPS",
    "LOWER_BOUND_BELOW_PCT",
    "REGISTRY",
    "MetricGroup",
    "MetricInfo",
    "MetricSet",
    "compute_metrics",
    "coverage_table",
    "declare",
]


#: the metric groups, run in this order (later groups read what earlier ones set)
GROUPS: list[MetricGroup] = [
    MetricGroup("mode", mode.compute, (mode,), options=True),
    MetricGroup("timing", timing.compute, (timing, steps, idle_metrics, completeness)),
    MetricGroup("memory", memory.compute, (memory,)),
    MetricGroup("memory snapshot", snapshot.compute, (snapshot,)),
    MetricGroup("copies", copies.compute, (copies,)),
    MetricGroup("communication", comm.compute, (comm,)),
    MetricGroup("cross-rank", ranks.compute, (ranks,)),
    MetricGroup("roofline", roofline.compute, (roofline,), options=True),
    MetricGroup("fabric", comm.fabric, (comm,), options=True),
    MetricGroup("precision", precision.compute, (precision,), options=True),
    MetricGroup("serving", serving.compute, (serving,)),
    MetricGroup("host", host.compute, (host,)),
    MetricGroup("overview", overview.compute, (overview,)),
    MetricGroup("run facts", mode.compute_facts, (mode,), options=True),
]


def compute_metrics(an: Analysis, options: RooflineOptions | None = None) -> MetricSet:
    """Run every group of :data:`GROUPS` over ``an``; a group that fails is recorded, not
    fatal."""
    from traceinsight.util.memory import release

    ms = MetricSet()
    opts = options or RooflineOptions()
    errors = []
    for group in GROUPS:
        try:
            if group.options:
                group.compute(an, ms, opts)
            else:
                group.compute(an, ms)
        except ConfigError:  # the user's configuration (a device file): one line, exit 2
            raise
        except Exception as e:  # one broken group must not hide the others
            errors.append(
                {
                    "group": group.name,
                    "error": f"{type(e).__name__}: {e}",
                    "traceback": traceback.format_exc(limit=6),
                }
            )
        release()  # what the group built and dropped (its selections of whole tables)
    ms.evidence["metric_errors"] = errors
    return ms
