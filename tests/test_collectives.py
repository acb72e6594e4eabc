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
