"""Run facts: what the trace shows the run already does, and advice that never contradicts it.

* Synthetic traces with known answers: the run mode (the forward half of an FSDP step and a
  forward+backward benchmark are not inference; MFU counts their backward), the optimizer
  implementation, the compile state, the matrix dtypes by time share.
* The corpus: every fact the expert labelled (``traces/expected/run_facts.yaml``, 40 runs)
  against the computed ``run`` section, fact by fact; and on every shared Kineto trace, no
  given recommendation belongs to a class the run facts rule out (:func:`contradictions`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from conftest import TRACES, corpus_id, corpus_kineto_files, requires_corpus
from run_fact_checks import agree, load

from tracegen.synth import KinetoTraceBuilder
from traceinsight.analysis import Analysis
from traceinsight.diagnose import diagnose
from traceinsight.ingest import ingest
from traceinsight.metrics import compute_metrics

LABELS = load()


def _facts(b: KinetoTraceBuilder, tmp: Path) -> tuple[dict[str, Any], dict[str, Any], Any]:
    an = Analysis(ingest([b.write(tmp / "t.json")], tmp / "s", quiet=True))
    ms = compute_metrics(an)
    return ms.evidence["run"], ms.evidence["run_values"], ms.get("is_training")


def _steps(
    b: KinetoTraceBuilder,
    ops: list[str],
    kernel: str = "nvjet_tst_128x256_bf16",
    ranges: tuple[str, ...] = (),
    n: int = 3,
    input_types: list | None = None,
) -> KinetoTraceBuilder:
    t = 0
    for step in range(n):
        with b.step(step + 1, t, 1_000_000):
            for j, r in enumerate(ranges):
                with b.annotation(r, t + 1_000 + j, 5_000):
                    pass
            for i, name in enumerate(ops):
                s = t + 10_000 + i * 60_000
                with b.cpu_op(name, s, 50_000, input_types=input_types):
                    b.launch(kernel, cpu_start=s + 1_000, gpu_start=s + 5_000, gpu_dur=40_000)
        t += 1_000_000
    return b


FWD = ["aten::mm", "aten::addmm"]
BWD = ["autograd::engine::evaluate_function: MmBackward0", "MmBackward0"]


@pytest.mark.parametrize(
    "ops,ranges,mode,training",
    [
        (FWD, (), "inference", 0.0),
        (FWD + BWD, ("Optimizer.step#AdamW.step",), "training", 1.0),
        # the forward half of an FSDP step: no backward op yet, still training (6·N·tokens)
        (FWD, ("FSDP::pre_forward", "FSDP::post_forward"), "training", 1.0),
        # forward + backward without an optimizer step: a benchmark, with backward FLOPs
        ([*FWD, "NllLossBackward0"], (), "benchmark", 1.0),
        (FWD, ("[param|pytorch.model.alex_net|warmup|forward]",), "benchmark", 0.0),
    ],
)
def test_run_mode(
    tmp_path: Path, ops: list[str], ranges: tuple[str, ...], mode: str, training: float
) -> None:
    run, flat, is_training = _facts(
        _steps(KinetoTraceBuilder(rank=0), ops, ranges=ranges), tmp_path
    )
    assert run["mode"]["value"] == mode and flat["mode"] == mode
    assert is_training == training
    assert run["mode"]["evidence"]


@pytest.mark.parametrize(
    "ops,ranges,cls,impl",
    [
        (
            ["aten::_foreach_add_", "aten::_foreach_mul_"],
            ("Optimizer.step#SGD.step",),
            "SGD",
            "foreach",
        ),
        (["aten::_fused_adamw_"], ("Optimizer.step#AdamW.step",), "AdamW", "fused"),
        (["aten::add_"], ("Optimizer.step#FusedAdam.step",), "FusedAdam", "fused"),
        (["aten::add_"], ("Optimizer.step#SGD.step",), "SGD", "for-loop"),
        # grad-norm clipping uses _foreach_norm: not a foreach optimizer
        (["aten::_foreach_norm"], ("Optimizer.step#SGD.step",), "SGD", "for-loop"),
    ],
)
def test_optimizer_class_and_implementation(
    tmp_path: Path, ops: list[str], ranges: tuple[str, ...], cls: str, impl: str
) -> None:
    run, flat, _ = _facts(
        _steps(KinetoTraceBuilder(rank=0), FWD + BWD + ops, ranges=ranges), tmp_path
    )
    assert run["optimizer"]["value"]["class"] == cls
    assert flat["optimizer.impl"] == impl and flat["optimizer.class"] == cls


def test_matrix_dtypes_by_time_share_and_compile_state(tmp_path: Path) -> None:
    b = KinetoTraceBuilder(rank=0)
    t = 0
    for step in range(2):
        with b.step(step + 1, t, 1_000_000):
            with b.cpu_op("aten::mm", t + 10_000, 50_000):
                b.launch(
                    "volta_sgemm_128x64_nn",
                    cpu_start=t + 11_000,
                    gpu_start=t + 20_000,
                    gpu_dur=300_000,
                )
            with b.cpu_op("aten::mm", t + 400_000, 50_000):
                b.launch(
                    "sm90_xmma_gemm_bf16bf16_bf16f32",
                    cpu_start=t + 401_000,
                    gpu_start=t + 420_000,
                    gpu_dur=100_000,
                )
            with b.cpu_op("CompiledFunction", t + 600_000, 50_000):
                b.launch(
                    "triton_poi_fused_add_0",
                    cpu_start=t + 601_000,
                    gpu_start=t + 620_000,
                    gpu_dur=10_000,
                )
        t += 1_000_000
    run, flat, _ = _facts(b, tmp_path)
    assert run["matrix_dtypes"]["value"] == {
        "shares": {"fp32": 75.0, "bf16": 25.0},
        "dominant": "fp32",
    }
    assert flat["matrix_dtypes.fp32_share"] == 75.0
    assert flat["matrix_dtypes.low_precision_share"] == 25.0
    assert run["compiled"]["value"] == ["torch_compile"]
    assert run["attention"]["value"] == "none"


# --- the corpus -------------------------------------------------------------------------------

_CACHE: dict[str, dict[str, Any]] = {}


def _result(path: Path) -> dict[str, Any]:
    key = str(path)
    if key not in _CACHE:
        import json

        _CACHE[key] = json.loads(diagnose(ingest([path], quiet=True), cache=False).to_json())
    return _CACHE[key]


@requires_corpus
@pytest.mark.corpus
@pytest.mark.parametrize(
    "key", list(LABELS) or ["none"], ids=[k.split("/", 1)[-1][-60:] for k in LABELS] or ["none"]
)
def test_run_facts_agree_with_the_expert(key: str) -> None:
    if not LABELS:
        pytest.skip("no labels")
    res = _result(TRACES / key)
    bad = {f: why for f, why in agree(LABELS[key], res["run"]).items() if why}
    assert not bad, bad


#: advice the run facts rule out: (what, does it apply to this run?, pattern of the advice)
def _training(run: dict[str, Any]) -> bool:
    return (run.get("mode") or {}).get("value") == "training"


def _value(run: dict[str, Any], fact: str) -> Any:
    return (run.get(fact) or {}).get("value")


def _shares(run: dict[str, Any]) -> dict[str, float]:
    v = _value(run, "matrix_dtypes")
    return (v or {}).get("shares") or {} if isinstance(v, dict) else {}


def _known(run: dict[str, Any], d: tuple[str, ...]) -> float:
    return sum(float(x) for k, x in _shares(run).items() if k in d)


TRAINING_ONLY = re.compile(
    r"gc\.freeze|off the training thread|belongs in the DataLoader workers|AdamW\(fused|"
    r"fused=True|foreach=True|GradScaler|no_sync|gradient accumulation|activation "
    r"checkpointing|FSDP/ZeRO|8-bit optimi"
)
NOT_ENGINE = re.compile(r'mode="reduce-overhead"|torch\.compile\(')
CLASSES: list[tuple[str, Any, re.Pattern[str]]] = [
    (
        "training advice for a run that is not training",
        lambda r: _value(r, "mode") in ("inference", "benchmark", "unknown"),
        TRAINING_ONLY,
    ),
    ("'batch requests' for training", _training, re.compile(r"batch requests")),
    (
        "bf16/fp16/TF32 advice for matmuls already in 16-bit or narrower",
        lambda r: bool(_shares(r)) and _known(r, ("fp32", "tf32", "fp64")) < 10,
        re.compile(r"in bf16|bf16 mixed precision|in fp16|fp16 mixed precision|TF32"),
    ),
    (
        "TF32 advice without fp32 matmuls",
        lambda r: bool(_shares(r)) and _known(r, ("fp32",)) < 10,
        re.compile(r"set_float32_matmul_precision"),
    ),
    (
        "AdamW(fused=True) for a run whose optimizer is not Adam/AdamW",
        lambda r: (
            isinstance(_value(r, "optimizer"), dict)
            and _value(r, "optimizer").get("class") not in ("Adam", "AdamW")
        ),
        re.compile(r"AdamW\(fused=True\)"),
    ),
    (
        "foreach advice for an optimizer already fused or running _foreach kernels",
        lambda r: (
            isinstance(_value(r, "optimizer"), dict)
            and _value(r, "optimizer").get("impl") in ("fused", "foreach")
        ),
        re.compile(r"foreach=True"),
    ),
    (
        "attention advice for a run without attention",
        lambda r: _value(r, "attention") == "none",
        re.compile(r"flash attention|Q, K and V|QKV|scaled_dot_product_attention"),
    ),
    (
        "torch.compile for a compiled run",
        lambda r: bool(set(_value(r, "compiled") or []) & {"torch_compile", "engine_managed"}),
        re.compile(r"torch\.compile\(|: torch\.compile,|max-autotune"),
    ),
    (
        "torch.compile / reduce-overhead for a serving engine",
        lambda r: _value(r, "engine") in ("vllm", "sglang", "tensorrt_llm"),
        NOT_ENGINE,
    ),
    (
        "NVIDIA tools for an AMD GPU",
        lambda r: _value(r, "vendor") == "amd",
        re.compile(r"nccl-tests|nvidia-smi|NVLink/InfiniBand"),
    ),
    (
        "AMD tools for an NVIDIA GPU",
        lambda r: _value(r, "vendor") == "nvidia",
        re.compile(r"rccl-tests|amd-smi|xGMI/InfiniBand"),
    ),
]


def contradictions(res: dict[str, Any]) -> list[str]:
    """Given recommendations of a class the run facts rule out, as 'class: advice'."""
    run = res.get("run") or {}
    out = []
    for f in res.get("findings") or []:
        for rec in f.get("recommendations") or []:
            for what, applies, rx in CLASSES:
                if applies(run) and rx.search(rec):
                    out.append(f"{f['rule']}: {what}: {rec[:90]}")
    return out


CORPUS = corpus_kineto_files()


@requires_corpus
@pytest.mark.corpus
@pytest.mark.parametrize("path", CORPUS or [None], ids=[corpus_id(p) for p in CORPUS] or ["none"])
def test_no_recommendation_contradicts_the_run_facts(path: Path | None) -> None:
    if path is None:
        pytest.skip("no corpus")
    bad = contradictions(_result(path))
    assert not bad, bad


def test_the_contradiction_classes_catch_what_they_name() -> None:
    """Without conditions these are the recommendations the classes must catch."""
    res = {
        "run": {
            "mode": {"value": "inference"},
            "matrix_dtypes": {"value": {"shares": {"bf16": 100.0}, "dominant": "bf16"}},
            "optimizer": {"value": {"class": "SGD", "impl": "foreach"}},
            "attention": {"value": "none"},
            "compiled": {"value": ["torch_compile", "cuda_graphs", "engine_managed"]},
            "engine": {"value": "vllm"},
            "vendor": {"value": "amd"},
        },
        "findings": [
            {
                "rule": "x",
                "recommendations": [
                    "Python garbage collection: gc.freeze() after model set-up.",
                    "Run fp32 matmuls in bf16 where the model tolerates it.",
                    "Use a fused or multi-tensor optimizer (AdamW(fused=True) or foreach=True).",
                    'Let the compiler pick better kernels: torch.compile(mode="max-autotune").',
                    "Check the fabric: compare with nccl-tests.",
                    "Make GEMMs tensor-core friendly: fuse QKV projections.",
                ],
            }
        ],
    }
    got = {c.split(": ")[1] for c in contradictions(res)}
    assert got == {w for w, _, _ in CLASSES} - {
        "'batch requests' for training",
        "TF32 advice without fp32 matmuls",
        "AMD tools for an NVIDIA GPU",
    }
