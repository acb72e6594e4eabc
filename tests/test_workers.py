"""Per-rank work where the data is: each rank partition attributed in a worker of its own,
joined into exactly the attribution of the whole store, and a diagnosis that is the same,
field by field, with one job or two (the bundled multi-rank samples, a generated job with
process-group sequence numbers, and the corpus's 2-rank pair)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow.compute as pc
import pytest
from conftest import KINETO, SAMPLES, requires_corpus

from traceinsight.analysis import attribution_parts, plain_strings
from traceinsight.analysis.attribution import attribute, attribute_part, finish
from traceinsight.diagnose import diagnose
from traceinsight.ingest import ingest
from traceinsight.store import core, partitions
from traceinsight.store.core import TraceStore
from traceinsight.util.distributed import Runner, using

STRAGGLER = SAMPLES / "synthetic_straggler_4rank"
COMM = SAMPLES / "synthetic_comm_bound_4rank"
PAIR = [KINETO / "hta" / "trace_filter" / f"sampled_rank-{r}.json.gz" for r in (0, 1)]


@pytest.fixture(scope="module")
def straggler_store(tmp_path_factory: pytest.TempPathFactory) -> TraceStore:
    with using(Runner(jobs=2)):
        return ingest([STRAGGLER], tmp_path_factory.mktemp("s") / "store", quiet=True)


def _generated_job(tmp: Path) -> Path:
    """Three ranks with process-group sequence numbers and a slow rank (written once)."""
    from tracegen.workloads import MiB, Workload, build_ranks

    w = Workload(
        hidden=256,
        seq=128,
        batch=1,
        layers=1,
        steps=3,
        world_size=3,
        comm_bytes=4 * MiB,
        straggler_rank=1,
        straggler_slowdown=1.5,
        with_stack=True,
    )
    for r, b in enumerate(build_ranks(w)):
        b.write(str(tmp / f"rank-{r}.json.gz"))
    return tmp


def _assert_same(a, b) -> None:
    for name in ("gpu", "ops", "runtime", "syncs"):
        pd.testing.assert_frame_equal(getattr(a, name), getattr(b, name), obj=name)
    assert a.steps == b.steps
    assert a.has_step_markers == b.has_step_markers
    assert a.diagnostics.to_list() == b.diagnostics.to_list()


def test_partitions_attributed_apart_equal_the_whole_store(
    straggler_store: TraceStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = partitions.names(straggler_store.meta)
    assert len(names) == 4
    with plain_strings():
        whole = finish(attribute_part(straggler_store))  # every table read here at once
    ops_per_rank = [len(TraceStore.open(straggler_store.path / n).table("cpu_ops")) for n in names]
    with using(Runner(jobs=1)):  # one process, a small store: read at once
        assert attribution_parts.by_partition(straggler_store) is None
    monkeypatch.setattr(attribution_parts, "SPLIT_ALONE_MB", 0.0)  # one process, too large
    monkeypatch.setattr(attribution_parts, "GROUP_MB", 0.0)  # each partition a task of its own
    for jobs in (1, 2):
        with using(Runner(jobs=jobs)):
            parts = attribution_parts.by_partition(straggler_store)
            assert parts is not None and len(parts) == 4
            # each part is its own rank's, indexed within its partition
            for p, n_ops, r in zip(parts, ops_per_rank, range(4), strict=True):
                assert set(p.gpu["rank"].unique()) == {r}
                assert len(p.ops) == n_ops
                assert int(p.gpu["op_idx"].max()) < n_ops
            with plain_strings():
                got = attribute(straggler_store)
        _assert_same(whole, got)
    monkeypatch.undo()
    monkeypatch.setattr(attribution_parts, "SPLIT_ALONE_MB", 0.0)
    # small partitions in groups: four ranks are four tasks for two workers (two each), two
    # tasks of two ranks for one; the same attribution
    assert attribution_parts.groups(straggler_store, names, 2) == [[n] for n in names]
    assert attribution_parts.groups(straggler_store, names, 1) == [names[:2], names[2:]]
    with using(Runner(jobs=1)):
        parts = attribution_parts.by_partition(straggler_store)
        assert parts is not None and [sorted(p.gpu["rank"].unique()) for p in parts] == [
            [0, 1],
            [2, 3],
        ]
        assert [len(p.ops) for p in parts] == [sum(ops_per_rank[:2]), sum(ops_per_rank[2:])]
        with plain_strings():
            got = attribute(straggler_store)
    _assert_same(whole, got)
    # the joined op indices point at the job's rows: rank 3's kernels at rank 3's ops
    g = whole.gpu[(whole.gpu["rank"] == 3) & (whole.gpu["op_idx"] >= 0)]
    assert len(g) and (whole.ops["rank"].to_numpy()[g["op_idx"].to_numpy()] == 3).all()
    assert int(g["op_idx"].min()) >= sum(ops_per_rank[:3])


def test_a_store_in_one_folder_or_a_window_is_attributed_here(tmp_path: Path) -> None:
    st = ingest([SAMPLES / "synthetic_h100_healthy.json.gz"], tmp_path / "s", quiet=True)
    with using(Runner(jobs=2)):
        assert attribution_parts.by_partition(st) is None


def _json(store: TraceStore, jobs: int) -> dict:
    with using(Runner(jobs=jobs, fresh=True)):
        return json.loads(diagnose(TraceStore.open(store.path), cache=False).to_json())


def _diff(a, b, path: str = "") -> list[str]:
    """Where two JSON values differ (field by field)."""
    if type(a) is not type(b):
        return [f"{path}: {type(a).__name__} vs {type(b).__name__}"]
    if isinstance(a, dict):
        out = [f"{path}/{k}: missing" for k in set(a) ^ set(b)]
        for k in set(a) & set(b):
            out += _diff(a[k], b[k], f"{path}/{k}")
        return out
    if isinstance(a, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} vs {len(b)} items"]
        return [
            d
            for i, (x, y) in enumerate(zip(a, b, strict=True))
            for d in _diff(x, y, f"{path}[{i}]")
        ]
    return [] if a == b else [f"{path}: {a!r} vs {b!r}"]


@pytest.mark.parametrize("which", ["straggler", "comm_bound", "generated"])
def test_diagnosis_is_the_same_with_one_job_or_two(which: str, tmp_path: Path) -> None:
    if which == "generated":
        (tmp_path / "job").mkdir()
        src = _generated_job(tmp_path / "job")
    else:
        src = {"straggler": STRAGGLER, "comm_bound": COMM}[which]
    store = ingest([src], tmp_path / "store", quiet=True)
    assert len(partitions.names(store.meta)) >= 3
    one, two = _json(store, 1), _json(store, 2)
    assert _diff(one, two) == []
    assert one["findings"] and one["summary"]["ranks"]


@pytest.mark.parametrize("which", ["straggler", "generated"])
def test_diagnosis_of_partitions_in_groups_is_the_same(
    which: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Small partitions analysed several to a task (their tables, attribution and products
    as one store of their ranks) give the diagnosis of one process, field by field; each
    partition keeps its own cached rank summary."""
    from traceinsight.metrics import rank_summary

    if which == "generated":
        (tmp_path / "job").mkdir()
        src = _generated_job(tmp_path / "job")
    else:
        src = STRAGGLER
    store = ingest([src], tmp_path / "store", quiet=True)
    names = partitions.names(store.meta)
    monkeypatch.setattr(attribution_parts, "TASKS_PER_WORKER", 1)  # two tasks for two workers
    tasks = attribution_parts.groups(store, names, 2)
    assert len(tasks) == 2 and max(len(t) for t in tasks) >= 2
    assert [n for t in tasks for n in t] == names  # consecutive, in rank order
    one, two = _json(store, 1), _json(store, 2)
    assert _diff(one, two) == []
    for n in names:  # the group's summaries saved rank by rank, as a partition's own task would
        part = TraceStore.open(store.path / n)
        saved = json.loads(part.read_derived(rank_summary._cache_name(part)) or "null")
        assert saved == rank_summary.summarize_store(part)


@requires_corpus
def test_corpus_rank_pair_is_the_same_with_one_job_or_two(tmp_path: Path) -> None:
    store = ingest(PAIR, tmp_path / "store", quiet=True)
    one, two = _json(store, 1), _json(store, 2)
    assert _diff(one, two) == []
    assert one["extra"]["cross_rank"]["matching"]["matched"] == 10


def test_large_tables_of_a_partitioned_store_are_read_per_use(
    straggler_store: TraceStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Above the cache limit a table is read, columns asked only, for each use, and not kept
    (the analysis holds its own frames, not a second copy of every rank's tables)."""
    st = TraceStore.open(straggler_store.path)
    kept = st.table("cpu_ops", ["name", "start_ns"])
    assert "cpu_ops" in st._tables
    monkeypatch.setattr(core, "CACHE_MAX_ROWS", 10)
    st2 = TraceStore.open(straggler_store.path)
    got = st2.table("cpu_ops", ["name", "start_ns"])
    assert "cpu_ops" not in st2._tables
    assert got.column_names == ["name", "start_ns"] and got.equals(kept)


def test_per_rank_products_from_the_workers_equal_the_whole_store(
    straggler_store: TraceStore,
) -> None:
    """The step table and the rank summaries each partition's worker computed next to its
    attribution are the whole store's, and the analysis uses them instead of recomputing."""
    import traceinsight.metrics  # noqa: F401 - registers the products
    from traceinsight.analysis import Analysis
    from traceinsight.metrics.rank_summary import summaries
    from traceinsight.metrics.steps import step_stats

    assert {"step_stats", "rank_summaries"} <= set(attribution_parts.PRODUCTS)
    with plain_strings():
        whole = Analysis(straggler_store)
        whole.__dict__["attribution"] = finish(attribute_part(straggler_store))
    want_steps, want_sums = step_stats(whole), summaries(whole)
    assert len(want_steps) == 4 * 4 and [s["rank"] for s in want_sums] == [0, 1, 2, 3]
    with using(Runner(jobs=2)):
        an = Analysis(TraceStore.open(straggler_store.path))
        an.attribution  # noqa: B018 - the workers' products land in the cache
    assert an.cache["step_stats"] == want_steps
    assert an.cache["rank_summaries"] == want_sums
    assert step_stats(an) is an.cache["step_stats"]


def test_idle_splits_and_step_models_come_from_the_workers(
    straggler_store: TraceStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each partition's worker classifies its rank's idle gaps and builds its step models;
    the client reads them (no rank's gaps classified again, no graph built here) and the
    diagnosis equals the one computed in one process."""
    import traceinsight.analysis.critical_path as cp
    import traceinsight.metrics  # registers the products
    from traceinsight.analysis import Analysis
    from traceinsight.analysis import idle as idle_mod
    from traceinsight.metrics import idle_metrics

    assert {"idle_rank_splits", "step_models"} <= set(attribution_parts.PRODUCTS)
    with using(Runner(jobs=2)):
        an = Analysis(TraceStore.open(straggler_store.path))
        an.attribution  # noqa: B018 - the workers' products land in the cache
    splits, packed = an.cache["idle_rank_splits"], an.cache["step_models"]
    assert sorted(splits) == [0, 1, 2, 3]
    assert all(len(s["split"].gaps) <= idle_metrics.EVIDENCE_GAPS for s in splits.values())
    assert [p.rank for p in packed] == [0, 1, 2, 3]
    assert [len(p.compute_ns) for p in packed] == [4, 4, 4, 4]  # one model per step
    # the packed models are each rank's own: unpacked, the rank's four steps in order
    steps = [[m.graph.step for m in p.models()] for p in packed]
    assert all(len(s) == 4 and s == sorted(s) for s in steps)

    calls: list[int] = []
    real = idle_mod._idle_split

    def counted(an_, rank, g, windows):
        calls.append(rank)
        return real(an_, rank, g, windows)

    monkeypatch.setattr(idle_mod, "_idle_split", counted)
    built: list[int] = []
    real_models = cp._models
    monkeypatch.setattr(cp, "_models", lambda *a: (built.append(1), real_models(*a))[1])
    from traceinsight.metrics import MetricSet

    ms = MetricSet()
    traceinsight.metrics.timing.compute(an, ms)
    assert calls == []  # every rank's idle split came from its worker
    sec = cp.analyse(an, ["comm-bound"])
    assert built == [] and sec["replay"]["steps"] == 16
    with plain_strings():
        whole = Analysis(straggler_store)
        whole.__dict__["attribution"] = finish(attribute_part(straggler_store))
    ms_whole = MetricSet()
    traceinsight.metrics.timing.compute(whole, ms_whole)
    assert {k: v for k, v in ms.values.items() if k.startswith("idle_")} == {
        k: v for k, v in ms_whole.values.items() if k.startswith("idle_")
    }
    assert ms.evidence["idle_gaps"] == ms_whole.evidence["idle_gaps"]
    assert sec == cp.analyse(whole, ["comm-bound"])


def test_ops_by_shape_grouped_rank_by_rank_equal_the_whole_table(
    straggler_store: TraceStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each rank's ops grouped by themselves and summed equal one grouping of every op."""
    from traceinsight.analysis import Analysis, op_shapes

    monkeypatch.setattr(op_shapes, "SLICE_MIN_OPS", 0)  # a small job: rank by rank too
    with plain_strings():
        an = Analysis(straggler_store)
        an.__dict__["attribution"] = finish(attribute_part(straggler_store))
        n = len(an.attribution.ops)
        assert len(op_shapes._rank_slices(an.attribution.ops, None)) == 4
        per_rank = op_shapes.ops_by_shape(an, top=1 << 30)
        one_rank = op_shapes.ops_by_shape(an, top=1 << 30, rank=2)
        monkeypatch.setattr(op_shapes, "_rank_slices", lambda ops, rank: [(0, n)])
        whole = op_shapes.ops_by_shape(an, top=1 << 30)
        whole_rank = op_shapes.ops_by_shape(an, top=1 << 30, rank=2)
    assert per_rank == whole and per_rank is not None and per_rank["groups"] > 10
    assert one_rank is not None and whole_rank is not None
    assert one_rank["rows"] == whole_rank["rows"]
    assert sum(r["calls"] for r in per_rank["rows"]) == 4 * sum(
        r["calls"] for r in one_rank["rows"]
    )


@pytest.mark.parametrize("sample", ["synthetic_h100_healthy.json.gz", "synthetic_straggler_4rank"])
def test_rank_peaks_are_the_memory_groups_per_rank_peaks(sample: str, tmp_path: Path) -> None:
    """A rank's summary reads only the memory group's per-rank peaks: computed alone, they
    are the group's own."""
    from traceinsight.analysis import Analysis
    from traceinsight.metrics import MetricSet, memory

    st = ingest([SAMPLES / sample], tmp_path / "s", quiet=True)
    full, light = MetricSet(), MetricSet()
    with plain_strings():
        memory.compute(Analysis(st), full)
        memory.rank_peaks(Analysis(st), light)
    want = {
        r: {k: v for k, v in d.items() if k in ("peak_allocated_bytes", "peak_reserved_bytes")}
        for r, d in full.per_rank.items()
    }
    assert light.per_rank == {r: d for r, d in want.items() if d}


def test_breakdown_names_and_step_parts_come_from_the_workers(
    straggler_store: TraceStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The window breakdowns, the event names with their counts (ties in the whole table's
    order), the TensorBoard step parts and the process-group names each partition's worker
    measured are the whole store's, and the client neither reads those tables nor measures a
    window again."""
    import traceinsight.analysis as analysis_mod
    import traceinsight.metrics  # noqa: F401 - registers the products
    from traceinsight.analysis import Analysis, overview, run_facts, run_names

    assert {"breakdown", "run_names", "step_breakdown", "pg_names"} <= set(
        attribution_parts.PRODUCTS
    )
    with plain_strings():
        whole = Analysis(straggler_store)
        whole.__dict__["attribution"] = finish(attribute_part(straggler_store))
        want_bd, want_names = whole.breakdown, run_names.read_names(whole)
        want_parts, want_pgs = overview.step_breakdown(whole), run_facts._pg_names(whole)
    with using(Runner(jobs=2)):
        an = Analysis(TraceStore.open(straggler_store.path))
        an.attribution  # noqa: B018 - the workers' products land in the cache

    def boom(*_a, **_k):
        raise AssertionError("computed in the client")

    monkeypatch.setattr(run_names, "_read_names", boom)
    monkeypatch.setattr(overview, "_step_breakdown", boom)
    monkeypatch.setattr(analysis_mod, "breakdown", boom)
    monkeypatch.setattr(run_facts, "_table_pg_names", boom)
    assert an.breakdown == want_bd and len(want_bd.steps) == 16
    got = run_names.read_names(an)
    for field in ("ops", "ranges", "frames", "kernels", "runtime", "memcpy"):
        a, b = getattr(got, field), getattr(want_names, field)
        assert list(a.items()) == list(b.items()), field  # same order, ties included
        assert a.dtype == b.dtype and a.index.dtype == b.index.dtype, field
    assert got.graph_kernels == want_names.graph_kernels
    assert len(want_names.ops) > 10 and want_names.ops.duplicated().any()  # ties to keep
    assert overview.step_breakdown(an) == want_parts and len(want_parts["steps"]) == 16
    assert run_facts._pg_names(an) == want_pgs
    # the op instances' cost models, their op indices moved to the job's rows
    from traceinsight.metrics import roofline

    with plain_strings():  # as the diagnosis computes it
        want_inst = roofline._op_instances(
            whole, overview.kernel_rows(whole.attribution.gpu, roofline._KERNEL_COLUMNS)
        )
    got_inst = an.cache["op_instances"]
    assert len(want_inst) > 100 and sorted(set(got_inst["rank"])) == [0, 1, 2, 3]
    pd.testing.assert_frame_equal(got_inst, want_inst)


def test_completeness_and_exposed_copies_come_from_the_workers(
    straggler_store: TraceStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each rank's completeness checks and its exposed copy time (by class, by class and
    direction, device-to-host) are measured in its partition's worker; the client adds them
    up to the whole store's figures without measuring a rank again."""
    import traceinsight.metrics  # noqa: F401 - registers the products
    from traceinsight.analysis import Analysis
    from traceinsight.analysis import completeness as comp
    from traceinsight.metrics import MetricSet, copies

    with plain_strings():
        whole = Analysis(straggler_store)
        whole.__dict__["attribution"] = finish(attribute_part(straggler_store))
    want_exposed = copies._exposed(whole, copies._copies(whole.attribution.gpu))
    want_checks = {r: comp.completeness(whole, r) for r in range(4)}
    ms_whole = MetricSet()
    copies.compute(whole, ms_whole)
    with using(Runner(jobs=2)):
        an = Analysis(TraceStore.open(straggler_store.path))
        an.attribution  # noqa: B018 - the workers' products land in the cache
    assert sorted(an.cache["copy_exposed"]) == sorted(want_exposed) and want_exposed
    assert an.cache["copy_exposed"] == want_exposed
    got_checks = an.cache["completeness"]
    assert sorted(got_checks) == [0, 1, 2, 3]
    for r in range(4):
        a, b = got_checks[r], want_checks[r]
        assert (a.no_launch, a.replays, a.tail_launches) == (
            b.no_launch,
            b.replays,
            b.tail_launches,
        )
    monkeypatch.setattr(comp, "_rank", lambda *_a: pytest.fail("a rank checked in the client"))
    monkeypatch.setattr(copies, "_exposed", lambda *_a: pytest.fail("copies measured here"))
    ms = MetricSet()
    copies.compute(an, ms)
    assert ms.values == ms_whole.values
    assert ms.evidence["copy_kinds"] == ms_whole.evidence["copy_kinds"]


def test_a_ranks_rows_are_read_from_its_partition_alone(straggler_store: TraceStore) -> None:
    """``rank_table`` reads one rank's partition file when the whole table is not in memory,
    and the whole table's rows of the rank otherwise; the same rows either way."""
    st = TraceStore.open(straggler_store.path)
    cols = ["name", "start_ns", "dur_ns"]
    alone = st.rank_table("ranges", 2, cols)
    assert "ranges" not in st._tables  # not read whole for it
    whole = st.table("ranges")
    want = whole.filter(pc.equal(whole["rank"], 2)).select(cols)
    assert alone.num_rows == want.num_rows > 0
    assert alone.to_pylist() == want.to_pylist()
    assert st.rank_table("ranges", 2, cols).to_pylist() == want.to_pylist()  # from the cache


def test_groups_fit_the_cluster_not_this_machine(
    straggler_store: TraceStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a Dask scheduler the tasks are sized for the cluster's worker threads (a login
    node's two cores must not leave a cluster idle): each of four small ranks its own task on
    a cluster of eight threads, two of two ranks on one thread."""

    class FakeClient:
        def __init__(self, threads: dict[str, int]) -> None:
            self.threads = threads

        def nthreads(self) -> dict[str, int]:
            return self.threads

    names = partitions.names(straggler_store.meta)
    r = Runner(jobs=1, scheduler="tcp://cluster:8786")
    r._client = FakeClient({"w1": 4, "w2": 4})
    assert r.slots() == 8
    assert attribution_parts.groups(straggler_store, names, r.slots()) == [[n] for n in names]
    r._client = FakeClient({"w1": 1})
    assert r.slots() == 1
    assert attribution_parts.groups(straggler_store, names, r.slots()) == [names[:2], names[2:]]
    assert Runner(jobs=3).slots() == 3
