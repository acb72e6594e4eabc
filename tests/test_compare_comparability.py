"""compare's comparability block: what each diagnosis records about its run, which differences
make two runs not comparable (blocking) or call for caution, how step time is normalised where
the work differs, how --fail-if-slower gates, and old results without the new fields.

Synthetic pairs come from ``layered`` (test_compare.py): back-to-back kernels per layer, with
the device, world size, step count, input shapes, dtype and kernel names chosen per side.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import KINETO, invoke, requires_corpus
from test_compare import BASE, US, layered, result

from traceinsight.compare.comparability import CHECKS, MIN_STEPS, gate
from traceinsight.compare.explain import compare
from traceinsight.diagnose import diagnose
from traceinsight.diagnose.signature import name_dtype
from traceinsight.ingest import load
from traceinsight.render.compare_markdown import render_compare_markdown
from traceinsight.render.html import render_compare_html
from traceinsight.render.terminal import render_compare
from traceinsight.result import DiagnosisResult

SLOW = dict(BASE, Block2=600 * US)  # 1.00 ms -> 1.30 ms per step
#: trace fields added for comparability (an older result has none of them)
NEW_FIELDS = (
    "mode",
    "steps",
    "module_signature",
    "module_count",
    "op_shape_signature",
    "op_shape_count",
    "params",
    "tokens_per_step",
    "flops_per_step",
    "dtypes",
    "compiled",
)
H100 = "NVIDIA H100 SXM5 80GB"
MI300X = "AMD Instinct MI300X"
QWEN = "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"


def diffs(c: dict) -> list[tuple[str, str]]:
    return [(d["what"], d["severity"]) for d in c["comparability"]["differences"]]


def mm_shapes(m: int) -> dict[str, list]:
    """aten::mm input dims per layer: [m, 1024] x [1024, 4096]."""
    return {layer: [[m, 1024], [1024, 4096]] for layer in BASE}


def flops_per_step(m: int) -> float:
    return float(len(BASE) * 2 * m * 1024 * 4096)


# --- what a diagnosis records ----------------------------------------------------------------


def test_a_diagnosis_records_what_comparability_needs(tmp_path: Path) -> None:
    r = result(layered(tmp_path, "a", BASE, shapes=mm_shapes(512)), tmp_path)
    t = r.trace
    assert (t["device"], t["vendor"], t["world_size"]) == (H100, "nvidia", 1)
    assert (t["mode"], t["steps"], t["compiled"], t["dtypes"]) == ("infer", 4, False, ["bf16"])
    assert t["module_count"] == 4  # the layers; Model_0 launches no kernel of its own
    assert t["op_shape_count"] == 1 and re.fullmatch(r"[0-9a-f]{16}", t["op_shape_signature"])
    assert t["flops_per_step"] == pytest.approx(flops_per_step(512), rel=1e-9)
    assert t["params"] is None and t["tokens_per_step"] is None
    # the signatures are stable: the same trace gives the same values
    again = result(layered(tmp_path, "a2", BASE, shapes=mm_shapes(512)), tmp_path)
    assert {k: again.trace[k] for k in NEW_FIELDS} == {k: t[k] for k in NEW_FIELDS}


def test_dtype_from_kernel_names() -> None:
    assert name_dtype("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64") == "bf16"
    assert name_dtype("Cijk_Alik_Bljk_B_BS_BH_Bias_HA_S_SAV_UserArgs_MT256x128x64") == "bf16"
    assert name_dtype("Cijk_Ailk_Bljk_HHS_BH_MT128x128x32_MI32x32x8x1") == "fp16"
    assert name_dtype("Cijk_Ailk_Bljk_SB_MT64x64x8") == "fp32"
    assert name_dtype("ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_tn") == "fp16"
    assert name_dtype("volta_sgemm_128x64_nn") == "fp32"
    assert name_dtype("sm80_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32") == "tf32"
    assert name_dtype("attn_fwd") is None


# --- comparable, caution ---------------------------------------------------------------------


def test_a_run_against_itself_is_comparable(tmp_path: Path) -> None:
    a = result(layered(tmp_path, "a", BASE), tmp_path)
    c = compare(a, a)
    comp = c["comparability"]
    assert comp["comparable"] is True and comp["differences"] == []
    assert comp["normalised_by"] is None and "pairing" not in comp
    assert comp["before"] == comp["after"]
    assert c["headline"].startswith("Step time is unchanged (mean 1.00 ms → 1.00 ms, +0.0%)")
    assert "Comparable: same device" in render_compare(c, width=120)
    assert "**Comparable**" in render_compare_markdown(c)
    html = render_compare_html(c)
    assert 'id="comparability"' in html and "CAUTION" not in html


def test_different_devices_call_for_caution(tmp_path: Path) -> None:
    a = layered(tmp_path, "h100", BASE)
    b = layered(tmp_path, "mi300x", SLOW, device="MI300X")
    c = compare(result(a, tmp_path), result(b, tmp_path))
    comp = c["comparability"]
    assert comp["comparable"] is True and diffs(c) == [("device", "caution")]
    d = comp["differences"][0]
    assert (d["before"], d["after"]) == (H100, MI300X)
    assert d["invalidated"] == ["absolute step time", "per-kernel names"]
    assert d["invalidates"] == (
        "absolute step time and per-kernel names, because the step time then measures the "
        "systems, not the code, and each vendor's libraries name their kernels differently"
    )
    assert c["headline"].startswith(
        f"Caution: different GPUs ({H100} → {MI300X}). After is "
        "30.0% slower per step (mean 1.00 ms → 1.30 ms); largest "
        "changes per step: Model_0/Block2_0 +300 µs"
    )
    html = render_compare_html(c)
    head = re.search(r'<header id="verdict".*?</header>', html, re.S).group(0)
    assert "SLOWER" in head and "CAUTION" in head
    assert "**Caution**" in render_compare_markdown(c)
    assert (
        "| caution | device | `NVIDIA H100 SXM5 80GB` | `AMD Instinct MI300X` |"
        in render_compare_markdown(c)
    )
    # caution still gates: a 30% regression fails, a 50% budget passes
    invoke(
        ["compare", a, b, "--fail-if-slower", "10"],
        exit_code=1,
        stderr_contains="step time regressed by 30.0% (> 10%)",
    )
    invoke(["compare", a, b, "--fail-if-slower", "50"])


def test_too_few_steps_call_for_caution(tmp_path: Path) -> None:
    a = result(layered(tmp_path, "a", BASE, steps=2), tmp_path)
    b = result(layered(tmp_path, "b", SLOW, steps=MIN_STEPS), tmp_path)
    c = compare(a, b)
    assert c["comparability"]["comparable"] and diffs(c) == [("steps", "caution")]
    assert c["headline"].startswith(
        "Caution: too few steps (2 and 3 per rank, fewer than 3). After is "
    )
    three = result(layered(tmp_path, "c", BASE, steps=MIN_STEPS), tmp_path)
    assert diffs(compare(three, b)) == []


def test_eager_vs_compiled_and_dtypes_call_for_caution(tmp_path: Path) -> None:
    shapes = mm_shapes(512)
    a = result(layered(tmp_path, "eager", BASE, shapes=shapes), tmp_path)
    fused = {layer: f"triton_tem_fused_mm_{i}" for i, layer in enumerate(BASE)}
    b = result(
        layered(tmp_path, "compiled", BASE, shapes=shapes, kernels=fused, dtype="c10::Half"),
        tmp_path,
    )
    c = compare(a, b)
    assert c["comparability"]["comparable"] and diffs(c) == [
        ("dtype", "caution"),
        ("compile", "caution"),
    ]
    d = {x["what"]: x for x in c["comparability"]["differences"]}
    assert (d["dtype"]["before"], d["dtype"]["after"]) == ("bf16", "fp16")
    assert (d["compile"]["before"], d["compile"]["after"]) == ("eager", "torch.compile")
    assert c["headline"].startswith(
        "Caution: different compute dtypes (bf16 → fp16); eager vs "
        "torch.compile (eager → torch.compile). Step time is "
        "unchanged"
    )


# --- not comparable --------------------------------------------------------------------------


def test_different_module_trees_are_not_comparable(tmp_path: Path) -> None:
    a = layered(tmp_path, "a", BASE)
    more = dict(BASE, Block3=250 * US)
    del more["Embed"]
    b = layered(tmp_path, "b", more)
    c = compare(result(a, tmp_path), result(b, tmp_path))
    comp = c["comparability"]
    assert comp["comparable"] is False and diffs(c) == [("module tree", "blocking")]
    assert comp["differences"][0]["detail"] == "4 module paths each, not the same"
    # layers pair by identical path only; the rest are added / removed, never matched up
    assert comp["pairing"] == {
        "by": "identical module path",
        "paired": 3,
        "added_count": 1,
        "removed_count": 1,
        "added": ["Model_0/Block3_0"],
        "removed": ["Model_0/Embed_0"],
    }
    status = {x["name"]: x["status"] for x in c["contributors"] if x["kind"] == "layer"}
    assert status == {
        "Model_0/Block3_0": "added",
        "Model_0/Embed_0": "removed",
        "Model_0/Block1_0": "paired",
        "Model_0/Block2_0": "paired",
        "Model_0/Head_0": "paired",
    }
    # the headline says so first, keeps the measurement, and names no contributor
    assert c["headline"] == (
        "Not comparable: different module trees (4 module paths each, not "
        "the same). Measured anyway, after is 15.0% slower per step (mean "
        "1.00 ms → 1.15 ms)."
    )
    html = render_compare_html(c)
    head = re.search(r'<header id="verdict".*?</header>', html, re.S).group(0)
    assert "NOT COMPARABLE" in head and "dsev-error" in html
    assert "<code>Model_0/Block3_0</code>" in html
    md = render_compare_markdown(c)
    assert "**Not comparable**" in md and "| blocking | module tree |" in md
    assert "Not comparable:" in render_compare(c, width=120)


def test_the_gate_refuses_an_incomparable_pair(tmp_path: Path) -> None:
    a = layered(tmp_path, "a", BASE)
    b = layered(tmp_path, "b", dict(BASE, Block3=250 * US))  # +25%, one more layer
    # a budget the change is within still does not pass: the comparison is not valid
    res = invoke(
        ["compare", a, b, "--fail-if-slower", "50", "--json", tmp_path / "c.json"], exit_code=2
    )
    assert res.stderr.startswith(f"wrote {tmp_path / 'c.json'}\n")  # the outputs are written
    line = res.stderr.strip().splitlines()[-1]
    assert line.startswith("traceinsight: error: ")
    assert f"{a} vs {b}: not comparable: different module trees (4 → 5 module paths)" in line
    assert "--allow-incomparable" in line
    assert json.loads((tmp_path / "c.json").read_text())["comparability"]["comparable"] is False
    # --allow-incomparable gates on the measured change
    invoke(
        ["compare", a, b, "--fail-if-slower", "10", "--allow-incomparable"],
        exit_code=1,
        stderr_contains="step time regressed by 25.0% (> 10%)",
    )
    invoke(["compare", a, b, "--fail-if-slower", "50", "--allow-incomparable"])
    # without a gate, compare itself succeeds
    invoke(["compare", a, b])


def test_different_world_sizes_are_not_comparable(tmp_path: Path) -> None:
    a = layered(tmp_path, "ws8", BASE, world_size=8)
    b = layered(tmp_path, "ws16", BASE, world_size=16)
    c = compare(result(a, tmp_path), result(b, tmp_path))
    assert c["comparability"]["comparable"] is False
    assert diffs(c) == [("world size", "blocking")]
    d = c["comparability"]["differences"][0]
    assert (d["before"], d["after"]) == (8, 16)
    assert c["headline"].startswith(
        "Not comparable: different world sizes (8 → 16 ranks). "
        "Measured anyway, step time is unchanged"
    )
    invoke(
        ["compare", a, b, "--fail-if-slower", "5"],
        exit_code=2,
        stderr_contains="not comparable: different world sizes (8 → 16 ranks)",
    )
    invoke(["compare", a, b, "--fail-if-slower", "5", "--allow-incomparable"])


def test_a_side_without_gpu_work_never_passes_the_gate(tmp_path: Path) -> None:
    a = layered(tmp_path, "a", BASE)
    b = layered(tmp_path, "empty", {})  # ProfilerSteps without GPU work: "98% faster" is vacuous
    c = compare(result(a, tmp_path), result(b, tmp_path))
    assert diffs(c) == [("step time", "blocking")]
    d = c["comparability"]["differences"][0]
    assert (d["before"], d["after"], d["detail"]) == (
        "4 steps",
        "no GPU activity",
        "no GPU activity on after",
    )
    assert c["headline"].startswith(
        "Not comparable: no step time on a side (no GPU activity on after). Measured anyway"
    )
    for extra in ([], ["--allow-incomparable"]):
        invoke(
            ["compare", a, b, "--fail-if-slower", "5", *extra],
            exit_code=2,
            stderr_contains="no step time on a side (no GPU activity on after): there is no "
            "change of step time to judge",
        )


# --- normalisation ---------------------------------------------------------------------------


def test_shapes_differ_normalise_per_modelled_flop(tmp_path: Path) -> None:
    """Twice the rows in every GEMM and 2.2x the time: per FLOP, 10% slower."""
    a = layered(tmp_path, "m512", BASE, shapes=mm_shapes(512))
    b = layered(
        tmp_path, "m1024", {k: int(v * 2.2) for k, v in BASE.items()}, shapes=mm_shapes(1024)
    )
    c = compare(result(a, tmp_path), result(b, tmp_path))
    comp = c["comparability"]
    assert comp["comparable"] is False and diffs(c) == [("op shapes", "blocking")]
    assert comp["normalised_by"] == "flop"
    n = comp["normalised"]
    # the mean of the representative steps (the headline's statistic) over the modelled FLOPs;
    # the first window holds the 6 µs before the first kernel starts
    st = c["step_time"]
    assert st["statistic"] == "mean"
    assert n["before"] == pytest.approx(st["before"]["mean"] / flops_per_step(512), rel=1e-9)
    assert n["after"] == pytest.approx(st["after"]["mean"] / flops_per_step(1024), rel=1e-9)
    assert n["before"] == pytest.approx(1.0e6 / flops_per_step(512), rel=2e-3)
    assert n["after"] == pytest.approx(2.2e6 / flops_per_step(1024), rel=2e-3)
    assert n["delta_pct"] == pytest.approx(10.0, abs=0.1)
    assert f"per modelled FLOP it is {n['delta_pct']:.1f}% slower" in c["headline"]
    assert c["headline"].startswith(
        "Not comparable: different op input shapes (1 (op, input "
        "shape) pairs each, not the same). Measured anyway, after is "
        f"{st['mean_delta_pct']:.1f}% slower per step (mean 1.00 ms → 2.20 ms)"
    )
    invoke(
        ["compare", a, b, "--fail-if-slower", "5", "--allow-incomparable"],
        exit_code=1,
        stderr_contains=f"step time per flop regressed by {n['delta_pct']:.1f}% (> 5%)",
    )
    invoke(["compare", a, b, "--fail-if-slower", "15", "--allow-incomparable"])


def test_tokens_per_step_normalise_per_token(tmp_path: Path) -> None:
    a = layered(tmp_path, "a", BASE, shapes=mm_shapes(512))
    b = layered(tmp_path, "b", {k: int(v * 1.8) for k, v in BASE.items()}, shapes=mm_shapes(1024))
    c = compare(result(a, tmp_path), result(b, tmp_path), tokens=(512.0, 1024.0))
    n = c["comparability"]["normalised"]
    assert c["comparability"]["normalised_by"] == "token"
    st = c["step_time"]
    assert (n["before"], n["after"]) == (
        pytest.approx(st["before"]["mean"] / 512),
        pytest.approx(st["after"]["mean"] / 1024),
    )
    assert (n["before"], n["after"]) == (
        pytest.approx(1.0e6 / 512, rel=2e-3),
        pytest.approx(1.8e6 / 1024, rel=2e-3),
    )
    assert n["delta_pct"] == pytest.approx(-10.0, abs=0.1)
    assert (
        f"per token it is {abs(n['delta_pct']):.1f}% faster (1.96 µs → 1.76 µs per token)"
        in c["headline"]
    )
    out = invoke(["compare", a, b, "--tokens-per-step", "512", "1024", "--json", "-"]).stdout
    assert json.loads(out)["comparability"]["normalised_by"] == "token"
    # the same shapes: nothing to normalise, the step time is the comparison
    same = compare(result(a, tmp_path), result(a, tmp_path), tokens=(512.0, 512.0))
    assert same["comparability"]["normalised_by"] is None
    # different tokens per step alone are different work
    assert diffs(compare(result(a, tmp_path), result(a, tmp_path), tokens=(512.0, 1024.0))) == [
        ("tokens per step", "blocking")
    ]


# --- old results -----------------------------------------------------------------------------


def test_an_old_result_without_the_new_fields(tmp_path: Path) -> None:
    def old(path: Path) -> dict:
        d = result(path, tmp_path).to_dict()
        for k in NEW_FIELDS:
            d["trace"].pop(k)
        return d

    a, b = layered(tmp_path, "a", BASE), layered(tmp_path, "b", SLOW)
    da, db = old(a), old(b)
    c = compare(DiagnosisResult.from_dict(da), DiagnosisResult.from_dict(db))
    comp = c["comparability"]
    # what old results held (device, world size, steps) is still checked
    assert comp["comparable"] and comp["differences"] == []
    assert comp["before"]["steps"] == 4 and comp["before"]["device"] == H100
    assert comp["before"]["module_signature"] is None and comp["before"]["compiled"] is None
    unchecked = {u["what"]: u["why"] for u in comp["unchecked"]}
    assert set(unchecked) == {"run mode", "module tree", "op shapes", "dtype", "compile"}
    assert all("older traceinsight" in why for why in unchecked.values())
    assert c["headline"].startswith("After is 30.0% slower per step")
    # saved as JSON, they go through the CLI and its gate
    pa, pb = tmp_path / "old_a.json", tmp_path / "old_b.json"
    pa.write_text(json.dumps(da))
    pb.write_text(json.dumps(db))
    invoke(
        ["compare", pa, pb, "--fail-if-slower", "10"],
        exit_code=1,
        stderr_contains="regressed by 30.0%",
    )
    md = invoke(["compare", pa, pb, "--markdown", tmp_path / "c.md"])
    assert md.exit_code == 0 and "Not checked: run mode" in (tmp_path / "c.md").read_text()
    # an old compare dict (no comparability block) still renders and gates on its step time
    legacy = {k: v for k, v in c.items() if k != "comparability"}
    assert 'id="comparability"' in render_compare_html(legacy)
    assert gate(legacy, 10.0)[0] == 1


def test_the_checks_table_is_documented() -> None:
    doc = (Path(__file__).resolve().parent.parent / "docs" / "COMPARE.md").read_text()
    for ch in CHECKS:
        assert f"| {ch.what} | {ch.severity} |" in doc, ch.what


# --- real traces -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def qwen() -> tuple[DiagnosisResult, DiagnosisResult]:
    base = KINETO / "tracelens" / "traces"
    return (
        diagnose(load([base / "h100" / QWEN], quiet=True)),
        diagnose(load([base / "mi300" / QWEN], quiet=True)),
    )


@requires_corpus
@pytest.mark.corpus
def test_real_qwen_h100_vs_mi300x_is_comparable_with_caution(qwen) -> None:
    a, b = qwen
    c = compare(a, b)
    comp = c["comparability"]
    assert comp["comparable"] is True
    assert diffs(c) == [("device", "caution"), ("steps", "caution")]
    assert comp["unchecked"] == []
    # the same model and shapes on both vendors: identical signatures
    for key in (
        "module_signature",
        "op_shape_signature",
        "dtypes",
        "mode",
        "compiled",
        "world_size",
        "flops_per_step",
    ):
        assert comp["before"][key] == comp["after"][key], key
    assert comp["before"]["module_count"] == 316 and comp["before"]["op_shape_count"] == 33
    assert comp["before"]["dtypes"] == ["bf16"] and comp["before"]["compiled"] is False
    assert c["headline"].startswith(
        f"Caution: different GPUs ({H100} → {MI300X}); too few "
        "steps (1 and 1 per rank, fewer than 3). After is 5.0% "
        "faster per step (mean 49.4 ms → 46.9 ms)"
    )
    # against itself only the step count calls for caution
    assert diffs(compare(a, a)) == [("steps", "caution")]
    assert gate(c, 0.0) == (0, None)  # faster: caution does not block the gate


@requires_corpus
@pytest.mark.corpus
def test_real_torch_compile_trace_is_recorded_as_compiled() -> None:
    r = diagnose(load([KINETO / "hta" / "triton_example" / "triton_example.json.gz"], quiet=True))
    assert r.trace["compiled"] is True
