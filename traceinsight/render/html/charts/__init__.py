"""The charts of the HTML reports: one :data:`CHARTS` registry, one module per chart family.

Every chart builder returns ``Svg.to_dict()``; the pages (``diagnose_page``, ``memory_view``,
``host``, ``compare_page``) build their charts through :data:`CHARTS` (``CHARTS[name].build``)
and add the tables around them. An entry says where the chart is placed: the page, the report
section (``<section id=...>``) and the class its ``<svg>`` gets (the template's
``m.svg(chart, css)``), which is how tests and the browser check find it.

Adding a chart is a builder in a module here, one :class:`Chart` entry below and a case in
``tests/test_charts.py`` (the report it shows in); a module here without an entry, or an entry
without its case, fails that test.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from traceinsight.render.html.charts.breakdown import class_chart, rank_chart
from traceinsight.render.html.charts.categories import categories_chart
from traceinsight.render.html.charts.compare_bars import compare_bars
from traceinsight.render.html.charts.critical_path import critical_path_chart
from traceinsight.render.html.charts.host import host_chart
from traceinsight.render.html.charts.memory import memory_chart
from traceinsight.render.html.charts.ranks import heatmap
from traceinsight.render.html.charts.roofline import roofline_chart
from traceinsight.render.html.charts.segments import segment_chart
from traceinsight.render.html.charts.step_parts import step_parts_chart
from traceinsight.render.html.charts.steps import step_chart
from traceinsight.render.html.charts.timeline import timeline_chart
from traceinsight.render.html.charts.waterfall import waterfall_chart

__all__ = ["CHARTS", "Chart"]


@dataclass(frozen=True)
class Chart:
    """One chart of a report and where it is placed."""

    name: str
    build: Callable[..., Any]  #: the builder (``Svg.to_dict()``, or with extras: see its module)
    page: str  #: diagnose | compare
    section: str  #: the id of the report section it is drawn in
    css: str  #: the class of its ``<svg>`` in the report (after ``chart``)
    doc: str  #: what it shows


CHARTS: dict[str, Chart] = {
    c.name: c
    for c in (
        Chart(
            "steps",
            step_chart,
            "diagnose",
            "steps",
            "steps-chart",
            "step time per step, stacked by what the GPU did",
        ),
        Chart(
            "step_parts",
            step_parts_chart,
            "diagnose",
            "overview",
            "step-parts-chart",
            "the step time breakdown: each step stacked by kernel, memcpy, memset, runtime, "
            "data loader, CPU exec and other (summing to the step)",
        ),
        Chart(
            "ranks_gpu_time",
            rank_chart,
            "diagnose",
            "breakdown",
            "breakdown-chart",
            "GPU time per rank: compute, exposed communication and copies, idle",
        ),
        Chart(
            "kernel_classes",
            class_chart,
            "diagnose",
            "breakdown",
            "class-chart",
            "kernel time by class, all ranks",
        ),
        Chart(
            "critical_path",
            critical_path_chart,
            "diagnose",
            "timeline",
            "cp-chart",
            "the critical path of one step drawn over its host thread and streams, and its "
            "breakdown by category as a bar",
        ),
        Chart(
            "rank_heatmap",
            heatmap,
            "diagnose",
            "ranks",
            "heat-chart",
            "a per-rank, per-step figure as a heat map (step time, idle, exposed comm)",
        ),
        Chart(
            "timeline",
            timeline_chart,
            "diagnose",
            "timeline",
            "timeline-chart",
            "the GPU streams of one step",
        ),
        Chart(
            "roofline",
            roofline_chart,
            "diagnose",
            "roofline",
            "roofline-chart",
            "achieved FLOP/s against arithmetic intensity",
        ),
        Chart(
            "memory",
            memory_chart,
            "diagnose",
            "memory",
            "memory-chart",
            "allocated and reserved memory over time, per rank and device",
        ),
        Chart(
            "snapshot_memory",
            memory_chart,
            "diagnose",
            "memory",
            "memory-chart snapshot-chart",
            "an allocator snapshot's trace over time",
        ),
        Chart(
            "segments",
            segment_chart,
            "diagnose",
            "memory",
            "segment-chart",
            "the allocator's segments and their blocks",
        ),
        Chart(
            "memory_categories",
            categories_chart,
            "diagnose",
            "memory",
            "categories-chart",
            "memory by category over time (memory-timeline export)",
        ),
        Chart(
            "host", host_chart, "diagnose", "host", "host-chart", "a CPU-only run's step time split"
        ),
        Chart(
            "compare_bars",
            compare_bars,
            "compare",
            "breakdown",
            "cmp-breakdown-chart",
            "the mean step of each side, stacked",
        ),
        Chart(
            "waterfall",
            waterfall_chart,
            "compare",
            "waterfall",
            "waterfall-chart",
            "from the before step to the after step, one bar per contributor",
        ),
    )
}
