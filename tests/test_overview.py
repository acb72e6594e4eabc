"""The TensorBoard plugin's overview figures: tensor-core kernel time, estimated SM efficiency
and achieved occupancy, the step time breakdown and the operators by input shape.

Real traces: the plugin's own ResNet50 samples, against the numbers the plugin reports for
them (kineto ``tb_plugin/test/result_check_file.txt``) and against sums counted here from the
raw JSON; synthetic traces with known answers for the classification and the sweep."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from conftest import KINETO, invoke, requires_corpus

from tracegen.synth import KinetoTraceBuilder
from traceinsight.analysis import Analysis, plain_strings
from traceinsight.analysis import overview as ov
from traceinsight.analysis.op_shapes import ops_by_shape
from traceinsight.diagnose import diagnose
from traceinsight.ingest import ingest
from traceinsight.metrics import compute_metrics

TB = KINETO / "tb_plugin" / "samples"
#: the sample the plugin's end-to-end test checks (steps 5-10, num_workers=0)
TB_SAMPLE = TB / "resnet50_num_workers_0" / "2021-02-23_d3fb4076_worker0.pt.trace.json.gz"
#: the V100 sample with occupancy, blocks per SM and device properties
V100_SAMPLE = TB / "resnet50_num_workers_0" / "worker0.1623143566756.pt.trace.json.gz"
#: the plugin's "Step Time Breakdown" of TB_SAMPLE, µs (result_check_file.txt): step ->
#: (total, kernel, memcpy, memset, runtime, data loader, CPU exec, other); its communication
#: column is 0 throughout
TB_STEPS_US = {
    6: (158499, 100576, 2436, 69, 3144, 37553, 13420, 1301),
    7: (140334, 100821, 2111, 69, 1756, 28965, 5907, 705),
    8: (163126, 101109, 2078, 69, 2040, 49998, 7087, 745),
    9: (141407, 101108, 2072, 69, 2926, 25338, 9084, 810),
    10: (159068, 100732, 2089, 69, 4174, 35514, 14748, 1742),
}
#: the plugin's operator view of TB_SAMPLE (by name), µs: device total, device self, host
#: total, host self
TB_OPS_US = {
    "aten::cudnn_convolution_backward": (285514, 0, 87104, 9515),
    "CudnnConvolutionBackward": (285514, 0, 90857, 3753),
    "aten::cudnn_convolution_backward_weight": (149670, 149670, 39006, 22973),
    "aten::cudnn_convolution": (135735, 135735, 49275, 34235),
    "aten::conv2d": (135735, 0, 61610, 3966),
    "aten::add_": (23357, 23357, 96814, 64646),
    "aten::copy_": (12734, 12734, 60140, 45838),
    "aten::to": (12734, 0, 46057, 4680),
    "torch::autograd::AccumulateGrad": (2915, 0, 34208, 6798),
    "aten::empty": (0, 0, 33098, 33098),
}


def _analysis(path: Path) -> Analysis:
    an = Analysis(ingest([path], quiet=True))
    with plain_strings():
        an.attribution  # noqa: B018
    return an


def _raw_events(path: Path) -> list[dict]:
    with gzip.open(path, "rt") as f:
        doc = json.load(f)
    return doc["traceEvents"] if isinstance(doc, dict) else doc


# --- the step time breakdown -------------------------------------------------------------------


@requires_corpus
def test_step_breakdown_matches_the_plugin_on_its_sample() -> None:
    """Every step after the first is the plugin's to the µs. The first differs: runtime and
    memcpy agree, the plugin's window is 36.4 ms shorter (35.1 ms of it kernel time)."""
    with plain_strings():
        sb = ov.step_breakdown(_analysis(TB_SAMPLE))
    got = {r["step"]: r for r in sb["steps"]}
    assert sorted(got) == [5, 6, 7, 8, 9, 10]
    for step, want in TB_STEPS_US.items():
        r = got[step]
        us = tuple(r[k] // 1000 for k in ("step_ns", *[f"{p}_ns" for p in ov.STEP_PARTS]))
        assert us == want, step
    first = got[5]
    assert (first["runtime_ns"] // 1000, first["memcpy_ns"] // 1000) == (3346, 1948)
    assert first["step_ns"] // 1000 - 129983 == 36372


@requires_corpus
@pytest.mark.parametrize("path", sorted(TB.rglob("*.json.gz")), ids=lambda p: p.parent.name)
def test_step_breakdown_sums_exactly_to_each_step(path: Path) -> None:
    an = _analysis(path)
    with plain_strings():
        sb = ov.step_breakdown(an)
    wins = {(w.rank, w.step): w for w in an.attribution.steps}
    assert len(sb["steps"]) == len(wins)
    for r in sb["steps"]:
        w = wins[(r["rank"], r["step"])]
        assert r["step_ns"] == w.end_ns - w.start_ns
        parts = [r[f"{p}_ns"] for p in ov.STEP_PARTS]
        assert all(isinstance(v, int) and v >= 0 for v in parts)
        assert sum(parts) == r["step_ns"]


@requires_corpus
def test_step_kernel_part_is_the_union_of_the_raw_kernels() -> None:
    """Kernel ns of each step counted here from the raw JSON: the union of the kernel
    intervals (µs, integers in this file) clipped to the step window."""
    an = _analysis(V100_SAMPLE)
    with plain_strings():
        sb = ov.step_breakdown(an)
    kern = sorted(
        (e["ts"] * 1000, (e["ts"] + e["dur"]) * 1000)
        for e in _raw_events(V100_SAMPLE)
        if e.get("cat") == "Kernel" and e.get("ph") == "X"
    )
    for r in sb["steps"]:
        lo, hi = r["start_ns"], r["start_ns"] + r["step_ns"]
        total, cur_s, cur_e = 0, None, None
        for s, e in kern:
            s, e = max(s, lo), min(e, hi)
            if e <= s:
                continue
            if cur_e is None or s > cur_e:
                total += (cur_e - cur_s) if cur_e is not None else 0
                cur_s, cur_e = s, e
            else:
                cur_e = max(cur_e, e)
        total += (cur_e - cur_s) if cur_e is not None else 0
        assert r["kernel_ns"] == total


def test_step_breakdown_priority_on_a_synthetic_step(tmp_path: Path) -> None:
    """A 1 ms step: a DataLoader range 0-300 µs holding a CPU op, a kernel launch at 400 µs
    (runtime 4 µs) running 500-700 µs, a memcpy 650-750 µs: each ns to the first part."""
    b = KinetoTraceBuilder()
    t0 = 1_000_000
    with b.step(1, t0, 1_000_000):
        with b.annotation(
            "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t0, 300_000
        ):
            b.op("aten::stack", t0 + 50_000, 100_000)
        with b.cpu_op("aten::mm", t0 + 390_000, 20_000):
            b.launch(
                "volta_sgemm_128x64_nn",
                cpu_start=t0 + 400_000,
                gpu_start=t0 + 500_000,
                gpu_dur=200_000,
            )
        b.launch(
            "Memcpy DtoH (Device -> Pinned)",
            kind="memcpy",
            cpu_start=t0 + 420_000,
            gpu_start=t0 + 650_000,
            gpu_dur=100_000,
            bytes=1024,
        )
    an = _analysis(b.write(tmp_path / "t.json"))
    with plain_strings():
        (r,) = ov.step_breakdown(an)["steps"]
    assert r["step_ns"] == 1_000_000
    assert r["kernel_ns"] == 200_000
    assert r["memcpy_ns"] == 50_000  # 700-750 µs: the rest is under the kernel
    assert r["runtime_ns"] == 8_000  # two 4 µs launches
    assert r["dataloader_ns"] == 300_000  # the op inside it is data loading, not CPU exec
    assert r["cpu_exec_ns"] == 20_000 - 4_000  # aten::mm less the launch inside it
    assert r["other_ns"] == 1_000_000 - 200_000 - 50_000 - 8_000 - 300_000 - 16_000


# --- SM efficiency, occupancy, tensor cores ----------------------------------------------------


@requires_corpus
def test_occupancy_is_the_time_weighted_mean_of_the_raw_estimates() -> None:
    an = _analysis(V100_SAMPLE)
    ms = compute_metrics(an)
    raw = _raw_events(V100_SAMPLE)
    kern = [e for e in raw if e.get("cat") == "Kernel"]
    lo, hi = ov._window(an, 0)
    # the window starts at the first ProfilerStep (its end is the last kernel launched in it)
    assert lo == 1000 * min(e["ts"] for e in raw if e.get("name", "").startswith("ProfilerStep#"))
    occ = [
        (
            e["args"]["est. achieved occupancy %"],
            min(e["ts"] + e["dur"], hi / 1000) - max(e["ts"], lo / 1000),
        )
        for e in kern
    ]
    occ = [(o, d) for o, d in occ if d > 0]
    want = sum(o * d for o, d in occ) / sum(d for _, d in occ)
    assert ms.values["achieved_occupancy_pct"] == pytest.approx(want, rel=1e-12)
    assert ms.values["achieved_occupancy_pct"] == pytest.approx(49.1356, abs=1e-4)
    assert 0 < ms.values["sm_efficiency_pct"] <= 100


@requires_corpus
def test_estimates_are_missing_where_the_trace_records_no_inputs() -> None:
    """The 2021-02 sample records no occupancy, no blocks per SM and no device properties:
    both estimates are missing with what they need, never 0."""
    kern = [e for e in _raw_events(TB_SAMPLE) if e.get("cat") == "Kernel"]
    assert kern and not any("blocks per SM" in e.get("args", {}) for e in kern)
    ms = compute_metrics(_analysis(TB_SAMPLE))
    assert ms.values["achieved_occupancy_pct"] is None
    assert "est. achieved occupancy" in ms.missing["achieved_occupancy_pct"]
    assert ms.values["sm_efficiency_pct"] is None
    assert "blocks per SM" in ms.missing["sm_efficiency_pct"]


def _sm_trace(tmp: Path, **kw) -> Analysis:
    b = KinetoTraceBuilder()
    t0 = 1_000_000
    with b.step(1, t0, 1_000_000):
        with b.cpu_op("aten::mm", t0, 10_000):
            b.launch(
                "k_a",
                cpu_start=t0 + 1_000,
                gpu_start=t0 + 100_000,
                gpu_dur=400_000,
                stream=7,
                **{"blocks per SM": 0.5, **kw},
            )
            b.launch(
                "k_b",
                cpu_start=t0 + 5_000,
                gpu_start=t0 + 300_000,
                gpu_dur=400_000,
                stream=8,
                **{"blocks per SM": 0.75, **kw},
            )
    return _analysis(b.write(tmp / "t.json"))


def test_sm_efficiency_sums_concurrent_kernels_and_caps_at_one(tmp_path: Path) -> None:
    """Step 1 ms: k_a 100-500 µs at 0.5, k_b 300-700 µs at 0.75; 300-500 µs capped at 1:
    (200*0.5 + 200*1 + 200*0.75) / 1000 = 45%."""
    ms = compute_metrics(_sm_trace(tmp_path))
    assert ms.values["sm_efficiency_pct"] == pytest.approx(45.0, abs=1e-9)
    assert ms.values["achieved_occupancy_pct"] == pytest.approx(50.0)


def test_sm_efficiency_from_grid_and_sm_count(tmp_path: Path) -> None:
    """Without ``blocks per SM`` the grid over the device's SM count is used."""
    an = _sm_trace(tmp_path, grid=[66, 1, 1])
    k = ov._kernels(an, ov._SM_COLUMNS)
    k = k.assign(blocks_per_sm=float("nan"))
    bps = ov.blocks_per_sm(an, k)
    sms = ov.sm_counts(an.store)
    assert sms, "the synthetic trace carries deviceProperties"
    assert list(bps) == [66 / next(iter(sms.values()))] * 2


TC_CASES = {
    # name -> uses tensor cores
    "sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x32_stage4": True,
    "sm90_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize128x128x8": False,  # fp32 in the name
    "ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_nn": True,
    "volta_h884gemm_64x64_ldg8_nn": True,
    "volta_sgemm_128x64_nn": False,
    "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTN": True,
    "void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_64x64_32x6_tn_align4>": True,
    "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64>>": True,
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::Half>>": False,
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>": False,
    # by class and dtype (no tensor-core pattern in the name): a bf16 GEMM / TF32 GEMM counts,
    # a bf16 elementwise kernel and a GEMM of unknown dtype do not
    "void gemm_bf16_custom_kernel<int>": True,
    "cutlass_gemm_tf32_kernel": True,
    "void at::native::vectorized_elementwise_kernel<4, CUDAFunctor_add<c10::BFloat16>>": False,
    "triton_tem_fused_mm_0": False,
}


@pytest.mark.parametrize("name", sorted(TC_CASES))
def test_tensor_core_classification(name: str) -> None:
    from traceinsight.analysis.categories import kernel_class

    assert ov.uses_tensor_cores(name, kernel_class(name)) is TC_CASES[name]


def test_tensor_core_share_and_dtypes(tmp_path: Path) -> None:
    b = KinetoTraceBuilder()
    t0 = 1_000_000
    durs = {}
    with b.step(1, t0, 3_000_000):
        t = t0
        for i, name in enumerate(sorted(TC_CASES)):
            d = 10_000 * (i + 1)
            durs[name] = d
            with b.cpu_op("aten::mm", t, 5_000, input_types=["c10::BFloat16", "c10::BFloat16"]):
                b.launch(name, cpu_start=t + 1_000, gpu_start=t + 2_000, gpu_dur=d)
            t += d + 10_000
    an = _analysis(b.write(tmp_path / "t.json"))
    ms = compute_metrics(an)
    want = sum(d for n, d in durs.items() if TC_CASES[n])
    assert ms.values["tensor_core_time_ns"] == want
    assert ms.values["tensor_core_time_pct"] == pytest.approx(100 * want / sum(durs.values()))
    tc = ms.evidence["overview"]["tensor_cores"]
    assert tc["rule"] == ov.TC_RULE
    rows = {r["name"]: r for r in tc["top"]}
    assert rows["volta_sgemm_128x64_nn"]["dtype"] == "fp32"
    assert rows["nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTN"]["tensor_cores"] is True


@requires_corpus
def test_tensor_core_time_on_a_real_trace_counted_from_raw_json() -> None:
    """AlexNet on A100: the tensor-core kernels (TF32 sm80_xmma implicit GEMMs) counted from
    the raw events by name; the fp32 ampere_sgemm kernels are not."""
    path = KINETO / "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"
    ms = compute_metrics(_analysis(path))
    kern = [e for e in _raw_events(path) if e.get("cat") == "kernel"]
    tc = sum(e["dur"] * 1000 for e in kern if "xmma" in e["name"] and "tf32" in e["name"])
    assert tc == 1_814_000
    assert ms.values["tensor_core_time_ns"] == tc
    total = sum(e["dur"] * 1000 for e in kern)
    assert ms.values["tensor_core_time_pct"] == pytest.approx(100 * tc / total)


@requires_corpus
def test_tensorboard_sample_fp32_resnet_uses_no_tensor_cores() -> None:
    ms = compute_metrics(_analysis(V100_SAMPLE))
    assert ms.values["tensor_core_time_ns"] == 0
    assert ms.values["tensor_core_time_pct"] == 0.0


# --- operators by input shape --------------------------------------------------------------------


@requires_corpus
def test_ops_by_name_match_the_plugin_operator_view() -> None:
    with plain_strings():
        ob = ops_by_shape(_analysis(TB_SAMPLE), top=100_000)
    assert ob is not None and ob["has_shapes"]
    agg: dict[str, list[int]] = {}
    for r in ob["rows"]:
        a = agg.setdefault(r["name"], [0, 0, 0, 0])
        for i, k in enumerate(
            ("device_total_ns", "device_self_ns", "host_total_ns", "host_self_ns")
        ):
            a[i] += r[k]
    for name, want in TB_OPS_US.items():
        assert tuple(v // 1000 for v in agg[name]) == want, name


@requires_corpus
def test_ops_by_shape_split_a_name_and_carry_the_call_stack() -> None:
    """BERT on H100 with with_stack: addmm with three input shapes, each its own row, the
    stack from the enclosing Python frames (innermost first)."""
    path = KINETO / "tracelens/traces/h100/gaunernst_bert-small-uncased__1016001.json.gz"
    with plain_strings():
        ob = ops_by_shape(_analysis(path), top=100_000)
    assert ob is not None and ob["has_stack"]
    addmm = [r for r in ob["rows"] if r["name"] == "aten::addmm"]
    shapes = {r["input_dims"] for r in addmm}
    assert "[[512], [141,512], [512,512], [], []]" in shapes
    assert len(shapes) == len(addmm) >= 3
    top = next(r for r in addmm if r["input_dims"] == "[[512], [141,512], [512,512], [], []]")
    assert top["calls"] == 17
    assert top["device_self_ns"] == top["device_total_ns"] == 98718
    assert top["stack"][0] == "<built-in function linear>"
    assert any("torch/nn/modules/linear.py" in f for f in top["stack"])


# --- the result section ----------------------------------------------------------------------


@requires_corpus
def test_result_carries_the_overview_section() -> None:
    r = diagnose(ingest([TB_SAMPLE], quiet=True))
    d = json.loads(r.to_json())
    ov_d = d["overview"]
    assert {r["step"] for r in ov_d["step_breakdown"]["steps"]} == {5, 6, 7, 8, 9, 10}
    assert ov_d["tensor_cores"]["tensor_core_ns"] == 0
    assert d["metrics"]["units"]["sm_efficiency_pct"] == "%"


@requires_corpus
def test_reports_show_the_overview() -> None:
    from traceinsight.render.diagnosis_markdown import render_markdown
    from traceinsight.render.html import render_html

    r = diagnose(ingest([V100_SAMPLE], quiet=True))
    html = render_html(r)
    sec = html[html.index('<section id="overview">') :]
    sec = sec[: sec.index("</section>")]
    assert 'href="#overview"' in html
    assert "Est. SM efficiency 62.7%" in sec and "Est. achieved occupancy 49.1%" in sec
    chart = sec[sec.index("step-parts-chart") : sec.index("</svg>")]
    # one segment per non-zero part of each of the 6 steps (all seven are non-zero here)
    assert chart.count("<rect") == 6 * 7
    assert "aten::cudnn_batch_norm_backward" in sec
    md = render_markdown(r)
    assert "**Overview**: kernel time on tensor cores 0.0%; est. SM efficiency 62.7%" in md
    assert "mean step 155 ms: Kernel 98.5 ms (63.6%)," in md  # one rank: on one line
    from traceinsight.render.terminal import render

    text = render(r, width=200)
    assert "mean step 155 ms: Kernel 63.6% · Memcpy 1.1%" in text


def test_overview_names_are_escaped(tmp_path: Path) -> None:
    """A kernel and an op name with control characters reach no report raw."""
    b = KinetoTraceBuilder()
    t0 = 1_000_000
    with b.step(1, t0, 1_000_000):
        with b.cpu_op("aten::mm\x1b[2J", t0, 100_000, input_dims=[[8, 8], [8, 8]]):
            b.launch(
                "evil\x1b]8;;x\x07gemm", cpu_start=t0 + 1_000, gpu_start=t0 + 2_000, gpu_dur=50_000
            )
    r = diagnose(ingest([b.write(tmp_path / "t.json")], tmp_path / "s.tistore", quiet=True))
    text = r.to_json()
    ov_d = json.loads(text)["overview"]
    assert "\x1b" not in json.dumps(ov_d, ensure_ascii=False)
    assert ov_d["ops_by_shape"]["rows"][0]["name"] == "aten::mm\\x1b[2J"
    from traceinsight.render.diagnosis_markdown import render_markdown
    from traceinsight.render.html import render_html

    assert "\x1b" not in render_html(r) and "\x1b" not in render_markdown(r)


@requires_corpus
def test_top_by_shape_lists_ops_by_name_and_input_shape() -> None:
    path = KINETO / "tracelens/traces/h100/gaunernst_bert-small-uncased__1016001.json.gz"
    out = invoke(["top", path, "--by", "shape", "-n", "3"]).stdout
    lines = out.splitlines()
    assert "input shapes" in lines[2] and "called from" in lines[2]
    assert lines[4].startswith("aten::addmm ") and "[512]×[141, 512]×[512, 512]" in lines[4]
    assert "17" in lines[4].split()
    rows = json.loads(invoke(["top", path, "--by", "shape", "--json"]).stdout)["rows"]
    first = rows[0]
    assert (first["name"], first["calls"], first["device_self_ns"]) == ("aten::addmm", 17, 98718)
    assert sum(r["calls"] for r in rows if r["name"] == "aten::addmm") > 17
    from traceinsight.render.overview_text import user_frame

    assert user_frame(first["stack"]) == "transformers/models/bert/modeling_bert.py(364): forward"


@requires_corpus
def test_ops_by_shape_carry_the_recorded_call_stack() -> None:
    """The 2021 samples record ``with_stack`` as a ``Call stack`` arg on each op: the row's
    stack is its first call's, one frame per entry, home-directory user names redacted."""
    with plain_strings():
        ob = ops_by_shape(_analysis(V100_SAMPLE), top=100_000)
    assert ob is not None and ob["has_stack"]
    dims = "[[32,256,14,14], [1024,256,1,1], [], [], [], [], [], [], []]"
    row = next(
        r for r in ob["rows"] if r["name"] == "aten::cudnn_convolution" and r["input_dims"] == dims
    )
    first = min(
        (
            e
            for e in _raw_events(V100_SAMPLE)
            if e.get("name") == "aten::cudnn_convolution"
            and json.dumps(e["args"].get("Input Dims"), separators=(",", ":")).replace(
                "],[", "], ["
            )
            == dims
        ),
        key=lambda e: e["ts"],
    )
    frames = first["args"]["Call stack"].split(";")
    assert row["stack"] == [f.replace("/home/yangu/", "/home/~/") for f in frames][:12]
    assert row["stack"][0].endswith("torch/nn/modules/conv.py(440): _conv_forward")
    assert not any("yangu" in f for r in ob["rows"] for f in r.get("stack") or [])
    from traceinsight.render.overview_text import user_frame

    # the innermost frame outside torch: the model's own code
    assert user_frame(row["stack"]).endswith(
        "site-packages/torchvision/models/resnet.py(132): forward"
    )


def test_damaged_estimates_are_left_out(tmp_path: Path) -> None:
    """A negative occupancy or blocks-per-SM value (damaged input) is not averaged in: the
    run's figures rest on the kernel with sane values only."""
    b = KinetoTraceBuilder()
    t0 = 1_000_000
    with b.step(1, t0, 1_000_000):
        with b.cpu_op("aten::mm", t0, 10_000):
            b.launch(
                "k_ok",
                cpu_start=t0 + 1_000,
                gpu_start=t0 + 100_000,
                gpu_dur=300_000,
                **{"blocks per SM": 0.5, "est. achieved occupancy %": 40},
            )
            b.launch(
                "k_bad",
                cpu_start=t0 + 5_000,
                gpu_start=t0 + 500_000,
                gpu_dur=100_000,
                **{"blocks per SM": -3.0, "est. achieved occupancy %": -50},
            )
    ms = compute_metrics(_analysis(b.write(tmp_path / "t.json")))
    assert ms.values["achieved_occupancy_pct"] == pytest.approx(40.0)
    assert ms.values["sm_efficiency_pct"] == pytest.approx(100 * 0.5 * 300_000 / 1_000_000)
