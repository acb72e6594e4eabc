"""Overview metrics (the TensorBoard plugin's GPU summary): kernel time on tensor cores, the
estimated SM efficiency and the estimated achieved occupancy (``analysis/overview.py`` holds
the definitions), and the section behind them: the step time breakdown and the operators by
input shape (``evidence["overview"]``, the result's ``overview``).

The SM efficiency and the occupancy are only measured where the trace records their inputs
(Kineto ``blocks per SM`` / a grid with the device's SM count, ``est. achieved occupancy %``);
below :data:`MIN_KNOWN_PCT` of kernel time with them they are missing, never a guess.
"""

from __future__ import annotations

from typing import Any

from traceinsight.analysis import Analysis
from traceinsight.analysis.op_shapes import ops_by_shape
from traceinsight.analysis.overview import (
    achieved_occupancy,
    sm_efficiency,
    step_breakdown,
    tensor_cores,
)
from traceinsight.metrics.registry import MetricSet, declare

MIN_KNOWN_PCT = 50.0  #: the share of kernel time an estimate must rest on
NEEDS_BLOCKS = (
    "kernels with blocks per SM (Kineto 'blocks per SM') or a grid size and the device's SM "
    "count (deviceProperties numSms)"
)
NEEDS_OCC = "kernels with an estimated achieved occupancy (Kineto 'est. achieved occupancy %')"
HINT_KINETO = "record with a PyTorch profiler that writes kernel launch details (1.8 or later)"

declare(
    "tensor_core_time_pct",
    "%",
    "kernel time on tensor / matrix cores (by kernel name and dtype: the rule is in the "
    "result's overview.tensor_cores.rule), % of kernel time",
    needs="GPU kernels",
)
declare(
    "tensor_core_time_ns",
    "ns",
    "the kernel time behind tensor_core_time_pct (all steps)",
    needs="GPU kernels",
)
declare(
    "sm_efficiency_pct",
    "%",
    "estimated SM efficiency: blocks per SM of the running kernels, summed and capped at 1, "
    "averaged over the analysed window per device (idle counts as 0), mean over ranks",
    needs=NEEDS_BLOCKS,
    hint=HINT_KINETO,
)
declare(
    "achieved_occupancy_pct",
    "%",
    "estimated achieved occupancy: mean of the recorded estimate weighted by each kernel's "
    "time in the analysed window, mean over ranks",
    needs=NEEDS_OCC,
    hint=HINT_KINETO,
)


def _rank_mean(ms: MetricSet, name: str, est: dict[str, Any], needs: str) -> None:
    per = est.get("per_rank") or {}
    known = est.get("known_pct")
    for rank, v in per.items():
        ms.rank_set(int(rank), name, v)
    if per and known is not None and known >= MIN_KNOWN_PCT:
        ms.set(name, sum(per.values()) / len(per))
    elif known:
        ms.set(name, None, why_missing=f"needs {needs} (recorded on {known:.0f}% of kernel time)")
    else:
        ms.set(name, None)


def compute(an: Analysis, ms: MetricSet) -> None:
    tc = tensor_cores(an)
    sm = sm_efficiency(an)
    occ = achieved_occupancy(an)
    if tc is not None:
        ms.set("tensor_core_time_pct", tc["tensor_core_pct"])
        ms.set("tensor_core_time_ns", tc["tensor_core_ns"])
    else:
        ms.set("tensor_core_time_pct", None)
        ms.set("tensor_core_time_ns", None)
    _rank_mean(ms, "sm_efficiency_pct", sm, NEEDS_BLOCKS)
    _rank_mean(ms, "achieved_occupancy_pct", occ, NEEDS_OCC)
    ms.evidence["overview"] = {
        "tensor_cores": tc,
        "sm_efficiency": {**sm, "pct": ms.values.get("sm_efficiency_pct")},
        "occupancy": {**occ, "pct": ms.values.get("achieved_occupancy_pct")},
        "step_breakdown": step_breakdown(an),
        "ops_by_shape": ops_by_shape(an),
    }
