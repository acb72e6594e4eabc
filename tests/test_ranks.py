"""Many ranks: the per-rank ingest into rank partitions, per-rank totals equal to single-rank
results, and the cross-rank analysis (matched collectives, clock offsets, straggler profile,
heatmaps) on the bundled 4-rank samples, the corpus's 2-rank pair and hand-made summaries."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import KINETO, SAMPLES, invoke, requires_corpus

from traceinsight.analysis import Analysis
from traceinsight.analysis.collectives import cross_rank
from traceinsight.diagnose import diagnose
from traceinsight.errors import InputError
from traceinsight.ingest import ingest
from traceinsight.metrics.rank_summary import (
    RankTask,
    summaries,
    summarize_partition,
)
from traceinsight.render.html import render_html
from traceinsight.store import partitions
from traceinsight.store.core import TraceStore, write_store
from traceinsight.store.schema import TABLES
from traceinsight.util.distributed import Runner, using

STRAGGLER = SAMPLES / "synthetic_straggler_4rank"
COMM = SAMPLES / "synthetic_comm_bound_4rank"
PAIR = [KINETO / "hta" / "trace_filter" / f"sampled_rank-{r}.json.gz" for r in (0, 1)]
#: per-rank totals that must be exact (integers: ns, counts, bytes)
EXACT = (
    "rank",
    "kernel_time_ns",
    "comm_kernel_time_ns",
    "memcpy_time_ns",
    "memset_time_ns",
    "kernels",
    "window_ns",
    "gpu_busy_ns",
    "gpu_idle_ns",
    "compute_ns",
    "comm_exposed_ns",
    "steps",
    "step_time_ns",
    "peak_allocated_bytes",
    "peak_reserved_bytes",
)


def _rows(result) -> dict[int, dict]:
    return {r["rank"]: {k: r.get(k) for k in EXACT} for r in result.summary["ranks"]}


@pytest.fixture(scope="module")
def straggler_store(tmp_path_factory: pytest.TempPathFactory) -> TraceStore:
    with using(Runner(jobs=2)):
        return ingest([STRAGGLER], tmp_path_factory.mktemp("s") / "store", quiet=True)


@pytest.fixture(scope="module")
def straggler_result(straggler_store: TraceStore):
    return diagnose(straggler_store, cache=False)


# --- the partitioned store -------------------------------------------------------------------


def test_rank_files_ingest_into_one_partition_per_rank(straggler_store: TraceStore) -> None:
    st = straggler_store
    assert partitions.names(st.meta) == [f"rank={r}" for r in range(4)]
    assert [r["rank"] for r in st.ranks] == [0, 1, 2, 3]
    for r in range(4):  # each partition is a single-rank store of that rank's file
        part = TraceStore.open(st.path / f"rank={r}")
        assert [x["rank"] for x in part.ranks] == [r]
        assert part.meta["sources"][0]["name"] == f"rank-{r}.json.gz"
    for name in TABLES:  # the whole store's table: the ranks' tables in rank order
        t = st.table(name)
        assert t.num_rows == st.row_counts[name]
        if t.num_rows:
            ranks = t["rank"].to_pylist()
            assert ranks == sorted(ranks)


def test_partitioned_equals_one_folder_and_workers_agree(
    straggler_store: TraceStore, straggler_result, tmp_path: Path
) -> None:
    """Diagnosing the partitioned store gives what the same tables in one folder give, and one
    worker writes the same tables as two."""
    meta = {
        k: v
        for k, v in straggler_store.meta.items()
        if k not in ("partitions", "tables", "format", "schema_version")
    }
    flat = write_store(tmp_path / "flat", meta, {n: straggler_store.table(n) for n in TABLES})
    got = diagnose(TraceStore.open(flat.path), cache=False)
    a = json.loads(got.to_json())
    b = json.loads(straggler_result.to_json())
    for d in (a, b):
        d["extra"].pop("open_in_viewer", None)
    assert a == b
    with using(Runner(jobs=1)):
        one = ingest([STRAGGLER], tmp_path / "one", quiet=True)
    for name in TABLES:
        assert one.table(name).equals(straggler_store.table(name)), name


def test_per_rank_totals_equal_single_rank_results(
    straggler_store: TraceStore, straggler_result
) -> None:
    """Each rank's row of the job's diagnosis, its partition's summary and the diagnosis of its
    file alone agree exactly."""
    job = _rows(straggler_result)
    for r in range(4):
        alone = diagnose(ingest([STRAGGLER / f"rank-{r}.json.gz"], quiet=True), cache=False)
        assert _rows(alone)[r] == job[r]
        (part,) = summarize_partition(RankTask(str(straggler_store.path / f"rank={r}"), True))
        assert {k: part["totals"].get(k) for k in EXACT} == job[r]


def test_partition_summaries_equal_whole_store_summaries(straggler_store: TraceStore) -> None:
    whole = summaries(Analysis(straggler_store))
    for r, s in enumerate(whole):
        assert summarize_partition(RankTask(str(straggler_store.path / f"rank={r}"), True)) == [s]
        # read back from the partition's derived/ folder
        assert summarize_partition(RankTask(str(straggler_store.path / f"rank={r}"))) == [s]


def test_parallel_ingest_reports_unreadable_and_duplicate_ranks(tmp_path: Path) -> None:
    job = tmp_path / "job"
    job.mkdir()
    for r in range(3):
        (job / f"rank-{r}.json.gz").write_bytes((STRAGGLER / f"rank-{r}.json.gz").read_bytes())
    (job / "rank-3.json.gz").write_bytes(b"\x1f\x8b\x08\x00broken")
    with using(Runner(jobs=2)):
        st = ingest([job], quiet=True)
    assert [r["rank"] for r in st.ranks] == [0, 1, 2]
    assert any(d.code == "rank-missing" and "rank-3" in d.message for d in st.diagnostics)
    (job / "rank-3.json.gz").write_bytes((STRAGGLER / "rank-0.json.gz").read_bytes())
    with using(Runner(jobs=2)), pytest.raises(InputError, match="two files claim rank 0"):
        ingest([job], quiet=True)


# --- cross-rank analysis ---------------------------------------------------------------------


def test_straggler_sample_matches_collectives_and_names_the_slow_rank(straggler_result) -> None:
    cross = straggler_result.extra["cross_rank"]
    assert cross["matching"]["matched"] == 16
    # the simulator writes Process Group Name and Seq on the NCCL kernels (stored since
    # schema 3): collectives match by (process group, sequence number)
    assert cross["matching"]["by"] == {"process group and sequence number": 64}
    (pg,) = cross["groups"]
    assert pg["group"] == "pg 0" and pg["ranks"] == 4 and pg["kinds"] == ["all_reduce"]
    # the simulator's bus bandwidth is 100 GB/s (less a fixed latency per collective)
    assert 90e9 < pg["busbw_p50_bytes_per_s"] <= 100e9
    assert pg["wait_ns"] > 5 * pg["transfer_ns"]  # the others wait for rank 2
    assert cross["last_arrivals"] == {"2": 16}
    assert cross["max_clock_offset_ns"] == 0  # one simulated clock
    s = cross["straggler"]
    assert (s["rank"], s["pattern"], s["cause"]) == (2, "every step", "compute")
    assert [
        o["rank"]
        for o in next(d for d in cross["distributions"] if d["measure"] == "compute_ns")["outliers"]
    ] == [2]
    assert cross["top_ranks"][0]["rank"] == 2
    assert len(cross["heatmaps"]["wall_ns"]) == 4 and cross["steps"] == [10, 11, 12, 13]
    f = next(f for f in straggler_result.findings if f.rule == "straggler")
    t = next(e for e in f.evidence if e.get("title", "").startswith("What rank 2 does"))
    assert "slowest rank in 4 of 4 steps (every step)" in t["note"]
    assert straggler_result.metrics["values"]["straggler_slow_steps_pct"] == 100.0
    assert straggler_result.metrics["values"]["collective_wait_pct"] > 20


def test_comm_bound_sample_has_no_straggler(tmp_path: Path) -> None:
    r = diagnose(ingest([COMM], tmp_path / "s", quiet=True), cache=False)
    cross = r.extra["cross_rank"]
    assert cross["matching"]["matched"] == 4
    assert cross["last_arrivals"] == {}  # all arrive together: no one is last
    assert cross["straggler"]["slowest_steps"] == 0
    assert all(c["last_rank"] is None and c["skew_ns"] == 0 for c in cross["collectives"])


@requires_corpus
def test_corpus_rank_pair_matches_by_stream_and_aligns_clocks(tmp_path: Path) -> None:
    """HTA's sampled 2-rank slice of a 128-rank job: SendRecv kernels without collective args
    are matched as the n-th of their kind per stream and step; the two hosts' clocks differ."""
    r = diagnose(ingest(PAIR, tmp_path / "s", quiet=True), cache=False)
    cross = r.extra["cross_rank"]
    assert cross["ranks"] == [0, 1]
    assert cross["matching"]["matched"] == 10
    assert set(cross["matching"]["by"]) == {"n-th of its kind on its stream"}
    assert {g["group"] for g in cross["groups"]} == {"stream 84", "stream 203"}
    assert cross["clock_offsets_ns"]["0"] == 0 and cross["clock_offsets_ns"]["1"] != 0
    assert cross["steps"] == [551, 552]
    assert r.metrics["values"]["ranks_clock_offset_ns"] == abs(cross["clock_offsets_ns"]["1"])
    assert "Ranks" in render_html(r)


def _summary(rank: int, colls: list[tuple], steps: list[tuple] = ()) -> dict:
    keys = ("kind", "pg", "seq", "stream", "step", "start_ns", "dur_ns", "bytes", "group_size")
    return {
        "rank": rank,
        "totals": {},
        "pg_config": [{"pg_name": "7", "pg_desc": "tp", "pg_size": 2, "ranks": [0, 1]}],
        "collectives": {k: [c[i] for c in colls] for i, k in enumerate(keys)},
        "steps": [
            {
                "step": s,
                "start_ns": 0,
                "end_ns": w,
                "host_ns": None,
                "wall_ns": w,
                "busy_ns": w - i,
                "idle_ns": i,
                "compute_ns": c,
                "comm_ns": x,
                "comm_exposed_ns": x,
                "memcpy_exposed_ns": 0,
                "memset_exposed_ns": 0,
                "kernels": 1,
            }
            for s, w, c, i, x in steps
        ],
    }


def test_sequence_numbers_match_across_clock_offsets() -> None:
    """Seq + process group match collectives whatever their order; a rank whose clock runs 5 ms
    ahead is aligned by the collective ends; bus bandwidth uses (n-1)/n for all_gather."""
    mb = 1 << 20
    r0 = _summary(
        0,
        [
            ("all_gather", "7", 1, 9, 1, 1_000_000, 300_000, 64 * mb, 2),
            ("all_gather", "7", 2, 9, 1, 2_000_000, 100_000, 64 * mb, 2),
        ],
    )
    # rank 1: 5 ms ahead, its records in another order, arriving 200 µs late at seq 1
    r1 = _summary(
        1,
        [
            ("all_gather", "7", 2, 5, 1, 7_000_000, 100_000, 64 * mb, 2),
            ("all_gather", "7", 1, 5, 1, 6_200_000, 100_000, 64 * mb, 2),
        ],
    )
    c = cross_rank([r0, r1])
    assert c["matching"]["by"] == {"process group and sequence number": 4}
    assert c["clock_offsets_ns"] == {"0": 0, "1": 5_000_000}
    first = next(x for x in c["collectives"] if x["skew_ns"] > 0)
    assert (first["skew_ns"], first["last_rank"], first["transfer_ns"]) == (200_000, 1, 100_000)
    assert first["wait_ns"] == 200_000
    assert first["busbw_bytes_per_s"] == pytest.approx(64 * mb / 100e-6 * 0.5)


def test_slow_sometimes_and_host_stalls() -> None:
    """A rank slow in one step of three, through GPU idle time (a host stall)."""
    steps_fast = [(s, 10_000, 8_000, 500, 1_500) for s in (1, 2, 3)]
    steps_slow = [
        (1, 10_000, 8_000, 500, 1_500),
        (2, 10_000, 8_000, 1_900, 100),
        (3, 10_000, 8_000, 500, 1_500),
    ]
    c = cross_rank(
        [_summary(0, [], steps_fast), _summary(1, [], steps_fast), _summary(2, [], steps_slow)]
    )
    s = c["straggler"]
    assert (s["rank"], s["slowest_steps"], s["pattern"]) == (2, 1, "sometimes")
    assert s["slow_step_numbers"] == [2]
    assert s["cause"] == "host stalls (GPU idle)"


# --- the report for many ranks ---------------------------------------------------------------


def test_heatmaps_cover_every_rank_and_stay_small() -> None:
    """1,024 ranks x 20 steps: every rank drawn, well under a megabyte per heatmap."""
    from traceinsight.render.html.charts.ranks import heatmap

    ranks = list(range(1024))
    rows = [
        [1_000_000 + (r % 7) * 1000 + (300_000 if r == 700 else 0) for _ in range(20)]
        for r in ranks
    ]
    chart = heatmap(rows, ranks, list(range(20)), "step time")
    cells = [it for it in chart["items"] if it["a"].get("class") == "heat"]
    covered = sum(float(it["a"]["height"]) for it in cells) / 20
    assert covered == pytest.approx(1024 * chart_row_h(1024))
    assert any("rank 700 " in it["title"] for it in cells)
    assert len(json.dumps(chart)) < 1_500_000


def chart_row_h(n: int) -> float:
    return max(1.0, min(16.0, 640.0 / n))


def test_cli_jobs_and_no_cache(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    invoke(["diagnose", STRAGGLER, "-j", "2", "--json", out, "-q"])
    first = json.loads(out.read_text())
    assert first["extra"]["cross_rank"]["straggler"]["rank"] == 2
    store = Path(json.loads(invoke(["ingest", STRAGGLER, "--json", "-j", "1"]).stdout)["store"])
    made = json.loads((store / "meta.json").read_text())["created_utc"]
    again = invoke(["ingest", STRAGGLER, "--json", "--no-cache"]).stdout
    assert json.loads(again)["store"] == str(store)
    assert json.loads((store / "meta.json").read_text())["created_utc"] >= made
    assert (store / "rank=3" / "meta.json").is_file()


def test_many_rank_report_draws_every_rank_and_stays_small(straggler_result) -> None:
    """200 ranks (the sample's ranks repeated): the GPU-time chart draws a bar for every rank
    (no cap at 64, the compact form), the rank table lists them all, and the page stays small."""
    from traceinsight.render.html.diagnose_page import build_view
    from traceinsight.result import DiagnosisResult

    d = json.loads(straggler_result.to_json())
    n = 200

    def spread(rows: list[dict]) -> list[dict]:
        return [{**rows[i % len(rows)], "rank": i} for i in range(n)]

    d["breakdown"]["ranks"] = spread(d["breakdown"]["ranks"])
    d["summary"]["ranks"] = spread(d["summary"]["ranks"])
    r = DiagnosisResult.from_dict(d)
    b = build_view(r)["breakdown"]
    bars = [it for it in b["chart"]["items"] if it["a"].get("class") == "hit"]
    assert [it["title"].split(" ·")[0] for it in bars] == [f"rank {i}" for i in range(n)]
    assert b["more_ranks"] == 0
    html = render_html(r)
    assert "more ranks in the table below" not in html
    assert len(html) < 3_000_000


def test_collective_seq_is_stored_and_matches_out_of_order(tmp_path: Path) -> None:
    """``Seq`` and ``Process Group Name`` of the kernels' args are stored; a rank that issues
    its collectives in another order than its peer still matches each one to its own."""
    from tracegen.workloads import Workload, build_ranks

    w = Workload(
        hidden=256,
        seq=128,
        batch=1,
        layers=1,
        steps=2,
        world_size=2,
        comm_bytes=1 << 20,
        memory=False,
        with_stack=False,
        record_shapes=False,
    )
    for r, b in enumerate(build_ranks(w)):
        b.write(str(tmp_path / f"rank-{r}.json.gz"))
    store = ingest([tmp_path], tmp_path / "store", quiet=True)
    g = store.table("gpu_activities", ["rank", "seq", "pg_name"]).to_pandas()
    got = g.dropna(subset=["seq"])
    assert len(got) and set(got["pg_name"].astype(str)) == {"0"}
    assert sorted(got[got["rank"] == 0]["seq"]) == sorted(got[got["rank"] == 1]["seq"])
    recs = summaries(Analysis(store))
    assert all(s is not None for x in recs for s in x["collectives"]["seq"])
    # rank 1's records reversed: matching by sequence number is order-free
    c1 = recs[1]["collectives"]
    recs[1]["collectives"] = {k: list(reversed(v)) for k, v in c1.items()}
    c = cross_rank(recs)
    assert c["matching"]["by"] == {"process group and sequence number": 2 * len(c1["seq"])}
    assert c["matching"]["matched"] == len(c1["seq"])


def test_rank_tables_break_ties_by_waits_then_compute() -> None:
    """Identical ranks (own work tied): the rank the others waited for comes first among the
    slowest, then the one with more compute; the fastest table ends with them."""
    from traceinsight.analysis.collectives import TOP_RANKS, rank_tables

    rows = [
        {"rank": r, "own_ns": 100, "last_arrivals": 0, "compute_ns": 50}
        for r in range(TOP_RANKS + 4)
    ]
    rows[7]["last_arrivals"] = 3
    rows[5]["compute_ns"] = 60
    rows[9]["own_ns"] = 90
    t = rank_tables(rows)
    assert [r["rank"] for r in t["top_ranks"]][:4] == [7, 5, 0, 1]
    assert [r["rank"] for r in t["bottom_ranks"]][:3] == [9, 0, 1]
    assert len(t["top_ranks"]) == TOP_RANKS
