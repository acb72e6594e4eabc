"""The charts registry: every chart of ``render/html/charts`` is registered in ``CHARTS``, is
drawn on the report it belongs to (the samples, a memory snapshot, a memory-timeline export,
a comparison of two samples) and is found there, in its section, with shapes in it.

A chart module without a registry entry, or an entry without a report in :data:`SHOWN_IN`,
fails here; ``tests/test_browser.py`` walks the same registry in a real browser.
"""

from __future__ import annotations

import gzip
import json
import pkgutil
import re
from pathlib import Path

import pytest

from tracegen.snapshot import fragmented_oom
from traceinsight.compare.explain import compare
from traceinsight.diagnose import diagnose
from traceinsight.ingest import ingest
from traceinsight.render.html import charts, render_compare_html, render_html
from traceinsight.render.html.charts import CHARTS

REPO = Path(__file__).resolve().parent.parent
SAMPLES = REPO / "sample_traces"
TEMPLATES = REPO / "templates"

#: chart -> the report it is drawn on (keys of the ``reports`` fixture)
SHOWN_IN = {
    "steps": "launch_bound",
    "critical_path": "launch_bound",
    "step_parts": "launch_bound",
    "ranks_gpu_time": "launch_bound",
    "kernel_classes": "launch_bound",
    "rank_heatmap": "straggler",
    "timeline": "launch_bound",
    "roofline": "launch_bound",
    "memory": "launch_bound",
    "snapshot_memory": "snapshot",
    "segments": "snapshot",
    "memory_categories": "memory_timeline",
    "host": "cpu",
    "compare_bars": "compare",
    "waterfall": "compare",
}
PAGE_TEMPLATE = {"diagnose": "report.html", "compare": "compare.html"}


def memory_timeline(path: Path) -> Path:
    """A memory-timeline export: activations created and destroyed over four steps."""
    t0, rows = 1_790_000_000_000_000_000, [[-1, 1, 4 << 20, 0]]
    for i in range(4):
        rows.append([t0 + i * 1_000_000, 2, 64 << 20, 4])
        rows.append([t0 + i * 1_000_000 + 500_000, 4, -(64 << 20), 4])
    path.write_bytes(gzip.compress(json.dumps(rows).encode(), mtime=0))
    return path


def _diagnosed(paths: list[Path], tmp: Path, name: str):
    return diagnose(ingest(paths, tmp / f"{name}.tistore", quiet=True), cache=False)


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    tmp = tmp_path_factory.mktemp("charts")
    healthy = _diagnosed([SAMPLES / "synthetic_h100_healthy.json.gz"], tmp, "healthy")
    launch = _diagnosed([SAMPLES / "synthetic_h100_launch_bound.json.gz"], tmp, "launch")
    return {
        "launch_bound": render_html(launch),
        "straggler": render_html(
            _diagnosed([SAMPLES / "synthetic_straggler_4rank"], tmp, "straggler")
        ),
        "cpu": render_html(
            _diagnosed([SAMPLES / "cpu_transformer_train.pt.trace.json.gz"], tmp, "cpu")
        ),
        "snapshot": render_html(
            _diagnosed([fragmented_oom().write(tmp / "snap.pickle")], tmp, "snap")
        ),
        "memory_timeline": render_html(
            _diagnosed([memory_timeline(tmp / "mem.raw.json.gz")], tmp, "timeline")
        ),
        "compare": render_compare_html(compare(healthy, launch)),
    }


def section(html: str, sid: str) -> str:
    start = html.index(f'<section id="{sid}"')
    return html[start : html.index("</section>", start)]


def test_every_chart_module_is_registered() -> None:
    registered = {c.build.__module__ for c in CHARTS.values()}
    modules = {f"{charts.__name__}.{m.name}" for m in pkgutil.iter_modules(charts.__path__)}
    assert modules - registered == set(), "a chart module without an entry in CHARTS"
    assert all(n == c.name for n, c in CHARTS.items())


def test_every_registered_chart_has_its_report() -> None:
    assert set(SHOWN_IN) == set(CHARTS), "a chart without a report in SHOWN_IN (or stale)"


@pytest.mark.parametrize("name", sorted(CHARTS))
def test_the_template_places_the_chart(name: str) -> None:
    c = CHARTS[name]
    text = (TEMPLATES / PAGE_TEMPLATE[c.page]).read_text()
    assert re.search(rf'm\.svg\([^)]*"{re.escape(c.css)}"\)', text), (name, c.css)


@pytest.mark.parametrize("name", sorted(CHARTS))
def test_every_chart_is_drawn_in_its_section(reports: dict[str, str], name: str) -> None:
    c = CHARTS[name]
    html = section(reports[SHOWN_IN[name]], c.section)
    svgs = re.findall(rf'<svg class="chart {re.escape(c.css)}".*?</svg>', html, re.S)
    assert svgs, f"{name}: no svg.{c.css} in section {c.section}"
    assert all(re.search(r"<(rect|circle|path|polyline) ", s) for s in svgs), name
