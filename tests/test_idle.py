"""Why the GPU was idle: every idle gap gets the cause the launching host thread shows, and
windows that are start-up, graph capture, compilation or one long wait are not diagnosed as
steady state.

Each cause has a synthetic trace where it must be found and a near miss where it must not, and
the real shared traces where the misclassification was seen are checked end to end.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import TRACES, requires_corpus

from tracegen.synth import KinetoTraceBuilder
from traceinsight.analysis import Analysis
from traceinsight.analysis.idle import CAUSES, idle_split
from traceinsight.diagnose import diagnose
from traceinsight.engine.evaluate import evaluate, load_rules
from traceinsight.ingest import ingest
from traceinsight.metrics import compute_metrics
from traceinsight.metrics.idle_metrics import METRIC_CAUSES

US, MS = 1_000, 1_000_000
RULES = load_rules()


class Measured:
    def __init__(self, b: KinetoTraceBuilder, tmp: Path) -> None:
        self.an = Analysis(ingest([b.write(tmp / "t.json")], tmp / "store", quiet=True))
        self.ms = compute_metrics(self.an)
        self.ev = evaluate(RULES, self.ms, self.an)

    def __getitem__(self, metric: str) -> Any:
        return self.ms.values[metric]

    def finding(self, rule: str) -> Any:
        return next((f for f in self.ev.findings if f.rule == rule), None)

    def status(self, rule: str) -> str:
        if self.finding(rule):
            return "fired"
        return next(s.status for s in self.ev.statuses if s.rule == rule)

    def split(self) -> dict[str, int]:
        attr = self.an.attribution
        out = dict.fromkeys(CAUSES, 0)
        for r in self.an.breakdown.ranks:
            s, _ = idle_split(
                self.an, r, attr.gpu[attr.gpu["rank"] == r], [w for w in attr.steps if w.rank == r]
            )
            for c in CAUSES:
                out[c] += s.ns[c]
        return out


@pytest.fixture
def measure(tmp_path: Path):
    n = [0]

    def run(b: KinetoTraceBuilder) -> Measured:
        n[0] += 1
        d = tmp_path / f"m{n[0]}"
        d.mkdir()
        m = Measured(b, d)
        # every idle nanosecond has exactly one cause
        assert sum(m.split().values()) == m.an.breakdown.ranks[0].idle_ns
        total = sum(
            m[k]
            for k, causes in METRIC_CAUSES.items()
            if k not in ("idle_copy_pct", "idle_alloc_pct", "idle_host_busy_pct")
        )
        assert total == pytest.approx(m["gpu_idle_pct"], abs=1e-6)
        return m

    return run


def _kernels(
    b: KinetoTraceBuilder,
    t: int,
    n: int,
    *,
    dur: int = 100 * US,
    gap: int = 20 * US,
    launch: int = 5 * US,
    lead: int = 3 * US,
    api: str | None = None,
) -> int:
    """``n`` kernels, each launched ``gap`` after the previous one ended; returns the end."""
    for i in range(n):
        b.launch(
            f"void elementwise_kernel_{i % 3}",
            cpu_start=t,
            cpu_dur=launch,
            gpu_start=t + launch + lead,
            gpu_dur=dur,
            api=api,
        )
        t += launch + lead + dur + gap
    return t


# --- launch overhead vs work queued behind a dependency --------------------------------------


def test_short_gaps_ended_by_late_launches_are_launch_overhead(measure) -> None:
    b = KinetoTraceBuilder()
    with b.step(1, 0, 4 * MS):
        t = 20 * US
        for _ in range(150):  # 3 µs kernels, the host needs 20 µs per op
            with b.cpu_op("aten::add", t, 18 * US):
                b.launch(
                    "void add_kernel",
                    cpu_start=t + 12 * US,
                    cpu_dur=4 * US,
                    gpu_start=t + 19 * US,
                    gpu_dur=3 * US,
                )
            t += 24 * US
    m = measure(b)
    assert m["idle_launch_pct"] > 70 and m["idle_device_wait_pct"] < 1
    assert m.finding("launch-bound").severity == "high"
    assert m.status("not-representative") == "passed"


def test_work_queued_before_the_gap_is_a_dependency_not_launch(measure) -> None:
    b = KinetoTraceBuilder()
    with b.step(1, 0, 4 * MS):
        t = 20 * US
        for i in range(150):  # all launched up front; each waits on another stream's event
            b.runtime("cudaStreamWaitEvent", t, 2 * US)
            b.launch(
                "void add_kernel",
                cpu_start=t + 3 * US,
                cpu_dur=4 * US,
                gpu_start=100 * US + 24 * US * i,
                gpu_dur=3 * US,
            )
            t += 9 * US
    m = measure(b)
    assert m["idle_device_wait_pct"] > 70 and m["idle_launch_pct"] < 5
    assert m.status("launch-bound") == "passed"


def _one_off_wait(launch_at: int) -> KinetoTraceBuilder:
    """The sglang decode pattern: a stream wait event, work launched right after it that starts
    400 ms later, the host meanwhile blocked in a synchronous copy on that stream."""
    b = KinetoTraceBuilder(device="MI300X", vendor="amd")
    b.launch("void fill_kernel", cpu_start=0, cpu_dur=5 * US, gpu_start=10 * US, gpu_dur=5 * US)
    b.runtime("hipStreamWaitEvent", 20 * US, 5 * US)
    b.launch(
        "void resolve_future_token",
        cpu_start=launch_at,
        cpu_dur=8 * US,
        gpu_start=400 * MS,
        gpu_dur=20 * US,
    )
    with b.cpu_op("aten::copy_", 60 * US, 400 * MS - 60 * US + 30 * US):
        b.runtime("hipMemcpyWithStream", 70 * US, 400 * MS - 70 * US + 25 * US)
    b.graph_launch(
        [(f"graph_kernel_{i}", 400 * MS + 40 * US + 20 * US * i, 19 * US) for i in range(400)],
        cpu_start=400 * MS + 35 * US,
    )
    return b


def test_a_long_wait_on_a_dependency_makes_the_window_not_representative(measure) -> None:
    m = measure(_one_off_wait(launch_at=40 * US))
    assert m["idle_device_wait_pct"] > 90 and m["idle_sync_pct"] < 1
    assert m["longest_wait_pct"] > 90 and m["steady_state"] == 0
    f = m.ev.findings[0]
    assert f.rule == "not-representative" and f.severity == "high"
    assert "one-off wait" in f.headline and "hipStreamWaitEvent" in f.message
    for rule in ("launch-bound", "host-sync", "gpu-idle", "host-stall"):
        assert m.status(rule) in ("not-applicable", "not-evaluated"), rule


def test_work_launched_after_a_blocking_copy_returns_is_a_blocking_copy(measure) -> None:
    m = measure(_one_off_wait(launch_at=400 * MS - 2 * US))
    assert m["idle_copy_pct"] > 90 and m["idle_device_wait_pct"] < 1
    assert m["steady_state"] == 1 and m.status("not-representative") == "passed"


def _copy_in_first_step(kernel_first: bool) -> KinetoTraceBuilder:
    """A step that blocks 40 ms in a pageable copy (the resnet50 worker0.1623213129365 step #16
    pattern), with or without recorded GPU work before it."""
    b = KinetoTraceBuilder()
    with b.step(16, 0, 47 * MS):
        if kernel_first:
            b.launch(
                "void fill_kernel",
                cpu_start=10 * US,
                cpu_dur=5 * US,
                gpu_start=20 * US,
                gpu_dur=5 * US,
            )
        with b.cpu_op("aten::copy_", 100 * US, 40 * MS + 20 * US):
            b.launch(
                "Memcpy HtoD (Pageable -> Device)",
                kind="memcpy",
                cpu_start=110 * US,
                cpu_dur=40 * MS,
                gpu_start=40 * MS,
                gpu_dur=100 * US,
                bytes=1 << 20,
            )
        _kernels(b, 40 * MS + 300 * US, 50)
    return b


def test_a_copy_blocked_before_any_recorded_gpu_work_is_unknown(measure) -> None:
    m = measure(_copy_in_first_step(kernel_first=False))
    assert m["idle_copy_pct"] < 1 and m["idle_unknown_pct"] > 60
    assert m.status("host-sync") != "fired"


def test_a_copy_blocked_after_recorded_gpu_work_is_a_blocking_copy(measure) -> None:
    m = measure(_copy_in_first_step(kernel_first=True))
    assert m["idle_copy_pct"] > 60 and m["idle_unknown_pct"] < 1


# --- synchronisation ------------------------------------------------------------------------


def _sync_then_launch(sync_start: int, sync_dur: int) -> KinetoTraceBuilder:
    b = KinetoTraceBuilder()
    with b.step(1, 0, 20 * MS):
        t = 10 * US
        for _ in range(10):  # 1 ms kernel, then a sync, then 400 µs of host work to relaunch
            b.launch(
                "void gemm_kernel",
                cpu_start=t,
                cpu_dur=5 * US,
                gpu_start=t + 10 * US,
                gpu_dur=1 * MS,
            )
            gpu_end = t + 10 * US + 1 * MS
            s = gpu_end + sync_start
            with b.cpu_op("aten::item", s - 2 * US, sync_dur + 4 * US):
                b.runtime("cudaStreamSynchronize", s, sync_dur)
            t = gpu_end + 400 * US
            for j in range(4):
                b.runtime("cudaGetDevice", t - 300 * US + 80 * US * j, 1 * US)
    return b


def test_a_sync_that_drains_the_queue_owns_the_gap_after_it(measure) -> None:
    m = measure(_sync_then_launch(sync_start=-900 * US, sync_dur=905 * US))
    assert m["idle_sync_pct"] > 15 and m["idle_launch_pct"] < 1


def test_a_microsecond_sync_while_the_gpu_is_already_idle_drains_nothing(measure) -> None:
    m = measure(_sync_then_launch(sync_start=20 * US, sync_dur=6 * US))
    assert m["idle_sync_pct"] < 0.1 and m["idle_launch_pct"] > 15


def _sync_then_slow_host(busy_ns: int) -> KinetoTraceBuilder:
    """A sync waits while ``busy_ns`` of queued work runs, then the host relaunches slowly:
    five 5 µs kernels, each launched 100 µs after the previous one ended."""
    b = KinetoTraceBuilder()
    with b.step(1, 0, busy_ns + 1 * MS):
        b.launch(
            "void gemm_kernel", cpu_start=5 * US, cpu_dur=5 * US, gpu_start=15 * US, gpu_dur=busy_ns
        )
        end = 15 * US + busy_ns
        with b.cpu_op("aten::item", 20 * US, end - 20 * US + 10 * US):
            b.runtime("cudaStreamSynchronize", 25 * US, end - 25 * US + 2 * US)
        t = end
        for _ in range(5):
            b.launch(
                "void add_kernel",
                cpu_start=t + 92 * US,
                cpu_dur=5 * US,
                gpu_start=t + 100 * US,
                gpu_dur=5 * US,
            )
            t += 105 * US
    return b


def test_the_lead_a_sync_cost_is_shared_by_the_gaps_after_it(measure) -> None:
    m = measure(_sync_then_slow_host(busy_ns=2 * MS))  # the host had been 2 ms ahead
    split = m.split()
    # all five relaunch gaps; launch overhead is only the 15 µs before the first kernel
    assert split["sync"] == 5 * 100 * US and split["launch"] == 15 * US


def test_a_sync_owns_no_more_than_the_lead_it_cost(measure) -> None:
    m = measure(_sync_then_slow_host(busy_ns=150 * US))
    split = m.split()
    # it waited 140 µs behind the kernel and ran 2 µs into the gap: 142 µs of the 500 µs
    assert split["sync"] == 142 * US and split["launch"] == 15 * US + 500 * US - 142 * US


# --- host stalls: allocator calls, long CPU ops ------------------------------------------------


def _frees(free_ns: int, n: int = 40) -> KinetoTraceBuilder:
    """The ddp_resnet18_no_pool pattern: every op frees device memory through the driver."""
    b = KinetoTraceBuilder(device="MI300X", vendor="amd")
    b.launch("void fill_kernel", cpu_start=0, cpu_dur=5 * US, gpu_start=10 * US, gpu_dur=5 * US)
    t = 20 * US
    for _ in range(n):
        with b.cpu_op("aten::miopen_convolution", t, free_ns + 40 * US):
            b.runtime("hipFree", t + 10 * US, free_ns)
            b.launch(
                "void conv_kernel",
                cpu_start=t + free_ns + 20 * US,
                cpu_dur=5 * US,
                gpu_start=t + free_ns + 30 * US,
                gpu_dur=100 * US,
            )
        t += free_ns + 140 * US
    return b


def test_blocking_allocator_calls_are_a_host_stall_named_in_the_message(measure) -> None:
    m = measure(_frees(2 * MS))
    assert m["idle_alloc_pct"] > 80 and m["idle_launch_pct"] < 2
    assert m["alloc_calls"] == 40
    f = m.finding("host-stall")
    assert f.severity == "high" and "40 `hipFree` calls" in f.message
    assert any("PYTORCH_NO_HIP_MEMORY_CACHING" in r for r in f.recommendations)
    assert not any("gc.freeze" in r for r in f.recommendations)
    assert m.status("launch-bound") == "passed"


def test_short_allocator_calls_are_launch_overhead(measure) -> None:
    m = measure(_frees(20 * US))
    assert m["idle_alloc_pct"] == 0 and m["idle_launch_pct"] > 10


def test_a_long_cpu_op_that_launches_nothing_is_a_host_stall(measure) -> None:
    b = KinetoTraceBuilder()
    with b.step(1, 0, 12 * MS):
        t = _kernels(b, 10 * US, 5)
        with b.cpu_op("aten::unflatten_dense_tensors", t, 8 * MS):
            pass
        _kernels(b, t + 8 * MS + 10 * US, 5)
    m = measure(b)
    assert m["idle_host_busy_pct"] > 60 and m["idle_alloc_pct"] == 0
    f = m.finding("host-stall")
    assert f and "aten::unflatten_dense_tensors" in f.message


def test_data_loading_is_input(measure) -> None:
    b = KinetoTraceBuilder()
    with b.step(1, 0, 12 * MS):
        with b.annotation(
            "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 10 * US, 6 * MS
        ):
            pass
        _kernels(b, 6 * MS + 20 * US, 20)
    m = measure(b)
    assert m["idle_input_pct"] > 40 and m.finding("input-bound").severity == "high"


# --- not steady state: start-up, capture, compilation ------------------------------------------


def _startup(free_ns: int, launch_ns: int) -> KinetoTraceBuilder:
    """The alexnet pattern: the first cudaFree (context creation) and the first launch (module
    loading) inside the first convolution, then ordinary kernels."""
    b = KinetoTraceBuilder(device="A100")
    b.launch("void fill_kernel", cpu_start=0, cpu_dur=5 * US, gpu_start=10 * US, gpu_dur=20 * US)
    t = 40 * US
    with b.cpu_op("aten::cudnn_convolution", t, free_ns + launch_ns + 100 * US):
        b.runtime("cudaFree", t + 10 * US, free_ns)
        b.launch(
            "void cask_cudnn::computeOffsetsKernel",
            cpu_start=t + free_ns + 20 * US,
            cpu_dur=launch_ns,
            gpu_start=t + free_ns + launch_ns + 30 * US,
            gpu_dur=50 * US,
        )
    _kernels(b, t + free_ns + launch_ns + 200 * US, 30)
    return b


def test_start_up_calls_make_the_window_not_representative(measure) -> None:
    m = measure(_startup(free_ns=3000 * MS, launch_ns=1500 * MS))
    assert m["idle_startup_pct"] > 95 and m["steady_state"] == 0
    f = m.ev.findings[0]
    assert f.rule == "not-representative" and f.severity == "high"
    assert f.headline.startswith("not representative: this window is start-up")
    assert "schedule(wait=1, warmup=1, active=3)" in f.headline
    assert "cudaFree" in f.message and "cudaLaunchKernel" in f.message
    assert not any("CUDA graph" in r for r in f.recommendations)
    for rule in ("launch-bound", "host-stall", "gpu-idle"):
        assert m.status(rule) == "not-applicable", rule


def test_ordinary_calls_are_not_start_up(measure) -> None:
    m = measure(_startup(free_ns=30 * US, launch_ns=6 * US))
    assert m["idle_startup_pct"] == 0 and m["steady_state"] == 1


def test_an_allocator_call_under_100_ms_is_an_allocator_stall_not_start_up(measure) -> None:
    m = measure(_startup(free_ns=60 * MS, launch_ns=6 * US))
    assert m["idle_startup_pct"] == 0 and m["idle_alloc_pct"] > 90


def test_graph_capture_makes_the_window_not_representative(measure) -> None:
    b = KinetoTraceBuilder(device="MI300X", vendor="amd")
    with b.step(134, 0, 34 * MS):
        with b.annotation("capture_32_DECODE", 40 * US, 33 * MS):
            b.launch(
                "void fill_kernel",
                cpu_start=900 * US,
                cpu_dur=5 * US,
                gpu_start=960 * US,
                gpu_dur=5 * US,
            )
            b.runtime("hipStreamBeginCapture", 970 * US, 3 * US)
            t = 1 * MS
            for _ in range(500):  # recorded into the graph, not run
                b.runtime("hipStreamGetCaptureInfo", t, 1 * US)
                t += 60 * US
            b.runtime("hipStreamEndCapture", t, 10 * US)
            b.runtime("hipGraphInstantiateWithFlags", t + 20 * US, 1500 * US)
    m = measure(b)
    assert m["idle_capture_pct"] > 95 and m["steady_state"] == 0
    f = m.ev.findings[0]
    assert f.rule == "not-representative" and "graph capture" in f.headline
    assert "1 stream capture, 1 graph instantiated" in f.message
    assert any("replays" in r for r in f.recommendations)


def test_graph_replay_is_steady_state(measure) -> None:
    b = KinetoTraceBuilder(device="MI300X", vendor="amd")
    b.graph_launch(
        [(f"graph_kernel_{i}", 20 * US + 25 * US * i, 24 * US) for i in range(400)], cpu_start=0
    )
    m = measure(b)
    assert m["idle_capture_pct"] == 0 and m["steady_state"] == 1
    assert m.status("not-representative") == "passed"


def test_compilation_ranges_are_compile_not_launch(measure) -> None:
    b = KinetoTraceBuilder()
    with b.step(1, 0, 60 * MS):
        t = _kernels(b, 10 * US, 5)
        with b.annotation("_compile.compile_inner (dynamo_timed)", t, 50 * MS):
            for i in range(400):  # Python and codegen, a runtime call now and then
                b.runtime("cudaGetDevice", t + 100 * US * i, 1 * US)
        _kernels(b, t + 50 * MS + 10 * US, 5)
    m = measure(b)
    assert m["idle_compile_pct"] > 75 and m["idle_launch_pct"] < 5
    assert m.ev.findings[0].rule == "not-representative"


def test_a_compiled_region_running_is_not_compilation(measure) -> None:
    b = KinetoTraceBuilder()
    with b.step(1, 0, 8 * MS):
        with b.cpu_op("Torch-Compiled Region: 0/0", 5 * US, 7 * MS):
            _kernels(b, 10 * US, 40, dur=20 * US, gap=150 * US)
    m = measure(b)
    assert m["idle_compile_pct"] == 0 and m["idle_launch_pct"] > 50


def test_idle_after_the_last_gpu_work_is_unknown_not_a_host_stall(measure) -> None:
    b = KinetoTraceBuilder()
    with b.step(1, 0, 12 * MS):
        _kernels(b, 10 * US, 20, gap=2 * US)  # ~2.2 ms of work, then nothing until the end
    m = measure(b)
    assert m["idle_unknown_pct"] > 70 and m["idle_host_pct"] == 0


# --- the real traces where the causes were misclassified -------------------------------------


def _real(rel: str) -> dict[str, Any]:
    d = diagnose(ingest([TRACES / "kineto" / rel], quiet=True)).to_dict()
    d["by_rule"] = {f["rule"]: f for f in d["findings"]}
    d["status"] = {s["rule"]: s["status"] for s in d["rules"]}
    d["v"] = d["metrics"]["values"]
    return d


@requires_corpus
@pytest.mark.corpus
@pytest.mark.parametrize(
    "rel,calls",
    [
        (
            "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz",
            ["2 `cudaFree` calls (6.53 s", "1 `cudaLaunchKernel` call (3.06 s"],
        ),
        (
            "hta/critical_path/end_to_end/simple_add/input/trace.json.gz",
            ["cudaFree", "cudaLaunchKernel"],
        ),
        (
            "tracelens/traces/perf_model/normalization/normalization_layer_test.json.gz",
            ["hipLaunchKernel"],
        ),
    ],
)
def test_real_start_up_traces_lead_with_not_representative(rel: str, calls: list[str]) -> None:
    d = _real(rel)
    assert d["v"]["idle_startup_pct"] > 75 and d["v"]["steady_state"] == 0
    first = d["findings"][0]
    assert first["rule"] == "not-representative" and first["severity"] == "high"
    assert d["headline"].startswith("Not representative: this window is start-up")
    assert all(c in first["message"] for c in calls), first["message"]
    assert d["status"]["launch-bound"] == "not-applicable"
    assert not any(
        "CUDAGraph" in r or "reduce-overhead" in r
        for f in d["findings"]
        for r in f["recommendations"]
    )


@requires_corpus
@pytest.mark.corpus
def test_real_hipfree_stalls_are_a_host_stall_not_launch_bound() -> None:
    d = _real("tracelens/traces/mi300/ddp_resnet18_no_pool/train_resnet18.json.gz")
    assert d["v"]["idle_alloc_pct"] > 80 and d["v"]["idle_launch_pct"] < 10
    f = d["findings"][0]
    assert f["rule"] == "host-stall" and f["severity"] == "high"
    assert "`hipFree` calls" in f["message"]
    assert d["status"].get("launch-bound") == "passed"


@requires_corpus
@pytest.mark.corpus
def test_real_event_wait_is_a_one_off_wait_not_launch_or_sync() -> None:
    d = _real("tracelens/traces/inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz")
    assert d["v"]["idle_device_wait_pct"] > 95 and d["v"]["idle_launch_pct"] < 1
    assert d["v"]["idle_sync_pct"] < 1
    first = d["findings"][0]
    assert first["rule"] == "not-representative" and "hipStreamWaitEvent" in first["message"]
    assert "launch-bound" not in d["by_rule"] and "host-sync" not in d["by_rule"]


@requires_corpus
@pytest.mark.corpus
@pytest.mark.parametrize(
    "rel",
    [
        "tracelens/traces/inference/sglang_decode/capture_traces/bs_32_rank0.json.gz",
        "tracelens/traces/inference/vllm_decode_full/capture_traces/"
        "graph_capture_rank_0.1773709742341309550.pt.trace.json.gz",
        "tracelens/traces/inference/xdit_flux.1/capture_traces/capture_trace_rank_0.json.gz",
    ],
)
def test_real_graph_capture_traces_lead_with_not_representative(rel: str) -> None:
    d = _real(rel)
    assert d["v"]["idle_capture_pct"] > 60
    assert d["findings"][0]["rule"] == "not-representative"
    assert "graph capture" in d["headline"]
    assert "launch-bound" not in d["by_rule"]


@requires_corpus
@pytest.mark.corpus
def test_real_microsecond_syncs_do_not_make_host_sync_lead() -> None:
    d = _real("hta/nccl_parser_config/nccl_data.json.gz")
    assert d["v"]["idle_sync_pct"] < 1 and d["v"]["idle_launch_pct"] > 40
    # led by what its what-ifs win most: the host stall or the launches (both the expert's)
    assert d["findings"][0]["rule"] in ("host-stall", "launch-bound")
    assert "host-sync" not in d["by_rule"]
    assert d["v"]["steady_state"] == 1
