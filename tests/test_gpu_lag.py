"""A GPU running a steady distance behind the host is a queue depth, not jitter: the first step
window carries the lag, and the step-time variation is measured without it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracegen.synth import KinetoTraceBuilder
from traceinsight.analysis import Analysis
from traceinsight.engine.evaluate import evaluate, load_rules
from traceinsight.ingest import ingest
from traceinsight.metrics import compute_metrics

MS = 1_000_000
LAG = 160 * MS
HOST = [216, 218, 214, 217, 215, 216, 219, 213]  #: host step times (ms): they vary by 1%


def _lagging(host_ms: list[int], lag: int = LAG) -> KinetoTraceBuilder:
    """Contiguous host steps; each step's GPU work runs as long as its host step and ends
    ``lag`` after it (the queue). The first step's first kernel runs at once; the rest of its
    work waits behind ``lag`` of work queued before the trace (no launch record)."""
    b = KinetoTraceBuilder()
    t0 = 0
    for i, h in enumerate(host_ms):
        dur = h * MS
        with b.step(i + 1, t0, dur):
            if i == 0:
                b.launch(
                    "first_small_kernel", cpu_start=t0 + 10_000, gpu_start=t0 + 20_000, gpu_dur=MS
                )
                n_pre = 4
                pre = (lag - MS - 20_000) // n_pre
                for k in range(n_pre):
                    s = t0 + 20_000 + MS + k * pre
                    b.launch("pre_trace_gemm", cpu_start=0, gpu_start=s, gpu_dur=pre, orphan=True)
            g0, q = t0 + lag, dur // 4
            for k in range(4):
                b.launch(
                    "ampere_bf16_s16816gemm",
                    cpu_start=t0 + (1 + k) * MS,
                    gpu_start=g0 + k * q,
                    gpu_dur=q if k < 3 else dur - 3 * q,
                )
        t0 += dur
    return b


def _run(b: KinetoTraceBuilder, tmp: Path):
    an = Analysis(ingest([b.write(tmp / "t.json")], tmp / "store", quiet=True))
    ms = compute_metrics(an)
    ev = evaluate(load_rules(), ms, an)
    return an, ms, ev


def test_a_steady_gpu_lag_is_reported_as_the_lag_not_as_jitter(tmp_path: Path) -> None:
    an, ms, ev = _run(_lagging(HOST), tmp_path)
    steps = [w for w in an.attribution.steps if w.step is not None]
    # the first window carries the lag: 216 + 160 ms against the others' host times
    assert steps[0].dur_ns == HOST[0] * MS + LAG
    assert [w.dur_ns for w in steps[1:]] == [h * MS for h in HOST[1:]]
    v = ms.values
    assert v["gpu_lag_ns"] == LAG
    # the variation is the host's (1%), and jitter does not fire
    t = [h * MS for h in HOST]
    mean = sum(t) / len(t)
    cv = 100.0 * (sum((x - mean) ** 2 for x in t) / len(t)) ** 0.5 / mean
    assert v["step_time_cv_pct"] == pytest.approx(cv)
    assert v["step_time_cv_pct"] < 1.0
    assert not any(f.rule == "jitter" for f in ev.findings)
    assert next(s.status for s in ev.statuses if s.rule == "jitter") == "passed"
    d = [x for x in an.attribution.diagnostics.to_list() if x["code"] == "gpu-lag"]
    assert len(d) == 1 and "160 ms behind the host" in d[0]["message"]
    assert "queue depth" in d[0]["message"] and d[0]["severity"] == "info"


def test_a_step_whose_host_time_varies_is_still_jitter(tmp_path: Path) -> None:
    # the same lag, but two host steps take twice as long: that is jitter
    host = [216, 218, 432, 217, 215, 430, 219, 213]
    _an, ms, ev = _run(_lagging(host), tmp_path)
    assert ms.values["gpu_lag_ns"] == LAG  # the queue stays as deep
    f = next(f for f in ev.findings if f.rule == "jitter")
    assert f.severity == "high" and ms.values["slow_steps"] == 2
    assert "step 3" in f.message and "step 6" in f.message and "step 1 " not in f.message


def test_a_first_window_holding_only_its_own_work_keeps_it(tmp_path: Path) -> None:
    """The host runs ahead of the GPU until the queue fills (host steps 35, 72, then 96 ms);
    every step runs the same 96 ms of GPU work back to back from the start: the first window
    is its own work, not a lag, and is not shortened."""
    b = KinetoTraceBuilder()
    host = [35, 72, 96, 96, 96, 96]
    t0, g = 0, 20_000
    for i, h in enumerate(host):
        with b.step(i + 1, t0, h * MS):
            for k in range(4):
                b.launch(
                    "ampere_bf16_s16816gemm",
                    cpu_start=t0 + (1 + k) * MS,
                    gpu_start=g,
                    gpu_dur=24 * MS,
                )
                g += 24 * MS
        t0 += h * MS
    an, ms, _ev = _run(b, tmp_path)
    walls = [w.dur_ns for w in an.attribution.steps if w.step is not None]
    assert walls[0] == 96 * MS + 20_000  # its own work, from its host start
    v = ms.values
    assert v["gpu_lag_ns"] > 0  # the host is ahead: a queue
    t = walls
    mean = sum(t) / len(t)
    cv = 100.0 * (sum((x - mean) ** 2 for x in t) / len(t)) ** 0.5 / mean
    assert v["step_time_cv_pct"] == pytest.approx(cv)  # nothing taken out
    d = [x for x in an.attribution.diagnostics.to_list() if x["code"] == "gpu-lag"]
    assert d and "first step window carries it" not in d[0]["message"]
