"""Attribution with known answers (synthetic traces), and conservation on every corpus trace."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import corpus_id, corpus_kineto_files, invoke, requires_corpus

from tracegen.synth import KinetoTraceBuilder
from traceinsight.analysis import Analysis
from traceinsight.analysis.attribution import UNATTRIBUTED
from traceinsight.analysis.rollups import records
from traceinsight.ingest import ingest, load
from traceinsight.render.top import render_top

BWD_TID = 4300


def analyse(b: KinetoTraceBuilder, tmp_path: Path) -> Analysis:
    return Analysis(ingest([b.write(tmp_path / "t.json")], tmp_path / "s.tistore", quiet=True))


def one_layer_step(b: KinetoTraceBuilder, *, seq: bool = True, flow: bool = False) -> None:
    """Step 3: forward Linear (aten::linear > aten::mm, seq 5), its backward on another thread."""
    with b.step(3, 0, 1_000_000):
        with b.module("Model", 10_000, 300_000):
            with b.module("Linear", 20_000, 200_000):
                with b.cpu_op("aten::linear", 30_000, 150_000, seq=5 if seq else None):
                    with b.cpu_op(
                        "aten::mm",
                        40_000,
                        100_000,
                        seq=5 if seq else None,
                        input_dims=[[64, 128], [128, 256]],
                        input_types=["float", "float"],
                    ):
                        b.launch(
                            "sm90_xmma_gemm_f32f32_tn",
                            cpu_start=50_000,
                            gpu_start=60_000,
                            gpu_dur=40_000,
                        )
        with b.cpu_op(
            "autograd::engine::evaluate_function: MmBackward0",
            400_000,
            200_000,
            tid=BWD_TID,
            seq=5 if seq else None,
        ):
            with b.cpu_op("aten::mm", 420_000, 100_000, tid=BWD_TID):
                b.launch(
                    "sm90_xmma_gemm_f32f32_nt",
                    cpu_start=430_000,
                    gpu_start=440_000,
                    gpu_dur=80_000,
                    tid=BWD_TID,
                )
        if flow:
            b.fwdbwd(30_000, 400_000, bwd_tid=BWD_TID)


def test_forward_and_backward_reach_their_layer(tmp_path: Path) -> None:
    b = KinetoTraceBuilder(rank=0)
    one_layer_step(b)
    g = analyse(b, tmp_path).attribution.gpu.sort_values("start_ns")
    fwd, bwd = g.iloc[0], g.iloc[1]
    assert (fwd.op, fwd.top_op, fwd.module, fwd.phase, fwd.method, fwd.step) == (
        "aten::mm",
        "aten::linear",
        "Model_0/Linear_0",
        "forward",
        "time",
        3,
    )
    assert (bwd.op, bwd.top_op, bwd.module, bwd.phase, bwd.method) == (
        "aten::mm",
        "autograd::engine::evaluate_function: MmBackward0",
        "Model_0/Linear_0",
        "backward",
        "time",
    )


def test_backward_linked_by_fwdbwd_flow_without_sequence_numbers(tmp_path: Path) -> None:
    b = KinetoTraceBuilder(rank=0)
    one_layer_step(b, seq=False, flow=True)
    g = analyse(b, tmp_path).attribution.gpu.sort_values("start_ns")
    assert g.iloc[1].module == "Model_0/Linear_0" and g.iloc[1].phase == "backward"


def test_layer_rollup_splits_forward_and_backward(tmp_path: Path) -> None:
    b = KinetoTraceBuilder(rank=0)
    one_layer_step(b)
    df = analyse(b, tmp_path).rollup("layer")
    row = df[df["module"] == "Model_0/Linear_0"].iloc[0]
    assert (row.forward_ns, row.backward_ns, row.total_ns) == (40_000, 80_000, 120_000)
    assert row.share_pct == pytest.approx(100.0)


def test_graph_orphan_and_external_id(tmp_path: Path) -> None:
    b = KinetoTraceBuilder(rank=0)
    with b.step(1, 0, 2_000_000):
        with b.cpu_op("CUDAGraph::replay", 10_000, 50_000):
            b.graph_launch(
                [("k_a", 100_000, 10_000), ("k_b", 110_000, 20_000), ("k_c", 130_000, 30_000)],
                cpu_start=20_000,
            )
        # a kernel whose launch record was lost, but which names its op by External id
        ext = b.op("aten::add", 300_000, 20_000)
        b.launch(
            "add_kernel",
            cpu_start=305_000,
            gpu_start=400_000,
            gpu_dur=5_000,
            orphan=True,
            **{"External id": ext},
        )
        # an orphan with nothing at all
        b.launch("lost_kernel", cpu_start=500_000, gpu_start=600_000, gpu_dur=7_000, orphan=True)
    an = analyse(b, tmp_path)
    g = an.attribution.gpu.set_index("name")
    assert list(g.loc[["k_a", "k_b", "k_c"], "method"]) == ["graph"] * 3
    assert set(g.loc[["k_a", "k_b", "k_c"], "op"]) == {"CUDAGraph::replay"}
    assert (g.loc["add_kernel", "method"], g.loc["add_kernel", "op"]) == (
        "external_id",
        "aten::add",
    )
    assert (g.loc["lost_kernel", "method"], g.loc["lost_kernel", "op"]) == ("none", UNATTRIBUTED)
    cov = an.attribution.coverage()
    assert cov["kernel_time_ns"] == 72_000 and cov["unattributed_ns"] == 7_000
    assert cov["by_method_ns"] == {"graph": 60_000, "external_id": 5_000, "none": 7_000}
    ops = an.rollup("op").set_index("name")
    assert ops.loc[UNATTRIBUTED, "device_self_ns"] == 7_000
    assert ops["kernel_ns"].sum() == cov["kernel_time_ns"]


def test_external_id_equal_to_correlation_is_not_a_link(tmp_path: Path) -> None:
    # GIVEN an old-style trace where an unlinked kernel carries External id == correlation
    b = KinetoTraceBuilder(rank=0)
    b.op("aten::mul", 0, 10_000)  # External id 1
    corr = b._corr + 1
    b._ext = corr - 1  # the next op gets External id == the next correlation id
    b.op("aten::div", 500_000, 10_000)
    b.launch(
        "orphan",
        cpu_start=1_000_000,
        gpu_start=1_100_000,
        gpu_dur=1_000,
        orphan=True,
        **{"External id": corr},
    )
    g = analyse(b, tmp_path).attribution.gpu
    assert g.iloc[0].op == UNATTRIBUTED


def test_communication_by_name_and_by_launching_op(tmp_path: Path) -> None:
    b = KinetoTraceBuilder(rank=0, world_size=2)
    with b.step(1, 0, 1_000_000):
        with b.cpu_op("nccl:all_reduce", 10_000, 20_000):
            b.launch(
                "custom_ring_kernel",
                cpu_start=20_000,
                gpu_start=100_000,
                gpu_dur=100_000,
                stream=20,
            )
        with b.cpu_op("aten::mm", 40_000, 20_000):
            b.launch("nvjet_tst_128x256", cpu_start=45_000, gpu_start=150_000, gpu_dur=100_000)
        with b.cpu_op("record_param_comms", 70_000, 20_000):
            b.launch(
                "ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
                cpu_start=75_000,
                gpu_start=300_000,
                gpu_dur=50_000,
                stream=20,
            )
    an = analyse(b, tmp_path)
    cls = an.attribution.gpu.set_index("name")["cls"]
    assert cls["custom_ring_kernel"] == "communication"
    assert cls["ncclDevKernel_AllReduce_Sum_bf16_RING_LL"] == "communication"
    assert cls["nvjet_tst_128x256"] == "gemm"
    # the breakdown: comm [100,200)+[300,350), compute [150,250): hidden 50 µs, exposed 100 µs
    w = an.breakdown.ranks[0]
    assert (w.comm_ns, w.comm_hidden_ns, w.comm_exposed_ns, w.compute_ns) == (
        150_000,
        50_000,
        100_000,
        100_000,
    )
    parts = (w.compute_ns, w.comm_exposed_ns, w.memcpy_exposed_ns, w.memset_exposed_ns, w.idle_ns)
    assert sum(parts) == w.wall_ns


def test_gpu_aware_step_windows(tmp_path: Path) -> None:
    # GIVEN a kernel launched in step 1 that runs past the host end of step 1
    b = KinetoTraceBuilder(rank=0)
    with b.step(1, 0, 100_000):
        with b.cpu_op("aten::mm", 10_000, 20_000):
            b.launch("gemm_long", cpu_start=15_000, gpu_start=20_000, gpu_dur=150_000)
    with b.step(2, 100_000, 100_000):
        with b.cpu_op("aten::mm", 110_000, 20_000):
            b.launch("gemm_short", cpu_start=115_000, gpu_start=170_000, gpu_dur=10_000)
    an = analyse(b, tmp_path)
    w1, w2 = an.attribution.steps
    # THEN step 1 ends when its last kernel does; step 2 starts there
    assert (w1.start_ns - b.base_ns, w1.end_ns - b.base_ns) == (0, 170_000)
    assert (w2.start_ns - b.base_ns, w2.end_ns - b.base_ns) == (170_000, 200_000)
    steps = an.rollup("step")
    assert steps["wall_ns"].tolist() == [170_000, 30_000]
    assert steps["busy_ns"].tolist() == [150_000, 10_000]


def test_trace_without_steps_is_one_window(tmp_path: Path) -> None:
    b = KinetoTraceBuilder(rank=0)
    with b.cpu_op("aten::mm", 0, 20_000):
        b.launch("gemm", cpu_start=5_000, gpu_start=10_000, gpu_dur=30_000)
    with b.cpu_op("aten::mm", 100_000, 20_000):
        b.launch("gemm", cpu_start=105_000, gpu_start=110_000, gpu_dur=30_000)
    an = analyse(b, tmp_path)
    (w,) = an.attribution.steps
    assert w.step is None and w.dur_ns == 130_000  # first kernel start .. last kernel end
    assert an.breakdown.ranks[0].idle_ns == 70_000
    assert any(d.code == "no-step-markers" for d in an.attribution.diagnostics.items)


def test_correlation_recovered_from_flow(tmp_path: Path) -> None:
    # GIVEN a device event without a correlation arg (MTIA style), linked by an ac2g flow only
    b = KinetoTraceBuilder(rank=0)
    with b.cpu_op("aten::add", 0, 50_000):
        corr = b.launch("dev_event", cpu_start=10_000, gpu_start=20_000, gpu_dur=5_000)
    for e in b.events:
        if e.get("cat") == "kernel":
            del e["args"]["correlation"]
    g = analyse(b, tmp_path).attribution.gpu
    assert g.iloc[0].op == "aten::add" and corr > 0


FILES = [p for p in corpus_kineto_files()]


@requires_corpus
@pytest.mark.corpus
@pytest.mark.parametrize("path", FILES, ids=[corpus_id(p) for p in FILES])
def test_corpus_attribution_conserves_time(path: Path, tmp_path: Path) -> None:
    an = Analysis(load([path], quiet=True))  # cached by content across tests
    g = an.attribution.gpu
    kernels = g[g["kind"] == "kernel"]
    total = int(kernels["dur_ns"].sum())
    for rank in [None, *an.attribution.ranks()]:
        cov = an.attribution.coverage(rank)
        assert cov["attributed_ns"] + cov["unattributed_ns"] == cov["kernel_time_ns"]
        assert sum(cov["by_method_ns"].values()) == cov["kernel_time_ns"]
    all_gpu = int(g["dur_ns"].sum())
    assert int(an.rollup("op")["kernel_ns"].sum()) == total
    assert int(an.rollup("op")["device_self_ns"].sum()) == all_gpu
    assert int(an.rollup("layer")["total_ns"].sum()) == all_gpu
    assert int(an.rollup("annotation")["device_ns"].sum()) == all_gpu
    assert int(an.rollup("kernel")["total_ns"].sum()) == all_gpu
    for w in an.breakdown.steps:
        assert (
            w.compute_ns + w.comm_exposed_ns + w.memcpy_exposed_ns + w.memset_exposed_ns + w.idle_ns
            == w.wall_ns
        )
        assert 0 <= w.busy_ns <= w.wall_ns
    # and `top` renders every rollup of it
    for by in ("kernel", "op", "layer", "annotation", "step"):
        assert render_top(
            records(an.rollup(by)),
            by,
            5,
            coverage=an.attribution.coverage(None),
            ranks=len(an.store.ranks),
        ).strip()


@requires_corpus
@pytest.mark.corpus
@pytest.mark.parametrize("by", ["kernel", "op", "layer", "annotation", "step"])
def test_top_command(by: str) -> None:
    path = next(p for p in FILES if p.name.startswith("Qwen_Qwen1.5") and "h100" in str(p))
    res = invoke(["top", path, "--by", by, "-n", "5"])
    if by == "step":
        assert "GPU kernel time 45.4 ms in 1,465 kernels" in res.stdout
    else:  # the header counts what the rows add up to: kernels, copies and memsets
        assert "GPU time 45.6 ms: 1,465 kernels (45.4 ms) and 242 copies and memsets" in res.stdout
    data = invoke(["top", path, "--by", by, "--json"]).stdout
    import json

    rows = json.loads(data)["rows"]
    assert rows
    if by in ("kernel", "op", "layer", "annotation"):
        key = {
            "kernel": "total_ns",
            "op": "device_self_ns",
            "layer": "total_ns",
            "annotation": "device_ns",
        }[by]
        assert sum(r[key] for r in rows) == 45_432_698 + 2_368 + 212_234  # kernels, copies, sets
