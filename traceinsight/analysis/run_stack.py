"""Run facts about the software stack: mode, engine or framework, optimizer, parallelism,
compile state and attention implementation, each from event names (:mod:`.run_facts`)."""

from __future__ import annotations

import re
from typing import Any

from traceinsight.analysis.run_names import UNKNOWN, Fact, Names, _show, unknown

# --- mode --------------------------------------------------------------------------------------

BACKWARD_OP = re.compile(r"Backward|^autograd::engine::evaluate_function|AccumulateGrad")
#: ranges (NVTX, record_function) of a backward pass: autograd's own, or a range named so
BACKWARD_RANGE = re.compile(
    r"Backward|^autograd::engine::evaluate_function|AccumulateGrad|\bbackward\b", re.IGNORECASE
)
OPTIMIZER = re.compile(r"^(?:Optimizer|optimizer)\.(?:step|zero_grad)")
#: sharded / engine-managed training whose forward half alone is still training
TRAINING_MARKERS = re.compile(
    r"^FSDP::|FullyShardedDataParallel|RegisterPostBackwardFunction|DeepSpeedEngine|"
    r"deepspeed/runtime/engine\.py.*(?:backward|step)|megatron/core/pipeline_parallel|"
    r"megatron/training/training\.py|torchtitan/train|lightning/.*training_step|"
    r"pytorch_lightning/.*training_step",
)
#: kernels only a backward pass runs (a GPU-only capture)
BACKWARD_KERNEL = re.compile(
    r"_backward|backward_|bn_bw|wgrad|dgrad|igemm_bwd|igemm_wrw|BackwardKernel|_bwd_", re.I
)
#: benchmark harnesses: PARAM annotations, torch.utils.benchmark, timeit, test/bench scripts
BENCHMARK = re.compile(
    r"^\[param\||torch/utils/benchmark|timeit\.py|(?:^|/)(?:test_|bench)[\w]*\.py\(\d+\)|"
    r"(?:^|/)\w*benchmark\w*\.py\(\d+\)|\|warmup\||\|measure\|",
)
INFERENCE_ENGINES = {"vllm", "sglang", "tensorrt_llm", "hf_pipeline", "hf_generate", "diffusers"}


def mode_fact(n: Names, engine: str | None = None) -> Fact:
    if not len(n.ops) and not len(n.ranges) and not len(n.frames):
        bwd_k = n.any(BACKWARD_KERNEL, "kernels")
        if bwd_k:
            return Fact(
                "training",
                "GPU-only capture; backward kernels " + _show(bwd_k, unit="ns"),
                "low",
            )
        return unknown("no CPU ops recorded (a GPU-only capture) and no backward kernels")
    bwd = n.any(BACKWARD_OP, "ops")
    opt = n.any(OPTIMIZER, "ops", "ranges")
    marks = n.any(TRAINING_MARKERS, "ops", "ranges", "frames")
    bench = n.any(BENCHMARK, "ranges", "frames")
    if opt:
        ev = "optimizer " + _show(opt) + ("; backward " + _show(bwd) if bwd else "")
        return Fact("training", ev)
    if marks:
        return Fact("training", "training framework " + _show(marks), "medium")
    if bench:
        what = "forward+backward" if bwd else "forward only"
        return Fact("benchmark", f"benchmark harness {_show(bench)}; {what}, no optimizer step")
    if bwd:
        return Fact(
            "benchmark",
            "backward " + _show(bwd) + " but no optimizer step (a forward+backward measurement)",
            "medium",
        )
    ev = "no backward or optimizer ops (forward only)"
    if engine in INFERENCE_ENGINES:
        ev += f"; {engine} serving/generation frames"
    return Fact("inference", ev, "high" if engine in INFERENCE_ENGINES else "medium")


def runs_backward(n: Names) -> bool:
    """Forward+backward work (FLOPs of a training step), whether or not an optimizer steps."""
    if n.any(BACKWARD_OP, "ops") or n.any(OPTIMIZER, "ops", "ranges"):
        return True
    if n.any(TRAINING_MARKERS, "ops", "ranges", "frames") or n.any(BACKWARD_RANGE, "ranges"):
        return True
    # no framework op recorded (a GPU-only capture, or Nsight without emit_nvtx): kernels only
    # a backward pass runs
    framework = any(str(k).startswith("aten::") for k in n.ops.index)
    return not framework and bool(n.any(BACKWARD_KERNEL, "kernels"))


# --- engine / framework ------------------------------------------------------------------------

ENGINES: tuple[tuple[str, re.Pattern[str], tuple[str, ...]], ...] = (
    ("vllm", re.compile(r"^vllm::|(?:^|/)vllm/"), ("ops", "frames", "ranges")),
    ("sglang", re.compile(r"^sglang|(?:^|/)sglang/|^sgl_kernel"), ("ops", "frames", "ranges")),
    (
        "tensorrt_llm",
        re.compile(r"(?:^|/)tensorrt_llm/|^trtllm|TensorRT-LLM", re.I),
        ("ops", "frames", "ranges"),
    ),
    (
        "torchrec",
        re.compile(r"(?:^|/)torchrec/|all2all_data:kjt|^fbgemm::|split_embedding_codegen"),
        ("ops", "frames", "ranges", "kernels"),
    ),
    ("diffusers", re.compile(r"(?:^|/)diffusers/"), ("frames",)),
    ("hf_pipeline", re.compile(r"(?:^|/)transformers/pipelines/"), ("frames",)),
    ("hf_generate", re.compile(r"(?:^|/)transformers/generation/"), ("frames",)),
    ("megatron", re.compile(r"(?:^|/)megatron/"), ("frames", "ranges")),
    ("deepspeed", re.compile(r"(?:^|/)deepspeed/|DeepSpeed"), ("frames", "ranges", "ops")),
    ("torchtitan", re.compile(r"(?:^|/)torchtitan/"), ("frames",)),
    ("lightning", re.compile(r"(?:^|/)(?:pytorch_)?lightning/"), ("frames", "ranges")),
    (
        "thunder",
        re.compile(r"(?:^|/)thunder/|nvfuser|CudaCodeGen|^nvFusion", re.I),
        ("frames", "ops", "kernels", "ranges"),
    ),
)
TORCH_OP = re.compile(r"^aten::|^c10d::|^torch::|^autograd::|^ProfilerStep#")


def engine_fact(n: Names, fmt: str) -> Fact:
    found = []
    for name, rx, where in ENGINES:
        hits = n.any(rx, *where)
        if hits:
            found.append((name, hits))
    if found:
        name, hits = found[0]
        also = [f for f, _ in found[1:]]
        ev = _show(hits, 2) + (f" (also {', '.join(also)})" if also else "")
        return Fact(name, ev)
    torch_ops = n.any(TORCH_OP, "ops", "ranges")
    if torch_ops:
        return Fact(
            "plain_pytorch", "PyTorch ops only, no framework frames: " + _show(torch_ops, 2)
        )
    if not len(n.kernels):
        return unknown("no GPU kernels and no framework ops")
    if fmt == "nsys" or len(n.runtime):
        return Fact("cuda_program", "GPU runtime calls and kernels without PyTorch ops", "low")
    return unknown("a GPU-only capture: no CPU ops or frames name the framework")


# --- optimizer ---------------------------------------------------------------------------------

OPT_CLASS = re.compile(r"^(?:Optimizer|optimizer)\.step#(\w+)\.step")
FUSED = re.compile(
    r"_fused_adam|_fused_sgd|_fused_adagrad|FusedAdam|FusedSGD|FusedLAMB|fused_adam|"
    r"multi_tensor_adam|FusedAdamMathFunctor",
    re.I,
)
FOREACH = re.compile(r"^aten::_foreach_(?!norm)")
EIGHT_BIT = re.compile(r"8bit|kOptimizerStatic8bit|kOptimizer32bit2State|bnb", re.I)
SPARSE_FUSED = re.compile(r"split_embedding_backward_codegen_(\w+?)_")


def optimizer_fact(n: Names) -> Fact:
    classes = sorted(
        {
            m.group(1)
            for name, _ in n.any(OPT_CLASS, "ops", "ranges")
            if (m := OPT_CLASS.search(name))
        }
    )
    sparse = sorted(
        {
            m.group(1)
            for name, _ in n.any(SPARSE_FUSED, "kernels")
            if (m := SPARSE_FUSED.search(name))
        }
    )
    if not classes and not sparse:
        return unknown("no Optimizer.step ranges or optimizer kernels")
    fused = n.any(FUSED, "ops", "kernels", "ranges")
    eight = n.any(EIGHT_BIT, "ops", "kernels", "ranges")
    foreach = n.any(FOREACH, "ops")
    if any(FUSED.search(c) for c in classes) or fused:
        impl, ev = "fused", _show(fused) or ", ".join(classes)
    elif eight or any("8bit" in c.lower() for c in classes):
        impl, ev = "8bit", _show(eight) or ", ".join(classes)
    elif foreach:
        impl, ev = "foreach", _show(foreach)
    elif len(n.ops) > 0 and classes:
        impl, ev = "for-loop", "no _foreach or fused optimizer ops recorded"
    else:
        impl, ev = UNKNOWN, "implementation not recorded"
    value = {"class": "+".join(classes) or UNKNOWN, "impl": impl}
    if sparse:
        value["sparse"] = "fused in the embedding backward (" + ", ".join(sparse) + ")"
    steps = _show(n.any(OPT_CLASS, "ranges", "ops"), 2)
    conf = "high" if impl in ("fused", "foreach", "8bit") else "medium"
    return Fact(value, "; ".join(x for x in (steps, ev) if x), conf)


# --- parallelism -------------------------------------------------------------------------------

PARALLEL: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("ddp", re.compile(r"DistributedDataParallel|ddp\.reducer|^torch::distributed::reducer")),
    ("fsdp2", re.compile(r"torch/distributed/(?:_composable/fsdp|fsdp/_fully_shard)")),
    ("fsdp", re.compile(r"^FSDP::|FullyShardedDataParallel|RegisterPostBackwardFunction")),
    ("zero", re.compile(r"deepspeed/runtime/zero|DeepSpeedZeroOptimizer|ZeRO")),
    (
        "tp",
        re.compile(
            r"tensor_model_parallel|ColumnParallelLinear|RowParallelLinear|"
            r"torch/distributed/tensor/parallel"
        ),
    ),
    ("pp", re.compile(r"pipeline_parallel|torch/distributed/pipelining|PipelineStage")),
    ("cp", re.compile(r"context_parallel|ring_attention", re.I)),
)
COLL_OP = re.compile(r"^(?:nccl|rccl|gloo):(\w+)|^c10d::(\w+)")
A2A = re.compile(r"all_?to_?all|alltoall", re.I)
SENDRECV = re.compile(r"send|recv", re.I)


def parallelism_fact(n: Names, ranks: list[dict[str, Any]], pg_names: list[str]) -> Fact:
    found: list[str] = []
    ev: list[str] = []
    for name, rx in PARALLEL:
        hits = n.any(rx, "ops", "ranges", "frames")
        if hits and not (name == "fsdp" and "fsdp2" in found):
            found.append(name)
            ev.append(_show(hits, 1))
    for pg in pg_names:
        low = pg.lower()
        for tag in ("tp", "pp", "ep", "cp"):
            if re.search(rf"(?:^|[_:\-]){tag}(?:$|[_:\-\d])", low) and tag not in found:
                found.append(tag)
                ev.append(f"process group {pg}")
    worlds = [w for w in (_world(r) for r in ranks) if w]
    world = max(worlds) if worlds else None
    if world == 1:  # wrappers of a degree-1 group (vLLM's tensor_model_parallel_* at tp=1)
        keep = [(f, e) for f, e in zip(found, ev) if f not in ("tp", "pp", "cp", "ep")]
        found, ev = [f for f, _ in keep], [e for _, e in keep]
    colls = n.any(COLL_OP, "ops", "ranges")
    comm_k = n.any(re.compile(r"^nccl|^rccl|ncclDevKernel|ncclKernel", re.I), "kernels")
    if colls and any(A2A.search(c) for c, _ in colls) and "ep" not in found:
        found.append("all_to_all")
        ev.append(_show([c for c in colls if A2A.search(c[0])], 1))
    if found:
        return Fact(found, "; ".join(ev) + (f"; world_size {world}" if world else ""))
    if colls or comm_k:
        return unknown(
            "collectives "
            + _show(colls or comm_k, 2)
            + " but no DDP/FSDP/ZeRO/TP/PP markers"
            + (f"; world_size {world}" if world else "")
        )
    if len(ranks) > 1:
        return unknown(f"{len(ranks)} ranks recorded but no collectives or parallel markers")
    return Fact(
        ["none"],
        "no collectives, no parallel-wrapper ops" + (f"; world_size {world}" if world else ""),
        "medium",
    )


def _world(r: dict[str, Any]) -> int | None:
    d = r.get("distributed") or r.get("distributed_info") or {}
    w = d.get("world_size") if isinstance(d, dict) else None
    return w if isinstance(w, int) else None


# --- compile state, attention ------------------------------------------------------------------

COMPILED = re.compile(
    r"CompiledFunction|Torch-Compiled Region|CompiledFxGraph|^Inductor|"
    r"torch/_inductor/"
)
INDUCTOR_KERNEL = re.compile(r"^triton_(?:poi|red|per|tem)_")
GRAPH_CALL = re.compile(
    r"^(?:cuda|hip)Graph(?:Launch|Instantiate)|StreamBeginCapture|"
    r"CUDAGraphNode\.record|CUDAGraph\.replay|^capture_\d+"
)


def compiled_fact(n: Names, engine: str) -> Fact:
    out, ev = [], []
    comp = n.any(COMPILED, "ops", "ranges") or n.any(COMPILED, "frames")
    ind = n.any(INDUCTOR_KERNEL, "kernels")
    if comp or ind:
        out.append("torch_compile")
        ev.append(_show(comp, 2) if comp else "inductor kernels " + _show(ind, 2, unit=""))
    graphs = n.any(GRAPH_CALL, "runtime", "ranges", "ops")
    if graphs or n.graph_kernels:
        out.append("cuda_graphs")
        ev.append(_show(graphs, 2) or f"{n.graph_kernels} kernels launched from graphs")
        if engine in ("vllm", "sglang", "tensorrt_llm"):
            out.append("engine_managed")
            ev.append(f"{engine} captures and replays the graphs")
    if not len(n.kernels) and not len(n.ops):
        return unknown("no kernels or ops")
    if not out:
        if not len(n.ops) and not len(n.runtime):
            return unknown("GPU-only capture: compile state not recorded")
        return Fact(["eager"], "no compiled-region ops, inductor kernels or graph launches")
    return Fact(out, "; ".join(ev))


ATTENTION: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("sage", re.compile(r"sage_?(?:attn|fwd|attention)|SageAttention", re.I)),
    ("flashinfer", re.compile(r"flashinfer", re.I)),
    ("xformers", re.compile(r"xformers|fmha_cutlass|cutlassF_", re.I)),
    ("triton-unified", re.compile(r"unified_attention", re.I)),
    ("paged", re.compile(r"paged_?attention|PagedAttention", re.I)),
    (
        "flash",
        re.compile(
            r"flash_?attn|flash_fwd|flash_bwd|_flash_attention|fmha|FmhaBatchPrefill|"
            r"^attn_fwd|^_attn_fwd|mha_fwd|mha_batch_prefill",
            re.I,
        ),
    ),
    ("sdpa-efficient", re.compile(r"efficient_attention|mem_efficient|fmha_cutlassF", re.I)),
    ("sdpa-cudnn", re.compile(r"cudnn_attention|cudnn.*(?:sdpa|flash)", re.I)),
    ("math", re.compile(r"_scaled_dot_product_attention_math")),
)


def attention_fact(n: Names) -> Fact:
    best: tuple[float, str, str] | None = None
    for name, rx in ATTENTION:
        hits = n.any(rx, "kernels")
        t = sum(c for _, c in hits)
        if hits and (best is None or t > best[0]):
            best = (t, name, "kernels " + _show(hits, 2, unit=""))
    if best is None:
        for name, rx in ATTENTION:
            hits = n.any(rx, "ops")
            if hits:
                best = (0.0, name, "ops " + _show(hits, 2))
                break
    if best is not None:
        return Fact(best[1], best[2])
    if not len(n.kernels):
        return unknown("no GPU kernels")
    return Fact("none", "no attention ops or kernels", "medium")
