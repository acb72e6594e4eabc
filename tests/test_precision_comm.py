"""Communication recognition, the no-communication warning, comm/compute overlap, matrix dtypes
from kernel names, and device-aware precision advice: synthetic cases that must fire, near
misses that must not, and the real shared traces where the errors were seen."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
from conftest import KINETO, requires_corpus

from tracegen import workloads
from tracegen.synth import KinetoTraceBuilder
from traceinsight.analysis import Analysis
from traceinsight.diagnose import diagnose
from traceinsight.engine.evaluate import evaluate, load_rules
from traceinsight.ingest import ingest
from traceinsight.metrics import compute_metrics

#: advice that must not reach a GPU without bf16 / TF32 units (the expert labels' patterns)
BF16_ADVICE = re.compile(
    r"(?i)autocast\([^)]*bfloat16|(?<!no )(?<!not )\bbf16 autocast|"
    r"(?:to|into|as|with|use|switch to)\s*\(?\s*torch\.bfloat16|"
    r"\.bfloat16\(\)|no GradScaler needed"
)
TF32_ADVICE = re.compile(
    r"(?i)set_float32_matmul_precision\(\s*[\"'](?:high|medium)|"
    r"allow_tf32\s*=\s*True|\b(?:enable|allow|use|turn on)\s+TF32"
)
TRAINING_ADVICE = re.compile(
    r"AdamW|fused=True|foreach=True|GradScaler|no_sync|gradient "
    r"accumulation|activation checkpointing|FSDP|ZeRO|8-bit optimi"
)


def analyse(builders: list[KinetoTraceBuilder], tmp_path: Path) -> Analysis:
    tmp_path.mkdir(parents=True, exist_ok=True)
    paths = [b.write(tmp_path / f"rank-{i}.json") for i, b in enumerate(builders)]
    return Analysis(ingest(paths, tmp_path / "s.tistore", quiet=True))


def rule(an: Analysis, rule_id: str):
    ms = compute_metrics(an)
    ev = evaluate([r for r in load_rules() if r.id == rule_id], ms, an)
    return ms, ev


# --- class 1: communication --------------------------------------------------------------------


def comm_trace(world_size: int = 2) -> KinetoTraceBuilder:
    """One step: a GEMM on the compute stream; DeepEP, an unknown kernel under
    record_param_comms and an unknown kernel with no CPU op on the comm streams; near misses:
    unknown kernels under aten::add and with no op on the compute stream."""
    b = KinetoTraceBuilder(rank=0, world_size=world_size)
    with b.step(1, 0, 2_000_000):
        with b.cpu_op(
            "aten::mm",
            10_000,
            20_000,
            input_dims=[[512, 512], [512, 512]],
            input_types=["c10::BFloat16", "c10::BFloat16"],
        ):
            b.launch(
                "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT",
                cpu_start=15_000,
                gpu_start=100_000,
                gpu_dur=400_000,
            )
        b.launch(
            "void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*)",
            cpu_start=40_000,
            gpu_start=300_000,
            gpu_dur=300_000,
            stream=20,
        )
        with b.cpu_op("record_param_comms", 60_000, 20_000):
            b.launch(
                "my_ring_exchange_v2",
                cpu_start=65_000,
                gpu_start=700_000,
                gpu_dur=100_000,
                stream=21,
            )
        b.launch(
            "proxy_progress_kernel",
            cpu_start=90_000,
            gpu_start=900_000,
            gpu_dur=100_000,
            stream=20,
            orphan=True,
        )
        with b.cpu_op("aten::add", 120_000, 20_000):
            b.launch("my_custom_kernel", cpu_start=125_000, gpu_start=1_100_000, gpu_dur=50_000)
        b.launch(
            "mystery_kernel", cpu_start=150_000, gpu_start=1_200_000, gpu_dur=50_000, orphan=True
        )
    return b


def test_communication_by_name_launching_op_and_stream(tmp_path: Path) -> None:
    an = analyse([comm_trace()], tmp_path)
    g = an.attribution.gpu.set_index("name")
    assert g.loc[
        "void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*)", ["cls", "cls_how"]
    ].tolist() == ["communication", "name"]
    assert g.loc["my_ring_exchange_v2", ["cls", "cls_how"]].tolist() == ["communication", "op"]
    how = g.loc["proxy_progress_kernel", ["cls", "cls_how"]].tolist()
    assert how == ["communication", "stream"]
    # near misses: an unknown kernel under aten::add is elementwise (its op), one on the
    # compute stream without an op stays unknown
    assert g.loc["my_custom_kernel", ["cls", "cls_how"]].tolist() == ["elementwise", "op"]
    assert g.loc["mystery_kernel", "cls"] == "other"
    assert g.loc["nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT", "cls"] == "gemm"
    # comm [300,600) + [700,800) + [900,1000) = 500 µs; 200 µs of it under the GEMM [100,500)
    w = an.breakdown.ranks[0]
    assert (w.comm_ns, w.comm_hidden_ns, w.comm_exposed_ns) == (500_000, 200_000, 300_000)
    assert w.to_dict()["comm_overlap_pct"] == pytest.approx(40.0)
    ms = compute_metrics(an)
    assert ms.get("comm_overlap_pct") == pytest.approx(40.0)
    assert ms.get("comm_all_to_all_pct") == pytest.approx(60.0)  # the DeepEP dispatch


def test_comm_overlap_is_stated_without_communication(tmp_path: Path) -> None:
    b = KinetoTraceBuilder(rank=0, world_size=1)
    with b.step(1, 0, 1_000_000), b.cpu_op("aten::mm", 10_000, 20_000):
        b.launch("nvjet_tst_128x256", cpu_start=15_000, gpu_start=100_000, gpu_dur=400_000)
    an = analyse([b], tmp_path)
    ms = compute_metrics(an)
    assert ms.values["comm_pct"] == 0.0 and ms.values["comm_overlap_pct"] == 0.0
    assert an.breakdown.step_frame()["comm_overlap_pct"].tolist() == [0.0]


def _codes(an: Analysis) -> list[str]:
    return [d.code for d in an.attribution.diagnostics.items]


def test_no_communication_found_warning(tmp_path: Path) -> None:
    # must fire: world size 2, GPU kernels, none of them communication
    b = KinetoTraceBuilder(rank=1, world_size=2)
    with b.step(1, 0, 1_000_000):
        with b.cpu_op("c10d::allreduce_", 5_000, 5_000):
            pass  # the collective op was recorded, its kernel was not
        with b.cpu_op("aten::mm", 10_000, 20_000):
            b.launch("nvjet_tst_128x256", cpu_start=15_000, gpu_start=100_000, gpu_dur=400_000)
    an = analyse([b], tmp_path / "a")
    diag = [d for d in an.attribution.diagnostics.items if d.code == "no-communication-found"]
    assert len(diag) == 1 and diag[0].severity == "warning" and diag[0].source == "rank 1"
    assert "world size 2" in diag[0].message and "1 collective CPU op" in diag[0].message
    res = json.loads(diagnose(an.store).to_json())
    assert "no-communication-found" in {d["code"] for d in res["diagnostics"]}
    # near misses: the same job with its NCCL kernel, a single-rank job, a CPU-only rank
    assert "no-communication-found" not in _codes(analyse([comm_trace()], tmp_path / "b"))
    assert "no-communication-found" not in _codes(
        analyse([comm_trace(world_size=1)], tmp_path / "c")
    )
    cpu = KinetoTraceBuilder(rank=3, world_size=8, device=None)
    with cpu.step(1, 0, 100_000):
        cpu.op("c10d::allreduce_", 10_000, 50_000)
    assert "no-communication-found" not in _codes(analyse([cpu], tmp_path / "d"))


def test_comm_bound_on_expert_parallel_all_to_all(tmp_path: Path) -> None:
    """DeepEP dispatch/combine with nothing to hide behind: comm-bound, with all-to-all advice."""
    b = KinetoTraceBuilder(rank=0, world_size=8)
    t = 0
    for step in range(3):
        with b.step(step + 1, t, 1_000_000):
            with b.cpu_op("aten::mm", t + 10_000, 20_000):
                b.launch(
                    "nvjet_tst_128x256", cpu_start=t + 15_000, gpu_start=t + 50_000, gpu_dur=300_000
                )
            b.launch(
                "void deep_ep::internode::dispatch<false, 2, 2, 4, 8, 768, 8192>(int4*)",
                cpu_start=t + 40_000,
                gpu_start=t + 400_000,
                gpu_dur=250_000,
                stream=20,
            )
            b.launch(
                "void deep_ep::internode::combine<__nv_bfloat16, 2, 4, 8, 768>(int4*)",
                cpu_start=t + 60_000,
                gpu_start=t + 700_000,
                gpu_dur=250_000,
                stream=20,
            )
        t += 1_000_000
    ms, ev = rule(analyse([b], tmp_path), "comm-bound")
    (f,) = ev.findings
    assert f.severity == "high" and ms.get("exposed_comm_pct") == pytest.approx(50.0)
    assert ms.get("comm_all_to_all_pct") == pytest.approx(100.0)
    assert any("all-to-all" in r for r in f.recommendations)
    assert not any(TRAINING_ADVICE.search(r) for r in f.recommendations)  # forward only


# --- classes 6 and 8: dtypes from kernel names, device-aware precision advice ------------------


def fp32_trace(
    device: str | None,
    kernel: str,
    *,
    busy_ns: int = 800_000,
    train: bool = True,
    input_types: list | None = None,
) -> KinetoTraceBuilder:
    """3 steps of 1 ms with ``busy_ns`` of one matrix kernel each (no input types by default)."""
    b = KinetoTraceBuilder(rank=0, device=device)
    t = 0
    for step in range(3):
        with b.step(step + 1, t, 1_000_000):
            with b.cpu_op("aten::mm", t + 10_000, 20_000, input_types=input_types):
                b.launch(kernel, cpu_start=t + 15_000, gpu_start=t + 50_000, gpu_dur=busy_ns)
            if train:  # a backward pass and an optimizer step: a training step
                b.op("autograd::engine::evaluate_function: MmBackward0", t + 40_000, 10_000)
                b.op("Optimizer.step#AdamW.step", t + 60_000, 10_000)
        t += 1_000_000
    return b


@pytest.mark.parametrize(
    "device,kernel,want,never",
    [
        (
            "V100",
            "volta_sgemm_128x64_nt",
            ["torch.float16", "GradScaler"],
            [BF16_ADVICE, TF32_ADVICE],
        ),
        (
            "A100",
            "ampere_sgemm_128x64_nn",
            ["torch.bfloat16", "set_float32_matmul_precision"],
            [re.compile("fp8"), re.compile("GradScaler\\(\\)")],
        ),
        (
            "H100",
            "void cutlass::Kernel2<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>(x)",
            # fp8 only once the matmuls are mostly 16-bit: this run is all fp32
            ["torch.bfloat16", "set_float32_matmul_precision"],
            [],
        ),
        (
            "MI300X",
            "Cijk_Ailk_Bljk_S_B_Bias_HA_S_SAV_UserArgs_MT16x16x128_MI16x16x1_SN_LDSB1",
            ["torch.bfloat16"],
            [re.compile("GradScaler\\(\\)")],
        ),
    ],
)
def test_precision_advice_follows_the_device(
    tmp_path: Path, device: str, kernel: str, want: list[str], never: list[re.Pattern]
) -> None:
    ms, ev = rule(analyse([fp32_trace(device, kernel)], tmp_path), "low-precision-unused")
    (f,) = ev.findings
    assert f.severity == "high" and ms.get("fp32_gemm_step_pct") == pytest.approx(80.0)
    text = " ".join(f.recommendations)
    for w in want:
        assert w in text, (device, w, text)
    for rx in never:
        assert not rx.search(text), (device, rx.pattern, text)


def test_forward_only_v100_gets_fp16_inference_advice(tmp_path: Path) -> None:
    an = analyse([fp32_trace("V100", "volta_sgemm_128x64_nt", train=False)], tmp_path)
    _, ev = rule(an, "low-precision-unused")
    (f,) = ev.findings
    text = " ".join(f.recommendations)
    assert "model.half()" in text
    assert not BF16_ADVICE.search(text) and not TF32_ADVICE.search(text)
    assert not TRAINING_ADVICE.search(text)


def test_fp32_share_too_small_to_matter_passes(tmp_path: Path) -> None:
    """GP100-like: fp32 GEMMs are most of the kernel time but 1% of the step."""
    an = analyse([fp32_trace("V100", "volta_sgemm_128x64_nt", busy_ns=10_000)], tmp_path)
    ms, ev = rule(an, "low-precision-unused")
    assert not ev.findings and ev.statuses[0].status == "passed"
    assert ms.get("fp32_gemm_time_pct") == pytest.approx(100.0)
    assert ms.get("fp32_gemm_step_pct") == pytest.approx(1.0)


def test_unknown_dtype_is_not_evaluated_never_passed(tmp_path: Path) -> None:
    an = analyse([fp32_trace("V100", "my_team_gemm_kernel_v3")], tmp_path / "a")
    ms, ev = rule(an, "low-precision-unused")
    assert not ev.findings
    (st,) = ev.statuses
    assert st.status == "not-evaluated" and "dtype" in st.reason
    assert ms.get("matrix_dtype_known_pct") == 0.0 and ms.get("fp32_gemm_time_pct") is None
    # the same kernel with recorded input types: the op's dtype decides
    an = analyse(
        [fp32_trace("V100", "my_team_gemm_kernel_v3", input_types=["float", "float"])],
        tmp_path / "b",
    )
    ms, ev = rule(an, "low-precision-unused")
    assert ms.get("matrix_dtype_known_pct") == 100.0 and len(ev.findings) == 1
    an = analyse(
        [fp32_trace("V100", "my_team_gemm_kernel_v3", input_types=["c10::Half", "c10::Half"])],
        tmp_path / "c",
    )
    ms, ev = rule(an, "low-precision-unused")
    assert ms.get("fp32_gemm_time_pct") == 0.0 and ev.statuses[0].status == "passed"


def test_tensor_core_kernels_do_not_fire(tmp_path: Path) -> None:
    """Near miss: fp32 inputs on TF32 tensor cores (A100 s1688gemm) are not fp32 SIMT."""
    kernel = "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>(x)"
    an = analyse([fp32_trace("A100", kernel, input_types=["float", "float"])], tmp_path)
    ms, ev = rule(an, "low-precision-unused")
    assert not ev.findings and ms.get("fp32_gemm_time_pct") == 0.0


def test_workload_fp32_without_shapes_reads_names(tmp_path: Path) -> None:
    w = dataclasses.replace(
        workloads.PRESETS["fp32_gemms"], device="V100", record_shapes=False, steps=2, layers=2
    )
    an = analyse(workloads.build_ranks(w), tmp_path)
    ms = compute_metrics(an)
    assert ms.get("matrix_dtype_known_pct") == 100.0 and ms.get("fp32_gemm_time_pct") > 80
    assert ms.get("fp16_speedup_ratio") == pytest.approx(125 / 15.7)
    assert ms.get("bf16_speedup_ratio") is None and ms.get("tf32_speedup_ratio") is None


# --- the real shared traces -------------------------------------------------------------------

_RESULTS: dict[str, dict] = {}


def result(rel: str) -> dict:
    if rel not in _RESULTS:
        _RESULTS[rel] = json.loads(diagnose(ingest([KINETO / rel], quiet=True)).to_json())
    return _RESULTS[rel]


def finding(res: dict, rule_id: str) -> dict | None:
    return next((f for f in res["findings"] if f["rule"] == rule_id), None)


V100_DDP = "hta/df_index_resolver/df_index_resolver.json.gz"
V100_CNN = "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
V100_RESNET = "tb_plugin/samples/resnet50_num_workers_0/worker0.1623143566756.pt.trace.json.gz"


@requires_corpus
@pytest.mark.corpus
@pytest.mark.parametrize(
    "rel,pct,severity",
    [
        (V100_DDP, 41.00, "medium"),  # volta_sgemm, no record_shapes
        (V100_CNN, 58.35, "high"),  # volta_sgemm + volta_scudnn + cuDNN <float> engines
        (V100_RESNET, 62.53, "high"),  # cuDNN fp32 convolutions, Input type float
    ],
)
def test_v100_fp32_matrix_math_from_kernel_names(rel: str, pct: float, severity: str) -> None:
    res = result(rel)
    assert res["metrics"]["values"]["fp32_gemm_time_pct"] == pytest.approx(pct, abs=0.01)
    f = finding(res, "low-precision-unused")
    assert f and f["severity"] == severity
    text = " ".join(f["recommendations"])
    assert "torch.float16" in text and "GradScaler" in text
    for r in res["findings"]:  # no rule may give bf16 or TF32 advice on a V100
        for rec in r["recommendations"]:
            assert not BF16_ADVICE.search(rec) and not TF32_ADVICE.search(rec), (r["rule"], rec)


@requires_corpus
@pytest.mark.corpus
@pytest.mark.parametrize(
    "rel,why",
    [
        ("hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz", "fp32 MFMA, 0.3% of the step"),
        (
            "hta/with_gpu_user_annotation/step_based_trace_2543932.json.gz",
            "GP100, 0.9% of the step",
        ),
        ("hta/nccl_parser_config/nccl_data.json.gz", "A100 TF32 tensor cores"),
        ("hta/trace_filter/sampled_rank-0.json.gz", "TF32 tensor cores, sgemm 2%"),
    ],
)
def test_real_traces_without_a_precision_finding(rel: str, why: str) -> None:
    res = result(rel)
    f = finding(res, "low-precision-unused")
    assert f is None or f["severity"] in ("low", "info"), why


@requires_corpus
@pytest.mark.corpus
def test_real_comm_traces() -> None:
    ddp = result(V100_DDP)
    f = finding(ddp, "comm-bound")
    assert f and f["severity"] == "medium"
    v = ddp["metrics"]["values"]
    assert v["comm_overlap_pct"] == 0.0 and v["comm_all_reduce_pct"] == 100.0
    assert ddp["summary"]["ranks"][0]["comm_kernel_time_ns"] == 357_343_000
    emb = result("hta/trace_filter/sampled_rank-0.json.gz")
    assert emb["summary"]["ranks"][0]["comm_kernel_time_ns"] == 396_199_000
    assert emb["metrics"]["values"]["comm_overlap_pct"] == pytest.approx(14.95, abs=0.05)
    assert finding(emb, "comm-bound")["severity"] == "medium"
    # a single-rank NCCL-backend job: no collective kernels, and no warning either
    cnn = result(V100_CNN)
    assert cnn["metrics"]["values"]["comm_overlap_pct"] == 0.0
    assert "no-communication-found" not in {d["code"] for d in cnn["diagnostics"]}
    for r in (ddp, emb):
        assert "no-communication-found" not in {d["code"] for d in r["diagnostics"]}
