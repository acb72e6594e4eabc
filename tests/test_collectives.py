"""Collectives by what launched them (kind from the launching op, an explicit unattributed
share), waiting apart from transfer across ranks (the straggler is the last arrival), one story
per cause (impacts shared, never over the step): synthetic traces with known answers, the
bundled 4-rank samples and the shared traces."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import KINETO, requires_corpus

from tracegen.synth import KinetoTraceBuilder
from traceinsight.analysis import Analysis
from traceinsight.analysis.comm_kinds import BY_KERNEL, BY_LAUNCH, BY_NONE, launch_kinds
from traceinsight.ingest import ingest
from traceinsight.metrics import compute_metrics
from traceinsight.metrics.comm import SPLIT

PAIR = [KINETO / "hta" / "trace_filter" / f"sampled_rank-{r}.json.gz" for r in (0, 1)]


def analyse(builders: list[KinetoTraceBuilder], tmp_path: Path) -> Analysis:
    tmp_path.mkdir(parents=True, exist_ok=True)
    paths = [b.write(tmp_path / f"rank-{i}.json") for i, b in enumerate(builders)]
    return Analysis(ingest(paths, tmp_path / "s.tistore", quiet=True))


def kinds_trace() -> KinetoTraceBuilder:
    """Six NCCL kernels of 100 µs (one 200 µs), each a different way of naming its collective."""
    b = KinetoTraceBuilder(rank=0, world_size=4)
    send = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"
    with b.step(1, 0, 3_000_000):
        # nccl:all_reduce launching a SendRecv kernel: an all-reduce
        with b.cpu_op("nccl:all_reduce", 10_000, 20_000):
            b.launch(send, cpu_start=15_000, gpu_start=100_000, gpu_dur=200_000, stream=20)
        # c10d::_allgather_base_ > record_param_comms (no collective name) > SendRecv kernel
        with b.cpu_op("c10d::_allgather_base_", 40_000, 30_000):
            with b.cpu_op("record_param_comms", 45_000, 20_000):
                b.launch(send, cpu_start=50_000, gpu_start=400_000, gpu_dur=100_000, stream=20)
        # record_param_comms naming the collective wins over the kernel name
        with b.cpu_op(
            "record_param_comms", 80_000, 20_000, **{"Collective name": "reduce_scatter_tensor"}
        ):
            b.launch(
                "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
                cpu_start=85_000,
                gpu_start=600_000,
                gpu_dur=100_000,
                stream=20,
            )
        # c10d::alltoall_base_ launching a SendRecv kernel
        with b.cpu_op("c10d::alltoall_base_", 110_000, 20_000):
            b.launch(send, cpu_start=115_000, gpu_start=800_000, gpu_dur=100_000, stream=20)
        # a runtime launch with no CPU op above it: the kernel name decides
        b.launch(
            "ncclDevKernel_Broadcast_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
            cpu_start=140_000,
            gpu_start=1_000_000,
            gpu_dur=100_000,
            stream=20,
        )
        # no launch record at all: unattributed
        b.launch(
            "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
            cpu_start=160_000,
            gpu_start=1_200_000,
            gpu_dur=100_000,
            stream=20,
            orphan=True,
        )
    return b


def test_collective_kind_comes_from_the_launching_op(tmp_path: Path) -> None:
    an = analyse([kinds_trace()], tmp_path)
    g = an.attribution.gpu
    comm = g[(g["kind"] == "kernel") & (g["cls"] == "communication")].sort_values("start_ns")
    kinds, how = launch_kinds(an, comm)
    assert list(kinds) == [
        "all_reduce",
        "all_gather",
        "reduce_scatter",
        "all_to_all",
        "broadcast",
        "all_gather",
    ]
    assert list(how) == [BY_LAUNCH] * 4 + [BY_KERNEL, BY_NONE]
    ms = compute_metrics(an)
    # 700 µs of NCCL time: all-reduce 200, all-gather 100 (+100 unattributed), ...
    v = {name: ms.get(name) for name in SPLIT}
    assert v == pytest.approx(
        {
            "comm_all_reduce_pct": 200 / 7,
            "comm_all_gather_pct": 100 / 7,
            "comm_reduce_scatter_pct": 100 / 7,
            "comm_all_to_all_pct": 100 / 7,
            "comm_broadcast_pct": 100 / 7,
            "comm_other_kind_pct": 0.0,
            "comm_unattributed_pct": 100 / 7,
        }
    )
    assert sum(v.values()) == pytest.approx(100.0)
    rows = {c["collective"]: c for c in ms.evidence["collectives"]}
    assert rows["all_reduce"]["kernel_kinds"] == {"sendrecv": 200_000}
    assert rows["unattributed"]["kernel_kinds"] == {"all_gather": 100_000}
    assert rows["unattributed"]["kind_from"] == BY_NONE


@requires_corpus
def test_corpus_sendrecv_kernels_count_as_what_launched_them(tmp_path: Path) -> None:
    """HTA's 2-rank slice of a 128-rank job: every NCCL kernel is ``SendRecv``, launched by
    c10d::alltoall_base_, c10d::_allgather_base_ and c10d::allreduce_ (the kernel name alone
    read "all-to-all / send-recv 100%")."""
    an = Analysis(ingest(PAIR, tmp_path / "s", quiet=True))
    ms = compute_metrics(an)
    v = {name: ms.get(name) for name in SPLIT}
    assert sum(v.values()) == pytest.approx(100.0)
    assert v["comm_unattributed_pct"] == 0.0
    rows = {c["collective"]: c for c in ms.evidence["collectives"]}
    assert {k: r["total_ns"] for k, r in rows.items()} == {
        "all_to_all": 412_103_000,
        "all_gather": 211_047_000,
        "all_reduce": 152_102_000,
    }
    assert all(r["kernel_kinds"] == {"sendrecv": r["total_ns"]} for r in rows.values())
    assert v["comm_all_reduce_pct"] == pytest.approx(100 * 152_102 / 775_252)


# --- waiting apart from transfer -------------------------------------------------------------

STEP = 10_000_000
#: per rank: compute kernel length (all start 100 µs into the step) and when it reaches the
#: all-reduce; rank 2 computes no longer than ranks 1 and 3 but its host stalls ~2.9 ms
COMPUTE = {0: 4_500_000, 1: 4_000_000, 2: 4_000_000, 3: 4_000_000}
ARRIVE = {0: 4_600_000, 1: 4_100_000, 2: 7_000_000, 3: 4_100_000}
TRANSFER = 1_200_000
SEND = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"


def skew_job(
    arrive: dict[int, int] = ARRIVE, compute: dict[int, int] = COMPUTE
) -> list[KinetoTraceBuilder]:
    """4 ranks, 2 steps of 10 ms: a GEMM, then one all-reduce (c10d::allreduce_ launching a
    SendRecv kernel, matched by process group and Seq) that ends on every rank when the last
    arrives plus the transfer."""
    out = []
    end = max(arrive.values()) + TRANSFER
    for r in range(4):
        b = KinetoTraceBuilder(rank=r, world_size=4)
        for k in range(2):
            t = k * STEP
            with b.step(10 + k, t, STEP, gpu=(t, STEP)):
                with b.cpu_op("aten::mm", t + 20_000, 30_000):
                    b.launch(
                        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64",
                        cpu_start=t + 25_000,
                        gpu_start=t + 100_000,
                        gpu_dur=compute[r],
                    )
                cpu = t + arrive[r] - 100_000
                with b.cpu_op("c10d::allreduce_", cpu, 40_000):
                    with b.cpu_op(
                        "record_param_comms",
                        cpu + 5_000,
                        30_000,
                        **{
                            "Collective name": "allreduce",
                            "In msg nelems": 16 << 20,
                            "dtype": "BFloat16",
                            "Group size": 4,
                        },
                    ):
                        b.launch(
                            SEND,
                            cpu_start=cpu + 10_000,
                            gpu_start=t + arrive[r],
                            gpu_dur=end - arrive[r],
                            stream=20,
                            **{"Process Group Name": "0", "Seq": k},
                        )
        out.append(b)
    return out


def diagnose_job(builders: list[KinetoTraceBuilder], tmp_path: Path):
    from traceinsight.diagnose import diagnose

    tmp_path.mkdir(parents=True, exist_ok=True)
    paths = [b.write(tmp_path / f"rank-{i}.json") for i, b in enumerate(builders)]
    return diagnose(ingest(paths, tmp_path / "s.tistore", quiet=True), cache=False)


def test_waiting_apart_from_transfer_and_the_last_arrival_is_the_straggler(
    tmp_path: Path,
) -> None:
    r = diagnose_job(skew_job(), tmp_path)
    cross = r.extra["cross_rank"]
    assert cross["matching"]["by"] == {"process group and sequence number": 8}
    for c in cross["collectives"]:  # waits 2.4 + 2.9 + 2.9 ms, the transfer 1.2 ms
        assert (c["collective"], c["last_rank"], c["skew_ns"]) == ("all_reduce", 2, 2_900_000)
        assert (c["transfer_ns"], c["wait_ns"]) == (TRANSFER, 8_200_000)
    assert cross["wait_caused_ns"] == {"2": 16_400_000}
    assert cross["waiting"] == {
        "wait_ns": 16_400_000,
        "transfer_ns": 8 * TRANSFER,
        "wait_share_pct": pytest.approx(100 * 16.4 / 26.0),
    }
    v = r.metrics["values"]
    # exposed comm: (3.6 + 4.1 + 1.2 + 4.1) ms per step over 4 x 10 ms; all waiting exposed
    assert v["exposed_comm_pct"] == pytest.approx(32.5)
    assert v["collective_wait_exposed_pct"] == pytest.approx(20.5)
    assert v["exposed_comm_transfer_pct"] == pytest.approx(12.0)
    # rank 0 computes most (12.5% over the median) but arrives before rank 2: rank 2 is named
    assert v["straggler_rank"] == 2.0 and v["last_arrival_share_pct"] == 100.0
    assert v["straggler_caused_wait_pct"] == 100.0
    before = cross["straggler"]["before_arrival"]
    assert before["parts_ns"]["compute"] == 0
    assert before["parts_ns"]["host"] == 2 * 2_900_000  # its GPU idle, its host stalled
    assert (before["collectives"], before["caused_wait_ns"]) == (2, 16_400_000)
    assert v["straggler_before_host_pct"] == 100.0
    f = {x.rule: x for x in r.findings}
    s = f["straggler"]
    assert s.title == "Ranks wait for the last one to arrive" and s.severity == "high"
    assert s.impact["estimate_pct"] == pytest.approx(20.5)  # the exposed waiting (one story)
    assert "Rank 2 arrives last at 100.0%" in s.message
    assert any("idles waiting for its CPU" in x for x in s.recommendations)
    assert not any("computes longer" in x for x in s.recommendations)
    # comm-bound keeps the transfer only (12% x 0.8), and says the rest is the straggler's
    c = f["comm-bound"]
    assert c.impact["estimate_pct"] == pytest.approx(9.6) and c.severity == "low"
    assert "The rest, 20.5% of step time, is ranks waiting" in c.message


def test_no_skew_leaves_all_exposed_communication_to_comm_bound(tmp_path: Path) -> None:
    """The same job with every rank computing alike and arriving together: no waiting, no
    straggler verdict; the exposed communication is all transfer."""
    r = diagnose_job(
        skew_job(dict.fromkeys(range(4), 4_100_000), dict.fromkeys(range(4), 4_000_000)),
        tmp_path,
    )
    v = r.metrics["values"]
    assert v["collective_wait_exposed_pct"] == 0.0 and v["collective_wait_share_pct"] == 0.0
    assert v["exposed_comm_transfer_pct"] == v["exposed_comm_pct"] == pytest.approx(12.0)
    assert r.extra["cross_rank"]["wait_caused_ns"] == {}
    assert "straggler" not in {x.rule for x in r.findings}
    c = next(x for x in r.findings if x.rule == "comm-bound")
    assert c.impact["estimate_pct"] == pytest.approx(9.6) and "ranks waiting" not in c.message


# --- one story per cause -----------------------------------------------------------------------


def _samples() -> list[Path]:
    from conftest import SAMPLES

    return sorted(p for p in SAMPLES.iterdir() if p.name.startswith("synthetic_"))


@pytest.mark.parametrize("path", _samples(), ids=lambda p: p.name)
def test_sample_impacts_add_up_to_at_most_the_step(path: Path, tmp_path: Path) -> None:
    from traceinsight.diagnose import diagnose

    r = diagnose(ingest([path], tmp_path / "s", quiet=True), cache=False)
    assert sum(f.impact_pct or 0.0 for f in r.findings) <= 100.0 + 1e-9
    for f in r.findings:
        if f.impact_pct is not None:
            assert f.impact is not None and f.impact["method"] in ("estimate", "what-if")
            assert f.impact["pct"] == pytest.approx(f.impact_pct, abs=0.05)


def test_straggler_sample_tells_one_story(tmp_path: Path) -> None:
    """The bundled 4-rank straggler sample: the straggler verdict owns the exposed waiting for
    rank 2 (17.4% of step time), comm-bound keeps the exposed transfer (13.5%, x 0.8) and says
    whose the rest is; before, both counted the same waiting (30.1% and 24.7%)."""
    from conftest import SAMPLES

    from traceinsight.diagnose import diagnose

    r = diagnose(ingest([SAMPLES / "synthetic_straggler_4rank"], tmp_path / "s", quiet=True))
    v = r.metrics["values"]
    f = {x.rule: x for x in r.findings}
    s, c = f["straggler"], f["comm-bound"]
    assert s.impact["estimate_pct"] == pytest.approx(v["collective_wait_exposed_pct"], abs=0.01)
    assert c.impact["shared_with"] == [
        {"rule": "straggler", "pct": round(v["collective_wait_exposed_pct"], 2)}
    ]
    assert c.impact["estimate_pct"] == pytest.approx(
        0.8 * (v["exposed_comm_pct"] - v["collective_wait_exposed_pct"]), abs=0.01
    )
    assert s.impact_pct + c.impact_pct <= 100.0
    assert "explained by straggler and counted there" in c.message
    assert r.primary == "straggler"


def test_idle_time_explained_by_a_cause_is_counted_once(tmp_path: Path) -> None:
    """A host stall makes the GPU idle: host-stall owns that idle time, gpu-idle keeps only the
    idle time no specific finding explains (before, host-stall 84% + gpu-idle 26.8% of the
    step on the MI300X ResNet18 trace)."""
    from tracegen.workloads import PRESETS, build
    from traceinsight.diagnose import diagnose

    tmp_path.mkdir(parents=True, exist_ok=True)
    p = build(PRESETS["launch_bound"]).write(tmp_path / "t.json")
    r = diagnose(ingest([p], tmp_path / "s", quiet=True), cache=False)
    v = r.metrics["values"]
    f = {x.rule: x for x in r.findings}
    assert {"launch-bound", "gpu-idle"} <= set(f)
    g = f["gpu-idle"]
    owners = {o["rule"] for o in g.impact["shared_with"]}
    assert "launch-bound" in owners
    owned = sum(
        v[m]
        for rule, m in (
            ("host-stall", "idle_host_pct"),
            ("launch-bound", "idle_launch_pct"),
            ("input-bound", "idle_input_pct"),
            ("host-sync", "idle_sync_pct"),
        )
        if rule in owners
    )
    assert g.impact["estimate_pct"] == pytest.approx(
        max(0.0, 0.3 * (v["gpu_idle_pct"] - owned)), abs=0.01
    )
    assert g.impact_pct <= g.impact["estimate_pct"] + 0.06  # impact_pct has one decimal
    assert sum(x.impact_pct or 0.0 for x in r.findings) <= 100.0


def test_impacts_are_capped_at_the_step() -> None:
    """Whatever the rules estimate, in impact order each finding gets at most what the ones
    before it leave of 100%."""
    from traceinsight.engine.impacts import share_impacts
    from traceinsight.result import Finding

    def finding(rule: str, pct: float) -> Finding:
        return Finding(rule, "high", rule, "host", "m", pct, [], [])

    class R:
        def __init__(self, rid: str, metric: str) -> None:
            self.id, self.impact = rid, {"metric": metric, "factor": 1.0}

    fs = [finding("a", 70.0), finding("b", 50.0), finding("c", 10.0)]
    share_impacts(fs, [R("a", "x"), R("b", "y"), R("c", "z")], {"step_time_p50_ns": 1e6})
    assert [f.impact_pct for f in fs] == [70.0, 30.0, 0.0]
    assert fs[1].impact["uncapped_pct"] == 50.0 and fs[1].impact["ns"] == 300_000
    assert "uncapped_pct" not in fs[0].impact


@requires_corpus
def test_corpus_rank_pair_impacts_and_straggler_is_the_last_arrival(tmp_path: Path) -> None:
    """HTA's 2-rank slice: rank 1 arrives last at 7 of the 10 collectives and causes 83% of
    the waiting; the impacts add up to at most the step."""
    from traceinsight.diagnose import diagnose

    r = diagnose(ingest(PAIR, tmp_path / "s", quiet=True), cache=False)
    cross = r.extra["cross_rank"]
    assert cross["last_arrivals"] == {"0": 3, "1": 7}
    assert cross["wait_caused_ns"] == {"0": 35_940_000, "1": 175_506_000}
    assert r.metrics["values"]["straggler_rank"] == 1.0
    assert cross["straggler"]["rank"] == 1
    assert sum(f.impact_pct or 0.0 for f in r.findings) <= 100.0


# --- one rank: bus bandwidth against the fabric ------------------------------------------------


def test_one_rank_far_below_the_fabric_reads_as_skew_or_transport(tmp_path: Path) -> None:
    """Rank 0 of the skewed job alone: its all-reduce (32 MiB, 3.6 ms of which 2.4 ms waiting
    for rank 2, 4 ranks) runs at 14.0 GB/s bus bandwidth, 3.1% of the H100's 450 GB/s NVLink:
    the skew-or-transport reading comes before any volume advice."""
    r = diagnose_job(skew_job()[:1], tmp_path)
    v = r.metrics["values"]
    assert v["device_fabric_gbs"] == 450.0
    busbw = (16 << 20) * 2 / 3.6e-3 * 2 * 3 / 4 / 1e9
    assert v["comm_busbw_gbs"] == pytest.approx(busbw)
    assert v["comm_busbw_fabric_pct"] == pytest.approx(100 * busbw / 450)
    c = next(x for x in r.findings if x.rule == "comm-bound")
    assert c.recommendations[0].startswith("Read the bandwidth before the volume")
    assert "Collect every rank's trace" in c.recommendations[0]


def test_fabric_reading_withheld_near_the_fabric_rate(tmp_path: Path) -> None:
    """One rank of the comm-bound sample: all-reduce at ~100 GB/s, 22% of NVLink: no
    skew-or-transport reading; the volume / overlap advice leads."""
    from conftest import SAMPLES

    from traceinsight.diagnose import diagnose

    p = SAMPLES / "synthetic_comm_bound_4rank" / "rank-0.json.gz"
    r = diagnose(ingest([p], tmp_path / "s", quiet=True), cache=False)
    v = r.metrics["values"]
    assert v["comm_busbw_fabric_pct"] == pytest.approx(22.2, abs=0.1)
    c = next(x for x in r.findings if x.rule == "comm-bound")
    assert not any("before the volume" in x for x in c.recommendations)
    assert c.recommendations[0].startswith("Overlap gradient reduction")
