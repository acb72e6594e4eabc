"""Host metrics of a run without GPU kernels: where the step time of a CPU-only run went.

The GPU metrics cannot describe a CPU-only trace (a CPU run, or a GPU run profiled without
``ProfilerActivity.CUDA``); its op tree, annotations and step markers still answer the same
question for the host (``analysis/host.py``: the split of step time into data loading,
synchronisation, framework ops and the rest). This group measures that split for the rules
scoped to such runs (``scope: cpu_only == 1``, ``rules/cpu-*.yaml``) and keeps the host view
for the result's ``host`` section (``evidence["host_view"]``). On a run with GPU kernels it sets
nothing: those metrics are about another kind of run. Nor is a salvaged trace whose GPU events
were all past the cut a CPU-only run (``analysis/truncation.py``): ``cpu_only`` stays unset.
"""

from __future__ import annotations

from traceinsight.analysis import Analysis
from traceinsight.analysis.host import host_view
from traceinsight.analysis.truncation import truncation
from traceinsight.metrics.registry import MetricSet, declare

#: the parts of the split (analysis/host.py) -> their metric
PARTS = {
    "data loading": "host_input_pct",
    "synchronisation": "host_sync_pct",
    "framework ops": "host_ops_pct",
    "Python and other host work": "host_python_pct",
}

declare("cpu_only", "bool", "1 for a run with CPU ops and no GPU activity (absent otherwise)")
declare(
    "host_input_pct",
    "%",
    "host step time in data loading (DataLoader ranges and ops), CPU-only run",
)
declare(
    "host_sync_pct",
    "%",
    "host step time waiting (.item(), collectives, barriers), CPU-only run",
)
declare("host_ops_pct", "%", "host step time in top-level framework ops, CPU-only run")
declare(
    "host_python_pct",
    "%",
    "host step time in no framework op (Python loop, interpreter, profiler), CPU-only run",
)
declare(
    "host_matmul_pct",
    "%",
    "host step time in matrix multiplications and convolutions (self time), CPU-only run",
)


def compute(an: Analysis, ms: MetricSet) -> None:
    if ms.values.get("has_gpu") != 0.0:  # GPU activity (or not measured): the GPU metrics apply
        return
    view = host_view(an)
    cut = truncation(an.store)
    if cut is not None and cut.gpu_lost:
        # a salvaged trace cut before its GPU events: not a CPU-only run (its GPU part was
        # lost), so no CPU-only verdict; the host split still describes what was kept
        view = {**view, "headline": None}
    ms.evidence["host_view"] = view
    if not view.get("headline") and cut is None:  # no CPU ops either
        return
    if cut is None:
        ms.set("cpu_only", 1.0)
    for p in view["split"]:
        ms.set(PARTS[p["part"]], p["pct"])
    ms.set("host_matmul_pct", view["matmul_pct"])
