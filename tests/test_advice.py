"""Every shipped recommendation states when it applies: a case where it is given and one where
it is withheld, on the run facts (``when`` / ``unless``) and the metrics (``if``).

:data:`CASES` is written by hand, one line per shipped recommendation (found by a substring of
its text): the overrides of a base run under which it is given, and those under which it is
not. Removing a condition from a rule file makes its "withheld" case fail; a new
recommendation without a case fails :func:`test_every_shipped_recommendation_has_a_case`.
The engine mechanisms (reasons in ``withheld``, the named cause first, load errors) are tested
on MetricSets below.
"""

from __future__ import annotations

from typing import Any

import pytest

from traceinsight.engine.advice import withheld_reason
from traceinsight.engine.evaluate import evaluate, load_rules, parse_rule
from traceinsight.errors import ConfigError
from traceinsight.metrics import MetricSet

RULES = {r.id: r for r in load_rules()}

#: a DDP training run on an NVIDIA GPU, fp32 matmuls, eager, SGD without foreach
BASE_RUN: dict[str, Any] = {
    "mode": "training",
    "engine": "plain_pytorch",
    "vendor": "nvidia",
    "matrix_dtypes.dominant": "fp32",
    "matrix_dtypes.fp32_share": 100.0,
    "matrix_dtypes.wide_share": 100.0,
    "matrix_dtypes.low_precision_share": 0.0,
    "optimizer.class": "SGD",
    "optimizer.impl": "for-loop",
    "parallelism": ["ddp"],
    "compiled": ["eager"],
    "attention": "math",
    "comm_dtype": ["fp32"],
    "dataloader.workers": "0",
    "dataloader.h2d": "pageable",
}
#: metric values under which every metric condition of the base case holds
BASE_VALUES: dict[str, float] = {
    "is_serving": 0.0,
    "comm_all_to_all_pct": 10.0,
    "comm_all_reduce_pct": 90.0,
    "device_bf16_tflops": 312.0,
    "device_tf32_tflops": 156.0,
    "device_fp16_tflops": 312.0,
    "device_fp8_tflops": 0.0,
    "memcpy_exposed_pageable_pct": 20.0,
    "memcpy_exposed_host_pct": 20.0,
    "memcpy_exposed_pinned_pct": 20.0,
    "memcpy_exposed_d2h_pct": 20.0,
    "memcpy_exposed_d2d_pct": 20.0,
    "memcpy_exposed_peer_pct": 20.0,
    "idle_unknown_pct": 10.0,
    "idle_device_wait_pct": 10.0,
    "idle_alloc_pct": 10.0,
    "idle_host_busy_pct": 10.0,
    "bf16_speedup_ratio": 16.0,
    "fp16_speedup_ratio": 8.0,
    "tf32_speedup_ratio": 8.0,
    "fp8_speedup_ratio": 2.0,
    "memory_preallocated": 0.0,
    "idle_capture_pct": 50.0,
    "idle_compile_pct": 50.0,
    "longest_wait_pct": 50.0,
    "steps_representative": 5.0,
}
INFER = {"mode": "inference"}
VLLM = {"engine": "vllm", "mode": "inference"}
AMD = {"vendor": "amd"}
BF16 = {
    "matrix_dtypes.dominant": "bf16",
    "matrix_dtypes.fp32_share": 0.0,
    "matrix_dtypes.wide_share": 0.0,
    "matrix_dtypes.low_precision_share": 100.0,
}
NO_BF16 = {"device_bf16_tflops": 0.0}
PRE = {"memory_preallocated": 1.0}

#: (rule, variant, unique text substring) -> (overrides where given, overrides where withheld)
CASES: dict[tuple[str, str, str], tuple[dict[str, Any], dict[str, Any]]] = {
    ("comm-bound", "", "Overlap gradient reduction"): ({}, {"parallelism": ["all_to_all"]}),
    # the skew-or-transport reading: one rank, bus bandwidth far below the fabric
    ("comm-bound", "", "Read the bandwidth before the volume"): (
        {"comm_busbw_fabric_pct": 3.0, "ranks_analysed": 1.0},
        {"comm_busbw_fabric_pct": 3.0, "ranks_analysed": 8.0},
    ),
    # CPU-only runs
    ("cpu-input-bound", "", "Load in background"): ({}, {"dataloader.workers": "multi"}),
    ("cpu-input-bound", "", "already uses worker processes"): ({"dataloader.workers": "multi"}, {}),
    ("cpu-matmul-bound", "", "and torch.compile."): ({}, {"compiled": ["torch_compile"]}),
    ("cpu-matmul-bound", "", "the model is already compiled"): (
        {"compiled": ["torch_compile"]},
        {},
    ),
    ("cpu-python-overhead", "", "torch.compile removes interpreter"): (
        {},
        {"compiled": ["torch_compile"]},
    ),
    ("cpu-python-overhead", "", "look for graph breaks"): ({"compiled": ["torch_compile"]}, {}),
    ("cpu-sync", "", "Read scalars back less often"): ({}, {"mode": "inference"}),
    ("cpu-sync", "", "Read results back less often"): ({"mode": "inference"}, {}),
    # fragmentation from the allocator's history (PyTorch's allocator, not an engine's)
    ("fragmentation", "history-cache", "Nothing to fix for fragmentation"): ({}, VLLM),
    ("fragmentation", "history-failed-request", "segments grow in place, so the free pieces"): (
        {},
        VLLM,
    ),
    ("fragmentation", "history-failed-request", "Allocate the largest buffers first"): ({}, VLLM),
    ("fragmentation", "history-failed-request", "max_split_size_mb"): ({}, VLLM),
    ("fragmentation", "history-segments-despite-free", "instead of new ones being reserved"): (
        {},
        VLLM,
    ),
    ("fragmentation", "history-segments-despite-free", "Avoid size churn at"): ({}, VLLM),
    # Nsight inputs get nsys flags
    ("not-representative", "", "Record steady-state iterations with Nsight"): (
        {"input_nsys": 1.0, "program_pytorch": 1.0},
        {"input_nsys": 0.0, "program_pytorch": 1.0},
    ),
    # a program without PyTorch (an Nsight capture of a C/CUDA program): CUDA API advice
    ("not-representative", "", "iterations of the program with Nsight"): (
        {"input_nsys": 1.0, "program_pytorch": 0.0},
        {"input_nsys": 1.0, "program_pytorch": 1.0},
    ),
    ("exposed-memcpy", "", "Host copies from pageable memory"): (
        {"program_pytorch": 0.0},
        {"program_pytorch": 1.0},
    ),
    ("exposed-memcpy", "", "Copies from pinned host memory"): (
        {"program_pytorch": 0.0},
        {"program_pytorch": 1.0},
    ),
    ("exposed-memcpy", "", "read results back every iteration"): (
        {"program_pytorch": 0.0},
        {"program_pytorch": 1.0},
    ),
    ("exposed-memcpy", "", "Copies within the GPU"): (
        {"program_pytorch": 0.0},
        {"program_pytorch": 1.0},
    ),
    # serving: each engine's own settings
    ("serving-decode-bandwidth-bound", "", 'vLLM `quantization="fp8"`, or AWQ'): (
        {"serving_engine_vllm": 1.0},
        {"serving_engine_vllm": 0.0},
    ),
    ("serving-decode-bandwidth-bound", "", "SGLang `--quantization fp8` (or an AWQ"): (
        {"serving_engine_sglang": 1.0},
        {"serving_engine_sglang": 0.0},
    ),
    ("serving-decode-bandwidth-bound", "", "int8/fp8 (or int4) weight quantisation"): (
        {"serving_engine_vllm": 0.0, "serving_engine_sglang": 0.0},
        {"serving_engine_vllm": 1.0, "serving_engine_sglang": 0.0},
    ),
    ("serving-decode-bandwidth-bound", "", "vLLM `kv_cache_dtype"): (
        {"serving_engine_vllm": 1.0},
        {"serving_engine_vllm": 0.0},
    ),
    ("serving-decode-bandwidth-bound", "", "SGLang `--kv-cache-dtype"): (
        {"serving_engine_sglang": 1.0},
        {"serving_engine_sglang": 0.0},
    ),
    ("serving-decode-bandwidth-bound", "", "raise vLLM `max_num_seqs`"): (
        {"serving_engine_vllm": 1.0},
        {"serving_engine_vllm": 0.0},
    ),
    ("serving-decode-bandwidth-bound", "", "raise SGLang `--max-running-requests`"): (
        {"serving_engine_sglang": 1.0},
        {"serving_engine_sglang": 0.0},
    ),
    ("serving-decode-latency-bound", "", "vLLM: drop `enforce_eager"): (
        {"serving_engine_vllm": 1.0, "serving_graph_launches": 0.0},
        {"serving_engine_vllm": 1.0, "serving_graph_launches": 12.0},
    ),
    ("serving-decode-latency-bound", "", "SGLang: drop `--disable-cuda-graph`"): (
        {"serving_engine_sglang": 1.0, "serving_graph_launches": 0.0},
        {"serving_engine_sglang": 1.0, "serving_graph_launches": 12.0},
    ),
    ("serving-decode-latency-bound", "", "vLLM: the batch sizes that run"): (
        {"serving_engine_vllm": 1.0, "serving_graph_launches": 12.0},
        {"serving_engine_vllm": 1.0, "serving_graph_launches": 0.0},
    ),
    ("serving-decode-latency-bound", "", "SGLang: the batch sizes that run"): (
        {"serving_engine_sglang": 1.0, "serving_graph_launches": 12.0},
        {"serving_engine_sglang": 1.0, "serving_graph_launches": 0.0},
    ),
    ("serving-decode-latency-bound", "", "vLLM/SGLang pick them per backend"): (VLLM, {}),
    ("serving-decode-latency-bound", "", "CUDA graphs of the decode step"): ({}, VLLM),
    ("serving-decode-latency-bound", "", "raise vLLM `max_nu"): (
        {"serving_engine_vllm": 1.0},
        {"serving_engine_vllm": 0.0},
    ),
    ("serving-decode-latency-bound", "", "raise SGLang `--ma"): (
        {"serving_engine_sglang": 1.0},
        {"serving_engine_sglang": 0.0},
    ),
    ("serving-jitter", "", "vLLM: long prompts batched"): (
        {"serving_engine_vllm": 1.0},
        {"serving_engine_vllm": 0.0},
    ),
    ("serving-jitter", "", "SGLang: a smaller `--chunked-prefill-size`"): (
        {"serving_engine_sglang": 1.0},
        {"serving_engine_sglang": 0.0},
    ),
    ("serving-jitter", "", "Batch sizes outside the captured"): (
        {"compiled": ["cuda_graphs"]},
        {"compiled": ["eager"]},
    ),
    ("serving-prefill-compute-bound", "", 'vLLM `quantization="fp8"` on a GPU'): (
        {"serving_engine_vllm": 1.0},
        {"serving_engine_vllm": 0.0},
    ),
    ("serving-prefill-compute-bound", "", "SGLang `--quantization fp8` on a GPU"): (
        {"serving_engine_sglang": 1.0},
        {"serving_engine_sglang": 0.0},
    ),
    ("serving-prefill-compute-bound", "", "vLLM `enable_chunked"): (
        {"serving_engine_vllm": 1.0},
        {"serving_engine_vllm": 0.0},
    ),
    ("serving-prefill-compute-bound", "", "SGLang `--chunked-pr"): (
        {"serving_engine_sglang": 1.0},
        {"serving_engine_sglang": 0.0},
    ),
    ("serving-scheduler-gaps", "", "vLLM: overlap scheduling"): (
        {"serving_engine_vllm": 1.0},
        {"serving_engine_vllm": 0.0},
    ),
    ("serving-scheduler-gaps", "", "SGLang: keep the overlap scheduler"): (
        {"serving_engine_sglang": 1.0},
        {"serving_engine_sglang": 0.0},
    ),
    ("serving-scheduler-gaps", "", "Larger batches amortise"): (INFER, {}),
    # arrival skew: what the last rank did before it arrived
    ("straggler", "arrival-skew", "computes longer before it arrives"): (
        {"straggler_before_compute_pct": 80.0},
        {"straggler_before_compute_pct": 10.0},
    ),
    ("straggler", "arrival-skew", "idles waiting for its CPU"): (
        {"straggler_before_host_pct": 60.0},
        {"straggler_before_host_pct": 5.0},
    ),
    ("straggler", "arrival-skew", "waits for input before it arrives"): (
        {"straggler_before_input_pct": 60.0},
        {"straggler_before_input_pct": 5.0},
    ),
    ("straggler", "arrival-skew", "faster links, gradient compression"): ({}, INFER),
    ("straggler", "arrival-skew", "check that every rank gets the same batch"): (INFER, {}),
    ("comm-bound", "", "Communicate less often"): ({}, INFER),
    ("comm-bound", "", "communicate them in bf16"): ({}, {"comm_dtype": ["bf16"]}),
    ("comm-bound", "", "Hide the all-to-all"): ({"comm_all_to_all_pct": 60.0}, {}),
    ("comm-bound", "", "with nccl-tests"): ({}, AMD),
    ("comm-bound", "", "with rccl-tests"): (AMD, {}),
    ("comm-bound", "", "vendor's collective benchmark"): ({"vendor": "unknown"}, AMD),
    ("comm-bound", "", "tensor/sequence parallelism"): ({"parallelism": ["tp"]}, {}),
    ("compute-bound", "", "matmuls in bf16 where"): ({}, BF16),
    ("compute-bound", "", "Allow TF32 tensor cores"): ({}, {"matrix_dtypes.fp32_share": 0.0}),
    ("compute-bound", "", "train fp32 matmuls in fp16"): (NO_BF16, {**NO_BF16, **INFER}),
    ("compute-bound", "", "run fp32 matmuls in fp16"): ({**NO_BF16, **INFER}, NO_BF16),
    ("compute-bound", "", "fp8 GEMMs"): (
        {**BF16, "device_fp8_tflops": 990.0},
        {"device_fp8_tflops": 990.0},
    ),
    ("compute-bound", "", "tensor-core friendly"): (BF16, {}),
    ("compute-bound", "", "Fuse the Q, K and V"): ({}, {"attention": "none"}),
    ("compute-bound", "", "max-autotune"): ({}, {"compiled": ["torch_compile"]}),
    ("compute-bound", "", "The engine picks the kernels"): (VLLM, {}),
    ("exposed-memcpy", "", "Pageable host copies"): ({}, {"memcpy_exposed_pageable_pct": 0.0}),
    ("exposed-memcpy", "", "whether the host buffers are pinned"): (
        {},
        {"memcpy_exposed_host_pct": 0.0},
    ),
    ("exposed-memcpy", "", "Pinned host copies"): ({}, {"memcpy_exposed_pinned_pct": 0.0}),
    ("exposed-memcpy", "", "Keep results on the device"): ({}, {"memcpy_exposed_d2h_pct": 0.0}),
    ("exposed-memcpy", "", "Device-to-device copies"): ({}, {"memcpy_exposed_d2d_pct": 0.0}),
    ("exposed-memcpy", "", "gradient_as_bucket_view"): ({}, {"parallelism": ["fsdp"]}),
    ("exposed-memcpy", "", "Peer copies"): ({}, {"memcpy_exposed_peer_pct": 0.0}),
    ("fragmentation", "", "expandable_segments:True (PyTorch"): ({}, VLLM),
    ("fragmentation", "", "Avoid many differently sized"): ({}, VLLM),
    ("fragmentation", "", "If the gap is cache"): ({}, VLLM),
    ("fragmentation", "", "To see which blocks"): ({}, VLLM),
    ("fragmentation", "snapshot-stranded", "expandable_segments:True (PyTorch"): ({}, VLLM),
    ("fragmentation", "snapshot-stranded", "Without expandable segments"): ({}, VLLM),
    ("fragmentation", "snapshot-cache", "Release the cache"): ({}, VLLM),
    ("fragmentation", "snapshot-cache", "maps and unmaps"): ({}, VLLM),
    ("gpu-idle", "", "Follow the more specific"): ({}, {"idle_unknown_pct": 80.0}),
    ("gpu-idle", "", "Idle with work queued"): ({}, {"idle_device_wait_pct": 0.0}),
    ("gpu-idle", "", "batch requests"): (INFER, {}),
    ("gpu-idle", "", "record a longer window"): ({"idle_unknown_pct": 80.0}, {}),
    ("host-stall", "", "bypass the caching allocator"): ({}, {"idle_alloc_pct": 0.0}),
    ("host-stall", "", "gc.freeze()"): ({}, INFER),
    ("host-stall", "", "checkpoint saving"): ({}, INFER),
    ("host-stall", "", "belongs in the DataLoader workers"): ({}, {"mode": "benchmark"}),
    ("host-stall", "", "Between requests or calls"): (INFER, {}),
    ("host-sync", "", "Remove per-step .item()"): ({}, VLLM),
    ("host-sync", "", "set_sync_debug_mode"): ({}, VLLM),
    ("host-sync", "", "Replace torch.cuda.synchronize()"): ({}, VLLM),
    ("host-sync", "", "serving engine syncs"): (VLLM, {}),
    ("input-bound", "", "Load in worker processes"): ({}, {"dataloader.workers": "multi"}),
    ("input-bound", "", "already uses worker processes"): ({"dataloader.workers": "multi"}, {}),
    ("input-bound", "", "Use pin_memory=True"): ({}, {"dataloader.h2d": "pinned"}),
    ("input-bound", "", "Move decoding/augmentation"): ({}, VLLM),
    ("jitter", "", "exposed communication to the network"): ({}, INFER),
    ("jitter", "", "prefill against decode"): (INFER, {}),
    ("jitter", "", "Periodic host pauses"): ({}, INFER),
    ("jitter", "", "varying shapes trigger recompilations"): ({"compiled": ["torch_compile"]}, {}),
    ("jitter", "", "nvidia-smi"): ({}, AMD),
    ("jitter", "", "amd-smi"): (AMD, {}),
    ("launch-bound", "", "Capture the step in CUDA graphs"): ({}, {"compiled": ["torch_compile"]}),
    ("launch-bound", "", "The model is compiled but"): (
        {"compiled": ["torch_compile"]},
        {"compiled": ["torch_compile", "cuda_graphs"]},
    ),
    ("launch-bound", "", "vLLM captures CUDA graphs"): (VLLM, {}),
    ("launch-bound", "", "SGLang captures CUDA graphs"): ({"engine": "sglang"}, VLLM),
    ("launch-bound", "", "Fuse the many small kernels"): ({}, {"compiled": ["torch_compile"]}),
    ("launch-bound", "", "AdamW(fused=True) (or Adam"): (
        {"optimizer.class": "AdamW"},
        {"optimizer.class": "FusedAdam", "optimizer.impl": "fused"},
    ),
    ("launch-bound", "", "SGD(foreach=True)"): ({}, {"optimizer.impl": "foreach"}),
    ("launch-bound", "", "fused or multi-tensor optimizer"): (
        {"optimizer.class": "Adagrad"},
        {"optimizer.class": "FusedAdam", "optimizer.impl": "fused"},
    ),
    ("launch-bound", "", "Give each kernel more work"): ({}, VLLM),
    ("launch-bound", "", "Remove Python work"): ({}, {"compiled": ["cuda_graphs"]}),
    ("low-precision-unused", "", "Train with bf16"): ({}, INFER),
    ("low-precision-unused", "", "Run inference in bf16"): (INFER, {}),
    ("low-precision-unused", "", "train with fp16 mixed"): (NO_BF16, {**NO_BF16, **INFER}),
    ("low-precision-unused", "", "run inference in fp16"): ({**NO_BF16, **INFER}, NO_BF16),
    ("low-precision-unused", "", "must stay in fp32"): ({}, {"matrix_dtypes.fp32_share": 0.0}),
    ("low-precision-unused", "", "Once the model runs in 16-bit"): (BF16, {}),
    ("low-precision-unused", "", "Find where the fp32 matrix"): (
        {"matrix_dtypes.low_precision_share": 40.0},
        {},
    ),
    ("low-precision-unused", "", "No matrix kernel runs in 16-bit"): ({}, BF16),
    ("memory-bound", "", "Fuse chains of elementwise"): ({}, {"compiled": ["torch_compile"]}),
    ("memory-bound", "", "AdamW(fused=True) reads"): (
        {"optimizer.class": "AdamW"},
        {"optimizer.class": "SGD"},
    ),
    ("memory-bound", "", "SGD(foreach=True) (or fused"): ({}, {"optimizer.impl": "foreach"}),
    ("memory-bound", "", "Halve the bytes"): ({}, BF16),
    ("memory-bound", "", "Raise arithmetic intensity"): ({}, VLLM),
    ("memory-bound", "", "Use flash attention"): ({}, {"attention": "flash"}),
    ("memory-bound", "", "LLM decode reads every weight"): ({"is_serving": 1.0}, {}),
    ("memory-leak", "", "hold their autograd graph"): ({}, INFER),
    ("memory-leak", "", "A forward-only loop that grows"): (INFER, {}),
    ("memory-leak", "", "Compare two memory snapshots"): ({}, VLLM),
    ("memory-leak", "snapshot-growth", "Compare two snapshots"): ({}, VLLM),
    ("memory-pressure", "", "activation checkpointing"): ({}, INFER),
    ("memory-pressure", "", "Shard or shrink state"): ({}, INFER),
    ("memory-pressure", "", "Smaller micro-batches"): ({}, INFER),
    ("memory-pressure", "", "Shrink the weights"): (INFER, {}),
    ("memory-pressure", "", "If the weights themselves"): (PRE, {}),
    ("memory-pressure", "", "Nothing to fix if the engine"): (PRE, {}),
    ("memory-pressure", "", "see the fragmentation rule"): ({}, PRE),
    ("memory-pressure", "snapshot-capacity", "Trade compute for memory"): ({}, INFER),
    ("memory-pressure", "snapshot-capacity", "smaller micro-batch"): ({}, INFER),
    ("memory-pressure", "snapshot-capacity", "Shard or shrink state"): ({}, INFER),
    ("memory-pressure", "snapshot-capacity", "Shrink the weights"): (INFER, {}),
    ("memory-pressure", "snapshot-capacity", "Nothing to fix"): (PRE, {}),
    ("memory-pressure", "snapshot-capacity", "are stranded between"): ({}, VLLM),
    ("not-representative", "", "Profile steady-state steps"): ({"input_nsys": 0.0}, VLLM),
    ("not-representative", "", "records CUDA/HIP graph capture"): ({}, {"idle_capture_pct": 0.0}),
    ("not-representative", "", "Compilation dominates"): ({}, {"idle_compile_pct": 0.0}),
    ("not-representative", "", "behind a dependency"): ({}, {"longest_wait_pct": 0.0}),
    ("not-representative", "", "Profile the engine after"): (VLLM, {}),
    ("out-of-memory", "", "Reduce the footprint (activation"): ({}, INFER),
    ("out-of-memory", "", "Reduce the footprint: a smaller"): (INFER, {}),
    ("out-of-memory", "", "fix fragmentation"): ({}, VLLM),
    ("out-of-memory", "", "Record a memory snapshot"): ({}, VLLM),
    ("out-of-memory", "snapshot-fragmented", "expandable_segments:True"): ({}, VLLM),
    ("out-of-memory", "snapshot-fragmented", "Without expandable segments"): ({}, VLLM),
    ("out-of-memory", "snapshot-oom", "Trade compute for memory"): ({}, INFER),
    ("out-of-memory", "snapshot-oom", "smaller micro-batch"): ({}, INFER),
    ("out-of-memory", "snapshot-oom", "Shard parameters"): ({}, INFER),
    ("out-of-memory", "snapshot-oom", "Reduce the footprint"): (INFER, {}),
    ("straggler", "", "nvidia-smi"): ({}, AMD),
    ("straggler", "", "amd-smi"): (AMD, {}),
    ("straggler", "", "Balance the work"): ({}, {"mode": "benchmark"}),
    ("straggler", "", "If the straggler moves"): ({}, {"steps_representative": 1.0}),
}
#: recommendations that quote the culprit the evidence names (a snapshot's allocation site):
#: given whenever their variant decides
EVIDENCE_NAMED = {
    ("fragmentation", "snapshot-stranded", "{snapshot_hole_site}"),
    ("fragmentation", "snapshot-stranded", "{snapshot_churn_site}"),
    ("memory-leak", "snapshot-growth", "{snapshot_survivor_site}"),
    ("memory-pressure", "snapshot-capacity", "Start where most memory is live"),
    ("out-of-memory", "snapshot-fragmented", "{snapshot_hole_site}"),
    ("out-of-memory", "snapshot-oom", "Start where most memory is live"),
}


def _text(rule: str, variant: str, key: str) -> Any:
    r = RULES[rule]
    v = next(x for x in [r.base(), *r.variants] if x.name == variant)
    hits = [t for t in v.recommendations if key in t.text]
    assert len(hits) == 1, f"{rule}/{variant}: {key!r} matches {len(hits)} recommendations"
    return hits[0]


def _split(over: dict[str, Any]) -> tuple[dict[str, Any], dict[str, float]]:
    run = {
        **BASE_RUN,
        **{
            k: v
            for k, v in over.items()
            if k in BASE_RUN
            or "." in k
            or k
            in ("mode", "engine", "vendor", "parallelism", "compiled", "attention", "comm_dtype")
        },
    }
    values = {**BASE_VALUES, **{k: v for k, v in over.items() if k not in run}}
    return run, values


def _given(rule: str, variant: str, key: str, over: dict[str, Any]) -> tuple[bool, str | None]:
    t = _text(rule, variant, key)
    run, values = _split(over)
    if not t.applies(values, RULES[rule].threshold_values()):
        return False, "a metric condition does not hold"
    why = withheld_reason(t.facts_when, t.facts_unless, run, {})
    return why is None, why


@pytest.mark.parametrize("case", list(CASES), ids=[f"{r}:{v}:{k[:30]}" for r, v, k in CASES])
def test_each_recommendation_is_given_and_withheld(case: tuple[str, str, str]) -> None:
    given, withheld = CASES[case]
    ok, why = _given(*case, given)
    assert ok, f"not given where it applies: {why}"
    ok, why = _given(*case, withheld)
    assert not ok, "given where it does not apply"


def test_every_shipped_recommendation_has_a_case() -> None:
    keys = set(CASES) | EVIDENCE_NAMED
    missing = []
    for rid, r in RULES.items():
        for v in [r.base(), *r.variants]:
            for t in v.recommendations:
                if not any(k[0] == rid and k[1] == v.name and k[2] in t.text for k in keys):
                    missing.append(f"{rid}/{v.name}: {t.text[:70]}")
    assert not missing, missing


def test_evidence_named_recommendations_quote_their_culprit() -> None:
    for rule, variant, key in EVIDENCE_NAMED:
        t = _text(rule, variant, key)
        assert "{snapshot_" in t.text and not t.facts_when and not t.facts_unless


# --- the engine: withheld with a reason, the named cause first --------------------------------


def _ms(run: dict[str, Any], facts: dict[str, Any] | None = None, **values: float) -> MetricSet:
    ms = MetricSet()
    for k, v in values.items():
        ms.set(k, v)
    ms.evidence["run_values"] = run
    ms.evidence["run"] = facts or {}
    return ms


def _rule(**over: Any) -> Any:
    base = {
        "id": "idle-test",
        "title": "Idle",
        "category": "gpu",
        "fires_if": [{"metric": "gpu_idle_pct", "op": ">=", "value": 10}],
        "thresholds": {},
        "message": "Idle {gpu_idle_pct}.",
        "recommendations": [
            {
                "text": "Use AdamW(fused=True).",
                "when": {"mode": "training"},
                "unless": {"optimizer.impl": ["fused", "foreach"]},
            },
            {"text": "Run in bf16.", "when": {"matrix_dtypes.fp32_share": ">= 10"}},
            "Always this.",
        ],
        "doc": {"symptom": "s", "why": "w", "fix": "f"},
    }
    base.update(over)
    return parse_rule(base, "idle-test.yaml")


def test_withheld_recommendations_say_why() -> None:
    facts = {
        "optimizer": {
            "value": {"class": "SGD", "impl": "foreach"},
            "evidence": "aten::_foreach_add_ x6",
        }
    }
    run = {"mode": "training", "optimizer.impl": "foreach", "matrix_dtypes.fp32_share": 0.0}
    f = evaluate([_rule()], _ms(run, facts, gpu_idle_pct=50.0)).findings[0]
    assert f.recommendations == ["Always this."]
    assert f.withheld == [
        {
            "text": "Use AdamW(fused=True).",
            "reason": "not advised: optimizer.impl is foreach (aten::_foreach_add_ x6)",
        },
        {
            "text": "Run in bf16.",
            "reason": "not advised: matrix_dtypes.fp32_share is 0% (it applies when "
            "matrix_dtypes.fp32_share >= 10)",
        },
    ]
    # an unknown fact does not satisfy `when` (and does not trigger `unless`)
    f = evaluate([_rule()], _ms({}, gpu_idle_pct=50.0)).findings[0]
    assert f.recommendations == ["Always this."]
    assert f.withheld[0]["reason"] == (
        "not advised: mode is unknown (it applies when mode is training)"
    )
    run = {"mode": "training", "optimizer.impl": "for-loop", "matrix_dtypes.fp32_share": 80.0}
    f = evaluate([_rule()], _ms(run, gpu_idle_pct=50.0)).findings[0]
    assert f.recommendations == ["Use AdamW(fused=True).", "Run in bf16.", "Always this."]
    assert f.withheld == []


def test_the_cause_named_by_the_evidence_comes_first() -> None:
    rule = RULES["host-stall"]
    run = {"mode": "inference"}
    for name, expect in (
        ("diffusers/hooks/group_offloading.py(930): _get_group_onload_device", "offload hooks"),
        ("transformers/pipelines/base.py(1290): preprocess", "pipeline pre/post-processing"),
        ("aten::unflatten_dense_tensors", "flatten/unflatten of parameter buffers"),
        ("hipFree (runtime call)", "allocator calls"),
        ("flashinfer/jit/core.py(120): load_cubin", "first-call loading and compilation"),
    ):
        ms = _ms(
            run, steady_state=1.0, idle_host_pct=30.0, idle_host_busy_pct=30.0, idle_alloc_pct=0.0
        )
        ms.evidence["host_stalls"] = [
            {
                "event": "<built-in function next>",
                "count": 8,
                "total_ns": 9_000_000,
                "max_ns": 2_000_000,
            },
            {"event": name, "count": 6, "total_ns": 67_469_589, "max_ns": 15_253_823},
        ]
        f = evaluate([rule], ms).findings[0]
        assert f.cause == {"cause": expect, "culprit": name}, name
        assert f"`{name}`" in f.recommendations[0]
        # the generic advice follows, for this inference run without training advice
        assert any("Between requests" in r for r in f.recommendations[1:])
        assert not any("gc.freeze" in r for r in f.recommendations)
    # no culprit of a known class: the generic advice leads
    ms = _ms(run, steady_state=1.0, idle_host_pct=30.0, idle_host_busy_pct=30.0)
    ms.evidence["host_stalls"] = [
        {"event": "<built-in function next>", "count": 1, "total_ns": 1, "max_ns": 1}
    ]
    f = evaluate([rule], ms).findings[0]
    assert f.cause is None and f.recommendations[0].startswith("Between requests")


def test_a_start_up_window_names_what_it_loads_first() -> None:
    rule = RULES["not-representative"]
    from traceinsight.engine.advice import culprits, first_cause

    names = ["start-up (one-off runtime calls)", "hipLaunchKernel", "hipModuleLoadData"]
    c, name = first_cause(rule.causes, names, {})
    assert (c.name, name) == ("kernel module loading", "hipModuleLoadData")
    c, name = first_cause(rule.causes, ["cudaFree", "cudaLaunchKernel"], {})
    assert c.name == "context creation and first allocation"
    assert first_cause(rule.causes, ["cudaLaunchKernel"], {}) is None
    assert culprits([{"kind": "table", "rows": [["a", 1], [2, "b"]]}]) == ["a"]


def test_a_culprit_name_is_quoted_without_control_characters() -> None:
    ms = _ms({"mode": "training"}, steady_state=1.0, idle_host_pct=30.0, idle_host_busy_pct=30.0)
    ms.evidence["host_stalls"] = [
        {
            "event": "torch/serialization.py(9): save\x1b[31m`x",
            "count": 1,
            "total_ns": 1,
            "max_ns": 1,
        }
    ]
    f = evaluate([RULES["host-stall"]], ms).findings[0]
    assert (
        "\x1b" not in f.recommendations[0]
        and "`torch/serialization.py(9): save [31m'x`" in (f.recommendations[0])
    )


@pytest.mark.parametrize(
    "rec,match",
    [
        ({"text": "x", "when": {"nope": 1}}, "unknown run fact 'nope'"),
        ({"text": "x", "when": {"mode": 3}}, "takes a word"),
        ({"text": "x", "when": {"mode": ">= 3"}}, "is a word, not a share"),
        ({"text": "x", "unless": {"matrix_dtypes.fp32_share": "bf16"}}, "is a share"),
        ({"text": "x", "unless": []}, "unless is a mapping"),
    ],
)
def test_bad_fact_conditions_are_refused_in_one_line(rec: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match) as e:
        _rule(recommendations=[rec])
    assert "\n" not in str(e.value).split(" (hint")[0]


@pytest.mark.parametrize(
    "causes,match",
    [
        ([{"name": "x", "match": "(", "text": "t"}], "no regex"),
        ([{"name": "x", "text": "t"}], "a cause is"),
        ([{"name": "x", "match": "a", "text": "t {nope}"}], "neither a metric"),
    ],
)
def test_bad_causes_are_refused(causes: list[Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        _rule(causes=causes)
