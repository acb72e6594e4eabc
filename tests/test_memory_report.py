"""The report's memory section: the capacity line at its true height (or named, never drawn at a
wrong one), a data-quality note when allocated lies above reserved, one chart for ranks with
identical curves, one capacity share quoted everywhere, and the allocator snapshot's charts
(curves, segment map) and frames."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from tracegen.snapshot import fragmented_oom
from traceinsight.diagnose import diagnose
from traceinsight.ingest import ingest
from traceinsight.render.html import render_html
from traceinsight.render.html.charts.memory import memory_chart
from traceinsight.render.html.memory_view import capacity_share, memory_view
from traceinsight.result import DiagnosisResult

GiB = 1 << 30


def _line_y(chart: dict[str, Any], cls: str) -> float | None:
    for it in chart["items"]:
        if it["el"] == "line" and it["a"].get("class") == cls:
            return float(it["a"]["y1"])
    return None


def _tick_y(chart: dict[str, Any], label: str) -> float:
    for i, it in enumerate(chart["items"]):
        if it["el"] == "text" and it["text"] == label:
            return float(chart["items"][i - 1]["a"]["y1"])  # the grid line drawn before it
    raise AssertionError(f"no tick {label}")


def series(rank: int, alloc_gib: list[float], res_gib: list[float], t0: int = 0) -> dict:
    return {
        "rank": rank,
        "device": 0,
        "ts_ns": [t0 + i * 1000 for i in range(len(alloc_gib))],
        "allocated": [int(a * GiB) for a in alloc_gib],
        "reserved": [int(r * GiB) for r in res_gib],
    }


def test_capacity_line_at_its_true_height() -> None:
    # GIVEN a device of 79 GiB whose memory peaks at 44 GiB
    cap = 79 * GiB
    c = memory_chart(series(0, [10, 40, 44], [20, 44, 44]), cap)["chart"]
    y_cap = _line_y(c, "mem-cap")
    assert y_cap is not None
    # THEN the line sits where 79 GiB is on the axis (between the 75 and 100 GiB ticks, when
    # those exist, else above the 75 GiB tick by 4/25 of a tick step)
    y0, y25 = _tick_y(c, "0 GiB"), _tick_y(c, "25 GiB")
    per_gib = (y0 - y25) / 25
    assert abs((y0 - y_cap) / per_gib - 79) < 0.5


def test_capacity_far_above_the_data_is_named_not_drawn() -> None:
    c = memory_chart(series(0, [2, 3], [3, 4]), 79 * GiB)["chart"]
    assert _line_y(c, "mem-cap") is None
    texts = [it["text"] for it in c["items"] if it["el"] == "text"]
    assert any("above this scale" in t for t in texts)


def result_with(timeline: list[dict], peak: dict, values: dict) -> DiagnosisResult:
    return DiagnosisResult(
        tool={},
        command=[],
        trace={},
        headline="",
        findings=[],
        rules=[],
        rule_errors=[],
        summary={},
        metrics={"values": values},
        breakdown={},
        rollups={},
        roofline=None,
        memory={"timeline": timeline, "peak": peak},
        timeline=None,
        diagnostics=[],
    )


def test_identical_rank_curves_share_one_chart_and_notes() -> None:
    same = [series(r, [1, 3, 2], [4, 4, 4], t0=r * 7) for r in range(4)]
    odd = series(4, [1, 5, 2], [4, 4, 4])  # allocated above reserved at one point
    peak = {
        "rank": 0,
        "device": 0,
        "peak_reserved_bytes": 4 * GiB,
        "capacity_bytes": 80 * GiB,
        "peak_allocated_bytes": 3 * GiB,
    }
    r = result_with(
        [*same, odd], peak, {"peak_reserved_capacity_pct": 5.0, "device_memory_bytes": 96 * GiB}
    )
    ev = memory_view(r)["events"]
    assert len(ev["charts"]) == 2
    assert ev["charts"][0]["caption"] == "ranks 0, 1, 2, 3 · device 0 (identical curves)"
    assert ev["identical"] == 3
    assert any("Allocated lies above reserved" in n for n in ev["notes"])
    # one capacity share: the metric against the capacity it was measured with
    assert capacity_share(r) == ("5.0%", "80.00 GiB")
    assert ev["peak"]["capacity_pct"] == "5.0%" and ev["peak"]["capacity"] == "80.00 GiB"


def test_snapshot_report_section(tmp_path: Path) -> None:
    p = fragmented_oom().write(tmp_path / "snap.pickle")
    result = diagnose(ingest([p], tmp_path / "s", quiet=True), cache=False)
    html = render_html(result)
    mem = html[html.index('<section id="memory">') :]
    mem = mem[: mem.index("</section>")]
    assert "Allocator snapshot" in mem
    assert mem.count('class="chart segment-chart"') == 2  # at the peak and at the snapshot
    assert 'class="chart memory-chart snapshot-chart"' in mem
    assert "blk-stranded" in mem and "blk-alloc" in mem and "blk-pending" in mem
    assert "proj/model.py:88 attention" in mem and "model.py:140 forward" in mem  # frames
    assert "/home/alice" not in html  # home directories are redacted
    # a memory-only run shows no GPU sections and says what it is
    assert 'id="steps"' not in html and "no GPU (CPU-only trace)" not in html
    assert re.search(r"memory input only", html)
