"""The FLOP model checked against the device: a convolution's stride inferred from the output
shape the next op reads (traces without Concrete Inputs), and modelled rates above the device's
peak excluded from MFU, FLOP/s and the roofline, counted and said (data quality)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import KINETO, requires_corpus

from tracegen.synth import KinetoTraceBuilder
from traceinsight.analysis import Analysis
from traceinsight.diagnose import diagnose
from traceinsight.ingest import ingest
from traceinsight.metrics import compute_metrics
from traceinsight.metrics.flops import OpContext, op_cost

F32 = "float"
STEM_IN, STEM_W, STEM_OUT = [32, 3, 224, 224], [64, 3, 7, 7], [32, 64, 112, 112]
#: 2·N·K·Ho·Wo·C·kh·kw of the ResNet-50 stem (stride 2, padding 3)
STEM_FLOPS = 2 * 32 * 64 * 112 * 112 * 3 * 7 * 7
#: cudnn_convolution(self, weight, padding, stride, dilation, groups, ...) as PyTorch 1.8 records
#: it: the int lists without values (no Concrete Inputs)
CONV_DIMS = [STEM_IN, STEM_W] + [[]] * 7
CONV_TYPES = [F32, F32, "ScalarList", "ScalarList", "ScalarList", "Scalar", "Scalar"] + [
    "Scalar"
] * 2


def conv_cost(context: OpContext | None):
    return op_cost(
        "aten::cudnn_convolution",
        json.dumps(CONV_DIMS),
        json.dumps(CONV_TYPES),
        None,
        context=context,
    )


def test_stride_two_from_the_output_shape() -> None:
    blind = conv_cost(None)
    assert blind.flops == 4 * STEM_FLOPS and "stride not recorded" in blind.note
    c = conv_cost(OpContext(output=tuple(STEM_OUT), output_source="the next op's input"))
    assert c.flops == STEM_FLOPS and c.exact and c.note == ""
    assert "stride [2, 2], padding [3, 3], output [32, 64, 112, 112]" in c.inferred
    # an output shape that is not this conv's (other channels, impossible size): assumed
    for wrong in ([32, 128, 112, 112], [32, 64, 300, 300]):
        w = conv_cost(OpContext(output=tuple(wrong)))
        assert w.flops == 4 * STEM_FLOPS and w.inferred == "" and "stride" in w.note


def test_gradient_ops_take_sizes_from_their_parent() -> None:
    go, x, w = [32, 64, 112, 112], STEM_IN, STEM_W
    types = json.dumps(["", F32, F32] + ["ScalarList"] * 3 + ["Scalar"] * 4)
    wgrad = json.dumps([[], go, x] + [[]] * 7)
    assert op_cost("aten::cudnn_convolution_backward_weight", wgrad, types) is None
    c = op_cost(
        "aten::cudnn_convolution_backward_weight",
        wgrad,
        types,
        context=OpContext(weight=tuple(w), weight_source="the gradient op's parent"),
    )
    assert c.flops == STEM_FLOPS and "weight size from the gradient op's parent" in c.inferred
    dgrad = json.dumps([[], go, w] + [[]] * 7)
    blind = op_cost("aten::cudnn_convolution_backward_input", dgrad, types)
    c = op_cost(
        "aten::cudnn_convolution_backward_input",
        dgrad,
        types,
        context=OpContext(input=tuple(x), input_source="the gradient op's parent"),
    )
    assert c.flops == blind.flops == STEM_FLOPS
    # grad_input written at the input's size (224²), not the output's (stride 1 assumed)
    assert c.bytes - blind.bytes == 4 * 32 * 3 * (224 * 224 - 112 * 112)
    assert "input size not recorded" in blind.note and c.note == ""


def stem_trace(*, consumer: bool, mm_ns: int | None = None) -> KinetoTraceBuilder:
    """3 steps on a V100 (fp32 peak 15.7 TFLOP/s): the stem conv, its kernel 1 ms (7.55
    TFLOP/s at stride 2, 30.2 at the stride 1 the bare record implies), then the batch norm that
    reads its output (``consumer``); ``mm_ns``: an fp32 8192³ matmul in that time."""
    b = KinetoTraceBuilder(rank=0, device="V100")
    t = 0
    for step in range(3):
        with b.step(step + 1, t, 3_000_000):
            with b.cpu_op("aten::conv2d", t + 10_000, 100_000, input_dims=CONV_DIMS[:7]):
                b.op(
                    "aten::cudnn_convolution",
                    t + 20_000,
                    80_000,
                    input_dims=CONV_DIMS,
                    input_types=CONV_TYPES,
                )
                b.launch(
                    "implicit_convolve_sgemm<float, float, 128, 5, 5, 3, 3, 3, 1, true>",
                    cpu_start=t + 30_000,
                    gpu_start=t + 200_000,
                    gpu_dur=1_000_000,
                )
            if consumer:
                b.op(
                    "aten::batch_norm",
                    t + 120_000,
                    50_000,
                    input_dims=[STEM_OUT, [64], [64], [64], [64], [], [], [], []],
                    input_types=[F32] * 5 + ["Scalar"] * 4,
                )
            if mm_ns:
                with b.cpu_op(
                    "aten::mm",
                    t + 200_000,
                    50_000,
                    input_dims=[[8192, 8192], [8192, 8192]],
                    input_types=[F32, F32],
                ):
                    b.launch(
                        "volta_sgemm_128x64_nn",
                        cpu_start=t + 210_000,
                        gpu_start=t + 1_300_000,
                        gpu_dur=mm_ns,
                    )
        t += 3_000_000
    return b


def analyse(b: KinetoTraceBuilder, tmp_path: Path):
    path = b.write(tmp_path / "rank-0.json")
    store = ingest([path], tmp_path / "s.tistore", quiet=True)
    return compute_metrics(Analysis(store)), json.loads(diagnose(store).to_json())


def test_stem_conv_at_its_inferred_stride(tmp_path: Path) -> None:
    ms, res = analyse(stem_trace(consumer=True), tmp_path)
    (pt,) = [p for p in res["roofline"]["points"] if p["op"] == "aten::cudnn_convolution"]
    assert pt["flops"] / pt["calls"] == STEM_FLOPS and pt["calls"] == 3
    assert pt["pct_of_roof"] == pytest.approx(100 * STEM_FLOPS / 1e-3 / 15.7e12)
    assert "stride [2, 2]" in pt["inferred"] and pt["assumption"] is None
    (inf,) = res["roofline"]["inferences"]
    assert inf["ops"] == 1 and inf["calls"] == 3 and inf["device_ns"] == 3_000_000
    assert res["roofline"]["excluded"] == []
    assert not [d for d in res["diagnostics"] if d["code"] == "model-above-peak"]
    # 3 x 7.55 GFLOP over 3 x 3 ms steps at 15.7 TFLOP/s
    assert ms.get("mfu_pct") == pytest.approx(100 * STEM_FLOPS / 3e-3 / 15.7e12)


def test_ops_above_the_peak_are_excluded_and_said(tmp_path: Path) -> None:
    # no consumer: stride 1 assumed, 30.2 TFLOP/s > 15.7; the fp32 matmul at 1.1 PFLOP/s too
    ms, res = analyse(stem_trace(consumer=False, mm_ns=1_000_000), tmp_path)
    rl = res["roofline"]
    assert rl["points"] == [] and ms.get("mfu_pct") is None
    assert ms.get("flops_modelled_pct") == 0.0
    ex = {e["op"]: e for e in rl["excluded"]}
    assert set(ex) == {"aten::cudnn_convolution", "aten::mm"}
    conv = ex["aten::cudnn_convolution"]
    assert conv["above"] == "peak" and conv["calls"] == 3
    assert conv["pct_of_peak"] == pytest.approx(100 * 4 * STEM_FLOPS / 1e-3 / 15.7e12)
    assert conv["assumption"].startswith("stride not recorded: assumed 1")
    assert "dense matrix FLOPs" in ex["aten::mm"]["assumption"]
    (d,) = [d for d in res["diagnostics"] if d["code"] == "model-above-peak"]
    assert d["message"].startswith("2 ops above the peak: their model's assumption (")
    assert "is wrong for them; excluded from MFU" in d["message"] and d["count"] == 2


def test_a_plausible_op_still_counts_beside_an_excluded_one(tmp_path: Path) -> None:
    # the conv (stride inferred) counts; the matmul at 1.1 PFLOP/s does not
    ms, res = analyse(stem_trace(consumer=True, mm_ns=1_000_000), tmp_path)
    assert [e["op"] for e in res["roofline"]["excluded"]] == ["aten::mm"]
    assert [p["op"] for p in res["roofline"]["points"]] == ["aten::cudnn_convolution"]
    assert ms.get("mfu_pct") == pytest.approx(100 * STEM_FLOPS / 3e-3 / 15.7e12)
    assert ms.get("flops_modelled_pct") == pytest.approx(50.0)


STEM_TRACE = "tb_plugin/samples/resnet50_num_workers_0/worker0.1623143566756.pt.trace.json.gz"


@requires_corpus
def test_resnet50_stem_conv_and_roof_on_the_v100_trace() -> None:
    res = json.loads(diagnose(ingest([KINETO / STEM_TRACE], quiet=True)).to_json())
    rl = res["roofline"]
    (stem,) = [p for p in rl["points"] if p["dims"] and p["dims"].startswith(f"[{STEM_IN}, ")]
    assert stem["flops"] / stem["calls"] / 1e9 == pytest.approx(7.55, abs=0.01)  # was 30.2
    assert max(p["pct_of_roof"] or 0 for p in rl["points"]) <= 100.0  # was 362%
    assert all(p["bytes"] / (p["device_ns"] / 1e9) <= rl["bandwidth"] for p in rl["points"])
    # MFU was 27.6% with the stem and five other stride-2 convs at 4x and 9 direct-conv
    # shapes (Winograd in cuDNN) above the fp32 peak
    assert res["metrics"]["values"]["mfu_pct"] == pytest.approx(22.46, abs=0.05)
    ex = rl["excluded"]
    assert len(ex) == 27 and sum(e["above"] == "peak" and e["kind"] == "conv" for e in ex) == 9
    (d,) = [d for d in res["diagnostics"] if d["code"] == "model-above-peak"]
    assert d["message"].startswith("27 ops above the peak")
