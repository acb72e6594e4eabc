"""Synthetic LLM serving traces with known answers: engine steps (vLLM V1 or SGLang step
annotations, TensorRT-LLM executor ranges, a Hugging Face ``generate`` loop, or CUDA-graph
replays of a graph-mode engine), eager GEMMs with weight shapes and dtypes, paged attention, an
optional fused MoE, and kernels whose times are chosen, so that steps, tokens, bytes per decode
step and floors are known exactly.

``build_serving`` writes one rank's trace and returns the answers (:class:`ServingAnswer`).
Each layer runs four GEMMs (``aten::linear``: QKV, O, gate-up, down; with ``moe_experts`` the
gate-up and down GEMMs are one ``vllm::fused_moe`` op over ``[E, N, K]`` expert weights and a
``[tokens, top-k]`` routing input) and one paged attention op; a step is the prefill (all
prompts), then ``decode_steps`` decode steps of the whole batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracegen.synth import KinetoTraceBuilder

BF16 = "c10::BFloat16"


@dataclass
class ServingAnswer:
    prefill_steps: int
    decode_steps: int
    decode_step_gpu_ns: list[int] = field(default_factory=list)
    prefill_step_gpu_ns: list[int] = field(default_factory=list)
    weight_bytes: int = 0  #: dense weights per step (every weight once)
    moe_bytes_decode: int = 0  #: routed expert weights per decode step
    kv_bytes_per_decode_step: list[int] = field(default_factory=list)
    activation_bytes_decode: int = 0  #: over all decode steps
    decode_tokens: int = 0
    prefill_tokens: int = 0
    gap_ns: int = 0


def _step_name(engine: str, phase: str, batch: int, prompt: int, ctx: int, i: int) -> str:
    if engine == "sglang":
        if phase == "prefill":
            return f"step[EXTEND bs={batch} toks={batch * prompt}]"
        return f"step[DECODE bs={batch}]"
    if engine == "trtllm":
        p, d = (batch, 0) if phase == "prefill" else (0, batch)
        return f"[Executor] _forward_step {i}: {p} ctx reqs, {d} gen reqs"
    if phase == "prefill":
        t = batch * prompt
        pairs = batch * prompt * prompt
        return (
            f"execute_{t}_context_{batch}(sq{t}sk{t}sqsq{pairs}sqsk{pairs})"
            "_generation_0(sq0sk0sqsq0sqsk0)"
        )
    return (
        f"execute_{batch}_context_0(sq0sk0sqsq0sqsk0)"
        f"_generation_{batch}(sq{batch}sk{ctx}sqsq{batch}sqsk{ctx})"
    )


def build_serving(path: str | Path, **kw: Any) -> ServingAnswer:
    """Write the trace of :func:`serving_builder` at ``path``; return what a correct analysis
    must find."""
    b, ans = serving_builder(**kw)
    b.write(str(path))
    return ans


def serving_builder(
    *,
    engine: str = "vllm",
    layers: int = 4,
    hidden: int = 4096,
    inter: int = 11008,
    heads: int = 32,
    kv_heads: int = 8,
    head_dim: int = 128,
    batch: int = 16,
    prompt: int = 512,
    decode_steps: int = 12,
    decode_kernel_ns: int = 50_000,
    prefill_kernel_ns: int = 700_000,
    gap_ns: int = 200_000,
    slow_every: int = 0,
    slow_factor: int = 3,
    device: str = "H100",
    moe_experts: int = 0,
    topk: int = 2,
    graph_decode: bool = False,
    rank: int | None = None,
    world_size: int | None = None,
) -> tuple[KinetoTraceBuilder, ServingAnswer]:
    """The trace builder of one rank and what a correct analysis must find.

    ``engine``: vllm | sglang | trtllm (step annotations) or hf (a ``generate`` frame around
    ``nn.Module: LlamaForCausalLM_k`` forwards with ``aten::embedding``). ``graph_decode``: the
    decode steps are bare ``cudaGraphLaunch`` replays (no annotation, no ops) of a vLLM engine.
    """
    b = KinetoTraceBuilder(device=device, rank=rank, world_size=world_size)
    ans = ServingAnswer(prefill_steps=1, decode_steps=decode_steps, gap_ns=gap_ns)
    qkv = (heads + 2 * kv_heads) * head_dim
    gemms = [(qkv, hidden), (hidden, heads * head_dim)]
    if not moe_experts:
        gemms += [(2 * inter, hidden), (hidden, inter)]
    ans.weight_bytes = layers * sum(n * k * 2 for n, k in gemms)
    n_ops = layers * (len(gemms) + 1 + (1 if moe_experts else 0)) + (1 if engine == "hf" else 0)
    t = 1_000_000  # host clock
    gpu = 2_000_000
    ctx_per_seq = prompt
    op_ns = 20_000
    total = (1 + decode_steps) * (n_ops * op_ns + 200_000) + 100_000_000
    if engine == "hf":
        b.python("transformers/generation/utils.py(2215): generate", 500_000, total)
    elif graph_decode:
        b.python("vllm/v1/worker/gpu_model_runner.py(2000): execute_model", 500_000, 10_000)
    for step in range(1 + decode_steps):
        phase = "prefill" if step == 0 else "decode"
        tokens_per_seq = prompt if phase == "prefill" else 1
        m = batch * tokens_per_seq
        kdur = prefill_kernel_ns if phase == "prefill" else decode_kernel_ns
        if phase == "decode" and slow_every and step % slow_every == 0:
            kdur *= slow_factor
        ctx_tokens = batch * ctx_per_seq if phase == "decode" else batch * prompt
        dur = n_ops * op_ns + 10_000
        gpu_start = max(gpu, t + 30_000)
        if phase == "decode" and graph_decode:
            b.graph_launch(
                [
                    ("sm90_xmma_gemm_bf16bf16_bf16f32", gpu_start + i * kdur, kdur)
                    for i in range(n_ops)
                ],
                cpu_start=t,
            )
        else:
            if engine == "hf":
                win = b.module("LlamaForCausalLM", t, dur)
            else:
                win = b.annotation(
                    _step_name(engine, phase, batch, prompt, ctx_tokens, step), t, dur
                )
            with win:
                _layers(
                    b,
                    ans,
                    engine,
                    t,
                    gpu_start,
                    m,
                    batch,
                    tokens_per_seq,
                    kdur,
                    gemms,
                    layers,
                    heads,
                    kv_heads,
                    head_dim,
                    hidden,
                    inter,
                    moe_experts,
                    topk,
                    phase,
                    op_ns,
                    ctx_per_seq,
                )
        gpu_ns = n_ops * kdur
        if phase == "prefill":
            ans.prefill_step_gpu_ns.append(gpu_ns)
            ans.prefill_tokens += batch * prompt
        else:
            ans.decode_step_gpu_ns.append(gpu_ns)
            ans.decode_tokens += batch
            ans.kv_bytes_per_decode_step.append(layers * ctx_tokens * kv_heads * head_dim * 2 * 2)
            ctx_per_seq += 1
        gpu = gpu_start + gpu_ns + gap_ns
        t = max(t + dur + 5_000, gpu - 30_000)
    return b, ans


def _layers(
    b: KinetoTraceBuilder,
    ans: ServingAnswer,
    engine: str,
    t: int,
    g: int,
    m: int,
    batch: int,
    seq: int,
    kdur: int,
    gemms: list[tuple[int, int]],
    layers: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    hidden: int,
    inter: int,
    moe_experts: int,
    topk: int,
    phase: str,
    op_ns: int,
    ctx_per_seq: int,
) -> None:
    c = t + 5_000
    if engine == "hf":
        b.op(
            "aten::embedding",
            c,
            op_ns - 2_000,
            input_dims=[[32000, hidden], [batch, seq], [], [], []],
            input_types=[BF16, "long int", "Scalar", "Scalar", "Scalar"],
        )
        b.launch("indexSelectLargeIndex", cpu_start=c + 1_000, gpu_start=g, gpu_dur=kdur)
        c, g = c + op_ns, g + kdur
    for _ in range(layers):
        for n, k in gemms:
            b.op(
                "aten::linear",
                c,
                op_ns - 2_000,
                input_dims=[[m, k], [n, k], []],
                input_types=[BF16, BF16, ""],
            )
            b.launch(
                "sm90_xmma_gemm_bf16bf16_bf16f32", cpu_start=c + 1_000, gpu_start=g, gpu_dur=kdur
            )
            if phase == "decode":
                ans.activation_bytes_decode += (m * k + m * n) * 2
            c, g = c + op_ns, g + kdur
        if engine == "hf":  # SDPA over the whole cache: K and V are [B, Hkv, context, D]
            kv_len = seq if phase == "prefill" else ctx_per_seq
            b.op(
                "aten::scaled_dot_product_attention",
                c,
                op_ns - 2_000,
                input_dims=[
                    [batch, heads, seq, head_dim],
                    [batch, kv_heads, kv_len, head_dim],
                    [batch, kv_heads, kv_len, head_dim],
                ],
                input_types=[BF16, BF16, BF16],
            )
        else:
            b.op(
                "sglang_profiler::attention_paged_attention_ragged"
                if engine == "sglang"
                else "vllm::unified_attention_with_output",
                c,
                op_ns - 2_000,
                input_dims=[
                    [m, heads, head_dim],
                    [m, kv_heads, head_dim],
                    [m, kv_heads, head_dim],
                    [m, heads, head_dim],
                ],
                input_types=[BF16, BF16, BF16, BF16],
            )
        b.launch("kernel_unified_attention_2d", cpu_start=c + 1_000, gpu_start=g, gpu_dur=kdur)
        c, g = c + op_ns, g + kdur
        if moe_experts:
            b.op(
                "vllm::fused_moe",
                c,
                op_ns - 2_000,
                input_dims=[
                    [m, hidden],
                    [moe_experts, 2 * inter, hidden],
                    [moe_experts, hidden, inter],
                    [m, topk],
                ],
                input_types=[BF16, BF16, BF16, "int"],
            )
            b.launch("fused_moe_kernel", cpu_start=c + 1_000, gpu_start=g, gpu_dur=kdur)
            if phase == "decode":
                routed = min(moe_experts, m * topk)
                ans.moe_bytes_decode += routed * (2 * inter * hidden + hidden * inter) * 2
            c, g = c + op_ns, g + kdur
