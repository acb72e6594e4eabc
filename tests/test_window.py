"""A store whose analysis would need more memory than ``--max-memory`` is analysed in step
chunks, the rest of the diagnosis on its last steps that fit (``traceinsight.store.window``),
and the result says so; a store that fits is diagnosed whole, unchanged (every step's figures:
tests/test_whole_steps.py)."""

from __future__ import annotations

from pathlib import Path

import pyarrow.compute as pc
import pytest
from conftest import invoke

import traceinsight.diagnose as dg
from tracegen.workloads import Workload, build
from traceinsight.analysis import Analysis
from traceinsight.errors import ConfigError
from traceinsight.ingest import ingest
from traceinsight.store import window

STEPS = 10


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    p = tmp_path_factory.mktemp("win") / "ten_steps.json.gz"
    build(Workload(layers=2, steps=STEPS)).write(str(p))
    return p


@pytest.fixture()
def store(trace: Path, tmp_path: Path):
    return ingest([trace], tmp_path / "s.tistore", quiet=True)


def _limit_for(store, fraction: float) -> float:
    """The limit under which ``fraction`` of the steps fit."""
    return window.BASE_MB + (window.estimate_mb(store) - window.BASE_MB) * fraction


def test_estimate_prices_each_table(store) -> None:
    rows = store.row_counts
    expect = window.BASE_MB + sum(rows.get(t, 0) * b for t, b in window.BYTES_PER_ROW.items()) / 1e6
    assert window.estimate_mb(store) == pytest.approx(expect)
    assert rows["cpu_ops"] > 0 and rows["gpu_activities"] > 0


def test_a_store_that_fits_is_not_windowed(store) -> None:
    assert window.plan(store, window.DEFAULT_MAX_MB) is None
    assert window.bounded(store) is store
    r = dg.diagnose(store, cache=False)
    assert "window" not in r.trace
    assert not [d for d in r.diagnostics if d["code"] == "analysis-window"]


def test_plan_takes_the_last_steps_that_fit(store) -> None:
    nums, starts, durs = window._steps(store)
    assert len(nums) == STEPS
    w = window.plan(store, _limit_for(store, 0.45))
    assert w is not None
    assert (w.steps, w.steps_total) == (4, STEPS)  # int(10 * 0.45)
    assert (w.first_step, w.last_step) == (int(nums[-4]), int(nums[-1]))
    assert w.start_ns == int(starts[-4])
    assert w.step_ms["all"]["steps"] == STEPS and w.step_ms["window"]["steps"] == 4
    assert w.step_ms["window"]["max"] == pytest.approx(durs[-4:].max() / 1e6)


def test_windowed_store_serves_only_the_window(store) -> None:
    w = window.plan(store, _limit_for(store, 0.45))
    ws = window.bounded(store, _limit_for(store, 0.45))
    assert isinstance(ws, window.WindowedStore) and ws.window == w
    for name, col in window.TIME_COLUMN.items():
        whole, part = store.table(name), ws.table(name)
        want = (
            int(pc.sum(pc.greater_equal(whole[col], w.start_ns)).as_py() or 0)
            if whole.num_rows
            else 0
        )
        assert part.num_rows == want, name
        if part.num_rows:
            assert pc.min(part[col]).as_py() >= w.start_ns
    assert ws.table("cpu_ops", ["name", "start_ns"]).column_names == ["name", "start_ns"]
    # the activities attributed are exactly the window's
    an = Analysis(ws)
    g = store.table("gpu_activities")
    in_win = pc.and_(pc.greater_equal(g["start_ns"], w.start_ns), pc.not_equal(g["kind"], "sync"))
    assert len(an.attribution.gpu) == pc.sum(in_win).as_py()


def test_windowed_diagnosis_says_which_steps(store) -> None:
    limit = _limit_for(store, 0.45)
    r = dg.diagnose(store, cache=False, max_memory_mb=limit)
    win = r.trace["window"]
    assert (win["steps"], win["steps_total"]) == (4, STEPS)
    d = r.diagnostics[0]
    assert d["code"] == "analysis-window" and d["severity"] == "warning"
    assert d["count"] == STEPS - 4
    assert f"rest on its last 4 steps (#{win['first_step']}-#{win['last_step']})" in d["message"]
    assert "--max-memory" in d["hint"] and "--steps" in d["hint"]
    assert win["chunked_steps"] == STEPS - 4 + 1  # the steps before it, and its first
    assert f"every step analysed, in {win['chunks'] + 1} runs of steps" in d["message"]
    assert f"cover all {STEPS} steps (exact sums)" in d["message"]
    # the step metrics describe every step (the earlier ones analysed in step chunks): the
    # window's first one, whose GPU was still busy with work launched before the window, is
    # measured in its chunk, from where its predecessor ended, so not left out
    rank = r.summary["ranks"][0]
    assert rank["steps"] == STEPS and rank["steps_representative"] == STEPS
    assert rank["steps_excluded"] == []


def test_window_is_part_of_the_cache_key(store) -> None:
    whole = dg.diagnose(store)
    part = dg.diagnose(store, max_memory_mb=_limit_for(store, 0.45))
    assert "window" not in whole.trace and part.trace["window"]["steps"] == 4
    assert dg.diagnose(store).to_dict() | {"command": []} == whole.to_dict() | {"command": []}


def test_cli_max_memory(store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    limit = _limit_for(store, 0.25)
    res = invoke(["diagnose", str(store.path), "--max-memory", f"{limit:.3f}", "--no-color"])
    assert "rest on its last 2 steps" in " ".join(res.stdout.split())
    monkeypatch.setenv(window.ENV_VAR, f"{limit:.3f}")
    assert window.max_memory_mb() == pytest.approx(float(f"{limit:.3f}"))
    assert window.max_memory_mb(123) == 123.0
    monkeypatch.setenv(window.ENV_VAR, "lots")  # a bad value is an error naming it, not 4096
    with pytest.raises(ConfigError, match=window.ENV_VAR):
        window.max_memory_mb()
    invoke(
        ["diagnose", str(store.path)],
        exit_code=2,
        stderr_contains=f"environment variable {window.ENV_VAR}='lots' is not a number",
    )
    monkeypatch.delenv(window.ENV_VAR)
    invoke(
        ["diagnose", str(store.path), "--max-memory", "-5"],
        exit_code=2,
        stderr_contains="--max-memory",
    )


def test_a_rank_partitioned_store_is_windowed_on_every_rank(tmp_path: Path) -> None:
    from tracegen.workloads import build_ranks

    folder = tmp_path / "job"
    folder.mkdir()
    for r, b in enumerate(
        build_ranks(Workload(layers=1, steps=STEPS, world_size=2, comm_bytes=1 << 20))
    ):
        b.write(str(folder / f"rank-{r}.json.gz"))
    store = ingest([folder], tmp_path / "job.tistore", quiet=True)
    assert store.meta.get("partitions")
    ws = window.bounded(store, _limit_for(store, 0.45))
    assert isinstance(ws, window.WindowedStore)
    start = ws.window.start_ns
    g = ws.table("gpu_activities", ["rank", "start_ns"])
    assert sorted(set(g["rank"].to_pylist())) == [0, 1]
    assert pc.min(g["start_ns"]).as_py() >= start
    whole = store.table("gpu_activities", ["rank", "start_ns"])
    assert g.num_rows == pc.sum(pc.greater_equal(whole["start_ns"], start)).as_py()
    r = dg.diagnose(store, cache=False, max_memory_mb=_limit_for(store, 0.45))
    assert r.trace["window"]["steps"] == 4 and r.trace["ranks"] == [0, 1]
    assert [x["rank"] for x in r.summary["ranks"]] == [0, 1]
    # every step of every rank is in the step table, as the whole store's analysis has it
    whole = dg.diagnose(store, cache=False)
    assert [x["steps"] for x in r.summary["ranks"]] == [STEPS, STEPS]
    for k in ("steps", "step_time_p50_ns", "step_time_max_ns", "step_time_cv_pct"):
        assert r.metrics["values"][k] == whole.metrics["values"][k], k
    assert [x["step_time_ns"] for x in r.summary["ranks"]] == [
        x["step_time_ns"] for x in whole.summary["ranks"]
    ]


@pytest.mark.parametrize("steps", ["none", "one"])
def test_without_two_steps_the_window_is_the_last_part_of_the_span(
    store, steps: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No step markers (or a single step): the window is the last share of the recorded span
    that fits, and the message says so."""
    real = window._steps(store)
    monkeypatch.setattr(
        window, "_steps", lambda s: None if steps == "none" else tuple(a[-1:] for a in real)
    )
    w = window.plan(store, _limit_for(store, 0.25))
    lo, hi = store.ranks[0]["span_ns"]
    assert w is not None and w.first_step is None and w.steps == 0
    assert w.start_ns == int(hi - 0.25 * (hi - lo))
    assert "its last 25% of the span (too few step markers to choose steps by)" in w.message()


def _own_kernels(store) -> dict[int, tuple[int, int]]:
    """Per step, independently of the analysis: (kernels, kernel ns) whose launching runtime
    call starts inside the step's ProfilerStep host range."""
    rng = store.table("ranges").to_pandas()
    st = window.host_steps(rng)
    rt = store.table("runtime_calls", ["correlation", "start_ns"]).to_pandas()
    g = store.table("gpu_activities", ["kind", "correlation", "dur_ns"]).to_pandas()
    k = g[g["kind"] == "kernel"].merge(rt, on="correlation")
    out = {}
    for step, hs, dur in zip(st["step"], st["start_ns"], st["dur_ns"]):
        m = k[(k["start_ns"] >= hs) & (k["start_ns"] < hs + dur)]
        out[int(step)] = (len(m), int(m["dur_ns"].sum()))
    return out


@pytest.mark.parametrize("fraction", [0.45, 0.25])
def test_step_chunks_give_every_step_exactly(store, fraction: float) -> None:
    """Over the limit, every step is in the step table with the figures of the whole trace's
    analysis (exact ns), its host time the ProfilerStep range and its kernels those launched
    in it (counted from the raw tables); the step statistics are the whole trace's."""
    from traceinsight.diagnose import chunks
    from traceinsight.metrics.steps import step_stats

    limit = _limit_for(store, fraction)
    ws = window.bounded(store, limit)
    assert isinstance(ws, window.WindowedStore) and ws.window is not None
    n_win = ws.window.steps
    assert n_win < STEPS
    parts = ws.step_chunks
    assert sum(len(c.keep) for c in parts) == STEPS - n_win + 1 == ws.window.chunked_steps
    assert all(c.lo_ns is not None for c in parts[1:]) and parts[0].lo_ns is None

    def rows(stats):
        return [
            (s.rank, s.step, s.start_ns, s.wall_ns, s.host_ns, s.gpu_ns, s.kernel_ns, s.kernels)
            for s in stats
        ]

    whole = step_stats(Analysis(store))
    an = Analysis(ws)
    chunked = chunks.analyse_chunks(ws)
    assert chunked is not None
    chunks.merge_into(an, chunked)
    got = step_stats(an)
    assert len(got) == STEPS
    assert rows(got) == rows(whole)
    assert [s.parts for s in got] == [s.parts for s in whole]
    host = window._steps(store)
    assert [s.host_ns for s in got] == [int(x) for x in host[2]]
    own = _own_kernels(store)
    assert {s.step: (s.kernels, s.kernel_ns) for s in got} == own
    assert all(n == 96 for n, _ in own.values())
    # the diagnosis: the step metrics equal the whole trace's
    a = dg.diagnose(store, cache=False).metrics["values"]
    b = dg.diagnose(store, cache=False, max_memory_mb=limit).metrics["values"]
    for name in (
        "steps",
        "steps_representative",
        "step_time_p50_ns",
        "step_time_p90_ns",
        "step_time_max_ns",
        "step_time_mean_ns",
        "step_time_cv_pct",
        "slow_steps",
    ):
        assert b[name] == a[name], name


def test_without_chunks_the_window_is_the_last_steps_only(store) -> None:
    """The chunks are what puts the earlier steps in: a window without them has its own."""
    ws = window.bounded(store, _limit_for(store, 0.45))
    assert isinstance(ws, window.WindowedStore)
    bare = window.WindowedStore(ws.path, ws.meta, window=ws.window)
    assert bare.step_chunks == ()
    from traceinsight.diagnose import chunks

    assert chunks.analyse_chunks(bare) is None
    r = dg.diagnose(store, cache=False, max_memory_mb=_limit_for(store, 0.45))
    assert r.metrics["values"]["steps"] == STEPS
