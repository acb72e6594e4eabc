"""compare: synthetic pairs with known deltas, self-comparison, real H100 vs MI300X pairs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import KINETO, invoke, requires_corpus

from tracegen.synth import KinetoTraceBuilder
from traceinsight.compare.explain import compare
from traceinsight.diagnose import diagnose
from traceinsight.ingest import ingest, load

STEPS = 4
US = 1_000


def layered(
    tmp: Path,
    name: str,
    durations: dict[str, int],
    *,
    comm: int = 0,
    comm_exposed: bool = False,
    kernels: dict[str, str] | None = None,
    steps: int = STEPS,
    device: str = "H100",
    world_size: int | None = None,
    shapes: dict[str, list] | None = None,
    dtype: str = "c10::BFloat16",
) -> Path:
    """Steps of back-to-back kernels, one per layer (module Model/Layer_k > aten::mm).

    The host runs ahead, so each GPU-aware step window is exactly the kernels' time: the step
    time is sum(durations) (+ comm when it runs after the compute on its own stream).
    ``kernels`` renames the kernel of a layer (default ``gemm_<layer>``); ``shapes`` gives a
    layer's aten::mm input dims (recorded with ``dtype``, so its FLOPs are modelled);
    ``device`` is a tracegen device key (H100, A100, MI300X); ``world_size`` is recorded with
    rank 0.
    """
    kernels = kernels or {}
    shapes = shapes or {}
    vendor = "amd" if device.startswith("MI") else "nvidia"
    b = KinetoTraceBuilder(rank=0, world_size=world_size, device=device, vendor=vendor)
    gpu_t = 6 * US  # right after the first launch: no idle lead-in in the first window
    host_t = 0
    for step in range(steps):
        host_len = 10 * US * (len(durations) + 2)
        with b.step(10 + step, host_t, host_len):
            with b.module("Model", host_t + US, host_len - 2 * US, instance=0):
                t = host_t + 2 * US
                gpu_start_step = gpu_t
                for layer, d in durations.items():
                    dims = shapes.get(layer)
                    shape_args = (
                        {"input_dims": dims, "input_types": [dtype] * len(dims)} if dims else {}
                    )
                    with b.module(layer, t, 8 * US, instance=0):
                        with b.cpu_op("aten::mm", t + US, 6 * US, **shape_args):
                            b.launch(
                                kernels.get(layer, f"gemm_{layer}"),
                                cpu_start=t + 2 * US,
                                cpu_dur=2 * US,
                                gpu_start=gpu_t,
                                gpu_dur=d,
                            )
                    gpu_t += d
                    t += 10 * US
            if comm:
                with b.cpu_op("record_param_comms", t + US, 5 * US):
                    start = gpu_t if comm_exposed else gpu_start_step
                    b.launch(
                        "ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
                        stream=20,
                        cpu_start=t + 2 * US,
                        cpu_dur=2 * US,
                        gpu_start=start,
                        gpu_dur=comm,
                    )
                if comm_exposed:
                    gpu_t += comm
        host_t += host_len
    return b.write(tmp / f"{name}.json")


def result(path: Path, tmp: Path):
    return diagnose(ingest([path], tmp / (path.stem + ".tistore"), quiet=True))


BASE = {"Embed": 100 * US, "Block1": 400 * US, "Block2": 300 * US, "Head": 200 * US}


def contributions(c: dict) -> dict[tuple[str, str], int]:
    return {(x["kind"], x["name"]): x["delta_ns"] for x in c["contributors"] if x["delta_ns"]}


def test_one_kernel_twice_as_slow(tmp_path: Path) -> None:
    a = result(layered(tmp_path, "a", BASE), tmp_path)
    slow = dict(BASE, Block2=600 * US)
    b = result(layered(tmp_path, "b", slow), tmp_path)
    c = compare(a, b)
    assert c["explained_by"] == "layer"
    assert c["total_delta_ns"] == 300 * US
    assert contributions(c) == {("layer", "Model_0/Block2_0"): 300 * US}
    assert c["step_time"]["p50_delta_ns"] == 300 * US
    assert c["step_time"]["p50_delta_pct"] == pytest.approx(30.0)
    row = next(r for r in c["layers"] if r["name"] == "Model_0/Block2_0")
    assert (row["before_ns"], row["after_ns"], row["status"]) == (300 * US, 600 * US, "same")
    assert "30.0% slower" in c["headline"] and "Model_0/Block2_0" in c["headline"]


def test_a_layer_added(tmp_path: Path) -> None:
    a = result(layered(tmp_path, "a", BASE), tmp_path)
    more = dict(BASE)
    more["Block3"] = 250 * US
    b = result(layered(tmp_path, "b", more), tmp_path)
    c = compare(a, b)
    assert c["total_delta_ns"] == 250 * US
    assert contributions(c) == {("layer", "Model_0/Block3_0"): 250 * US}
    row = next(r for r in c["layers"] if r["name"] == "Model_0/Block3_0")
    assert row["status"] == "new" and row["before_ns"] == 0
    assert "gemm_Block3" in c["new_kernels"]


def test_comm_overlap_removed(tmp_path: Path) -> None:
    a = result(layered(tmp_path, "a", BASE, comm=500 * US, comm_exposed=False), tmp_path)
    b = result(layered(tmp_path, "b", BASE, comm=500 * US, comm_exposed=True), tmp_path)
    c = compare(a, b)
    assert c["total_delta_ns"] == 500 * US
    assert contributions(c) == {("comm", "exposed communication"): 500 * US}
    bd = {r["part"]: r["delta_ns"] for r in c["breakdown"]}
    assert bd["comm exposed"] == 500 * US and bd["compute"] == 0
    assert any(f["rule"] == "comm-bound" for f in c["findings"]["appeared"])


def test_contributors_always_sum_to_the_total(tmp_path: Path) -> None:
    a = result(layered(tmp_path, "a", BASE), tmp_path)
    b = result(
        layered(
            tmp_path,
            "b",
            {"Embed": 97 * US, "Block1": 401_333, "Head": 1_001},
            comm=333_333,
            comm_exposed=True,
        ),
        tmp_path,
    )
    c = compare(a, b)
    assert sum(x["delta_ns"] for x in c["contributors"]) == c["total_delta_ns"]
    assert sum(x["before_ns"] for x in c["contributors"]) == c["before_step_ns"]
    assert sum(x["after_ns"] for x in c["contributors"]) == c["after_step_ns"]


def test_compare_with_itself_is_zero(tmp_path: Path) -> None:
    a = result(layered(tmp_path, "a", BASE, comm=200 * US), tmp_path)
    c = compare(a, a)
    assert c["total_delta_ns"] == 0
    assert all(x["delta_ns"] == 0 for x in c["contributors"])
    assert not c["new_kernels"] and not c["gone_kernels"]
    assert not c["findings"]["appeared"] and not c["findings"]["disappeared"]
    assert "unchanged" in c["headline"]


def test_cli_gate_and_outputs(tmp_path: Path) -> None:
    a = layered(tmp_path, "a", BASE)
    b = layered(tmp_path, "b", dict(BASE, Block2=600 * US))
    invoke(["compare", a, b, "--fail-if-slower", "50"])
    res = invoke(
        ["compare", a, b, "--fail-if-slower", "10", "--json", tmp_path / "c.json"],
        exit_code=1,
        stderr_contains="regressed by 30.0%",
    )
    c = json.loads((tmp_path / "c.json").read_text())
    assert c["schema"] == "traceinsight.compare" and c["total_delta_ns"] == 300 * US
    assert "Contributors" in res.stdout
    # faster is never a failure
    invoke(["compare", b, a, "--fail-if-slower", "0"])
    # results JSON work as inputs too
    invoke(["diagnose", a, "--json", tmp_path / "a.result.json"])  # not over the trace a.json
    out = invoke(["compare", tmp_path / "a.result.json", b, "--json", "-"]).stdout
    assert json.loads(out)["total_delta_ns"] == 300 * US


def test_compare_and_a_saved_result_load_without_pandas() -> None:
    """Comparing or rendering saved results needs no analysis stack."""
    code = (
        "import sys; import traceinsight.compare.explain, traceinsight.result, traceinsight.util.redact; "
        "import traceinsight.cli; heavy = {'pandas', 'numpy', 'pyarrow'} & set(sys.modules); "
        "assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parent.parent)


PAIRS = [
    "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
    "gaunernst_bert-small-uncased__1016001.json.gz",
    "Falconsai_nsfw_image_detection__1016002.json.gz",
]


@requires_corpus
@pytest.mark.corpus
@pytest.mark.parametrize("name", PAIRS)
def test_real_h100_vs_mi300x(name: str) -> None:
    base = KINETO / "tracelens" / "traces"
    a = diagnose(load([base / "h100" / name], quiet=True))
    b = diagnose(load([base / "mi300" / name], quiet=True))
    c = compare(a, b)
    # the same model on two vendors lines up by module path, though every kernel differs
    assert c["explained_by"] == "layer"
    assert c["before"]["vendor"] == "nvidia" and c["after"]["vendor"] == "amd"
    assert sum(x["delta_ns"] for x in c["contributors"]) == c["total_delta_ns"]
    same = [r for r in c["layers"] if r["status"] == "same"]
    assert len(same) >= 0.9 * len(c["layers"])
    assert c["new_kernels"] and c["gone_kernels"]
    # the same model on another vendor's GPU: comparable, with caution (the systems differ)
    comp = c["comparability"]
    assert comp["comparable"] and comp["normalised_by"] is None
    assert [(d["what"], d["severity"]) for d in comp["differences"]] == [
        ("device", "caution"),
        ("steps", "caution"),
    ]
    assert c["headline"].startswith(
        "Caution: different GPUs (NVIDIA H100 SXM5 80GB → AMD "
        "Instinct MI300X); too few steps (1 and 1 per rank"
    )
    assert ". After is " in c["headline"] or ". Step time is unchanged" in c["headline"]
