"""Completeness checks as data-quality diagnostics, each with what it does to the verdicts
(:mod:`..analysis.completeness` measures them; the idle split calls idle inside an incompletely
recorded replay ``unrecorded``, and the rules resting on GPU idle cap their severity by
``idle_recorded_pct``).
"""

from __future__ import annotations

from traceinsight.analysis import Analysis
from traceinsight.analysis.completeness import HOLE_MIN_NS, completeness
from traceinsight.metrics.registry import MetricSet, declare
from traceinsight.util import capture_hints, fmt

for _n, _d in (
    ("graph_replays_incomplete", "CUDA/HIP graph replays whose nodes are only partly recorded"),
    ("kernels_without_launch", "kernels outside graph replays without a launch record"),
    ("tail_launches_unrecorded", "launches after the last recorded activity never recorded"),
):
    declare(_n, "count", _d, needs="GPU kernels", setting=capture_hints.GPU)


def compute(an: Analysis, ms: MetricSet, ranks: list[int]) -> None:
    log = an.attribution.diagnostics
    tot = {"inc": 0, "nol": 0, "tail": 0}
    for r in ranks:
        c = completeness(an, r)
        src = f"rank {r}"
        tot["inc"] += c.incomplete
        tot["nol"] += c.no_launch
        tot["tail"] += c.tail_launches
        if c.incomplete:
            why = []
            if c.short:
                why.append(
                    f"{c.short:,} hold under half the kernels of another replay of the graph"
                )
            if c.holed:
                why.append(
                    f"{c.holed:,} have holes of {fmt.fmt_ns(HOLE_MIN_NS)} or more between "
                    f"recorded nodes ({fmt.fmt_ns(c.hole_ns)} in all)"
                )
            if c.memsets_alone:
                why.append(f"{c.memsets_alone:,} memsets are not followed by their kernel")
            log.add(
                "graph-replay-incomplete",
                f"{c.incomplete:,} of {c.replays:,} CUDA/HIP graph replays are only partly "
                f"recorded ({'; '.join(why)}): the GPU idle inside them is counted as "
                "unrecorded work, not as idle with a cause, and the findings resting on GPU "
                "idle are capped by the share of idle that is recorded (idle_recorded_pct)",
                source=src,
                count=c.incomplete,
                hint="profile an eager step as well (CUDA graphs off, e.g. vLLM "
                "enforce_eager=True), or a newer PyTorch/CUPTI that records every graph node",
            )
        if c.no_launch:
            pre = c.no_launch_before_first == c.no_launch
            log.add(
                "kernels-without-launch",
                f"{c.no_launch:,} kernels ({fmt.fmt_ns(c.no_launch_ns)}) have no launch record"
                + (
                    ", all before the first recorded launch (work queued before the profiler "
                    "started)"
                    if pre
                    else f" ({c.no_launch - c.no_launch_before_first:,} after the first "
                    "recorded launch: lost records)"
                )
                + ": their ops are unknown and the GPU idle before them has no host-side "
                "cause (counted as unknown)",
                severity="info" if pre else "warning",
                source=src,
                count=c.no_launch,
            )
        if c.tail_launches:
            log.add(
                "truncated-tail",
                f"{c.tail_launches:,} kernel or graph launches in the last "
                f"{fmt.fmt_ns(c.tail_ns)} of the host timeline have no GPU record: the "
                "profiler stopped before the GPU ran them; a last step without its work is "
                "left out of the step statistics",
                severity="info",
                source=src,
                count=c.tail_launches,
                hint="stop the profiler after torch.cuda.synchronize() (a schedule does)",
            )
    ms.set("graph_replays_incomplete", float(tot["inc"]))
    ms.set("kernels_without_launch", float(tot["nol"]))
    ms.set("tail_launches_unrecorded", float(tot["tail"]))
