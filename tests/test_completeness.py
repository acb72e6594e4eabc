"""Completeness checks: what the capture left out is counted as a data-quality diagnostic and
never read as idle with a cause (partly recorded graph replays, kernels without a launch
record, a truncated tail, an overflowed profiler buffer)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tracegen.synth import KinetoTraceBuilder
from traceinsight.analysis import Analysis
from traceinsight.analysis.completeness import completeness
from traceinsight.engine.evaluate import evaluate, load_rules
from traceinsight.ingest import ingest
from traceinsight.metrics import compute_metrics

US = 1_000
RULES = load_rules()
STEP = 500 * US
PAIRS = 8  #: split-K GEMMs per replay, each after the memset that zeroes its workspace
MEMSET, GEMM, TAIL = 5 * US, 40 * US, 10 * US


def _replays(steps: int = 6, *, gemms: bool, short_step: int | None = None) -> KinetoTraceBuilder:
    """One graph replayed once per 500 µs step: 8 × (memset, split-K GEMM) then 2 kernels,
    back to back on the device. ``gemms=False`` leaves the GEMMs out of the record (the
    device ran them: holes exactly as long as a GEMM after each memset); ``short_step`` keeps
    only the first two nodes of that step's replay."""
    b = KinetoTraceBuilder()
    for i in range(steps):
        t0 = i * STEP
        with b.step(i + 1, t0, STEP):
            with b.cpu_op("CUDAGraph.replay", t0 + 10 * US, 20 * US):
                nodes: list[tuple[str, int, int, str]] = []
                t = t0 + 40 * US
                for k in range(PAIRS):
                    nodes.append((f"[memset] splitk_ws_{k}", t, MEMSET, "memset"))
                    t += MEMSET
                    if gemms:
                        nodes.append(("sm90_xmma_gemm_splitK_bf16", t, GEMM, "kernel"))
                    t += GEMM
                for k in range(2):
                    nodes.append((f"triton_poi_fused_{k}", t, TAIL, "kernel"))
                    t += TAIL
                if short_step == i:
                    nodes = nodes[:2]
                b.graph_launch(nodes, cpu_start=t0 + 12 * US)
    return b


def _measure(b: KinetoTraceBuilder, tmp: Path) -> tuple[Analysis, Any, Any, list[dict]]:
    an = Analysis(ingest([b.write(tmp / "t.json")], tmp / "store", quiet=True))
    ms = compute_metrics(an)
    ev = evaluate(RULES, ms, an)
    diags = list(an.store.meta.get("diagnostics", [])) + an.attribution.diagnostics.to_list()
    return an, ms, ev, diags


def _diag(diags: list[dict], code: str) -> dict | None:
    return next((d for d in diags if d["code"] == code), None)


def test_idle_inside_a_partly_recorded_replay_is_unrecorded_and_caps_the_finding(
    tmp_path: Path,
) -> None:
    # GIVEN replays whose split-K GEMMs were not recorded (memsets followed by GEMM-long holes)
    an, ms, ev, diags = _measure(_replays(gemms=False), tmp_path)
    c = completeness(an, 0)
    # THEN every replay is flagged, with all its memsets alone, and the holes are exact
    assert (c.replays, c.incomplete, c.holed, c.short) == (6, 6, 6, 0)
    assert c.memsets_alone == 6 * PAIRS and c.hole_ns == 6 * PAIRS * GEMM
    # the idle between recorded nodes is unrecorded, not a device wait
    wall = an.breakdown.ranks[0].wall_ns
    assert ms.values["idle_unrecorded_pct"] * wall / 100 == pytest.approx(6 * PAIRS * GEMM)
    assert ms.values["idle_device_wait_pct"] * wall / 100 < 6 * PAIRS * GEMM / 10
    idle = an.breakdown.ranks[0].idle_ns
    assert ms.values["idle_recorded_pct"] == pytest.approx(100.0 * (idle - 6 * PAIRS * GEMM) / idle)
    # a counted data-quality diagnostic saying what it does to the verdicts
    d = _diag(diags, "graph-replay-incomplete")
    assert d and d["count"] == 6 and "capped" in d["message"]
    assert "48 memsets are not followed by their kernel" in d["message"]
    # gpu-idle (88% idle: medium) is capped to low with the reason stated
    f = next(f for f in ev.findings if f.rule == "gpu-idle")
    assert ms.values["gpu_idle_pct"] >= 50
    assert f.severity == "low"
    assert "Severity capped at low (would be medium)" in f.message
    assert "idle_recorded_pct" in f.message and "unrecorded work, not idle" in f.message


def test_completely_recorded_replays_pass_every_check(tmp_path: Path) -> None:
    an, ms, ev, diags = _measure(_replays(gemms=True), tmp_path)
    c = completeness(an, 0)
    assert (c.replays, c.incomplete, c.memsets_alone, c.hole_ns) == (6, 0, 0, 0)
    assert ms.values["idle_unrecorded_pct"] == 0 and ms.values["idle_recorded_pct"] == 100
    assert _diag(diags, "graph-replay-incomplete") is None
    f = next((f for f in ev.findings if f.rule == "gpu-idle"), None)
    assert f is None or "capped" not in f.message


def test_a_replay_with_fewer_kernels_than_the_others_of_its_graph(tmp_path: Path) -> None:
    # GIVEN complete replays but one that recorded only its first two nodes (no hole inside)
    an, ms, _ev, diags = _measure(_replays(gemms=True, short_step=3), tmp_path)
    c = completeness(an, 0)
    assert (c.incomplete, c.short, c.holed) == (1, 1, 0)
    assert c.memsets_alone == 0  # the memset is followed by its GEMM
    d = _diag(diags, "graph-replay-incomplete")
    assert d and d["count"] == 1 and "1 hold under half the kernels" in d["message"]
    assert ms.values["graph_replays_incomplete"] == 1


def test_kernels_without_launch_truncated_tail_and_dropped_records(tmp_path: Path) -> None:
    b = KinetoTraceBuilder(
        metadata={"WARNING": ["W1201 CuptiActivityApi.cpp:9] Dropped 1234 activity records"]}
    )
    # two kernels queued before the profiler started (no launch record), then 4 steps
    b.launch("pre_trace_kernel", cpu_start=0, gpu_start=1 * US, gpu_dur=30 * US, orphan=True)
    b.launch("pre_trace_kernel", cpu_start=0, gpu_start=31 * US, gpu_dur=30 * US, orphan=True)
    for i in range(4):
        t0 = 100 * US + i * STEP
        with b.step(i + 1, t0, STEP):
            for k in range(5):
                b.launch(
                    "ampere_sgemm_128x64_nn",
                    cpu_start=t0 + (10 + 20 * k) * US,
                    gpu_start=t0 + (20 + 60 * k) * US,
                    gpu_dur=50 * US,
                )
    # three launches after the last recorded one whose kernels never made it into the trace
    for k in range(3):
        b.runtime("cudaLaunchKernel", 100 * US + 4 * STEP + (10 + 20 * k) * US, 4 * US)
    an, ms, _ev, diags = _measure(b, tmp_path)
    c = completeness(an, 0)
    assert (c.no_launch, c.no_launch_ns, c.no_launch_before_first) == (2, 60 * US, 2)
    assert (c.tail_launches, c.tail_ns) == (3, 44 * US)
    nol = _diag(diags, "kernels-without-launch")
    assert nol and nol["count"] == 2 and nol["severity"] == "info"
    assert "before the first recorded launch" in nol["message"]
    tail = _diag(diags, "truncated-tail")
    assert tail and tail["count"] == 3 and "profiler stopped" in tail["message"]
    dropped = _diag(diags, "records-dropped")
    assert dropped and dropped["count"] == 1234 and "reads as idle" in dropped["message"]
    assert "W1201" not in dropped["message"]  # the log line itself is not echoed
    assert "capped at medium" in dropped["message"]
    assert ms.values["idle_recorded_pct"] == 85.0  # no high finding rests on this idle
    assert ms.values["kernels_without_launch"] == 2
    assert ms.values["tail_launches_unrecorded"] == 3
