"""Time slices are compared as slices; a step is left out only when the rest hold the work;
every statistic of the step time is over the same representative steps.

A capture without step markers (``nsys profile --duration N``, a Kineto trace without
``ProfilerStep``) has no step time: ``compare`` normalises both sides by a unit of work both
name and ``--fail-if-slower`` refuses to pass a gate it cannot judge (exit 2 with the reason).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import invoke
from test_steps import KERNEL_NS, MS, US, Steps

from tracegen.synth import KinetoTraceBuilder
from traceinsight.compare.explain import compare
from traceinsight.diagnose import diagnose
from traceinsight.ingest import ingest
from traceinsight.render.html import render_compare_html
from traceinsight.render.markdown import render_compare_markdown
from traceinsight.render.terminal import render

SLICE_NS = 12 * MS  #: both captures: a fixed-length slice of the run


def sliced(tmp: Path, name: str, kernel_ns: int) -> Path:
    """A run captured as a fixed slice, without step markers: iterations (each an
    ``iteration`` annotation launching 4 GEMMs of ``kernel_ns``) back to back until the
    slice ends, so a slower kernel means fewer iterations in the same slice."""
    b = KinetoTraceBuilder(rank=0, device="H100")
    t = 10 * US
    gpu = 20 * US
    while gpu + 4 * kernel_ns <= SLICE_NS:
        host = 4 * 20 * US + 10 * US
        with b.annotation("iteration", t, host):
            for j in range(4):
                c = t + 5 * US + 20 * US * j
                with b.cpu_op("aten::mm", c, 15 * US):
                    b.launch(
                        "sm90_xmma_gemm_bf16bf16_bf16f32",
                        cpu_start=c + 2 * US,
                        cpu_dur=4 * US,
                        gpu_start=gpu,
                        gpu_dur=kernel_ns,
                    )
                gpu += kernel_ns
        t = max(t + host, gpu - 200 * US)  # the host stays a little ahead of the GPU
    # the capture ends with a short kernel at the slice's end: both spans are the same
    with b.cpu_op("aten::fill_", t, 10 * US):
        b.launch(
            "vectorized_elementwise_kernel",
            cpu_start=t + 2 * US,
            cpu_dur=3 * US,
            gpu_start=SLICE_NS - 10 * US,
            gpu_dur=10 * US,
        )
    return b.write(tmp / f"{name}.json")


def result(path: Path, tmp: Path):
    return diagnose(ingest([path], tmp / (path.stem + ".tistore"), quiet=True), cache=False)


def test_a_slice_pair_is_compared_per_unit_of_work_never_per_step(tmp_path: Path) -> None:
    a_path, b_path = sliced(tmp_path, "a", 250 * US), sliced(tmp_path, "b", 300 * US)
    a, b = result(a_path, tmp_path), result(b_path, tmp_path)
    assert a.trace["has_step_markers"] is False
    sa = a.rollups["slice"]
    assert sa["span_ns"] == b.rollups["slice"]["span_ns"]  # the same slice length
    unit = sa["units"][0]
    assert unit["unit"] == "annotation iteration" and unit["kernel_ns_per_instance"] == 1_000_000
    c = compare(a, b)
    assert c["per"] == "second"
    comp = c["comparability"]
    assert not comp["comparable"]
    assert next(d["what"] for d in comp["differences"]) == "step markers"
    norm = comp["normalised"]
    assert norm["by"] == "unit" and norm["before"] == 1_000_000 and norm["after"] == 1_200_000
    assert norm["delta_pct"] == pytest.approx(20.0)
    # no step-time claim: the headline states the unit and how to mark steps
    h = c["headline"]
    assert "Step time is" not in h and "slower per step" not in h and "unchanged" not in h
    assert h.startswith("Not comparable: a time slice without step markers")
    assert "GPU kernel time per annotation iteration is 20.0% more" in h
    assert "prof.step()" in h
    # every part is per second of the capture: each side's contributors sum to one second
    assert c["before_step_ns"] == c["after_step_ns"] == 1_000_000_000
    assert sum(x["delta_ns"] for x in c["contributors"]) == c["total_delta_ns"] == 0
    md = render_compare_markdown(c)
    assert "step time p50" not in md and "per second of capture" in md
    assert "A time slice without step markers on a side" in render_compare_html(c)
    # the diagnosis of a slice states its rates and how to mark steps
    text = render(a, width=200)
    assert "time slice: kernel time" in text and "per annotation iteration" in text
    assert "prof.step()" in text


def test_the_gate_refuses_a_slice_and_judges_the_unit_when_allowed(tmp_path: Path) -> None:
    a, b = sliced(tmp_path, "a", 250 * US), sliced(tmp_path, "b", 300 * US)
    res = invoke(
        ["compare", a, b, "--fail-if-slower", "5"],
        exit_code=2,
        stderr_contains="a time slice has no step time",
    )
    assert "prof.step()" in res.stderr  # the advice in Kineto's own vocabulary
    invoke(
        ["compare", a, b, "--fail-if-slower", "5", "--allow-incomparable"],
        exit_code=1,
        stderr_contains="GPU kernel time per annotation iteration regressed by 20.0%",
    )
    invoke(["compare", a, b, "--fail-if-slower", "25", "--allow-incomparable"])
    out = invoke(["compare", a, b]).stdout
    assert "compute / s" in out and "compute / step" not in out
    assert "step time p50" not in out and "steps / s" not in out


def test_the_advice_is_in_the_inputs_vocabulary() -> None:
    from traceinsight.util.vocab import mark_steps_hint

    assert "--capture-range=cudaProfilerApi" in mark_steps_hint("nsys")
    assert "torch.cuda.profiler.start()" in mark_steps_hint("nsys")
    assert "NVTX range" in mark_steps_hint("nsys")
    assert "torch.profiler.schedule" in mark_steps_hint("kineto")


# --- step exclusion keeps the work ------------------------------------------------------------


def only_working_step_is_pre_trace(pre_ns: int) -> KinetoTraceBuilder:
    """A tiny capture: step 1 runs work queued before the profiler started, then its own
    work (a 1 ms GEMM); step 2 is nearly empty (18 µs of host time, no GPU work)."""
    b = KinetoTraceBuilder(rank=0, device="H100")
    b.launch(
        "sm90_xmma_gemm_bf16bf16_bf16f32", cpu_start=0, gpu_start=0, gpu_dur=pre_ns, orphan=True
    )
    with b.step(1, 10 * US, 200 * US):
        with b.cpu_op("aten::mm", 20 * US, 20 * US):
            b.launch(
                "sm90_xmma_gemm_bf16bf16_bf16f32",
                cpu_start=25 * US,
                cpu_dur=4 * US,
                gpu_start=pre_ns,
                gpu_dur=1_000 * US,
            )
    with b.step(2, pre_ns + 1_100 * US, 18 * US):
        with b.cpu_op("aten::empty", pre_ns + 1_102 * US, 5 * US):
            pass
    return b


def test_the_only_working_step_is_kept_and_says_so(tmp_path: Path) -> None:
    path = only_working_step_is_pre_trace(400 * US).write(tmp_path / "t.json")
    r = result(path, tmp_path).to_dict()
    rank = r["summary"]["ranks"][0]
    assert rank["steps_excluded"] == []
    assert [x["step"] for x in rank["steps_kept"]] == [1]
    assert "pre-trace work" in rank["steps_kept"][0]["detail"]
    assert "1.00 ms of its own kernel time" in rank["steps_kept"][0]["detail"]
    v = r["metrics"]["values"]
    assert v["steps_representative"] == 2
    assert v["step_time_max_ns"] > 1_000 * US  # the working step is in the statistics


def test_pre_trace_work_is_still_left_out_when_the_rest_hold_the_work(tmp_path: Path) -> None:
    store = ingest(
        [Steps(pre_trace_ns=6 * MS).build().write(tmp_path / "t.json")], tmp_path / "s", quiet=True
    )
    rank = diagnose(store, cache=False).to_dict()["summary"]["ranks"][0]
    assert [x["step"] for x in rank["steps_excluded"]] == [1] and rank["steps_kept"] == []


# --- one definition of the representative steps ----------------------------------------------


def check_one_definition(r) -> None:
    """diagnose's statistics, the per-rank summary and compare-of-itself agree, over the same
    representative steps; mean <= max; the left-out steps are not in them."""
    v = r.metrics["values"]
    if v.get("step_time_p50_ns") is None:
        return
    steps = [s for s in r.breakdown["steps"] if s.get("step") is not None]
    rep = [s["wall_ns"] for s in steps if not s.get("excluded")] or [s["wall_ns"] for s in steps]
    t = np.array(rep, dtype=np.float64)
    assert v["step_time_p50_ns"] == pytest.approx(float(np.percentile(t, 50)))
    assert v["step_time_max_ns"] == pytest.approx(float(t.max()))
    assert v["step_time_mean_ns"] == pytest.approx(float(t.mean()))
    assert v["step_time_mean_ns"] <= v["step_time_max_ns"] + 1e-6
    c = compare(r, r)
    st = c["step_time"]["before"]
    for q in ("p50", "p90", "max"):
        assert st[q] == pytest.approx(v[f"step_time_{q}_ns"])
    assert st["mean"] == pytest.approx(v["step_time_mean_ns"])
    assert st["mean"] <= st["max"] + 1e-6
    assert c["step_time"]["statistic"] == "mean"
    assert c["before_step_ns"] == round(st["mean"])
    if len(r.summary["ranks"]) == 1:
        q = r.summary["ranks"][0]["step_time_representative_ns"]
        assert q["p50"] == pytest.approx(v["step_time_p50_ns"])
        assert q["max"] == pytest.approx(v["step_time_max_ns"])
    # the left-out steps are not in the statistics: the count says so, and every statistic is
    # that of the representative windows alone (asserted above)
    n_rep = sum(1 for s in steps if not s.get("excluded"))
    if n_rep and len(r.summary["ranks"]) == 1:
        assert v["steps_representative"] == n_rep
        assert r.rollups["step_basis"]["windows"] == n_rep


def test_one_definition_of_the_representative_steps(tmp_path: Path) -> None:
    store = ingest(
        [
            Steps(n=6, pre_trace_ns=6 * MS, tail_ns=4 * MS, stall={3: 3 * MS})
            .build()
            .write(tmp_path / "t.json")
        ],
        tmp_path / "s",
        quiet=True,
    )
    r = diagnose(store, cache=False)
    rank = r.summary["ranks"][0]
    assert sorted(x["step"] for x in rank["steps_excluded"]) == [1, 6]
    check_one_definition(r)
    # the compare's mean is over the 4 representative steps, not all 6 windows
    walls = {s["step"]: s["wall_ns"] for s in r.breakdown["steps"]}
    mean4 = sum(walls[k] for k in (2, 3, 4, 5)) / 4
    assert compare(r, r)["step_time"]["before"]["mean"] == pytest.approx(mean4)
    assert r.rollups["step_basis"]["windows"] == 4 and r.rollups["step_basis"]["windows_all"] == 6
    assert KERNEL_NS  # the synthetic loop's kernel length (imported from test_steps)
