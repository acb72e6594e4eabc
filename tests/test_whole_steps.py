"""A trace larger than the analysis budget is analysed in step chunks, every step in the result:
its time breakdown, kernel / op / layer / module-type / annotation rollups and idle split equal
(exactly, in ns) the whole store's diagnosis without a limit; ``--steps`` diagnoses exactly the
steps it names, each as the whole trace's analysis measures it."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import pytest
from conftest import invoke

import traceinsight.diagnose as dg
from tracegen.workloads import Workload, build, build_ranks
from traceinsight.analysis import Analysis, rollups
from traceinsight.errors import ConfigError
from traceinsight.ingest import ingest
from traceinsight.metrics.steps import step_stats
from traceinsight.store import window

STEPS = 10
#: the figures the chunks merge: every one equals the whole store's
MERGED = ("kernels", "ops", "layers", "annotations", "classes", "windows", "step_basis")
#: the metrics a store analysed in step chunks measures over every step (the merged sums)
WHOLE_METRICS = (
    "gpu_busy_pct",
    "gpu_idle_pct",
    "compute_pct",
    "comm_pct",
    "exposed_comm_pct",
    "memcpy_exposed_pct",
    "memset_exposed_pct",
    "idle_launch_pct",
    "idle_host_pct",
    "idle_sync_pct",
    "idle_unknown_pct",
    "idle_oneoff_pct",
    "gpu_idle_steady_pct",
    "idle_recorded_pct",
    "kernels_per_step",
    "small_kernel_pct",
    "small_kernel_time_pct",
    "median_kernel_ns",
    "gemm_time_pct",
    "elementwise_time_pct",
)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory):
    d = tmp_path_factory.mktemp("whole")
    build(Workload(layers=2, steps=STEPS)).write(str(d / "ten.json.gz"))
    return ingest([d / "ten.json.gz"], d / "s.tistore", quiet=True)


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory):
    d = tmp_path_factory.mktemp("job")
    (d / "in").mkdir()
    for r, b in enumerate(
        build_ranks(Workload(layers=1, steps=STEPS, world_size=2, comm_bytes=1 << 20))
    ):
        b.write(str(d / "in" / f"rank-{r}.json.gz"))
    return ingest([d / "in"], d / "job.tistore", quiet=True)


@pytest.fixture(scope="module")
def whole(store):
    return dg.diagnose(store, cache=False)


def _limit_for(store, fraction: float) -> float:
    return window.BASE_MB + (window.estimate_mb(store) - window.BASE_MB) * fraction


def same(a: Any, b: Any, path: str = "") -> list[str]:
    """Where ``a`` and ``b`` differ: integers (ns, counts) exactly, floats (shares, means,
    deviations recomputed from the merged sums) to 1e-12 relative."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{path}: keys {sorted(set(a) ^ set(b))}"] if set(a) != set(b) else []
        return out + [d for k in a if k in b for d in same(a[k], b[k], f"{path}.{k}")]
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} vs {len(b)} rows"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in same(x, y, f"{path}[{i}]")]
    if isinstance(a, float) or isinstance(b, float):
        if a is None or b is None:
            return [] if a is b else [f"{path}: {a} vs {b}"]
        if math.isnan(a) and math.isnan(b):
            return []
        ok = math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-9)
        return [] if ok else [f"{path}: {a} vs {b}"]
    return [] if a == b else [f"{path}: {a!r} vs {b!r}"]


@pytest.mark.parametrize("fraction", [0.45, 0.25])
def test_chunked_figures_equal_the_whole_diagnosis(store, whole, fraction: float) -> None:
    r = dg.diagnose(store, cache=False, max_memory_mb=_limit_for(store, fraction))
    win = r.trace["window"]
    assert win["steps"] < STEPS and win["chunks"] >= 2
    # the time breakdown: per-rank totals (busy, idle, compute, comm, copies, by class) and
    # every step's window, exactly
    assert r.breakdown["steps_total"] == STEPS
    assert same(r.breakdown, whole.breakdown) == []
    b = r.breakdown["ranks"][0]
    assert b["kernels"] == whole.breakdown["ranks"][0]["kernels"] == STEPS * 96
    assert b["wall_ns"] == sum(s["wall_ns"] for s in whole.breakdown["steps"])
    for k in MERGED:
        assert same(r.rollups[k], whole.rollups[k], k) == [], k
    assert same(r.rollups["module_types"], whole.rollups["module_types"]) == []
    # the idle split by cause over every step (the step basis' statistic), exactly
    basis = r.rollups["step_basis"]
    assert (
        basis["windows"] == STEPS
        and basis["idle_split_ns"] == (whole.rollups["step_basis"]["idle_split_ns"])
    )
    assert sum(basis["idle_split_ns"].values()) == basis["idle_ns"] == b["idle_ns"]
    # the step statistics too
    for k in ("steps", "step_time_p50_ns", "step_time_p90_ns", "step_time_max_ns"):
        assert r.metrics["values"][k] == whole.metrics["values"][k], k
    # and the metrics of GPU time and kernels the findings test: every step's, as the whole's
    got, want = r.metrics["values"], whole.metrics["values"]
    for k in WHOLE_METRICS:
        assert same(got[k], want[k], k) == [], (k, got[k], want[k])
    assert (
        same(
            r.metrics["per_rank"]["0"]["gpu_busy_pct"],
            whole.metrics["per_rank"]["0"]["gpu_busy_pct"],
        )
        == []
    )


@pytest.fixture(scope="module")
def cold(tmp_path_factory: pytest.TempPathFactory):
    """A trace whose first kernel launch blocks 200 ms: its first step is a warm-up step."""
    d = tmp_path_factory.mktemp("cold")
    build(Workload(layers=2, steps=STEPS, cold_start_ns=200_000_000)).write(str(d / "c.json.gz"))
    return ingest([d / "c.json.gz"], d / "c.tistore", quiet=True)


@pytest.mark.parametrize("fraction", [0.45, 0.25])
def test_a_warm_up_step_is_left_out_as_in_the_whole(cold, fraction: float) -> None:
    """The step basis over the representative steps (the warm-up step out), the step table's
    exclusions, the breakdown and the rollups: the whole store's, exactly (a chunk's host rows
    read on past its steps hold no later step of its own)."""
    a = dg.diagnose(cold, cache=False)
    assert [x["reason"] for x in a.summary["ranks"][0]["steps_excluded"]] == ["warm-up"]
    assert a.rollups["step_basis"]["windows"] == STEPS - 1
    b = dg.diagnose(cold, cache=False, max_memory_mb=_limit_for(cold, fraction))
    assert b.trace["window"]["chunks"] >= 2
    assert b.summary["ranks"][0]["steps_excluded"] == a.summary["ranks"][0]["steps_excluded"]
    assert same(b.breakdown, a.breakdown) == []
    for k in MERGED:
        assert same(b.rollups[k], a.rollups[k], k) == [], k
    assert b.rollups["step_basis"]["windows"] == STEPS - 1
    assert b.metrics["values"]["steps_representative"] == STEPS - 1


def test_without_the_merge_the_figures_are_the_last_steps(store, whole) -> None:
    """What the chunks add: the window's own analysis has the last steps' kernels only."""
    ws = window.bounded(store, _limit_for(store, 0.45))
    assert isinstance(ws, window.WindowedStore) and ws.window is not None
    own = rollups.by_kernel(Analysis(ws).attribution)
    calls = int(own.loc[own["kind"] == "kernel", "calls"].sum())
    assert calls < STEPS * 96
    assert sum(k["calls"] for k in whole.rollups["kernels"] if k["kind"] == "kernel") == (
        STEPS * 96
    )


def test_a_job_of_two_ranks_is_merged_exactly(job) -> None:
    a = dg.diagnose(job, cache=False)
    b = dg.diagnose(job, cache=False, max_memory_mb=_limit_for(job, 0.45))
    assert b.trace["window"]["steps"] == 4 and b.trace["window"]["chunks"] >= 2
    assert [x["rank"] for x in b.breakdown["ranks"]] == [0, 1]
    assert same(b.breakdown, a.breakdown) == []
    for k in MERGED:
        assert same(b.rollups[k], a.rollups[k], k) == [], k
    comm = [x["comm_ns"] for x in b.breakdown["ranks"]]
    assert all(c > 0 for c in comm)
    # the job's metrics of GPU time (communication exposed and hidden too) over every step
    for k in (*WHOLE_METRICS, "comm_overlap_pct"):
        assert same(b.metrics["values"][k], a.metrics["values"][k], k) == [], k
    assert b.metrics["values"]["comm_pct"] > 0
    for r in ("0", "1"):
        for k in ("gpu_busy_pct", "exposed_comm_pct", "comm_pct", "compute_pct"):
            assert same(b.metrics["per_rank"][r][k], a.metrics["per_rank"][r][k], k) == []


def test_the_diagnostic_names_what_rests_on_which_steps(store) -> None:
    r = dg.diagnose(store, cache=False, max_memory_mb=_limit_for(store, 0.45))
    d = next(x for x in r.diagnostics if x["code"] == "analysis-window")
    w = r.trace["window"]
    msg = d["message"]
    assert f"every step analysed, in {w['chunks'] + 1} runs of steps one at a time" in msg
    assert "time breakdown, the kernel, op, layer, module-type and annotation rollups" in msg
    assert f"cover all {STEPS} steps (exact sums)" in msg
    assert "and so do the metrics of GPU time (busy, idle and its causes" in msg
    assert (
        "the findings' other evidence (calls, gaps, launch latency), the timeline, critical "
        "path, per-rank summary and roofline rest on its last 4 steps "
        f"(#{w['first_step']}-#{w['last_step']})" in msg
    )


def test_rollup_sums_of_any_partition_equal_the_rollups(store) -> None:
    """The sums of the rows split any way (with varied durations, so medians, deviations and
    shares are not trivial) make the rollups of all rows."""
    an = Analysis(store)
    attr = an.attribution
    rng = np.random.default_rng(7)
    g = attr.gpu.copy()
    g["dur_ns"] = g["dur_ns"].to_numpy(np.int64) + rng.integers(0, 50, len(g)) * 1000
    g["end_ns"] = g["start_ns"] + g["dur_ns"]
    attr = dataclasses.replace(attr, gpu=g)
    part = rng.integers(0, 3, len(g))
    op_part = rng.integers(0, 3, len(attr.ops))
    sums = None
    for i in range(3):
        s = rollups.RollupSums.of(attr, g[part == i], attr.ops[op_part == i])
        if sums is None:
            sums = s
        else:
            sums.add(s)
    assert sums is not None

    def rec(df):
        return df.to_dict("records")

    assert same(rec(sums.kernels()), rec(rollups.by_kernel(attr))) == []
    assert same(rec(sums.ops()), rec(rollups.by_op(attr))) == []
    assert same(rec(sums.layers()), rec(rollups.by_layer(attr))) == []
    assert same(rec(sums.module_types()), rec(rollups.by_module_type(attr))) == []
    assert same(rec(sums.annotations()), rec(rollups.by_annotation(attr))) == []
    k = rollups.by_kernel(attr)
    assert (k["median_ns"] != k["mean_ns"]).any() and (k["stddev_ns"] > 0).any()


# --- --steps ----------------------------------------------------------------------------------


def _whole_rows(store) -> dict[int, tuple]:
    return {
        s.step: (s.wall_ns, s.host_ns, s.gpu_ns, s.kernel_ns, s.kernels, s.parts)
        for s in step_stats(Analysis(store))
    }


@pytest.mark.parametrize(
    ("spec", "want"),
    [("12:15", [12, 13, 14, 15]), ("last:3", [17, 18, 19]), (":11", [10, 11]), ("18:", [18, 19])],
)
def test_steps_diagnoses_exactly_those_steps(store, spec: str, want: list[int]) -> None:
    an = Analysis(store)
    wanted = set(want)
    g = an.attribution.gpu
    mine = g[g["step"].isin(want)]
    r = dg.diagnose(store, cache=False, steps=spec)
    assert [w["step"] for w in r.breakdown["steps"]] == want
    assert r.summary["ranks"][0]["steps"] == len(want)
    assert r.summary["ranks"][0]["steps_excluded"] == []
    assert r.metrics["values"]["steps"] == len(want)
    # each step as the whole trace's analysis measures it (its first one's window starts where
    # its predecessor's GPU work ended, not at its host start)
    rows = _whole_rows(store)
    got = {
        s.step: (s.wall_ns, s.host_ns, s.gpu_ns, s.kernel_ns, s.kernels, s.parts)
        for s in _stats_of(store, spec)
    }
    assert got == {k: v for k, v in rows.items() if k in wanted}
    # the rollups are those steps' rows: as many kernels, as much time
    assert sum(k["calls"] for k in r.rollups["kernels"]) == len(mine)
    assert sum(k["calls"] for k in r.rollups["kernels"] if k["kind"] == "kernel") == 96 * len(want)
    assert sum(k["total_ns"] for k in r.rollups["kernels"]) == int(mine["dur_ns"].sum())
    w = r.trace["window"]
    assert (w["selected"], w["steps"], w["steps_total"]) == (spec, len(want), STEPS)
    assert (w["first_step"], w["last_step"]) == (want[0], want[-1])
    d = next(x for x in r.diagnostics if x["code"] == "analysis-window")
    assert (
        f"diagnosed steps #{want[0]}-#{want[-1]} ({len(want)} of {STEPS}), as chosen with "
        f"--steps {spec}: every figure describes those steps only" in d["message"]
    )


def _stats_of(store, spec: str):
    from traceinsight.diagnose import chunks

    ws = window.bounded(store, steps=spec)
    an = Analysis(ws)
    chunks.restrict(an, ws.keep_steps, ws.own_from_ns)
    return step_stats(an)


def test_steps_over_the_whole_trace_equals_the_whole(store, whole) -> None:
    r = dg.diagnose(store, cache=False, steps="10:19")
    assert same(r.breakdown, whole.breakdown) == []
    for k in ("kernels", "ops", "layers", "module_types"):
        assert same(r.rollups[k], whole.rollups[k], k) == [], k


def test_steps_is_part_of_the_cache_key(store) -> None:
    a = dg.diagnose(store)
    b = dg.diagnose(store, steps="last:3")
    assert "window" not in a.trace and b.trace["window"]["steps"] == 3
    assert dg.diagnose(store, steps="last:3").trace["window"]["selected"] == "last:3"
    assert "window" not in dg.diagnose(store).trace


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("last:100", window.StepRange("last:100", last=100)),
        ("20:80", window.StepRange("20:80", first=20, stop=80)),
        (" 20: ", window.StepRange("20:", first=20)),
        (":80", window.StepRange(":80", stop=80)),
        ("LAST:5", window.StepRange("LAST:5", last=5)),
    ],
)
def test_parse_steps(text: str, want: window.StepRange) -> None:
    assert window.parse_steps(text) == want


@pytest.mark.parametrize("text", ["12-15", "last:0", "last:x", ":", "a:b", "-3:4", "5", "1:2:3"])
def test_a_bad_steps_value_is_refused(store, text: str) -> None:
    with pytest.raises(ConfigError, match="--steps"):
        window.parse_steps(text)
    res = invoke(["diagnose", str(store.path), "--steps", text], exit_code=2)
    err = res.stderr.strip()
    assert "\n" not in err and "--steps" in err and "last:N" in err, err


def test_steps_out_of_range_or_reversed_is_one_line_exit_2(store) -> None:
    res = invoke(["diagnose", str(store.path), "--steps", "90:95"], exit_code=2)
    assert res.stderr.strip() == (
        "traceinsight: error: --steps 90:95: no such step (the trace has steps #10-#19)"
    )
    res = invoke(["diagnose", str(store.path), "--steps", "15:12"], exit_code=2)
    assert "the first step (15) is after the last (12)" in res.stderr
    assert "\n" not in res.stderr.strip()
    with pytest.raises(ConfigError, match="no such step"):
        dg.diagnose(store, cache=False, steps="90:")


def test_cli_steps(store) -> None:
    res = invoke(["diagnose", str(store.path), "--steps", "last:2", "--no-color"])
    out = " ".join(res.stdout.split())
    assert "diagnosed steps #18-#19 (2 of 10), as chosen with --steps last:2" in out
    help_text = " ".join(invoke(["diagnose", "--help"]).stdout.split())
    assert "--steps RANGE" in help_text and "--steps last:100, --steps 20:80" in help_text


def test_api_steps(store) -> None:
    import traceinsight

    r = traceinsight.open(store.path).diagnose(steps="12:13")
    assert [w["step"] for w in r.result.breakdown["steps"]] == [12, 13]
