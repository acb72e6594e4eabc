"""Start-up and JIT recognised beyond PyTorch: nvFuser/NVRTC compilation, code loading,
first-call library heuristics and NCCL set-up are one-off work; a capture that is mostly such
work is not representative (with what to record instead, in the input's vocabulary), and
inside a steady run such time is left out of the steady-state rules and named."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tracegen.nsys import NsysExportBuilder
from tracegen.synth import KinetoTraceBuilder
from traceinsight.analysis import Analysis
from traceinsight.engine.evaluate import evaluate, load_rules
from traceinsight.ingest import ingest
from traceinsight.metrics import compute_metrics

US, MS = 1_000, 1_000_000
RULES = load_rules()


def _run(path: Path, tmp: Path) -> tuple[Any, Any]:
    an = Analysis(ingest([path], tmp / "store", quiet=True))
    ms = compute_metrics(an)
    return ms, evaluate(RULES, ms, an)


def _finding(ev: Any, rule: str) -> Any:
    return next((f for f in ev.findings if f.rule == rule), None)


def _status(ev: Any, rule: str) -> str:
    if _finding(ev, rule):
        return "fired"
    return next(s.status for s in ev.statuses if s.rule == rule)


def _nvfuser_first_call(b: KinetoTraceBuilder) -> None:
    """A benchmark of one first call: 18 small kernels, between them the host compiles the
    fusion (nvFuser's compileFusion and NVRTC, 400 ms) with no runtime call."""
    t = 0
    for i in range(18):
        b.launch(
            f"nvfuser_pointwise_f0_c1_r0_g{i}", cpu_start=t, gpu_start=t + 10 * US, gpu_dur=20 * US
        )
        t += 40 * US
        if i == 8:
            with b.annotation("KernelExecutor::compileFusion", t, 400 * MS):
                b.annotation("executor_utils::NVRTC", t + 5 * MS, 380 * MS).__enter__()
            t += 400 * MS + 10 * US


def test_an_nvfuser_nvrtc_first_call_is_not_representative(tmp_path: Path) -> None:
    b = KinetoTraceBuilder()
    _nvfuser_first_call(b)
    ms, ev = _run(b.write(tmp_path / "t.json"), tmp_path)
    v = ms.values
    # the compile time is compilation, not a host stall
    wall = (400 * MS + 10 * US + 18 * 40 * US) - 10 * US - 20 * US  # first to last GPU work
    assert v["idle_compile_pct"] * wall / 100 > 399 * MS
    assert v["idle_host_pct"] < 1
    assert v["steady_state"] == 0
    f = _finding(ev, "not-representative")
    assert f is not None and f.severity == "high"
    assert "compilation" in f.headline and "KernelExecutor::compileFusion" in f.message
    # the advice names torch.profiler's schedule for a Kineto trace, not nsys options
    assert any("schedule(wait=2" in r for r in f.recommendations)
    assert not any("nsys profile" in r for r in f.recommendations)
    assert any("nvFuser" in r for r in f.recommendations)
    assert _status(ev, "host-stall") == "not-applicable"


def _steady(first_call: bool) -> KinetoTraceBuilder:
    """8 steady 2 ms steps; with ``first_call``, aten::addmm's first call in step 5 loads a
    cuBLASLt library (a short cuLibraryLoadData) and spends 0.9 ms choosing an algorithm
    with no runtime call."""
    b = KinetoTraceBuilder()
    for i in range(8):
        t0 = i * 2 * MS
        with b.step(i + 1, t0, 2 * MS):
            extra = 900 * US if first_call and i == 4 else 0
            with b.cpu_op("aten::addmm", t0 + 10 * US, 20 * US + extra):
                if extra:
                    b.runtime("cuLibraryLoadData", t0 + 12 * US, 100 * US)
                b.launch(
                    "sm90_xmma_gemm_bf16bf16_bf16f32",
                    cpu_start=t0 + 20 * US + extra,
                    gpu_start=t0 + 30 * US + extra,
                    gpu_dur=1900 * US - extra,
                )
    return b


def test_first_call_heuristics_inside_a_steady_run_are_start_up_not_a_host_stall(
    tmp_path: Path,
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    base, _ = _run(_steady(False).write(tmp_path / "a" / "t.json"), tmp_path / "a")
    ms, _ev = _run(_steady(True).write(tmp_path / "b" / "t.json"), tmp_path / "b")
    v, v0 = ms.values, base.values
    wall = 16 * MS
    # the first call's 0.9 ms is start-up (one-off), named, and the host-stall share is that
    # of the same run without it
    assert v0["idle_startup_pct"] == 0
    assert v["idle_startup_pct"] * wall / 100 > 850 * US
    assert abs(v["idle_host_pct"] - v0["idle_host_pct"]) * wall / 100 < 20 * US
    assert v["steady_state"] == 1
    assert v["gpu_idle_steady_pct"] < v["gpu_idle_pct"]


def test_an_nsight_capture_of_nccl_start_up_one_step_and_teardown(tmp_path: Path) -> None:
    b = NsysExportBuilder()
    b.process(100, "python3")
    b.thread(100, 100, "python3")
    # NCCL communicator set-up (300 ms), one 50 ms step, teardown (200 ms)
    b.nvtx(100, 100, "ncclCommInitRank", 0, 300 * MS)
    b.launch(100, 100, "ncclDevKernel_Init", cpu_start=1 * MS, gpu_start=2 * MS, gpu_dur=100 * US)
    with b.nvtx(100, 100, "train_step", 300 * MS, 350 * MS):
        for k in range(10):
            b.launch(
                100,
                100,
                "sm90_xmma_gemm_bf16bf16_bf16f32",
                cpu_start=300 * MS + k * 100 * US,
                gpu_start=301 * MS + k * 4900 * US,
                gpu_dur=4800 * US,
            )
        b.launch(
            100,
            100,
            "flash_bwd_dq_dk_dv_loop_kernel",
            cpu_start=302 * MS,
            gpu_start=350 * MS - 200 * US,
            gpu_dur=100 * US,
        )
    b.nvtx(100, 100, "ncclCommDestroy", 350 * MS, 550 * MS)
    b.runtime(100, 100, "cuModuleUnload", 360 * MS, 150 * MS)
    b.launch(
        100, 100, "ncclDevKernel_Fini", cpu_start=549 * MS, gpu_start=549500 * US, gpu_dur=100 * US
    )
    ms, ev = _run(b.write(tmp_path / "run.sqlite"), tmp_path)
    v = ms.values
    assert v["input_nsys"] == 1
    assert v["is_training"] == 1  # its step has a backward pass (no framework op recorded)
    assert v["idle_startup_pct"] >= 50 and v["steady_state"] == 0
    f = _finding(ev, "not-representative")
    assert f is not None and f.severity == "high"
    assert "start-up" in f.headline and "--capture-range=cudaProfilerApi" in f.headline
    assert "ncclCommInitRank" in f.message and "ncclCommDestroy" in f.message
    # the advice is Nsight's, not torch.profiler's schedule
    assert any("nsys profile --capture-range=cudaProfilerApi" in r for r in f.recommendations)
    assert not any("schedule(wait=1" in r for r in f.recommendations)
