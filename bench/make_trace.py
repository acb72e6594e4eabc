"""Build the ingest benchmark trace: a large, realistic, deterministic Kineto trace.

The trace models one rank (of 8) of a data-parallel GPT-2-medium-sized training run (24 blocks,
bf16) on an H100, recorded with ``record_shapes``, ``profile_memory``, ``with_stack`` and
``with_modules`` by PyTorch 2.x (modern Kineto layout: ``baseTimeNanoseconds`` plus relative µs
with three decimals). Each ``ProfilerStep#N`` is one optimizer step with gradient accumulation
over 8 micro-batches (so a 320 MB trace holds ~17 steps, as a profiler schedule of a big model
records, not hundreds of tiny ones) and holds, like a real trace of that kind:

* ``zero_grad`` (``gpu_memset``),
* per micro-batch, the data-loader annotation and its host-to-device copies (``gpu_memcpy``),
* the forward pass on the main thread: deep Python stacks with ``nn.Module: X_k`` frames,
  ``aten::*`` ops with ``Input Dims`` / ``Input type``, ``cudaLaunchKernel`` + ``kernel`` with
  ``ac2g`` flows, ``[memory]`` events, ``cudaStreamIsCapturing`` / ``cudaFuncSetAttribute``,
* the backward pass on the autograd thread: ``autograd::engine::evaluate_function: XBackward0``
  with ``Sequence number`` / ``Fwd thread id``, ``fwdbwd`` flows from the forward ops, gradient
  accumulation, and after the last micro-batch one NCCL all-reduce kernel on its own stream,
* the AdamW step (``_foreach_*`` ops and ``multi_tensor_apply`` kernels) and a final
  ``aten::item`` that copies the loss to the host and synchronises.

Every event is made by the project's own builder, ``tracegen.synth.KinetoTraceBuilder``,
and written out one step at a time (the builder's event list is flushed and cleared after each
step), so memory stays flat whatever ``--size-mb`` is. The builder's op stack is kept to the
currently open ops, so its enclosing-op look-up stays O(depth).

Usage::

    python bench/make_trace.py --size-mb 320 --out bench/.cache/bench_320mb.pt.trace.json
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the checkout's traceinsight, also when not installed

from tracegen.synth import KinetoTraceBuilder, _dumps, _dur, _us  # noqa: E402

MAIN_TID = 2_381_447
BWD_TID = 2_381_702
PID = 2_381_447
COMPUTE_STREAM = 7
NCCL_STREAM = 20
WORLD_SIZE = 8

# model shape (bf16, micro-batch 8 x 1024 tokens)
B, S, H, NH, FF, V = 8, 1024, 1024, 16, 4096, 50304
N_LAYERS = 24  # GPT-2 medium: 24 x 1024, 16 heads
MICRO_BATCHES = 8  # gradient accumulation: forward + backward 8 times per optimizer step
BT = B * S

BF16 = "c10::BFloat16"
GEMM = ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_"
        "execute_segment_k_off_kernel__5x_cublas")
GEMM_BWD = ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize128x256x64_warpgroupsize2x1x1_"
            "execute_segment_k_off_kernel__5x_cublas")
LN_FWD = ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, "
          "float>(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, "
          "float*, float*, c10::BFloat16*)")
LN_BWD = ("void at::native::(anonymous namespace)::layer_norm_grad_input_kernel_vectorized<c10::"
          "BFloat16, float>(c10::BFloat16 const*, c10::BFloat16 const*, float const*, "
          "float const*, c10::BFloat16 const*, c10::BFloat16*, int)")
LN_GAMMA = ("void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernelTemplate<c10::"
            "BFloat16, float, 32u, 32u, 256u, false, true, true>(long, long, c10::BFloat16 const*, "
            "c10::BFloat16 const*, float const*, float const*, c10::BFloat16*, c10::BFloat16*)")
FLASH_FWD = ("void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, "
             "128, 128, 4, false, false, cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits"
             "<64, 128, 128, 4, cutlass::bfloat16_t> >, false, true, false, false, true, true, "
             "false, false>(pytorch_flash::Flash_fwd_params)")
FLASH_BWD = ("void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<pytorch_flash::"
             "Flash_bwd_kernel_traits<64, 128, 128, 8, 4, 2, 2, false, false, cutlass::bfloat16_t, "
             "pytorch_flash::Flash_kernel_traits<64, 128, 128, 8, cutlass::bfloat16_t> >, true, "
             "false, true, false, false, false>(pytorch_flash::Flash_bwd_params)")
FLASH_DOT = ("void pytorch_flash::flash_bwd_dot_do_o_kernel<true, pytorch_flash::Flash_bwd_kernel_"
             "traits<64, 128, 128, 8, 4, 2, 2, false, false, cutlass::bfloat16_t, pytorch_flash::"
             "Flash_kernel_traits<64, 128, 128, 8, cutlass::bfloat16_t> > >(pytorch_flash::"
             "Flash_bwd_params)")


def _elementwise(op: str) -> str:
    return ("void at::native::vectorized_elementwise_kernel<4, at::native::" + op +
            "<c10::BFloat16>, std::array<char*, 3ul> >(int, at::native::" + op +
            "<c10::BFloat16>, std::array<char*, 3ul>)")


ADD_K = _elementwise("CUDAFunctor_add")
GELU_K = ("void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::"
          "TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::"
          "{lambda()#4}::operator()() const::{lambda(c10::BFloat16)#1}, std::array<char*, 2ul> >"
          "(int, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::"
          "{lambda()#2}::"
          "operator()() const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16)#1}, "
          "std::array<char*, 2ul>)")
GELU_BWD_K = _elementwise("GeluBackwardCUDAKernelImpl")
DROPOUT_K = ("void at::native::(anonymous namespace)::fused_dropout_kernel_vec<c10::BFloat16, "
             "float, unsigned int, 1, 4, bool>(at::cuda::detail::TensorInfo<c10::BFloat16 const, "
             "unsigned int>, at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>, "
             "at::cuda::detail::TensorInfo<bool, unsigned int>, unsigned int, float, "
             "at::PhiloxCudaState)")
MASKED_SCALE_K = _elementwise("masked_scale_kernel")
EMB_K = ("void at::native::(anonymous namespace)::indexSelectLargeIndex<c10::BFloat16, long, "
         "unsigned int, 2, 2, -2, true>(at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>, "
         "at::cuda::detail::TensorInfo<c10::BFloat16 const, unsigned int>, at::cuda::detail::"
         "TensorInfo<long const, unsigned int>, int, int, unsigned int, unsigned int, long)")
EMB_BWD_K = ("void at::native::(anonymous namespace)::embedding_backward_feature_kernel<c10::"
             "BFloat16, float, long>(long const*, c10::BFloat16 const*, c10::BFloat16*, int, long, "
             "int, int)")
SOFTMAX_K = ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, c10::BFloat16, float, "
             "float, at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>(float*, "
             "c10::BFloat16 const*, int)")
SOFTMAX_BWD_K = ("void at::native::(anonymous namespace)::cunn_SoftMaxBackward<4, c10::BFloat16, "
                 "float, float, at::native::(anonymous namespace)::LogSoftMaxBackwardEpilogue>"
                 "(c10::BFloat16*, float const*, float const*, long)")
NLL_K = ("void at::native::(anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d<float, "
         "float, long>(float*, float*, float const*, long const*, float const*, bool, long, long, "
         "long, long)")
NLL_BWD_K = ("void at::native::(anonymous namespace)::nll_loss_backward_reduce_cuda_kernel_2d<"
             "float, long>(float*, float const*, long const*, float const*, float const*, bool, "
             "int, int, "
             "long, long)")
FILL_K = _elementwise("FillFunctor")
COPY_K = _elementwise("bfloat16_copy_kernel_cuda")
NCCL_K = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
MTA = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous "
       "namespace)::TensorListMetadata<{n}>, at::native::(anonymous namespace)::{f}<float, float>, "
       "float>(at::native::(anonymous namespace)::TensorListMetadata<{n}>, at::native::(anonymous "
       "namespace)::{f}<float, float>, float)")

REDUCE_K = ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<c10::BFloat16, "
            "at::native::func_wrapper_t<float, at::native::sum_functor<c10::BFloat16, float, "
            "c10::BFloat16>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned "
            "int, c10::BFloat16, 4, 4> >(at::native::ReduceOp<c10::BFloat16, at::native::"
            "func_wrapper_t<float, at::native::sum_functor<c10::BFloat16, float, c10::BFloat16>::"
            "operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, "
            "c10::BFloat16, 4, 4>)")
# autograd node -> (aten op, kernel, GPU µs) for the single-kernel backward ops
BWD_ELEMENTWISE = {
    "GeluBackward0": ("aten::gelu_backward", GELU_BWD_K, 40.0),
    "NativeDropoutBackward0": ("aten::native_dropout_backward", MASKED_SCALE_K, 12.0),
    "CloneBackward0": ("aten::clone", COPY_K, 10.0),
    "LogSoftmaxBackward0": ("aten::_log_softmax_backward_data", SOFTMAX_BWD_K, 400.0),
    "NllLossBackward0": ("aten::nll_loss_backward", NLL_BWD_K, 60.0),
}

PY_WRAPPED = "torch/nn/modules/module.py(1773): _wrapped_call_impl"
PY_CALL = "torch/nn/modules/module.py(1784): _call_impl"
PY_TRACING = "<built-in method _get_tracing_state of PyCapsule object at 0x7f3b5e8c14e0>"
PY_GETATTR = "torch/nn/modules/module.py(1962): __getattr__"
PY_NOISE = [  # the small leaf frames a with_stack trace is full of
    PY_GETATTR,
    "<built-in function isinstance>",
    "<built-in function _has_torch_function_unary>",
    "<built-in function len>",
    "<built-in method size of Tensor object at 0x7f3a1c2b4d10>",
    "<built-in function hasattr>",
    "model.py(64): __getattr__",
    "torch/_jit_internal.py(1130): is_scripting",
]
OPEN = 10**15  # duration of an op still open (patched when it closes)
# autograd node -> (parameters accumulated, emits a fwdbwd flow)
BWD_PARAMS = {"AddmmBackward0": 1, "MmBackward0": 1, "NativeLayerNormBackward0": 1,
              "EmbeddingBackward0": 1}
BWD_FLOW = {"AddmmBackward0", "MmBackward0", "ScaledDotProductFlashAttentionBackward0",
            "EmbeddingBackward0"}
BWD_FREES = {"AddmmBackward0", "MmBackward0", "NativeLayerNormBackward0",
             "ScaledDotProductFlashAttentionBackward0", "GeluBackward0", "LogSoftmaxBackward0",
             "EmbeddingBackward0"}


class Gen:
    """Writes the trace step by step through one KinetoTraceBuilder.

    Ranges are written when they open (with a placeholder duration) and patched when they close,
    so that file order is start order, as Kineto writes it; ``self.t`` is the CPU clock of the
    thread being written (ns since the trace start), ``self.gpu`` the end of each stream's work.
    """

    def __init__(self, seed: int, layers: int = N_LAYERS,
                 micro_batches: int = MICRO_BATCHES) -> None:
        self.rng = random.Random(seed)
        self.layers = layers
        self.micro = micro_batches
        self.b = KinetoTraceBuilder(rank=0, world_size=WORLD_SIZE, device="H100", pid=PID,
                                    tid=MAIN_TID, default_stream=COMPUTE_STREAM,
                                    metadata={"trace_id": "5A0B7C2E9D6F4B1A8C3E2D1F0A9B8C7D"})
        # real runs have been going for a while: CUPTI correlation ids are large by the time the
        # profiler records (they also keep HTA 0.5.0 off an int16 downcast that pandas 3 rejects)
        self.b._corr = 675_000
        self.t = 0
        self.tid = MAIN_TID
        self.gpu = {COMPUTE_STREAM: 0, NCCL_STREAM: 0}
        self.seq = 0
        self.addr = 0x7F3A_0000_0000
        self.allocated = 6_400_000_000
        self.reserved = 12_884_901_888
        self.live: list[tuple[int, int]] = []  # activations, freed by the backward pass
        self.module_ids: dict[str, int] = {}
        self.class_counts: dict[str, int] = {}
        self.fwd_ops: list = []

    # --- primitives -------------------------------------------------------------------------------
    def j(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)

    def adv(self, lo: int, hi: int) -> None:
        self.t += self.rng.randint(lo, hi)

    def _patch(self, ev: dict, start: int) -> None:
        ev["dur"] = _dur(self.t - start, "relative")

    def py(self, name: str, body=None) -> None:
        """A python_function frame around ``body``."""
        start = self.t
        self.b.python(name, start, 0, tid=self.tid)
        ev = self.b.events[-1]
        if body is None:
            self.adv(150, 900)
        else:
            self.adv(400, 1500)
            body()
            self.adv(300, 1200)
        self._patch(ev, start)

    def noise(self, lo: int = 1, hi: int = 3) -> None:
        for _ in range(self.rng.randint(lo, hi)):
            self.py(self.rng.choice(PY_NOISE))

    def module(self, cls: str, key: str, forward: str, body, n_getattr: int = 0) -> None:
        """``nn.Module: Cls_k`` > ``_wrapped_call_impl`` > ``_call_impl`` > (``_get_tracing_state``,
        ``forward`` > body)."""
        inst = self.module_ids.get(key)
        if inst is None:
            inst = self.module_ids[key] = self.class_counts.get(cls, 0)
            self.class_counts[cls] = inst + 1
        start = self.t
        with self.b.module(cls, start, 0, tid=self.tid, instance=inst):
            pass
        ev = self.b.events[-1]
        self.adv(300, 900)

        def fwd() -> None:
            for _ in range(n_getattr):
                self.py(PY_GETATTR)
            self.noise(2, 4)
            body()

        self.py(PY_WRAPPED, lambda: self.py(PY_CALL, lambda: (self.py(PY_TRACING),
                                                              self.py(forward, fwd))))
        self.adv(200, 700)
        self._patch(ev, start)

    def op(self, name: str, dims=None, types=None, body=None, autograd: bool = False,
           seq: int | None = None, self_ns=(1500, 6000)) -> dict:
        """A cpu_op; the builder's op stack holds only the ops open around ``self.t``."""
        start = self.t
        if autograd and seq is None:
            self.seq += 1
            seq = self.seq
        mark = len(self.b._ops)
        self.b.op(name, start, 0, tid=self.tid, input_dims=dims, input_types=types, seq=seq,
                  **{"Record function id": 0})
        ev = self.b.events[-1]
        opr = self.b._ops[-1]
        opr.dur = OPEN  # launches inside it find it as their enclosing op
        self.adv(self_ns[0] // 2, self_ns[1] // 2)
        if body is not None:
            body()
        self.adv(self_ns[0] // 2, self_ns[1] // 2)
        self._patch(ev, start)
        opr.dur = self.t - start
        del self.b._ops[mark:]
        return ev

    def annotation(self, name: str, body) -> None:
        start = self.t
        mark = len(self.b._ops)
        with self.b.annotation(name, start, 0, tid=self.tid):
            pass
        ev = self.b.events[-1]
        self.b._ops[-1].dur = OPEN
        self.adv(20_000, 60_000)
        body()
        self.adv(5_000, 20_000)
        self._patch(ev, start)
        del self.b._ops[mark:]

    def launch(self, kernel: str, gpu_us: float, *, kind: str = "kernel",
               stream: int = COMPUTE_STREAM, nbytes: int | None = None, grid=None,
               block=None) -> None:
        cpu_dur = self.j(3500, 9000)
        ready = self.t + self.j(4000, 12000)
        gstart = max(ready, self.gpu[stream] + self.j(1000, 3000))
        gdur = max(800, int(gpu_us * 1000 * self.rng.uniform(0.9, 1.15)))
        self.b.launch(kernel, cpu_start=self.t, gpu_start=gstart, gpu_dur=gdur, cpu_dur=cpu_dur,
                      stream=stream, kind=kind, tid=self.tid, bytes=nbytes, grid=grid, block=block)
        self.gpu[stream] = gstart + gdur
        self.t += cpu_dur

    def runtime(self, name: str, lo: int = 800, hi: int = 3000) -> None:
        d = self.j(lo, hi)
        self.b.runtime(name, self.t, d, tid=self.tid)
        self.t += d

    def alloc(self, nbytes: int) -> None:
        self.addr += (nbytes + 511) // 512 * 512
        self.allocated += nbytes
        self.b.memory(self.t, nbytes, self.allocated, self.reserved, addr=self.addr, tid=self.tid)
        self.live.append((self.addr, nbytes))
        self.t += self.j(200, 800)

    def free(self) -> None:
        if self.live:
            addr, nbytes = self.live.pop()
            self.allocated -= nbytes
            self.b.memory(self.t, -nbytes, self.allocated, self.reserved, addr=addr, tid=self.tid)
            self.t += self.j(200, 800)

    # --- forward building blocks ----------------------------------------------------------------
    def transpose(self, shape) -> None:
        self.op("aten::transpose", [shape, [], []], [BF16, "Scalar", "Scalar"],
                body=lambda: self.op("aten::as_strided", [shape, [], [], []],
                                     [BF16, "ScalarList", "ScalarList", "Scalar"],
                                     self_ns=(800, 2500)))

    def linear(self, key: str, n_in: int, n_out: int, bias: bool = True) -> None:
        fwd = {}

        def mm() -> None:
            self.alloc(BT * n_out * 2)
            self.launch(GEMM, 2.0 * BT * n_in * n_out / 6.0e8, grid=[132, 1, 1], block=[384, 1, 1])

        def ops() -> None:
            self.op("aten::t", [[n_out, n_in]], [BF16], body=lambda: self.transpose([n_out, n_in]))
            if bias:
                fwd["ev"] = self.op("aten::addmm", [[n_out], [BT, n_in], [n_in, n_out], [], []],
                                    [BF16, BF16, BF16, "Scalar", "Scalar"], body=mm, autograd=True)
            else:
                fwd["ev"] = self.op("aten::mm", [[BT, n_in], [n_in, n_out]], [BF16, BF16], body=mm,
                                    autograd=True)
            self.op("aten::view", [[BT, n_out], []], [BF16, "ScalarList"], self_ns=(1000, 3000))

        self.module("Linear", key, "torch/nn/modules/linear.py(125): forward",
                    lambda: self.py("<built-in function linear>", lambda: self.op(
                        "aten::linear", [[B, S, n_in], [n_out, n_in], [n_out] if bias else []],
                        [BF16, BF16, BF16 if bias else ""], body=ops)),
                    n_getattr=2 if bias else 1)
        self.fwd_ops.append(("AddmmBackward0" if bias else "MmBackward0", fwd["ev"], n_in, n_out))

    def layer_norm(self, key: str) -> None:
        fwd = {}

        def native() -> None:
            self.op("aten::empty_like", [[B, S, H], [], [], [], [], []],
                    [BF16, "Scalar", "Scalar", "Scalar", "Scalar", "Scalar"],
                    body=lambda: self.op("aten::empty", [[], [], [], [], [], []],
                                         ["ScalarList"] + ["Scalar"] * 5, self_ns=(1500, 4000)))
            self.alloc(BT * H * 2)
            self.launch(LN_FWD, 18.0, grid=[BT, 1, 1], block=[256, 1, 1])

        def ln() -> None:
            fwd["ev"] = self.op("aten::native_layer_norm", [[B, S, H], [], [H], [H], []],
                                [BF16, "ScalarList", BF16, BF16, "Scalar"], body=native,
                                autograd=True)

        self.module("LayerNorm", key, "torch/nn/modules/normalization.py(217): forward",
                    lambda: self.py("torch/nn/functional.py(2910): layer_norm", lambda: (
                        self.noise(1, 2),
                        self.py("<built-in method layer_norm of type object at 0x7f3b6a2d1f40>",
                                lambda: self.op("aten::layer_norm",
                                                [[B, S, H], [], [H], [H], [], []],
                                                [BF16, "ScalarList", BF16, BF16, "Scalar",
                                                 "Scalar"],
                                                body=ln)))),
                    n_getattr=2)
        self.fwd_ops.append(("NativeLayerNormBackward0", fwd["ev"], H, H))

    def dropout(self, key: str) -> None:
        fwd = {}

        def nd() -> None:
            fwd["ev"] = self.op("aten::native_dropout", [[B, S, H], [], []],
                                [BF16, "Scalar", "Scalar"],
                                body=lambda: self.launch(DROPOUT_K, 12.0, grid=[528, 1, 1],
                                                         block=[256, 1, 1]),
                                autograd=True)

        self.module("Dropout", key, "torch/nn/modules/dropout.py(70): forward",
                    lambda: self.py("torch/nn/functional.py(1422): dropout", lambda: (
                        self.noise(1, 2),
                        self.py("<built-in function dropout>", lambda: self.op(
                            "aten::dropout", [[B, S, H], [], []], [BF16, "Scalar", "Scalar"],
                            body=nd)))),
                    n_getattr=2)
        self.fwd_ops.append(("NativeDropoutBackward0", fwd["ev"], 0, 0))

    def add(self) -> None:
        ev = self.op("aten::add", [[B, S, H], [B, S, H], []], [BF16, BF16, "Scalar"],
                     body=lambda: self.launch(ADD_K, 9.0, grid=[4096, 1, 1], block=[128, 1, 1]),
                     autograd=True)
        self.fwd_ops.append(("AddBackward0", ev, 0, 0))

    def attention(self, layer: int) -> None:
        hd = H // NH
        sh = [B, NH, S, hd]

        def body() -> None:
            self.linear(f"Linear/{layer}/qkv", H, 3 * H)
            self.py("<built-in method split of Tensor object at 0x7f3a1c2b4db0>", lambda: self.op(
                "aten::split", [[B, S, 3 * H], [], []], [BF16, "Scalar", "Scalar"],
                self_ns=(4000, 9000)))
            for _ in range(3):
                self.py("<built-in method view of Tensor object at 0x7f3a1c2b4e00>",
                        lambda: self.op("aten::view", [[B, S, H], []], [BF16, "ScalarList"],
                                        self_ns=(1000, 3000)))
                self.py("<built-in method transpose of Tensor object at 0x7f3a1c2b4e50>",
                        lambda: self.transpose([B, S, NH, hd]))
            fwd = {}

            def flash() -> None:
                self.alloc(BT * H * 2)
                self.runtime("cudaFuncSetAttribute", 1500, 4000)
                self.launch(FLASH_FWD, 160.0, grid=[8, B, NH], block=[128, 1, 1])

            def sdpa() -> None:
                fwd["ev"] = self.op(
                    "aten::_scaled_dot_product_flash_attention", [sh, sh, sh, [], [], [], []],
                    [BF16, BF16, BF16, "Scalar", "Scalar", "Scalar", ""], autograd=True,
                    body=lambda: self.op("aten::_flash_attention_forward",
                                         [sh, sh, sh, [], [], [], [], [], []],
                                         [BF16, BF16, BF16, "", "", "Scalar", "Scalar", "Scalar",
                                          "Scalar"], body=flash))

            self.py("<built-in function scaled_dot_product_attention>", lambda: self.op(
                "aten::scaled_dot_product_attention", [sh, sh, sh, [], [], [], [], []],
                [BF16, BF16, BF16, "", "Scalar", "Scalar", "", "Scalar"], body=sdpa))
            self.fwd_ops.append(("ScaledDotProductFlashAttentionBackward0", fwd["ev"], 0, 0))
            self.py("<built-in method transpose of Tensor object at 0x7f3a1c2b4e50>",
                    lambda: self.transpose(sh))
            self.py("<built-in method contiguous of Tensor object at 0x7f3a1c2b4f90>",
                    lambda: self.op(
                        "aten::contiguous", [[B, S, NH, hd], []], [BF16, "Scalar"],
                        body=lambda: self.op("aten::clone", [[B, S, NH, hd], []], [BF16, "Scalar"],
                                             body=lambda: self.launch(COPY_K, 10.0),
                                             autograd=True)))
            self.noise(1, 3)
            self.linear(f"Linear/{layer}/proj", H, H)
            self.dropout(f"Dropout/{layer}/attn")

        self.module("CausalSelfAttention", f"Attn/{layer}", "model.py(88): forward", body,
                    n_getattr=3)

    def mlp(self, layer: int) -> None:
        def gelu() -> None:
            def g() -> None:
                def k() -> None:
                    self.alloc(BT * FF * 2)
                    self.launch(GELU_K, 38.0, grid=[16384, 1, 1], block=[128, 1, 1])

                ev = self.op("aten::gelu", [[B, S, FF], []], [BF16, ""], body=k, autograd=True)
                self.fwd_ops.append(("GeluBackward0", ev, 0, 0))

            self.py("<built-in function gelu>", g)

        def body() -> None:
            self.linear(f"Linear/{layer}/fc", H, FF)
            self.module("GELU", f"GELU/{layer}", "torch/nn/modules/activation.py(734): forward",
                        gelu, n_getattr=1)
            self.linear(f"Linear/{layer}/proj2", FF, H)
            self.dropout(f"Dropout/{layer}/mlp")

        self.module("MLP", f"MLP/{layer}", "model.py(131): forward", body, n_getattr=4)

    def block(self, layer: int) -> None:
        def body() -> None:
            self.layer_norm(f"LayerNorm/{layer}/ln1")
            self.attention(layer)
            self.add()
            self.layer_norm(f"LayerNorm/{layer}/ln2")
            self.mlp(layer)
            self.add()

        self.module("Block", f"Block/{layer}", "model.py(152): forward", body, n_getattr=4)

    def embedding(self, name: str, rows: int) -> None:
        def e() -> None:
            def isel() -> None:
                self.alloc(BT * H * 2)
                self.launch(EMB_K, 15.0, grid=[BT, 1, 1], block=[128, 1, 1])

            ev = self.op("aten::embedding", [[rows, H], [B, S], [], [], []],
                         [BF16, "long int", "Scalar", "Scalar", "Scalar"], autograd=True,
                         body=lambda: (self.op("aten::reshape", [[B, S], []],
                                               ["long int", "ScalarList"],
                                               body=lambda: self.op("aten::view", [[B, S], []],
                                                                    ["long int", "ScalarList"])),
                                       self.op("aten::index_select", [[rows, H], [], [BT]],
                                               [BF16, "Scalar", "long int"], body=isel)))
            self.fwd_ops.append(("EmbeddingBackward0", ev, rows, H))

        self.module("Embedding", f"Embedding/{name}", "torch/nn/modules/sparse.py(190): forward",
                    lambda: self.py("torch/nn/functional.py(2551): embedding", lambda: self.py(
                        "<built-in method embedding of type object at 0x7f3b6a2d1f40>", e)),
                    n_getattr=1)

    def forward(self) -> None:
        def gpt() -> None:
            self.embedding("wte", V)
            self.embedding("wpe", S)
            self.add()
            self.dropout("Dropout/emb")
            for layer in range(self.layers):
                self.block(layer)
            self.layer_norm("LayerNorm/final")
            self.linear("Linear/lm_head", H, V, bias=False)

        self.module("GPT", "GPT/0", "model.py(203): forward", gpt, n_getattr=2)

        def ce() -> None:
            def ls() -> None:
                self.alloc(BT * V * 4)
                self.launch(SOFTMAX_K, 420.0, grid=[BT, 1, 1], block=[1024, 1, 1])

            ev = self.op("aten::log_softmax", [[BT, V], [], []], [BF16, "Scalar", ""],
                         autograd=True,
                         body=lambda: self.op("aten::_log_softmax", [[BT, V], [], []],
                                              [BF16, "Scalar", "Scalar"], body=ls))
            self.fwd_ops.append(("LogSoftmaxBackward0", ev, 0, 0))

            def nll() -> None:
                self.alloc(512)
                self.launch(NLL_K, 30.0, grid=[1, 1, 1], block=[1024, 1, 1])

            dims = [[BT, V], [BT], [], [], []]
            types = ["float", "long int", "", "Scalar", "Scalar"]
            ev = self.op("aten::nll_loss_nd", dims, types, autograd=True, body=lambda: self.op(
                "aten::nll_loss", dims, types, body=lambda: self.op("aten::nll_loss_forward", dims,
                                                                     types, body=nll)))
            self.fwd_ops.append(("NllLossBackward0", ev, 0, 0))

        self.py("torch/nn/functional.py(3494): cross_entropy", lambda: (
            self.noise(2, 3),
            self.py("<built-in method cross_entropy_loss of PyCapsule object at 0x7f3b5e8c1d10>",
                    lambda: self.op("aten::cross_entropy_loss", [[BT, V], [BT], [], [], [], []],
                                    [BF16, "long int", "", "Scalar", "Scalar", "Scalar"],
                                    body=ce))))

    # --- backward (autograd thread) ---------------------------------------------------------------
    def grad_fn(self, name: str, n_in: int, n_out: int) -> None:
        if name in ("AddmmBackward0", "MmBackward0"):
            for i, dims in enumerate(([[BT, n_out], [n_out, n_in]], [[n_in, BT], [BT, n_out]])):
                if i == 0:
                    self.op("aten::t", [dims[1]], [BF16], self_ns=(1500, 4000))
                self.op("aten::mm", dims, [BF16, BF16], body=lambda: self.launch(
                    GEMM_BWD, 2.0 * BT * n_in * n_out / 6.0e8, grid=[132, 1, 1], block=[384, 1, 1]))
            if name == "AddmmBackward0":
                self.op("aten::sum", [[BT, n_out], [], [], []], [BF16, "ScalarList", "Scalar", ""],
                        body=lambda: self.launch(REDUCE_K, 14.0))
        elif name == "NativeLayerNormBackward0":
            self.op("aten::native_layer_norm_backward",
                    [[B, S, H], [B, S, H], [], [B, S, 1], [B, S, 1], [H], [H], []],
                    [BF16, BF16, "ScalarList", "float", "float", BF16, BF16, "ScalarList"],
                    body=lambda: (self.launch(LN_BWD, 30.0), self.launch(LN_GAMMA, 22.0)))
        elif name == "ScaledDotProductFlashAttentionBackward0":
            sh = [B, NH, S, H // NH]
            self.op("aten::_scaled_dot_product_flash_attention_backward",
                    [sh, sh, sh, sh, sh, [B, NH, S], [], [], [], [], [], [], [], []],
                    [BF16] * 5 + ["float", "", "", "Scalar", "Scalar", "Scalar", "Scalar", "", ""],
                    body=lambda: self.op(
                        "aten::_flash_attention_backward",
                        [sh] * 5 + [[B, NH, S], [], [], [], [], [], [], []],
                        [BF16] * 5 + ["float"] + ["Scalar"] * 7,
                        body=lambda: (self.runtime("cudaFuncSetAttribute", 1500, 4000),
                                      self.launch(FLASH_DOT, 20.0), self.launch(FLASH_BWD, 420.0))))
        elif name == "EmbeddingBackward0":
            self.op("aten::embedding_backward", [[B, S, H], [B, S], [], [], [], []],
                    [BF16, "long int", "Scalar", "Scalar", "Scalar", "Scalar"],
                    body=lambda: self.op("aten::embedding_dense_backward",
                                         [[B, S, H], [B, S], [], [], []],
                                         [BF16, "long int", "Scalar", "Scalar", "Scalar"],
                                         body=lambda: (self.launch(FILL_K, 40.0),
                                                       self.launch(EMB_BWD_K, 90.0))))
        elif name in BWD_ELEMENTWISE:
            aten, k, gpu_us = BWD_ELEMENTWISE[name]
            self.op(aten, [[B, S, H], [B, S, H], []], [BF16, BF16, "Scalar"],
                    body=lambda: self.launch(k, gpu_us))
        if name in BWD_FREES:
            self.free()

    def backward(self, sync: bool) -> None:
        """On the autograd thread, in reverse order of the forward ops; then (``sync``, the last
        micro-batch of a step) the DDP all-reduce."""
        main_t, self.tid = self.t, BWD_TID
        self.t += self.j(20_000, 40_000)
        self.op("aten::ones_like", [[], [], [], [], [], []], ["float"] + ["Scalar"] * 5,
                body=lambda: self.launch(FILL_K, 1.5))
        for name, fev, n_in, n_out in reversed(self.fwd_ops):
            seq = fev["args"]["Sequence number"]
            if name in BWD_FLOW:
                self.b.fwdbwd(_to_ns(fev["ts"]), self.t, fwd_tid=MAIN_TID, bwd_tid=BWD_TID)
            self.op(f"autograd::engine::evaluate_function: {name}", seq=seq, body=lambda: self.op(
                name, seq=seq, body=lambda: self.grad_fn(name, n_in, n_out)))
            for _ in range(BWD_PARAMS.get(name, 0)):
                self.op("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad",
                        body=lambda: self.op("torch::autograd::AccumulateGrad"))
        if not sync:  # DDP no_sync(): gradients are reduced after the last micro-batch only
            self.tid, self.t = MAIN_TID, max(main_t, self.t) + self.j(10_000, 30_000)
            return
        # DDP: one bucketed all-reduce per step on the NCCL stream
        self.op("c10d::allreduce_", [[], [], [], [], []], ["TensorList", "", "", "", "Scalar"],
                body=lambda: self.op(
                    "record_param_comms", [[], [], [], [], [], [], [], []],
                    ["", "Scalar", "Scalar", "Scalar", "Scalar", "", "Scalar", "Scalar"],
                    body=lambda: (self.runtime("cudaStreamWaitEvent"),
                                  self.launch(NCCL_K, 3800.0, stream=NCCL_STREAM, grid=[24, 1, 1],
                                              block=[640, 1, 1]),
                                  self.runtime("cudaEventRecord"))))
        self.tid, self.t = MAIN_TID, max(main_t, self.t) + self.j(10_000, 30_000)

    # --- the rest of a step ----------------------------------------------------------------------
    def loader(self) -> None:
        def copy() -> None:
            self.alloc(BT * 8)
            self.launch("Memcpy HtoD (Pinned -> Device)", 6.0, kind="memcpy", nbytes=BT * 8)

        def body() -> None:
            self.t += self.j(150_000, 350_000)  # the data loader's own Python work
            for _ in range(2):
                self.op("aten::to", [[B, S], [], [], [], [], []], ["long int"] + ["Scalar"] * 5,
                        body=lambda: self.op(
                            "aten::_to_copy", [[B, S], [], [], [], [], [], []],
                            ["long int"] + ["Scalar"] * 6,
                            body=lambda: self.op("aten::copy_", [[B, S], [B, S], []],
                                                 ["long int", "long int", "Scalar"], body=copy)))

        self.py("train.py(74): <module>", lambda: self.py(
            "torch/utils/data/dataloader.py(733): __next__", lambda: self.annotation(
                "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", body)))

    def zero_grad(self) -> None:
        def body() -> None:
            for _ in range(3):
                self.op("aten::zero_", [[H, H]], [BF16], body=lambda: self.op(
                    "aten::fill_", [[H, H], []], [BF16, "Scalar"],
                    body=lambda: self.launch("Memset (Device)", 3.0, kind="memset",
                                             nbytes=H * H * 2)))

        self.py("torch/optim/optimizer.py(960): zero_grad", lambda: self.annotation(
            "Optimizer.zero_grad#AdamW.zero_grad", body))

    def optimizer(self) -> None:
        def adam() -> None:
            for f, n in (("FusedAdamMathFunctor", 4), ("PointwiseOpScalarListFunctor", 2),
                         ("BinaryOpListAlphaFunctor", 3), ("UnaryOpFunctor", 2)):
                for name in ("aten::_foreach_mul_", "aten::_foreach_add_"):
                    self.op(name, [[], []], ["TensorList", "Scalar"],
                            body=lambda f=f, n=n: self.launch(MTA.format(n=n, f=f), 45.0,
                                                              grid=[320, 1, 1], block=[512, 1, 1]))

        self.py("torch/optim/optimizer.py(485): wrapper", lambda: self.annotation(
            "Optimizer.step#AdamW.step", lambda: self.py(
                "torch/optim/adamw.py(205): step", lambda: self.py(
                    "torch/optim/adamw.py(770): adamw", lambda: self.py(
                        "torch/optim/adamw.py(560): _multi_tensor_adamw", adam)))))

    def item(self) -> None:
        """``loss.item()``: a D2H copy and a sync that waits for the GPU."""
        def sync() -> None:
            self.runtime("cudaStreamIsCapturing", 500, 1200)
            self.launch("Memcpy DtoH (Device -> Pinned)", 2.0, kind="memcpy", nbytes=4)
            d = max(max(self.gpu.values()) - self.t + self.j(3000, 8000), 2000)
            self.b.runtime("cudaStreamSynchronize", self.t, d, tid=self.tid)
            self.t += d

        self.py("<built-in method item of Tensor object at 0x7f3a1c2b5a40>", lambda: self.op(
            "aten::item", [[]], ["float"], body=lambda: self.op(
                "aten::_local_scalar_dense", [[]], ["float"], body=sync)))

    def step(self, n: int, micro: int | None = None) -> None:
        micro = self.micro if micro is None else micro
        self.fwd_ops = []
        start = self.t
        pos = len(self.b.events)
        self.t += self.j(30_000, 80_000)
        self.zero_grad()
        for m in range(micro):
            self.fwd_ops = []
            self.loader()
            self.py("train.py(81): <module>", lambda: self.py(
                "torch/nn/modules/module.py(1773): _wrapped_call_impl", self.forward))
            self.py("torch/_tensor.py(626): backward", lambda: self.py(
                "torch/autograd/__init__.py(347): backward", lambda: self.py(
                    "torch/autograd/graph.py(823): _engine_run_backward", lambda: self.py(
                        "<built-in method run_backward of torch._C._EngineBase object at "
                        "0x7f3b5a1e2c80>", lambda: self.backward(sync=m == micro - 1)))))
            while self.live:  # what the micro-batch still holds is released before the next
                self.free()
        self.optimizer()
        self.item()
        while self.live:
            self.free()
        self.t += self.j(20_000, 50_000)
        gpu0 = min(_to_ns(e["ts"]) for e in self.b.events[pos:] if e.get("pid") == 0
                   and e.get("ph") == "X")
        with self.b.step(n, start, self.t - start, gpu=(gpu0, max(self.gpu.values()) - gpu0)):
            pass
        # put the step window (and its GPU projection) ahead of its content, as Kineto writes it
        tail = self.b.events[-2:]
        del self.b.events[-2:]
        self.b.events[pos:pos] = tail
        self.b._ops.clear()


def _to_ns(ts) -> int:
    s = str(ts)
    whole, _, frac = s.partition(".")
    return int(whole) * 1000 + int((frac + "000")[:3])


def _header(b: KinetoTraceBuilder) -> tuple[str, str]:
    """The JSON text before and after the event list (metadata events included in the first)."""
    saved = b.events
    b.events = []
    d = b.to_dict()
    b.events = saved
    meta = d["traceEvents"]
    ts0 = _us(0, "relative", b.base_ns)
    meta += [
        {"name": "process_labels", "ph": "M", "ts": ts0, "pid": PID, "tid": 0,
         "args": {"labels": "CPU"}},
        {"name": "process_sort_index", "ph": "M", "ts": ts0, "pid": PID, "tid": 0,
         "args": {"sort_index": PID}},
        {"name": "thread_name", "ph": "M", "ts": ts0, "pid": PID, "tid": BWD_TID,
         "args": {"name": f"thread {BWD_TID} (python3)"}},
    ]
    for s in (COMPUTE_STREAM, NCCL_STREAM):
        meta.append({"name": "thread_name", "ph": "M", "ts": ts0, "pid": 0, "tid": s,
                     "args": {"name": f"stream {s}"}})
    d["traceEvents"] = "\x02EVENTS\x02"
    text = _dumps(d)
    marker = '"\\u0002EVENTS\\u0002"'
    pre, post = text.split(marker)
    pre += "[\n" + ",\n".join(_dumps(m) for m in meta)
    return pre, "\n]" + post


def make_trace(out: str | Path, size_mb: float = 320, seed: int = 20260, quiet: bool = False,
               layers: int = N_LAYERS, micro_batches: int = MICRO_BATCHES) -> dict:
    """Write the trace to ``out`` (uncompressed JSON); stop after the step that passes size_mb."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    target = int(size_mb * 1_000_000)
    g = Gen(seed, layers, micro_batches)
    pre, post = _header(g.b)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    t0 = time.perf_counter()
    n_events = 0
    steps = 0
    try:
        with open(tmp, "w", encoding="utf-8", newline="\n") as fh:
            fh.write(pre)
            written = len(pre)
            n = 1
            step_bytes = 0
            while written + len(post) < target:
                micro = None
                if step_bytes and target - written < step_bytes:
                    # the last step: only the micro-batches needed to reach the size
                    per_micro = step_bytes / g.micro
                    micro = max(1, min(g.micro, -int(-(target - written - len(post)) // per_micro)))
                g.step(n, micro)
                evs = g.b.events
                # one _dumps call per step; strip the list's brackets, one event per line
                body = _dumps(evs)[1:-1].replace("},{\"ph\"", "},\n{\"ph\"")
                chunk = ",\n" + body
                fh.write(chunk)
                written += len(chunk)
                step_bytes = step_bytes or len(chunk)
                n_events += len(evs)
                evs.clear()
                g.b._ops.clear()
                steps += 1
                n += 1
                if not quiet and (steps % 5 == 0 or steps < 3):
                    print(f"  step {steps}: {written / 1e6:.0f} MB, {n_events:,} events, "
                          f"{time.perf_counter() - t0:.0f} s", file=sys.stderr)
            fh.write(post)
            written += len(post)
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            tmp.unlink()
    info = {"path": str(out), "bytes": out.stat().st_size, "events": n_events, "steps": steps,
            "layers": layers, "micro_batches": micro_batches, "seed": seed,
            "build_s": round(time.perf_counter() - t0, 2)}
    if not quiet:
        print(f"wrote {out}: {info['bytes'] / 1e6:.1f} MB, {n_events:,} events, {steps} steps "
              f"in {info['build_s']} s", file=sys.stderr)
    return info


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mb", type=float, default=320,
                    help="uncompressed size to reach, in MB (10^6 bytes); default 320")
    ap.add_argument("--out", default=str(HERE / ".cache" / "bench_{size}mb.pt.trace.json"),
                    help="output path (uncompressed .json); {size} is replaced by --size-mb")
    ap.add_argument("--seed", type=int, default=20260)
    ap.add_argument("--layers", type=int, default=N_LAYERS,
                    help=f"transformer blocks (default {N_LAYERS})")
    ap.add_argument("--micro-batches", type=int, default=MICRO_BATCHES,
                    help=f"forward/backward passes per ProfilerStep (default {MICRO_BATCHES})")
    ap.add_argument("-q", "--quiet", action="store_true")
    a = ap.parse_args(argv)
    out = a.out.replace("{size}", f"{a.size_mb:g}")
    make_trace(out, a.size_mb, a.seed, a.quiet, a.layers, a.micro_batches)
    return 0


if __name__ == "__main__":
    sys.exit(main())
