"""Synthetic LLM serving traces with known answers: engine-step annotations (vLLM V1 or
SGLang), eager GEMMs with weight shapes and dtypes, paged attention, and kernels whose times
are chosen, so that steps, tokens, bytes per decode step and floors are known exactly.

``build_serving`` writes one rank's trace and returns the answers (:class:`ServingAnswer`).
Each layer runs four GEMMs (``aten::linear``: QKV, O, gate-up, down) and one paged attention
op; a step is prefill (all prompts), then ``decode_steps`` decode steps of the whole batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tracegen.synth import KinetoTraceBuilder

BF16 = "c10::BFloat16"


@dataclass
class ServingAnswer:
    prefill_steps: int
    decode_steps: int
    decode_step_gpu_ns: list[int] = field(default_factory=list)
    prefill_step_gpu_ns: list[int] = field(default_factory=list)
    weight_bytes: int = 0  #: per step (every weight once)
    kv_bytes_per_decode_step: list[int] = field(default_factory=list)
    activation_bytes_decode: int = 0
    decode_tokens: int = 0
    prefill_tokens: int = 0
    gap_ns: int = 0


def _step_name(engine: str, phase: str, batch: int, prompt: int, ctx: int) -> str:
    if engine == "sglang":
        if phase == "prefill":
            return f"step[EXTEND bs={batch} toks={batch * prompt}]"
        return f"step[DECODE bs={batch}]"
    if phase == "prefill":
        t = batch * prompt
        pairs = batch * prompt * prompt
        return (
            f"execute_{t}_context_{batch}(sq{t}sk{t}sqsq{batch * prompt * prompt}sqsk{pairs})"
            "_generation_0(sq0sk0sqsq0sqsk0)"
        )
    return (
        f"execute_{batch}_context_0(sq0sk0sqsq0sqsk0)"
        f"_generation_{batch}(sq{batch}sk{ctx}sqsq{batch}sqsk{ctx})"
    )


def build_serving(
    path: str | Path,
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
    prefill_kernel_ns: int = 400_000,
    gap_ns: int = 200_000,
    slow_every: int = 0,
    slow_factor: int = 3,
    device: str = "H100",
) -> ServingAnswer:
    """Write the trace at ``path``; return what a correct analysis must find."""
    b = KinetoTraceBuilder(device=device)
    ans = ServingAnswer(prefill_steps=1, decode_steps=decode_steps, gap_ns=gap_ns)
    qkv = (heads + 2 * kv_heads) * head_dim
    gemms = [(qkv, hidden), (hidden, heads * head_dim), (2 * inter, hidden), (hidden, inter)]
    ans.weight_bytes = layers * sum(n * k * 2 for n, k in gemms)
    t = 1_000_000  # host clock
    gpu = 2_000_000
    ctx_per_seq = prompt
    for step in range(1 + decode_steps):
        phase = "prefill" if step == 0 else "decode"
        tokens_per_seq = prompt if phase == "prefill" else 1
        m = batch * tokens_per_seq
        kdur = prefill_kernel_ns if phase == "prefill" else decode_kernel_ns
        if phase == "decode" and slow_every and step % slow_every == 0:
            kdur *= slow_factor
        ctx_tokens = batch * ctx_per_seq if phase == "decode" else batch * prompt
        n_ops = layers * 5
        op_ns = 20_000
        dur = n_ops * op_ns + 10_000
        gpu_start = max(gpu, t + 30_000)
        name = _step_name(engine, phase, batch, prompt, ctx_tokens)
        with b.annotation(name, t, dur):
            c, g = t + 5_000, gpu_start
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
                        "sm90_xmma_gemm_bf16bf16_bf16f32",
                        cpu_start=c + 1_000,
                        gpu_start=g,
                        gpu_dur=kdur,
                    )
                    if phase == "decode":
                        ans.activation_bytes_decode += (m * k + m * n) * 2
                    c, g = c + op_ns, g + kdur
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
                b.launch(
                    "kernel_unified_attention_2d", cpu_start=c + 1_000, gpu_start=g, gpu_dur=kdur
                )
                c, g = c + op_ns, g + kdur
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
    b.write(str(path))
    return ans
