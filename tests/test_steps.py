"""Representative steps, slow-step causes, the headline and the primary verdict.

Step statistics (median, p90, max, jitter) leave out a first step that runs work queued before
the profiler started, a truncated last step and leading warm-up steps, and say which and why;
a jitter finding names its slow steps and what grew in them. The headline always names what
bounds the run, and ``primary`` says what it leads with. Each behaviour has a synthetic trace
where it must happen, a near miss where it must not, and the real shared traces where the
error was seen.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from conftest import TRACES, requires_corpus

from tracegen import workloads
from tracegen.synth import KinetoTraceBuilder
from traceinsight.diagnose import diagnose
from traceinsight.diagnose.verdict import bound_sentence, headline
from traceinsight.ingest import ingest
from traceinsight.result import DiagnosisResult, Finding, primary_of

US, MS = 1_000, 1_000_000
KERNEL_NS = 400 * US  #: one kernel of the synthetic step
PITCH_NS = 450 * US  #: the host launches a kernel this often


@dataclass
class Steps:
    """A training loop of ``n`` steps of ``kernels`` kernels each on one stream, with knobs
    for what can make a step unrepresentative or slow."""

    n: int = 6
    kernels: int = 20
    pre_trace_ns: int = 0  #: GPU work without a launch record at the start of the first step
    blocked_ns: int = 0  #: first step: the host waits in a pageable copy, the GPU shows nothing
    copy_ns: int = 0  #: every step starts with a blocking pageable copy of this length
    cold_ns: int = 0  #: the first launch of the first step loads modules this long
    last_kernels: int | None = None  #: kernels of the last step (the profiler stopped in it)
    tail_ns: int = 0  #: the last step runs on this long with nothing recorded
    stall: dict[int, int] = field(default_factory=dict)  #: step index -> host stall (GC) in it
    extra_kernels: dict[int, int] = field(default_factory=dict)  #: step index -> more kernels

    def build(self) -> KinetoTraceBuilder:
        b = KinetoTraceBuilder(rank=0, device="H100")
        gpu_free = 0
        if self.pre_trace_ns:  # queued before the profiler started: only the GPU side is seen
            t = 0
            while t < self.pre_trace_ns:
                d = min(KERNEL_NS, self.pre_trace_ns - t)
                b.launch(
                    "sm90_xmma_gemm_bf16bf16_bf16f32",
                    cpu_start=0,
                    gpu_start=t,
                    gpu_dur=d,
                    orphan=True,
                )
                t += d
            gpu_free = self.pre_trace_ns
        t = 10 * US
        for i in range(self.n):
            k = self.kernels + self.extra_kernels.get(i, 0)
            if i == self.n - 1 and self.last_kernels is not None:
                k = self.last_kernels
            head = (self.blocked_ns if i == 0 else 0) + self.copy_ns
            stall = self.stall.get(i, 0)
            cold = self.cold_ns if i == 0 else 0
            body = head + cold + k * PITCH_NS + stall + 50 * US
            tail = self.tail_ns if i == self.n - 1 else 0
            with b.step(i + 1, t, body + tail):
                c = t + 10 * US
                if head:
                    with b.cpu_op("aten::copy_", c, head + 20 * US):
                        b.launch(
                            "Memcpy DtoH (Device -> Pageable)",
                            kind="memcpy",
                            cpu_start=c + 5 * US,
                            cpu_dur=head,
                            gpu_start=c + head - 10 * US,
                            gpu_dur=8 * US,
                            bytes=4096,
                        )
                    gpu_free = c + head
                    c += head + 20 * US
                for j in range(k):
                    if stall and j == k // 2:
                        b.python("<built-in function collect>", c, stall)
                        c += stall
                    load = cold if j == 0 else 0
                    with b.cpu_op("aten::mm", c, 20 * US + load):
                        start = max(c + 10 * US + load, gpu_free)
                        b.launch(
                            "sm90_xmma_gemm_bf16bf16_bf16f32",
                            cpu_start=c + 5 * US,
                            cpu_dur=4 * US + load,
                            gpu_start=start,
                            gpu_dur=KERNEL_NS,
                        )
                        gpu_free = start + KERNEL_NS
                    c += PITCH_NS + load
            t += body + tail
        return b


class Diagnosed:
    def __init__(self, d: dict[str, Any]) -> None:
        self.d = d
        self.values = d["metrics"]["values"]
        self.rank = d["summary"]["ranks"][0]

    def finding(self, rule: str) -> dict[str, Any] | None:
        return next((f for f in self.d["findings"] if f["rule"] == rule), None)

    @property
    def excluded(self) -> dict[int, str]:
        return {x["step"]: x["reason"] for x in self.rank["steps_excluded"]}


@pytest.fixture
def run(tmp_path: Path):
    n = [0]

    def go(spec: Steps | KinetoTraceBuilder) -> Diagnosed:
        n[0] += 1
        d = tmp_path / f"t{n[0]}"
        d.mkdir()
        b = spec.build() if isinstance(spec, Steps) else spec
        store = ingest([b.write(d / "t.json")], d / "store", quiet=True)
        return Diagnosed(diagnose(store, cache=False).to_dict())

    return go


# --- representative steps --------------------------------------------------------------------


def test_pre_trace_kernels_inflate_the_first_step_and_it_is_left_out(run) -> None:
    d = run(Steps(pre_trace_ns=6 * MS))
    steps = sorted(d.d["breakdown"]["steps"], key=lambda s: s["start_ns"])
    assert steps[0]["wall_ns"] > steps[1]["wall_ns"] + 5 * MS  # the window holds the queued work
    assert steps[0]["gpu_ns"] == pytest.approx(steps[1]["gpu_ns"], rel=0.02)  # its own work: same
    assert d.excluded == {1: "pre-trace work"}
    assert "without a launch record" in d.rank["steps_excluded"][0]["detail"]
    assert d.values["steps"] == 6 and d.values["steps_representative"] == 5
    assert d.values["step_time_max_ns"] < steps[0]["wall_ns"]
    assert d.values["step_time_cv_pct"] < 3.0  # all six windows: over 15%
    assert d.finding("jitter") is None
    # the exact facts still count every window
    assert d.rank["steps"] == 6 and steps[0]["excluded"] == "pre-trace work"


def test_host_blocked_behind_unrecorded_work_is_pre_trace(run) -> None:
    d = run(Steps(blocked_ns=5 * MS))
    assert d.excluded == {1: "pre-trace work"}
    assert "cudaMemcpyAsync" in d.rank["steps_excluded"][0]["detail"]
    assert d.values["step_time_cv_pct"] < 3.0


def test_a_blocking_copy_in_every_step_is_not_pre_trace(run) -> None:
    d = run(Steps(copy_ns=3 * MS))  # the same input copy starts every step: a near miss
    assert d.excluded == {}
    d = run(Steps(copy_ns=3 * MS, blocked_ns=4 * MS))  # the first waits 4 ms longer
    assert d.excluded == {1: "pre-trace work"}
    assert (
        "4.00 ms with the host waiting in cudaMemcpyAsync" in d.rank["steps_excluded"][0]["detail"]
    )


def test_little_pre_trace_work_keeps_the_first_step(run) -> None:
    d = run(Steps(pre_trace_ns=200 * US))  # 2% of a step: below 5%
    assert d.excluded == {}
    assert d.values["steps_representative"] == 6


def test_truncated_last_step_is_left_out(run) -> None:
    d = run(Steps(last_kernels=6))  # the profiler stopped inside it: a fast-looking step
    assert d.excluded == {6: "truncated"}
    assert "6 kernels against a median of 20" in d.rank["steps_excluded"][0]["detail"]
    assert d.values["step_time_cv_pct"] < 3.0
    near = run(Steps(last_kernels=17))  # 85% of the kernels: a normal step
    assert near.excluded == {}


def test_empty_tail_of_the_last_step_is_truncation(run) -> None:
    d = run(Steps(tail_ns=4 * MS))  # 4 ms with nothing recorded after the last kernel
    assert d.excluded == {6: "truncated"}
    assert "no GPU work and no recorded host event" in d.rank["steps_excluded"][0]["detail"]
    assert d.finding("jitter") is None
    near = run(Steps(tail_ns=500 * US))  # under 1 ms and 10% of a step
    assert near.excluded == {}


def test_a_cold_first_step_is_warm_up(run) -> None:
    d = run(Steps(n=8, cold_ns=3 * MS))  # module loading in the first launch: 25% of the step
    assert d.excluded == {1: "warm-up"}
    assert "one-off start-up" in d.rank["steps_excluded"][0]["detail"]
    assert d.values["steady_state"] == 1  # the window as a whole is still steady state
    near = run(Steps(n=8, kernels=40, cold_ns=1 * MS))  # 5% of a longer step
    assert near.excluded == {}


def test_a_short_first_window_alone_is_not_excluded(run) -> None:
    d = run(Steps(n=3))
    assert d.excluded == {} and d.values["steps_representative"] == 3


# --- slow steps and their causes -------------------------------------------------------------


def test_jitter_names_the_slow_step_and_its_host_stall(run) -> None:
    d = run(Steps(stall={3: 8 * MS}))
    f = d.finding("jitter")
    assert f is not None and f["severity"] in ("medium", "high")
    assert "step 4 " in f["message"] and "host stall" in f["message"]
    assert "the slowest (step 4, GPU idle: host stall)" in f["headline"]
    slow = next(e for e in f["evidence"] if e.get("title") == "Slowest steps and what grew")
    row = slow["rows"][0]
    assert row[1] == 4 and row[5] == "GPU idle: host stall"
    assert row[6] == pytest.approx(8 * MS, rel=0.05)
    assert d.excluded == {}  # a slow step in the middle is real jitter, not an edge step


def test_jitter_names_more_kernel_time(run) -> None:
    d = run(Steps(extra_kernels={2: 12}))
    f = d.finding("jitter")
    assert f is not None and "step 3 " in f["message"] and "more kernel time" in f["message"]


def test_jitter_states_the_left_out_steps(run) -> None:
    d = run(Steps(n=8, pre_trace_ns=8 * MS, stall={4: 8 * MS}))
    f = d.finding("jitter")
    assert f is not None and "Left out as not representative: step 1" in f["message"]
    assert "pre-trace work" in f["message"]


def test_slow_steps_need_a_slow_step(run) -> None:
    d = run(Steps(stall={3: 1 * MS}))  # +11%: under 1.25x the median
    assert d.values["slow_steps"] == 0
    assert d.finding("jitter") is None


@requires_corpus
def test_resnet_edge_steps_are_not_jitter() -> None:
    """Step #16 absorbs GPU work queued before the trace, #21 ends with ~80 ms of nothing
    (profiler stop); steps #17-#20 vary by 2.7% (expert label)."""
    key = "kineto/tb_plugin/samples/resnet50_num_workers_4/worker0.1623213129365.pt.trace.json.gz"
    d = Diagnosed(diagnose(ingest([TRACES / key], quiet=True), cache=False).to_dict())
    assert d.excluded == {16: "pre-trace work", 21: "truncated"}
    assert "cudaMemcpyAsync" in d.rank["steps_excluded"][0]["detail"]
    assert d.values["step_time_cv_pct"] < 3.0
    assert d.finding("jitter") is None
    assert d.rank["steps"] == 6  # the label fact counts all windows
    steps = sorted(d.d["breakdown"]["steps"], key=lambda s: s["start_ns"])
    assert steps[0]["wall_ns"] > 165 * MS and steps[0]["gpu_ns"] < 125 * MS


@requires_corpus
def test_queued_kernels_before_the_trace_on_real_traces() -> None:
    """tb_plugin's 2021 ResNet50 captures: the first step runs hundreds of kernels that were
    launched before the profiler started."""
    key = (
        "kineto/tb_plugin/samples/resnet50_num_workers_4/"
        "2021-02-23_29dba67d_worker0.pt.trace.json.gz"
    )
    d = Diagnosed(diagnose(ingest([TRACES / key], quiet=True), cache=False).to_dict())
    assert d.excluded == {5: "pre-trace work", 10: "truncated"}
    assert "771 activities queued" in d.rank["steps_excluded"][0]["detail"]
    assert d.finding("jitter") is None


# --- headline and primary --------------------------------------------------------------------


def _f(rule: str, severity: str, impact: float) -> Finding:
    return Finding(
        rule=rule,
        severity=severity,
        title=rule,
        category="x",
        message="",
        impact_pct=impact,
        evidence=[],
        recommendations=[],
    )


def test_primary_of() -> None:
    assert primary_of([]) == "healthy"
    assert primary_of([_f("jitter", "low", 9.0)]) == "healthy"
    assert (
        primary_of([_f("launch-bound", "high", 40.0), _f("gpu-idle", "medium", 20.0)])
        == "launch-bound"
    )
    # not-representative leads whenever it fired
    assert (
        primary_of([_f("launch-bound", "high", 90.0), _f("not-representative", "medium", 60.0)])
        == "not-representative"
    )


def test_headline_leads_with_the_primary_even_without_gpu() -> None:
    jit = Finding(
        rule="jitter",
        severity="medium",
        title="t",
        category="jitter",
        message="",
        impact_pct=16.0,
        evidence=[],
        recommendations=[],
        headline="jittery: steps vary by 33%",
    )
    h = headline([jit], {"has_gpu": 0.0}, None)
    assert h.startswith("Jittery: steps vary by 33%.") and "No GPU activity" in h
    assert headline([], {"has_gpu": 0.0}, None).startswith("No GPU activity")
    h = headline(
        [_f("gpu-idle", "low", 9.0)],
        {"has_gpu": 1.0, "compute_pct": 90.0, "gpu_idle_pct": 10.0},
        None,
    )
    assert h.startswith("GPU-bound: kernels run 90.0%") and h.endswith("Minor: gpu-idle.")


def test_primary_in_the_result_and_for_old_files(run) -> None:
    d = run(Steps(stall={3: 8 * MS}))
    keys = list(d.d)
    assert keys.index("primary") == keys.index("headline") + 1
    assert d.d["primary"] == primary_of([Finding.from_dict(f) for f in d.d["findings"]])
    old = {k: v for k, v in d.d.items() if k != "primary"}
    old["findings"] = [
        {"rule": "comm-bound", "severity": "high", "impact_pct": 30.0},
        {"rule": "jitter", "severity": "medium", "impact_pct": 10.0},
    ]
    assert DiagnosisResult.from_dict(old).primary == "comm-bound"
    assert DiagnosisResult.from_dict({**old, "findings": []}).primary == "healthy"
    assert DiagnosisResult.from_dict(d.d).to_dict()["primary"] == d.d["primary"]


def test_healthy_compute_bound_headline_names_the_bound(run) -> None:
    """Nothing of medium weight, GEMMs at 85% of peak: the headline still says what bounds it."""
    d = run(workloads.build(workloads.PRESETS["compute_bound"]))
    assert d.d["primary"] == "healthy"
    h = d.d["headline"]
    assert h.startswith("Compute-bound: ") and "of modelled time in math at 8" in h
    assert "MFU 7" in h and "of kernel time modelled" in h
    assert "lower precision or fewer FLOPs" in h and "No major bottleneck" not in h


def test_bound_sentence() -> None:
    base = {
        "compute_pct": 95.0,
        "exposed_comm_pct": 0.0,
        "memcpy_exposed_pct": 0.0,
        "memset_exposed_pct": 0.0,
        "gpu_idle_pct": 5.0,
        "idle_launch_pct": 4.0,
        "idle_unknown_pct": 1.0,
    }
    mix = [("gemm", 80.0), ("elementwise", 15.0), ("reduction", 5.0)]
    s = bound_sentence(
        {
            **base,
            "flops_modelled_pct": 90.0,
            "compute_bound_time_pct": 87.0,
            "memory_bound_time_pct": 13.0,
            "compute_bound_efficiency_pct": 61.0,
            "mfu_pct": 53.0,
        },
        mix,
    )
    assert s.startswith("Compute-bound: 87% of modelled time in math at 61% of peak, MFU 53.0%")
    assert "lower precision or fewer FLOPs" in s and "GEMM 80%" in s
    assert "mostly launch overhead (4.0%)" in s
    s = bound_sentence(
        {
            **base,
            "flops_modelled_pct": 90.0,
            "compute_bound_time_pct": 20.0,
            "memory_bound_time_pct": 80.0,
            "memory_bound_efficiency_pct": 70.0,
            "mfu_pct": 5.0,
        },
        mix,
    )
    assert s.startswith("Memory-bound: 80% of modelled time moves data at 70% of peak bandwidth")
    # too little modelled: no regime, MFU stated as a lower bound
    s = bound_sentence(
        {
            **base,
            "flops_modelled_pct": 2.7,
            "compute_bound_time_pct": 0.0,
            "memory_bound_time_pct": 100.0,
            "mfu_pct": 0.3,
        },
        mix,
    )
    assert s.startswith("GPU-bound: kernels run 95.0% of step time")
    assert "covers only 2.7% of kernel time" in s and "MFU ≥ 0.30% is only a lower bound" in s
    assert "Memory-bound" not in s
    # idle leads: named with its largest cause
    s = bound_sentence(
        {
            **base,
            "compute_pct": 30.0,
            "gpu_idle_pct": 70.0,
            "idle_launch_pct": 10.0,
            "idle_host_pct": 50.0,
        },
        mix,
    )
    assert s.startswith(
        "GPU idle most of the window: 70.0% of step time, the largest part host stalls (50.0%)"
    )
    s = bound_sentence({**base, "compute_pct": 58.0, "gpu_idle_pct": 42.0}, mix)
    assert s.startswith("No single bound: kernels run 58.0%")


LABELS_HEADLINES = {
    # nothing of medium weight, the GPU busy 99.8%, 2.7% of kernel time modelled (MFU 0.3%)
    "kineto/tracelens/traces/inference/vllm_decode_full/graph_execution.json.gz": (
        "healthy",
        ["GPU-bound: kernels run 99", "GEMM", "covers only 2.", "only a lower bound"],
    ),
    "kineto/tb_plugin/samples/resnet50_num_workers_4/2021-02-23_29dba67d_worker0.pt.trace.json.gz": (
        "healthy",
        ["GPU-bound: kernels run 8", "convolution", "no op's FLOPs or bytes"],
    ),
}


@requires_corpus
@pytest.mark.parametrize("key", list(LABELS_HEADLINES), ids=lambda k: k.split("/")[-2])
def test_healthy_real_traces_name_their_bound(key: str) -> None:
    r = diagnose(ingest([TRACES / key], quiet=True), cache=False)
    primary, parts = LABELS_HEADLINES[key]
    assert r.primary == primary
    assert "No major bottleneck" not in r.headline
    for p in parts:
        assert p in r.headline, r.headline
