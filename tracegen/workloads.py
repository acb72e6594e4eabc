"""Scenario generator: GPU-shaped training traces whose bottleneck is known by construction.

A :class:`Workload` describes a transformer training loop (model size, dtype, device, host
behaviour, communication, memory); :func:`build` simulates it and writes the Kineto events a
profiler would have recorded, through :class:`~tracegen.synth.KinetoTraceBuilder`.
Nothing is drawn from the clock or an unseeded generator: the same ``Workload`` always gives the
same bytes.

The simulation, in brief:

* **Host threads.** The main thread runs, per ``ProfilerStep#N``: an optional host stall (slow
  steps), ``Optimizer.zero_grad``, the ``DataLoader`` ``__next__`` annotation, the H2D copy of the
  batch, the forward pass (``nn.Module`` frames, ``aten::`` ops with shapes, one launch per
  kernel), the loss, ``loss.backward()``, ``Optimizer.step#AdamW.step`` and optional
  ``aten::item`` host syncs. Backward runs on the autograd thread (``pt_autograd_0``): one
  ``autograd::engine::evaluate_function: XBackward0`` per autograd node, replayed from the
  forward "tape" in reverse, with the forward op's ``Sequence number`` and a ``fwdbwd`` flow.
  Every launching op costs ``cpu_op_overhead_ns`` before its first launch, each launch
  ``launch_ns``.
* **GPU streams.** A kernel starts at ``max(launch end + 2 µs, previous end on its stream + 1 µs,
  dependencies)`` and runs for its roofline time: GEMMs ``2·M·N·K / (peak · gemm_efficiency)``,
  attention the same at 0.75 of that efficiency, everything else ``bytes / (bandwidth ·
  memory_efficiency)``, never under 2 µs. A host that launches slower than the GPU executes
  leaves the GPU idle (launch-bound); a faster host runs ahead (up to 1024 queued kernels).
* **Communication** (``world_size > 1`` and ``comm_bytes > 0``): DDP-style gradient all-reduce on
  a separate NCCL stream. ``comm_overlap`` of the bytes go out in per-layer buckets during
  backward (each waits for the gradients it reduces), the rest in one bucket after backward;
  the optimizer waits for all of it. Duration ``bytes · 2(n-1)/n / comm_bandwidth`` (ring, bus
  bandwidth). A collective ends on every rank when the last rank has arrived plus that duration,
  so ranks wait inside NCCL kernels for a straggler (:func:`build_ranks` simulates the ranks in
  lockstep).
* **Memory** (``[memory]`` events, on the allocating thread): persistent state plus activations
  allocated through forward and freed through backward (true tensor sizes unless they would
  exceed 60% of the budget), sized so that the peak ``Total Reserved`` is
  ``peak_memory_fraction · totalGlobalMem`` and reserved = ``reserved_overhead`` × allocated at
  the peak; reserved never shrinks (caching allocator); ``leak_bytes_per_step`` stays allocated.

Beyond what :class:`KinetoTraceBuilder` writes, :meth:`_Rank.finish` adds ``thread_name``
metadata for the autograd thread and the streams, sets real CUPTI ``cbid`` values (``cid``,
``kernel``, ``grid``, ``block`` on ROCm runtime events), turns ``cuLaunchKernel`` into
``cuda_driver`` and drops the occupancy fields ROCm kernels do not have.

Use::

    from tracegen.workloads import PRESETS, Workload, build, build_ranks
    build(PRESETS["launch_bound"]).write("t.json.gz")
    for r, b in enumerate(build_ranks(PRESETS["straggler"])):
        b.write(f"rank-{r}.json.gz")
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from tracegen.synth import DEVICE_PRESETS, KinetoTraceBuilder, _us

MiB = 1 << 20
GiB = 1 << 30

#: dense peak FLOP/s by device and dtype (tensor cores where the dtype has them)
PEAK_FLOPS: dict[str, dict[str, float]] = {
    "H100": {"bf16": 989e12, "fp16": 989e12, "fp32": 67e12},
    "A100": {"bf16": 312e12, "fp16": 312e12, "fp32": 19.5e12},
    "V100": {"bf16": 15.7e12, "fp16": 125e12, "fp32": 15.7e12},  # no bf16 tensor cores on sm70
    "MI300X": {"bf16": 1307e12, "fp16": 1307e12, "fp32": 163e12},
}
#: peak DRAM bandwidth, bytes/s
MEM_BANDWIDTH: dict[str, float] = {"H100": 3.35e12, "A100": 2.0e12, "V100": 0.9e12,
                                   "MI300X": 5.3e12}

VOCAB = 32_000  #: embedding rows (the embedding's parameters count in the optimizer)
HEAD_DIM = 128
LAUNCH_LATENCY_NS = 2_000  #: launch end -> earliest kernel start
KERNEL_GAP_NS = 1_000  #: back-to-back kernels on one stream
MIN_KERNEL_NS = 2_000
OP_TAIL_NS = 1_500  #: op end after its last launch
OP_GAP_NS = 1_000  #: between sibling ops
CPU_ONLY_OP_NS = 2_500  #: an op that launches nothing (views, aten::t, AddBackward0)
WRAP_PRE_NS, WRAP_POST_NS = 2_000, 1_000  #: composite op (aten::linear) around its children
MODULE_PRE_NS, MODULE_POST_NS = 3_000, 1_500  #: nn.Module frame around its ops
ANN_PRE_NS, ANN_POST_NS = 1_000, 500  #: record_function annotation
POST_SYNC_HOST_NS = 25_000  #: Python work after a host sync before the next launch
LAUNCH_QUEUE_DEPTH = 1024  #: launches block once this many GPU activities are pending
COMM_LATENCY_NS = 10_000
ADAM_CHUNK_ELEMS = 320 * 65_536  #: elements per multi_tensor_apply launch

_DTYPES = ("bf16", "fp16", "fp32")
_CTYPE = {"bf16": "c10::BFloat16", "fp16": "c10::Half", "fp32": "float"}
_CUTLASS = {"bf16": "cutlass::bfloat16_t", "fp16": "cutlass::half_t", "fp32": "float"}
_NCCL_DT = {"bf16": "bf16", "fp16": "f16", "fp32": "f32"}
_COLL_DT = {"bf16": "BFloat16", "fp16": "Half", "fp32": "Float"}
_DSIZE = {"bf16": 2, "fp16": 2, "fp32": 4}
_CBID = {"cudaLaunchKernel": 211, "cudaLaunchKernelExC": 430, "cudaMemcpyAsync": 41,
         "cudaStreamSynchronize": 131, "cudaStreamWaitEvent": 146, "cudaEventRecord": 135}
_CID = {"hipLaunchKernel": 107, "hipExtModuleLaunchKernel": 65, "hipMemcpyWithStream": 153,
        "hipMemcpyAsync": 105, "hipExtLaunchKernel": 300}  # roctracer ids seen in MI300X traces
_AMD_DROP = ("registers per thread", "shared memory", "blocks per SM", "warps per SM",
             "est. achieved occupancy %")


@dataclass(frozen=True)
class Workload:
    """One training run to simulate. Times in ns, sizes in bytes."""

    device: str = "H100"  #: key of synth.DEVICE_PRESETS
    steps: int = 4  #: ProfilerStep windows
    first_step: int = 10  #: number of the first ProfilerStep#N
    layers: int = 4  #: transformer blocks
    hidden: int = 4096
    seq: int = 2048
    batch: int = 4
    dtype: str = "bf16"  #: bf16 | fp16 | fp32
    world_size: int = 1
    rank: int = 0
    # host side
    cpu_op_overhead_ns: int = 6_000  #: CPU time per launching op before its launch
    launch_ns: int = 4_000  #: duration of each cudaLaunchKernel
    dataloader_ns: int = 200_000  #: DataLoader __next__ at step start
    syncs_per_step: int = 0  #: aten::item host syncs: one at step end, the rest inside forward
    tiny_kernels_per_layer: int = 0  #: extra 1-3 µs elementwise kernels per layer
    # GPU efficiency
    gemm_efficiency: float = 0.6  #: fraction of peak FLOP/s GEMMs reach
    memory_efficiency: float = 0.7  #: fraction of peak bandwidth memory-bound kernels reach
    elementwise_scale: float = 1.0  #: >1 adds memory-bound elementwise work per layer
    # communication
    comm_bytes: int = 0  #: bytes all-reduced per step (0 = none)
    comm_bandwidth: float = 100e9  #: bus bandwidth, bytes/s
    comm_overlap: float = 1.0  #: fraction of the all-reduce issued during backward
    straggler_rank: int | None = None
    straggler_slowdown: float = 1.0  #: GPU time multiplier on straggler_rank
    # variability
    jitter: float = 0.0  #: per-step relative variation of GPU and host time (seeded)
    slow_step_every: int = 0  #: every k-th step gets a host stall ...
    slow_step_extra_ns: int = 0  #: ... of this length
    cold_start_ns: int = 0  #: the first kernel launch blocks this long (lazy module loading)
    # memory
    memory: bool = True  #: [memory] events (profile_memory)
    reserved_overhead: float = 1.1  #: Total Reserved / Total Allocated at the peak
    peak_memory_fraction: float = 0.5  #: peak Total Reserved / totalGlobalMem
    leak_bytes_per_step: int = 0  #: stays allocated at every step end
    oom: bool = False  #: an [OutOfMemory] event at the end
    backward_thread: bool = True  #: autograd ops on their own thread
    with_stack: bool = True  #: nn.Module Python frames
    record_shapes: bool = True  #: Input Dims / Input type
    seed: int = 0

    def __post_init__(self) -> None:
        if self.device not in DEVICE_PRESETS or self.device not in PEAK_FLOPS:
            raise ValueError(f"device {self.device!r} is not one of {sorted(PEAK_FLOPS)}")
        if self.dtype not in _DTYPES:
            raise ValueError(f"dtype {self.dtype!r} is not one of {_DTYPES}")
        for name in ("steps", "layers", "hidden", "seq", "batch", "world_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank {self.rank} outside world_size {self.world_size}")
        if self.straggler_rank is not None and not 0 <= self.straggler_rank < self.world_size:
            raise ValueError(f"straggler_rank {self.straggler_rank} outside world_size")
        if not 0.0 <= self.comm_overlap <= 1.0:
            raise ValueError("comm_overlap must be within [0, 1]")
        if min(self.gemm_efficiency, self.memory_efficiency, self.comm_bandwidth,
               self.straggler_slowdown, self.elementwise_scale, self.reserved_overhead,
               self.peak_memory_fraction) <= 0:
            raise ValueError("efficiencies, bandwidths, scales and fractions must be > 0")
        if min(self.cpu_op_overhead_ns, self.launch_ns, self.dataloader_ns, self.syncs_per_step,
               self.tiny_kernels_per_layer, self.comm_bytes, self.slow_step_every,
               self.slow_step_extra_ns, self.leak_bytes_per_step, self.cold_start_ns) < 0 \
                or self.jitter < 0:
            raise ValueError("counts, times and byte sizes must be >= 0")

    @property
    def tokens(self) -> int:
        return self.batch * self.seq

    @property
    def params(self) -> int:
        """Trainable parameters: per block 12·H² + 13·H, plus the embedding and final norm."""
        h = self.hidden
        return self.layers * (12 * h * h + 13 * h) + VOCAB * h + 2 * h


# --- kernel names ---------------------------------------------------------------------------

def _gemm_kernel(w: Workload, layout: str, n: int) -> tuple[str, str | None]:
    """(kernel name, launch API or None for the default) of a GEMM; layout tn | nn | nt."""
    dev, dt = w.device, w.dtype
    if dev == "H100":
        if dt == "fp32":
            if layout == "tn":
                name = (f"sm90_xmma_gemm_f32f32_f32f32_f32_{layout}_n_tilesize128x128x32_"
                        "warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas")
                return name, "cudaLaunchKernelExC"
            k = f"cutlass_80_simt_sgemm_128x64_8x5_{layout}_align1"
            return f"void cutlass::Kernel2<{k}>({k}::Params)", "cuLaunchKernel"
        if n >= 8192:
            return f"nvjet_tst_128x256_64x4_1x2_h_bz_coopA_{layout.upper()}T", "cudaLaunchKernelExC"
        tag = "bf16bf16_bf16f32" if dt == "bf16" else "f16f16_f16f32"
        name = (f"sm90_xmma_gemm_{tag}_f32_{layout}_n_tilesize128x128x64_warpgroupsize1x1x1_"
                "execute_segment_k_off_kernel__5x_cublas")
        return name, "cudaLaunchKernelExC"
    if dev == "A100":
        return {"bf16": f"ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_{layout}",
                "fp16": f"ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_{layout}",
                "fp32": f"ampere_sgemm_128x64_{layout}"}[dt], None
    if dev == "V100":
        return {"bf16": (f"sm70_xmma_gemm_bf16bf16_bf16f32_f32_{layout}_n_tilesize128x128x32_"
                         "stage1_warpsize2x2x1_ffma_aligna8_alignc8_execute_kernel__5x_cublas"),
                "fp16": f"volta_fp16_s884gemm_fp16_128x128_ldg8_f2f_{layout}",
                "fp32": f"volta_sgemm_128x64_{layout}"}[dt], None
    lay = {"tn": "Alik_Bljk", "nn": "Ailk_Bljk", "nt": "Ailk_Bjlk"}[layout]
    if dt == "fp32":
        body = "SB_MT128x64x16_SN_LDSB0_AFC1_AFEM1_ASEM1_CLR1_CADS0_EPS0_GRVWA4_GRVWB4"
    else:
        body = (("BBS_BH" if dt == "bf16" else "HHS_BH")
                + "_Bias_HA_S_SAV_UserArgs_MT128x128x64_MI16x16x1_SN_LDSB1_AFC1_AFEM1_ASEM1_CLR1_"
                "CADS0_EPS0_GRVWA8_GRVWB8")
    name = (f"Cijk_{lay}_{body}_GSUAMBSK_ISA942_IU1_K1_LBSPPA256_LBSPPB256_MIAV0_MIWT4_4_NTn1_"
            "ONLL1_PGR2_PLR1_SIA3_SS1_SVW8_TLDS1_USL1_VWA1_VWB1_WSGRA0_WSGRB0_WS64_WG32_8_1")
    return name, "hipExtModuleLaunchKernel"


def _attention_impl(w: Workload) -> str:
    if w.device == "MI300X":
        return "ck"
    if w.device == "V100" or w.dtype == "fp32":
        return "efficient"
    return "flash"


def _attention_kernels(w: Workload, hd: int) -> tuple[str, list[str]]:
    """(forward kernel, backward kernels [main first]) of scaled_dot_product_attention."""
    impl, dt = _attention_impl(w), w.dtype
    if impl == "flash":
        cut = _CUTLASS[dt]
        bt = (f"pytorch_flash::Flash_bwd_kernel_traits<{hd}, 64, 128, 8, 2, 4, 2, false, false, "
              f"{cut}, pytorch_flash::Flash_kernel_traits<{hd}, 64, 128, 8, {cut}> >")
        fwd = (f"void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<{hd}, "
               f"128, 64, 4, false, false, {cut}, pytorch_flash::Flash_kernel_traits<{hd}, 128, "
               f"64, 4, {cut}> >, false, true, false, false, false, true, false>"
               "(pytorch_flash::Flash_fwd_params)")
        return fwd, [
            (f"void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<{bt}, false, true, "
             "false, false, false, false>(pytorch_flash::Flash_bwd_params)"),
            (f"void pytorch_flash::flash_bwd_dot_do_o_kernel<true, {bt} >"
             "(pytorch_flash::Flash_bwd_params)"),
            (f"void pytorch_flash::flash_bwd_convert_dq_kernel<{bt} >"
             "(pytorch_flash::Flash_bwd_params, int)"),
        ]
    if impl == "efficient":
        tag = {"bf16": "bf16", "fp16": "f16", "fp32": "f32"}[dt]
        sm = "70" if w.device == "V100" else "80"
        ct = _CUTLASS[dt]
        fwd = (f"fmha_cutlassF_{tag}_aligned_64x64_rf_sm{sm}(PyTorchMemEffAttention::"
               f"AttentionKernel<{ct}, cutlass::arch::Sm{sm}, true, 64, 64, {hd}, true, true>"
               "::Params)")
        bwd = (f"fmha_cutlassB_{tag}_aligned_64x64_k{hd}_sm{sm}(PyTorchMemEffAttention::"
               f"AttentionBackwardKernel<cutlass::arch::Sm{sm}, {ct}, true, false, true, 64, 64, "
               f"{hd}, false>::Params)")
        return fwd, [bwd]
    t = {"bf16": "DF16b", "fp16": "DF16_", "fp32": "f"}[dt]
    shape = "NS_13TileFmhaShapeINS_8sequenceIJLi128ELi128ELi32ELi128ELi32ELi128EEEE"
    fwd = (f"_ZN7ck_tile6kentryILi256ELi1ENS_13FmhaFwdKernelINS_30BlockFmhaPipelineQRKSVSAsyncINS_"
           f"24BlockFmhaPipelineProblemI{t}{t}{t}ff{t}hf{t}{shape}Lb1EEELb0ENS_17ComposedAttention"
           f"ILj0ELb1EEENS_30SimplifiedGenericAttentionMaskILb1EEEEEENS_17Default2DEpilogueINS_"
           f"24Default2DEpilogueProblemIf{t}Lb0ELb0ELb1EEEEEEEEEvT1_")
    return fwd, [
        (f"_ZN7ck_tile6kentryILi256ELi1ENS_19FmhaBwdDQDKDVKernelINS_36BlockFmhaBwdDQDKDV"
         f"PipelineKRKTRVRINS_27BlockFmhaBwdPipelineProblemI{t}{t}{t}ff{t}{t}{t}{shape}"
         "Lb0EEEEEEEEvT1_"),
        (f"_ZN7ck_tile6kentryILi256ELi1ENS_22FmhaBwdOGradDotOKernelINS_29BlockFmhaBwdOGradDotO"
         f"ProblemI{t}{t}fLi256ELi128EEEEEEvT1_"),
        (f"_ZN7ck_tile6kentryILi256ELi1ENS_24FmhaBwdConvertQGradKernelINS_32BlockFmhaBwd"
         f"ConvertQGradProblemIf{t}Li256ELi128EEEEEEvT1_"),
    ]


def _ew(vec: int, functor: str, arity: int) -> str:
    return (f"void at::native::vectorized_elementwise_kernel<{vec}, {functor}, std::array<char*, "
            f"{arity}ul> >(int, {functor}, std::array<char*, {arity}ul>)")


def _lambda_functor(impl: str, ct: str, args: int) -> str:
    lam = ", ".join([ct] * args)
    return (f"at::native::{impl}(at::TensorIteratorBase&, at::native::GeluType)::{{lambda()#2}}::"
            f"operator()() const::{{lambda()#4}}::operator()() const::{{lambda({lam})#1}}")


def _kernel_names(w: Workload) -> dict[str, str]:
    ct = _CTYPE[w.dtype]
    vec = 8 if w.device == "MI300X" else 4
    anon = "at::native::(anonymous namespace)"
    sum_op = (f"at::native::ReduceOp<{ct}, at::native::func_wrapper_t<{ct}, at::native::sum_functor"
              f"<{ct}, float, {ct}>::operator()(at::TensorIterator&)::{{lambda(float, float)#1}}>, "
              f"unsigned int, {ct}, 4>")
    mean_op = (f"at::native::ReduceOp<{ct}, at::native::MeanOps<float, float, float, float>, "
               f"unsigned int, {ct}, 4>")
    mse = (f"at::native::(anonymous namespace)::mse_kernel_cuda(at::TensorIteratorBase&)::"
           f"{{lambda()#1}}::operator()() const::{{lambda()#4}}::operator()() const::"
           f"{{lambda({ct}, {ct})#1}}")
    mse_bwd = (f"at::native::mse_backward_cuda_kernel(at::TensorIterator&, c10::Scalar const&)::"
               f"{{lambda()#1}}::operator()() const::{{lambda()#4}}::operator()() const::"
               f"{{lambda({ct}, {ct}, {ct})#1}}")
    meta = f"{anon}::FusedOptimizerTensorListMetadata<4>"
    functor = f"{anon}::FusedAdamMathFunctor<{ct}, 4, (at::native::ADAM_MODE)1, false>"
    adam_args = "double*, double, double, double, double, double, bool, double*, double*"
    adam = (f"void {anon}::multi_tensor_apply_kernel<{meta}, {functor}, {adam_args}>"
            f"({meta}, {functor}, {adam_args})")
    return {
        "add": _ew(vec, f"at::native::CUDAFunctor_add<{ct}>", 3),
        "mul": _ew(vec, (f"at::native::BinaryFunctor<{ct}, {ct}, {ct}, "
                         "at::native::binary_internal::MulFunctor<float> >"), 3),
        "gelu": _ew(vec, _lambda_functor("GeluCUDAKernelImpl", ct, 1), 2),
        "gelu_bwd": _ew(vec, _lambda_functor("GeluBackwardCUDAKernelImpl", ct, 2), 3),
        "fill": _ew(vec, f"at::native::FillFunctor<{ct}>", 1),
        "mse": _ew(vec, mse, 3),
        "mse_bwd": _ew(vec, mse_bwd, 4),
        "tiny_add": _ew(vec, "at::native::CUDAFunctorOnSelf_add<float>", 2),
        "tiny_mul": _ew(vec, ("at::native::AUnaryFunctor<float, float, float, "
                              "at::native::binary_internal::MulFunctor<float> >"), 2),
        "tiny_fill": _ew(vec, "at::native::FillFunctor<float>", 1),
        "ln": (f"void {anon}::vectorized_layer_norm_kernel<{ct}, float>(int, float, {ct} const*, "
               f"{ct} const*, {ct} const*, float*, float*, {ct}*)"),
        "ln_bwd_input": (f"void {anon}::layer_norm_grad_input_kernel_vectorized<{ct}, float>("
                         f"{ct} const*, {ct} const*, float const*, float const*, {ct} const*, "
                         f"{ct}*, int)"),
        "ln_bwd_gamma": (f"void {anon}::GammaBetaBackwardCUDAKernel_32x32<{ct}, float>(long, long, "
                         f"{ct} const*, {ct} const*, float const*, float const*, {ct}*, {ct}*)"),
        "sum": f"void at::native::reduce_kernel<512, 1, {sum_op} >({sum_op})",
        "mean": f"void at::native::reduce_kernel<512, 1, {mean_op} >({mean_op})",
        "index_select": (f"void {anon}::indexSelectLargeIndex<{ct}, long, unsigned int, 2, 2, -2, "
                         f"true>(at::cuda::detail::TensorInfo<{ct}, unsigned int>, "
                         f"at::cuda::detail::TensorInfo<{ct} const, unsigned int>, "
                         "at::cuda::detail::TensorInfo<long const, unsigned int>, int, int, "
                         "unsigned int, unsigned int, long)"),
        "embedding_bwd": (f"void {anon}::embedding_backward_feature_kernel<{ct}, float, long>(long "
                          f"const*, {ct} const*, {ct}*, int, long, int)"),
        "adam": adam,
        "nccl": (f"ncclDevKernel_AllReduce_Sum_{_NCCL_DT[w.dtype]}_RING_LL(ncclDevComm*, "
                 "unsigned long, ncclWork*)"),
    }


# --- simulation -----------------------------------------------------------------------------

@dataclass
class _Kernel:
    name: str
    dur: int
    kind: str = "kernel"  # kernel | memcpy
    stream: int | None = None
    api: str | None = None
    bytes: int | None = None
    grid: list[int] | None = None
    block: list[int] | None = None
    dep: int = 0  # earliest GPU start (cross-stream dependency)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Node:
    """One autograd node recorded in forward (the tape), replayed in reverse by backward."""

    kind: str
    seq: int = 0
    fwd_start: int = 0
    info: dict[str, Any] = field(default_factory=dict)


class _Rank:
    """Simulates one rank; ``run()`` is a generator that yields at every collective."""

    def __init__(self, w: Workload, rank: int) -> None:
        self.w = w
        self.rank = rank
        self.amd = w.device == "MI300X"
        pid = 4242 + 100 * rank
        capture = {"record_shapes": int(w.record_shapes), "profile_memory": int(w.memory),
                   "with_stack": int(w.with_stack), "with_flops": 0,
                   "with_modules": int(w.with_stack)}
        self.b = KinetoTraceBuilder(rank=rank if w.world_size > 1 else None,
                                    world_size=w.world_size if w.world_size > 1 else None,
                                    device=w.device, pid=pid, tid=pid, capture=capture,
                                    vendor="amd" if self.amd else "nvidia")
        if w.world_size > 1:
            self.b.metadata["distributedInfo"] = {
                "backend": "nccl", "rank": rank, "world_size": w.world_size, "pg_count": 1,
                "pg_config": [{"pg_name": "0", "pg_desc": "default_pg",
                               "backend_config": "cuda:nccl", "pg_size": w.world_size,
                               "ranks": list(range(w.world_size))}],
                "nccl_version": "2.21.5"}
        self.main = pid
        self.bwd = pid + 17 if w.backward_thread else pid
        self.compute = self.b.default_stream
        self.comm = 3 if self.amd else 24
        self.t: dict[int, int] = {self.bwd: 0}
        self.t[self.main] = 50_000
        self.in_backward = False
        self.free: dict[int, int] = {self.compute: 0, self.comm: 0}
        self.recs: list[tuple[int, int, int, Callable[[], Any]]] = []
        self.late: list[Callable[[], Any]] = []
        self.flows: list[tuple[int, int, int]] = []
        self.mem: list[tuple[int, int, int, str, int]] = []  # (ts, order, tid, op, key)
        self.mem_size: dict[int, int] = {}
        self.mem_leak: set[int] = set()
        self.pending: list[int] = []  # heap of GPU end times (launch queue)
        self.launched = False
        self.seq = 4000
        self.coll_seq = 0
        self.names = _kernel_names(w)
        self.dt = _CTYPE[w.dtype]
        self.ds = _DSIZE[w.dtype]
        self.peak = PEAK_FLOPS[w.device][w.dtype]
        self.bw = MEM_BANDWIDTH[w.device]
        self.factor = 1.0  # this step's jitter factor
        self.gpu_scale = w.straggler_slowdown if rank == w.straggler_rank else 1.0
        self.rng_jitter = random.Random(w.seed * 1_000_003 + rank + 1)
        self.rng_shape = random.Random(w.seed)
        self.step_gpu = [0, 0]
        self.hd = HEAD_DIM if w.hidden % HEAD_DIM == 0 else 64
        self.heads = max(1, w.hidden // self.hd)
        self.tape: list[_Node] = []
        self.mod_count: dict[str, int] = {}

    # --- records ------------------------------------------------------------------------------
    def _rec(self, start: int, dur: int, fn: Callable[[], Any]) -> None:
        self.recs.append((start, -dur, len(self.recs), fn))

    def _shapes(self, dims: list | None, types: list | None) -> dict[str, Any]:
        if not self.w.record_shapes or dims is None:
            return {}
        return {"input_dims": dims, "input_types": types}

    def _next_seq(self) -> int:
        self.seq += 1
        return self.seq

    def _annotation(self, name: str, start: int, dur: int, tid: int,
                    gpu: tuple[int, int] | None = None) -> None:
        with self.b.annotation(name, start, dur, tid=tid, gpu=gpu):
            pass

    def _module(self, cls: str, start: int, dur: int, tid: int, inst: int) -> None:
        with self.b.module(cls, start, dur, tid=tid, instance=inst):
            pass

    @contextmanager
    def op(self, name: str, *, tid: int | None = None, dims: list | None = None,
           types: list | None = None, seq: int | None = None, **extra: Any) -> Iterator[int]:
        """A composite op around the ops issued inside the block; yields its start."""
        tid = self.main if tid is None else tid
        start = self.t[tid]
        self.t[tid] = start + WRAP_PRE_NS
        yield start
        end = self.t[tid] - OP_GAP_NS + WRAP_POST_NS
        self.t[tid] = end + OP_GAP_NS
        self._record_op(name, start, end, tid, dims, types, seq, extra)

    def _record_op(self, name: str, start: int, end: int, tid: int, dims: list | None,
                   types: list | None, seq: int | None, extra: dict[str, Any]) -> None:
        kw = self._shapes(dims, types)
        if seq is not None:
            kw.update(seq=seq, fwd_tid=int(self.in_backward))
        self._rec(start, end - start,
                  partial(self.b.op, name, start, end - start, tid=tid, **kw, **extra))

    @contextmanager
    def annotation(self, name: str, *, tid: int | None = None,
                   late: bool = False) -> Iterator[None]:
        """A record_function range around the block."""
        tid = self.main if tid is None else tid
        start = self.t[tid]
        self.t[tid] = start + ANN_PRE_NS
        yield
        end = self.t[tid] - OP_GAP_NS + ANN_POST_NS
        self.t[tid] = end + OP_GAP_NS
        fn = partial(self._annotation, name, start, end - start, tid)
        if late:  # registered after the launches inside it, so they link to the enclosing op
            self.late.append(fn)
        else:
            self._rec(start, end - start, fn)

    @contextmanager
    def module(self, cls: str, *, inst: int | None = None) -> Iterator[None]:
        if inst is None:
            inst = self.mod_count.get(cls, 0)
            self.mod_count[cls] = inst + 1
        if not self.w.with_stack:
            yield
            return
        tid = self.main
        start = self.t[tid]
        self.t[tid] = start + MODULE_PRE_NS
        yield
        end = self.t[tid] - OP_GAP_NS + MODULE_POST_NS
        self.t[tid] = end + OP_GAP_NS
        self._rec(start, end - start, partial(self._module, cls, start, end - start, tid, inst))

    def leaf(self, name: str, kernels: Sequence[_Kernel] = (), *, tid: int | None = None,
             dims: list | None = None, types: list | None = None, seq: int | None = None,
             alloc: int = 0, cpu_ns: int | None = None, **extra: Any) -> tuple[int, int | None]:
        """An op that launches ``kernels``; returns (start, key of the allocation it made)."""
        tid = self.main if tid is None else tid
        start = self.t[tid]
        if cpu_ns is None:
            cpu_ns = round(self.w.cpu_op_overhead_ns * self.factor) if kernels else CPU_ONLY_OP_NS
        c = start + cpu_ns
        key = self.malloc(c - min(cpu_ns // 2, 1_000), tid, alloc) if alloc else None
        for k in kernels:
            c = self.launch(k, c, tid)
        end = c + (OP_TAIL_NS if kernels else 0)
        self.t[tid] = end + OP_GAP_NS
        self._record_op(name, start, end, tid, dims, types, seq, extra)
        return start, key

    def cpu(self, ns: int, tid: int | None = None) -> None:
        tid = self.main if tid is None else tid
        self.t[tid] += ns

    # --- GPU ----------------------------------------------------------------------------------
    def launch(self, k: _Kernel, c: int, tid: int) -> int:
        """Launches ``k`` at CPU time ``c``; returns the CPU time after the launch call."""
        stream = self.compute if k.stream is None else k.stream
        api_ns = self.w.launch_ns
        if not self.launched and k.kind == "kernel":  # lazy module loading at the first kernel
            api_ns += self.w.cold_start_ns
            self.launched = True
        while self.pending and self.pending[0] <= c:
            heapq.heappop(self.pending)
        if len(self.pending) >= LAUNCH_QUEUE_DEPTH:  # the launch blocks until a slot frees up
            wait_until = c
            while len(self.pending) >= LAUNCH_QUEUE_DEPTH:
                wait_until = heapq.heappop(self.pending)
            api_ns += wait_until - c
        gpu_start = max(c + api_ns + LAUNCH_LATENCY_NS, self.free[stream] + KERNEL_GAP_NS, k.dep)
        dur = max(1, k.dur)
        self.free[stream] = gpu_start + dur
        heapq.heappush(self.pending, gpu_start + dur)
        self._track(gpu_start, gpu_start + dur)
        kw: dict[str, Any] = dict(k.extra)
        if k.kind == "memcpy":
            kw["memory bandwidth (GB/s)"] = round((k.bytes or 0) / dur, 6)
        self._rec(c, api_ns, partial(self.b.launch, k.name, cpu_start=c, gpu_start=gpu_start,
                                     gpu_dur=dur, cpu_dur=api_ns, stream=stream, kind=k.kind,
                                     api=k.api, tid=tid, bytes=k.bytes, grid=k.grid,
                                     block=k.block, **kw))
        return c + api_ns + 300

    def _track(self, start: int, end: int) -> None:
        """Extent of the GPU work launched in the current step (its gpu_user_annotation)."""
        if self.step_gpu[1] == 0:
            self.step_gpu = [start, end]
        else:
            self.step_gpu = [min(self.step_gpu[0], start), max(self.step_gpu[1], end)]

    def _gpu_ns(self, seconds: float, floor: int = MIN_KERNEL_NS) -> int:
        return max(floor, round(seconds * 1e9 * self.factor * self.gpu_scale))

    def gemm(self, m: int, n: int, k: int, layout: str) -> _Kernel:
        name, api = _gemm_kernel(self.w, layout, n)
        dur = self._gpu_ns(2.0 * m * n * k / (self.peak * self.w.gemm_efficiency))
        tiles = max(1, math.ceil(m / 128)) * max(1, math.ceil(n / 128))
        return _Kernel(name, dur, api=api, grid=[min(tiles, 65_535), 1, 1],
                       block=[384 if self.w.device == "H100" else 256, 1, 1])

    def mem_kernel(self, key: str, nbytes: float, numel: int = 0) -> _Kernel:
        dur = self._gpu_ns(nbytes / (self.bw * self.w.memory_efficiency))
        blocks = max(1, min(2**31 - 1, math.ceil((numel or nbytes / self.ds) / 512)))
        return _Kernel(self.names[key], dur, grid=[blocks, 1, 1], block=[128, 1, 1])

    # --- memory -------------------------------------------------------------------------------
    def malloc(self, ts: int, tid: int, nbytes: int, *, leak: bool = False) -> int:
        key = len(self.mem_size)
        self.mem_size[key] = nbytes
        if leak:
            self.mem_leak.add(key)
        self.mem.append((ts, len(self.mem), tid, "alloc", key))
        return key

    def mfree(self, ts: int, tid: int, key: int | None) -> None:
        if key is not None:
            self.mem.append((ts, len(self.mem), tid, "free", key))

    # --- the training loop ----------------------------------------------------------------------
    def run(self) -> Generator[tuple[int, int], int, None]:
        w = self.w
        n_sync_fwd = max(0, w.syncs_per_step - 1)
        slots = 2 * w.layers
        self.sync_plan = [n_sync_fwd // slots + (1 if i < n_sync_fwd % slots else 0)
                          for i in range(slots)]
        for i in range(w.steps):
            self.factor = 1.0
            if w.jitter:
                self.factor += w.jitter * (2.0 * self.rng_jitter.random() - 1.0)
            self.step_gpu = [0, 0]
            start = self.t[self.main]
            self.t[self.main] = start + ANN_PRE_NS
            if w.slow_step_every and (i + 1) % w.slow_step_every == 0 and w.slow_step_extra_ns:
                s0 = self.t[self.main]
                if w.with_stack:
                    self._rec(s0, w.slow_step_extra_ns, partial(
                        self.b.python, "<built-in function collect>", s0, w.slow_step_extra_ns))
                self.t[self.main] = s0 + w.slow_step_extra_ns + OP_GAP_NS
            yield from self._step()
            end = self.t[self.main] - OP_GAP_NS + ANN_POST_NS
            g0, g1 = self.step_gpu
            proj = (g0, g1 - g0) if g1 else None
            name = f"ProfilerStep#{w.first_step + i}"
            self._rec(start, end - start,
                      partial(self._annotation, name, start, end - start, self.main, proj))
            self.t[self.main] = end + 4_000  # prof.step()

    def _step(self) -> Generator[tuple[int, int], int, None]:
        w, T, dt = self.w, self.w.tokens, self.dt
        with self.annotation("Optimizer.zero_grad#AdamW.zero_grad"):
            self.cpu(8_000)
        with self.annotation("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"):
            self.cpu(max(0, round(w.dataloader_ns * self.factor) - ANN_PRE_NS))
        batch = [w.batch, w.seq]
        nbytes = T * 8
        copy = _Kernel("Memcpy HtoD (Pinned -> Device)", max(2_000, round(nbytes / 25e9 * 1e9)),
                       kind="memcpy", bytes=nbytes)
        with self.op("aten::to", dims=[batch, [], [], [], [], []],
                     types=["long int"] + ["Scalar"] * 5), \
                self.op("aten::_to_copy", dims=[batch, [], [], [], [], [], []],
                        types=["long int"] + ["Scalar"] * 6):
            _, batch_key = self.leaf("aten::copy_", [copy], dims=[batch, batch, []],
                                     types=["long int", "long int", "Scalar"], alloc=nbytes)
        self.tape = []
        if w.world_size > 1:
            with self.annotation("DistributedDataParallel.forward"), \
                    self.module("DistributedDataParallel", inst=0):
                self._forward()
        else:
            self._forward()
        # a leak: something keeps a tensor (and its graph) alive across steps
        if w.leak_bytes_per_step:
            self.malloc(self.t[self.main], self.main, w.leak_bytes_per_step, leak=True)
        # loss.backward()
        with self.annotation("## backward ##"):
            with self.op("aten::ones_like", dims=[[], [], [], [], [], []],
                         types=[dt, "Scalar", "Scalar", "Scalar", "Scalar", "Scalar"]):
                with self.op("aten::empty_like", dims=[[], [], [], [], [], []],
                             types=[dt, "Scalar", "Scalar", "Scalar", "Scalar", "Scalar"]):
                    self.cpu(1_500)
                self.leaf("aten::fill_", [self.mem_kernel("fill", self.ds, 1)], dims=[[], []],
                          types=[dt, "Scalar"])
            self.t[self.bwd] = max(self.t[self.bwd], self.t[self.main] + 15_000)
            self.in_backward = True
            yield from self._backward()
            self.in_backward = False
            self.t[self.main] = max(self.t[self.main], self.t[self.bwd] + 8_000)
        self.mfree(self.t[self.main], self.main, batch_key)
        # optimizer
        self.free[self.compute] = max(self.free[self.compute], self.free[self.comm])  # DDP wait
        with self.annotation("Optimizer.step#AdamW.step"):
            self._adamw()
        # host syncs: loss.item() at the end of the step
        if w.syncs_per_step:
            self._item()

    def _forward(self) -> None:
        w, T, H, dt = self.w, self.w.tokens, self.w.hidden, self.dt
        B, S = w.batch, w.seq
        self.mod_count = {}  # nn.Module instance numbers are per module object: same every step
        with self.annotation("## forward ##"), self.module("TransformerLM", inst=0):
            self.tape.append(_Node("bucket", info={"bytes": self._bucket_bytes(-1)}))
            with self.module("Embedding", inst=0):
                seq = self._next_seq()
                with self.op("aten::embedding", dims=[[VOCAB, H], [B, S], [], [], []],
                             types=[dt, "long int", "Scalar", "Scalar", "Scalar"],
                             seq=seq) as start:
                    kern = self.mem_kernel("index_select", 2 * T * H * self.ds, T * H)
                    _, key = self.leaf("aten::index_select", [kern], dims=[[VOCAB, H], [], [B * S]],
                                       types=[dt, "Scalar", "long int"], alloc=T * H * self.ds)
                self.tape.append(_Node("embedding", seq, start, {"saved": key}))
            for layer in range(w.layers):
                self.tape.append(_Node("bucket", info={"bytes": self._bucket_bytes(layer)}))
                self._block(layer)
            self._layer_norm(2 * w.layers)
            with self.module("MSELoss", inst=0):
                seq = self._next_seq()
                kerns = [self.mem_kernel("mse", 3 * T * H * self.ds, T * H),
                         self.mem_kernel("mean", T * H * self.ds, T * H)]
                start, key = self.leaf("aten::mse_loss", kerns, dims=[[B, S, H], [B, S, H], []],
                                       types=[dt, dt, "Scalar"], seq=seq, alloc=T * H * self.ds)
                self.tape.append(_Node("mse", seq, start, {"saved": key}))

    def _bucket_bytes(self, layer: int) -> int:
        """Gradient bytes all-reduced after ``layer``'s backward (-1: the final, exposed bucket)."""
        w = self.w
        if w.world_size <= 1 or not w.comm_bytes:
            return 0
        overlapped = round(w.comm_bytes * w.comm_overlap) if w.layers > 1 else 0
        if layer == -1:
            return w.comm_bytes - overlapped
        if layer == 0:
            return 0
        share, rest = divmod(overlapped, w.layers - 1)
        return share + (rest if layer == w.layers - 1 else 0)

    def _layer_norm(self, inst: int) -> None:
        w, T, H, dt = self.w, self.w.tokens, self.w.hidden, self.dt
        with self.module("LayerNorm", inst=inst):
            seq = self._next_seq()
            with self.op("aten::layer_norm", dims=[[w.batch, w.seq, H], [], [H], [H], [], []],
                         types=[dt, "", dt, dt, "Scalar", "Scalar"], seq=seq):
                start, key = self.leaf("aten::native_layer_norm",
                                       [self.mem_kernel("ln", 2 * T * H * self.ds, T * H)],
                                       dims=[[w.batch, w.seq, H], [], [H], [H], []],
                                       types=[dt, "", dt, dt, "Scalar"], seq=seq,
                                       alloc=T * H * self.ds)
            self.tape.append(_Node("ln", seq, start, {"saved": key}))

    def _linear(self, k_in: int, n_out: int) -> None:
        w, T, dt = self.w, self.w.tokens, self.dt
        with self.module("Linear"):
            seq_t = self._next_seq()
            with self.op("aten::linear", dims=[[w.batch, w.seq, k_in], [n_out, k_in], [n_out]],
                         types=[dt, dt, dt], seq=seq_t):
                start_t, _ = self.leaf("aten::t", dims=[[n_out, k_in]], types=[dt], seq=seq_t)
                seq = self._next_seq()
                start, key = self.leaf("aten::addmm", [self.gemm(T, n_out, k_in, "tn")],
                                       dims=[[n_out], [T, k_in], [k_in, n_out], [], []],
                                       types=[dt, dt, dt, "Scalar", "Scalar"], seq=seq,
                                       alloc=T * n_out * self.ds)
        self.tape.append(_Node("t", seq_t, start_t, {"k": k_in, "n": n_out}))
        self.tape.append(_Node("addmm", seq, start, {"k": k_in, "n": n_out, "saved": key}))

    def _block(self, layer: int) -> None:
        w, T, H, dt = self.w, self.w.tokens, self.w.hidden, self.dt
        B, S, F = w.batch, w.seq, 4 * w.hidden
        with self.module("TransformerBlock", inst=layer):
            self._layer_norm(2 * layer)
            with self.module("SelfAttention", inst=layer):
                self._linear(H, 3 * H)
                self._attention()
                self._linear(H, H)
            self._residual()
            self._tiny(0)
            self._syncs(2 * layer)
            self._layer_norm(2 * layer + 1)
            with self.module("MLP", inst=layer):
                self._linear(H, F)
                with self.module("GELU", inst=layer):
                    seq = self._next_seq()
                    kern = self.mem_kernel("gelu", 2 * T * F * self.ds, T * F)
                    start, key = self.leaf("aten::gelu", [kern], dims=[[B, S, F], []],
                                           types=[dt, ""], seq=seq, alloc=T * F * self.ds)
                    self.tape.append(_Node("gelu", seq, start, {"saved": key}))
                # elementwise_scale: extra memory-bound work (gating / scaling of the MLP
                # activations), on top of the 18·T·H elements a block moves in norms/adds/GELU
                extra_bytes = (w.elementwise_scale - 1.0) * 18 * T * H * self.ds
                n_extra = 0
                if extra_bytes > 0:
                    n_extra = math.ceil(extra_bytes / (3 * T * F * self.ds) - 1e-9)
                for _ in range(n_extra):
                    seq = self._next_seq()
                    nb = extra_bytes / n_extra
                    start, key = self.leaf("aten::mul", [self.mem_kernel("mul", nb, T * F)],
                                           dims=[[B, S, F], [B, S, F]], types=[dt, dt], seq=seq,
                                           alloc=round(nb / 3))
                    self.tape.append(_Node("mul", seq, start, {"saved": key, "bytes": nb}))
                self._linear(F, H)
            self._residual()
            self._tiny(1)
            self._syncs(2 * layer + 1)

    def _attention(self) -> None:
        w, T, H, dt = self.w, self.w.tokens, self.w.hidden, self.dt
        qkv = [w.batch, self.heads, w.seq, self.hd]
        impl = _attention_impl(w)
        fwd_name, _ = _attention_kernels(w, self.hd)
        flops = 2.0 * w.batch * w.seq * w.seq * H  # causal: half of 4·B·S²·H
        dur = self._gpu_ns(flops / (self.peak * self.w.gemm_efficiency * 0.75))
        kern = _Kernel(fwd_name, dur, grid=[math.ceil(w.seq / 128), self.heads, w.batch],
                       block=[128, 1, 1], api="hipLaunchKernel" if self.amd else None)
        kind = "efficient" if impl == "efficient" else "flash"
        inner = (f"aten::_scaled_dot_product_{kind}_attention", f"aten::_{kind}_attention_forward")
        seq = self._next_seq()
        scalars = ["Scalar"] * 4
        with self.op("aten::scaled_dot_product_attention", dims=[qkv, qkv, qkv, [], [], [], [], []],
                     types=[dt, dt, dt, "", *scalars], seq=seq), \
                self.op(inner[0], dims=[qkv, qkv, qkv, [], [], [], []],
                        types=[dt, dt, dt, *scalars], seq=seq) as start:
            _, key = self.leaf(inner[1], [kern], dims=[qkv, qkv, qkv, [], [], [], [], [], []],
                               types=[dt, dt, dt, "", "", "Scalar", "Scalar", "Scalar", "Scalar"],
                               alloc=T * H * self.ds)
        self.tape.append(_Node("sdpa", seq, start, {"saved": key, "flops": flops}))

    def _residual(self) -> None:
        w, T, H, dt = self.w, self.w.tokens, self.w.hidden, self.dt
        seq = self._next_seq()
        act = [w.batch, w.seq, H]
        start, key = self.leaf("aten::add", [self.mem_kernel("add", 3 * T * H * self.ds, T * H)],
                               dims=[act, act, []], types=[dt, dt, "Scalar"], seq=seq,
                               alloc=T * H * self.ds)
        self.tape.append(_Node("add", seq, start, {"saved": key}))

    def _tiny(self, half: int) -> None:
        """Tiny elementwise ops on small buffers (no autograd): 1-3 µs kernels."""
        n = self.w.tiny_kernels_per_layer
        count = n // 2 + (n % 2 if half == 0 else 0)
        ops = (("aten::add_", "tiny_add"), ("aten::mul_", "tiny_mul"), ("aten::fill_", "tiny_fill"))
        for j in range(count):
            name, key = ops[j % 3]
            dur = max(1, round(self.rng_shape.randint(1_000, 3_000) * self.factor * self.gpu_scale))
            kern = _Kernel(self.names[key], dur, grid=[1, 1, 1], block=[128, 1, 1])
            self.leaf(name, [kern], dims=[[self.w.hidden], []], types=["float", "Scalar"])

    def _syncs(self, slot: int) -> None:
        for _ in range(self.sync_plan[slot]):
            self._item()

    def _item(self) -> None:
        """``aten::item`` -> ``aten::_local_scalar_dense``: a DtoH copy queued behind all the
        work launched so far, and a host wait until it is done."""
        dt, tid, stream = self.dt, self.main, self.compute
        with self.op("aten::item", dims=[[]], types=[dt]):
            start = self.t[tid]
            c = start + round(self.w.cpu_op_overhead_ns * self.factor)
            if self.amd:  # hipMemcpyWithStream itself blocks until its copy is done
                gpu_start = max(c + 3_000, self.free[stream] + KERNEL_GAP_NS)
                api_ns = gpu_start + 2_000 + 2_000 - c
                self.free[stream] = gpu_start + 2_000
                heapq.heappush(self.pending, gpu_start + 2_000)
                self._track(gpu_start, gpu_start + 2_000)
                self._rec(c, api_ns, partial(
                    self.b.launch, "Memcpy DtoH (Device -> Host)", cpu_start=c,
                    gpu_start=gpu_start, gpu_dur=2_000, cpu_dur=api_ns, stream=stream,
                    kind="memcpy", api="hipMemcpyWithStream", tid=tid, bytes=self.ds,
                    **{"memory bandwidth (GB/s)": round(self.ds / 2_000, 6)}))
                c += api_ns
            else:  # cudaMemcpyAsync, then cudaStreamSynchronize until the stream drains
                copy = _Kernel("Memcpy DtoH (Device -> Pinned)", 2_000, kind="memcpy",
                               bytes=self.ds, api="cudaMemcpyAsync")
                c = self.launch(copy, c, tid)
                sync_ns = max(2_000, self.free[stream] + 1_000 - c)
                self._rec(c, sync_ns, partial(self.b.runtime, "cudaStreamSynchronize", c, sync_ns,
                                              tid=tid))
                c += sync_ns
            end = c + OP_TAIL_NS
            self.t[tid] = end + OP_GAP_NS
            self._rec(start, end - start, partial(self.b.op, "aten::_local_scalar_dense", start,
                                                  end - start, tid=tid, **self._shapes([[]], [dt])))
        self.cpu(POST_SYNC_HOST_NS)

    # --- backward -------------------------------------------------------------------------------
    @contextmanager
    def node(self, name: str, seq: int | None, fwd_start: int | None) -> Iterator[None]:
        """``autograd::engine::evaluate_function: <name>`` around ``<name>`` around the block."""
        tid = self.bwd
        start = self.t[tid]
        if seq is not None and fwd_start is not None:
            self.flows.append((fwd_start, start, seq))
        self.t[tid] = start + WRAP_PRE_NS
        with self.op(name, tid=tid, seq=seq):
            yield
        end = self.t[tid] - OP_GAP_NS + WRAP_POST_NS
        self.t[tid] = end + OP_GAP_NS
        kw: dict[str, Any] = {"seq": seq, "fwd_tid": 1} if seq is not None else {}
        self._rec(start, end - start, partial(
            self.b.op, f"autograd::engine::evaluate_function: {name}", start, end - start, tid=tid,
            **kw))

    def _accumulate(self, dims: list, hook_bytes: int = 0) -> Generator[tuple[int, int], int, None]:
        """AccumulateGrad for one parameter; ``hook_bytes``: the DDP bucket it completes."""
        tid = self.bwd
        with self.op("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad",
                     tid=tid):
            self.leaf("torch::autograd::AccumulateGrad", tid=tid, dims=[dims], types=[self.dt])
            if hook_bytes:
                yield from self._allreduce(hook_bytes)

    def _allreduce(self, nbytes: int) -> Generator[tuple[int, int], int, None]:
        """DDP's all-reduce of one gradient bucket, from the autograd thread, on the NCCL stream.
        Yields (arrival, duration) to the driver and receives the collective's end time."""
        w, tid = self.w, self.bwd
        nelems = nbytes // self.ds
        self.coll_seq += 1
        coll = {"Collective name": "allreduce", "In msg nelems": nelems, "Out msg nelems": nelems,
                "Group size": w.world_size, "dtype": _COLL_DT[w.dtype], "In split size": "[]",
                "Out split size": "[]", "Process Group Name": "0",
                "Process Group Description": "default_pg",
                "Process Group Ranks": str(list(range(w.world_size))), "Rank": self.rank,
                "Global rank start": 0, "Global rank stride": 1, "Is asynchronized op": True}
        on_kernel = {k: v for k, v in coll.items() if k not in ("Rank", "Is asynchronized op")}
        on_kernel["Seq"] = self.coll_seq
        with self.op("c10d::allreduce_", tid=tid), self.op("record_param_comms", tid=tid, **coll):
            c = self.t[tid] + 4_000
            if not self.amd:
                self._rec(c, 1_500, partial(self.b.runtime, "cudaStreamWaitEvent", c, 1_500,
                                            tid=tid))
                c += 2_500
            self.t[tid] = c
            with self.annotation("nccl:all_reduce", tid=tid, late=True):
                c = self.t[tid] + 6_000
                api_ns = w.launch_ns + 4_000
                # waits for the gradients it reduces: everything launched on the compute stream
                arrival = max(c + api_ns + LAUNCH_LATENCY_NS, self.free[self.comm] + KERNEL_GAP_NS,
                              self.free[self.compute])
                n = w.world_size
                dur = COMM_LATENCY_NS + round(nbytes * 2 * (n - 1) / n / w.comm_bandwidth * 1e9)
                end = yield (arrival, dur)
                self.free[self.comm] = end
                heapq.heappush(self.pending, end)
                self.step_gpu[1] = max(self.step_gpu[1], end)
                self._rec(c, api_ns, partial(
                    self.b.launch, self.names["nccl"], cpu_start=c, gpu_start=arrival,
                    gpu_dur=end - arrival, cpu_dur=api_ns, stream=self.comm,
                    api="hipExtLaunchKernel" if self.amd else "cudaLaunchKernelExC", tid=tid,
                    grid=[32, 1, 1], block=[512 if self.amd else 640, 1, 1], **on_kernel))
                self.t[tid] = c + api_ns + 3_000

    def _backward(self) -> Generator[tuple[int, int], int, None]:
        """Replays the forward tape in reverse on the autograd thread."""
        grad: list[int | None] = [None]  # the live incoming gradient (an allocation key)
        tape = self.tape
        for idx in range(len(tape) - 1, -1, -1):
            nd = tape[idx]
            if nd.kind == "bucket":
                continue
            # a DDP bucket is complete once the tape entry before this one is a bucket marker
            prev = tape[idx - 1] if idx > 0 else None
            hook = prev.info["bytes"] if prev is not None and prev.kind == "bucket" else 0
            yield from self._backward_node(nd, grad, hook)
        self.mfree(self.t[self.bwd], self.bwd, grad[0])
        if self.w.world_size > 1 and self.w.comm_bytes and not self.amd:
            c = self.t[self.bwd]  # DDP: the compute stream waits for the all-reduce
            self._rec(c, 1_500, partial(self.b.runtime, "cudaStreamWaitEvent", c, 1_500,
                                        tid=self.bwd))
            self.t[self.bwd] = c + 2_500

    def _backward_node(self, nd: _Node, grad: list[int | None],
                       hook: int) -> Generator[tuple[int, int], int, None]:
        w, T, H, dt, tid, ds = self.w, self.w.tokens, self.w.hidden, self.dt, self.bwd, self.ds
        B, S, F = w.batch, w.seq, 4 * w.hidden
        info = nd.info
        saved = info.get("saved")

        def swap(size: int) -> tuple[int | None, int | None]:
            """(new grad key, old grad key): the node's output gradient replaces the old one."""
            new = self.malloc(self.t[tid], tid, size) if size else None
            old = grad[0] if new is not None else None
            if new is not None:
                grad[0] = new
            return new, old

        def release(old: int | None) -> None:
            self.mfree(self.t[tid], tid, saved)
            self.mfree(self.t[tid], tid, old)

        if nd.kind == "addmm":
            k, n = info["k"], info["n"]
            with self.node("AddmmBackward0", nd.seq, nd.fwd_start):
                _, old = swap(T * k * ds)
                self.leaf("aten::t", tid=tid, dims=[[k, n]], types=[dt])
                self.leaf("aten::mm", [self.gemm(T, k, n, "nn")], tid=tid, dims=[[T, n], [n, k]],
                          types=[dt, dt])
                self.leaf("aten::t", tid=tid, dims=[[T, n]], types=[dt])
                self.leaf("aten::mm", [self.gemm(n, k, T, "nt")], tid=tid, dims=[[n, T], [T, k]],
                          types=[dt, dt])
                self.leaf("aten::sum", [self.mem_kernel("sum", T * n * ds, T * n)], tid=tid,
                          dims=[[T, n], [], [], []], types=[dt, "ScalarList", "Scalar", ""])
                release(old)
            yield from self._accumulate([n])
        elif nd.kind == "t":
            with self.node("TBackward0", nd.seq, nd.fwd_start):
                self.leaf("aten::t", tid=tid, dims=[[info["k"], info["n"]]], types=[dt])
            yield from self._accumulate([info["n"], info["k"]])
        elif nd.kind == "ln":
            with self.node("NativeLayerNormBackward0", nd.seq, nd.fwd_start):
                _, old = swap(T * H * ds)
                kerns = [self.mem_kernel("ln_bwd_input", 3 * T * H * ds, T * H),
                         self.mem_kernel("ln_bwd_gamma", 2 * T * H * ds, T * H)]
                self.leaf("aten::native_layer_norm_backward", kerns, tid=tid,
                          dims=[[B, S, H], [B, S, H], [], [B, S, 1], [B, S, 1], [H], [H], []],
                          types=[dt, dt, "", "float", "float", dt, dt, "ScalarList"])
                release(old)
            yield from self._accumulate([H])
            yield from self._accumulate([H], hook)
            hook = 0
        elif nd.kind == "sdpa":
            self._attention_backward(nd, swap, release)
        else:
            if nd.kind == "gelu":
                name, op, size = "GeluBackward0", "aten::gelu_backward", T * F * ds
                kerns = [self.mem_kernel("gelu_bwd", 3 * T * F * ds, T * F)]
                dims, types = [[B, S, F], [B, S, F], []], [dt, dt, ""]
            elif nd.kind == "mul":
                nb = info["bytes"]
                name, op, size = "MulBackward0", "aten::mul", round(nb / 3)
                kerns = [self.mem_kernel("mul", nb, T * F), self.mem_kernel("mul", nb, T * F)]
                dims, types = [[B, S, F], [B, S, F]], [dt, dt]
            elif nd.kind == "add":
                name, op, size, kerns, dims, types = "AddBackward0", "", 0, [], [], []
            elif nd.kind == "mse":
                name, op, size = "MseLossBackward0", "aten::mse_loss_backward", T * H * ds
                kerns = [self.mem_kernel("mse_bwd", 3 * T * H * ds, T * H)]
                dims, types = [[], [B, S, H], [B, S, H], []], [dt, dt, dt, "Scalar"]
            elif nd.kind == "embedding":
                name, op = "EmbeddingBackward0", "aten::embedding_dense_backward"
                size = VOCAB * H * ds
                kerns = [self.mem_kernel("fill", VOCAB * H * ds, VOCAB * H),
                         self.mem_kernel("embedding_bwd", 2 * T * H * ds, T * H)]
                dims = [[B, S, H], [B, S], [], [], []]
                types = [dt, "long int", "Scalar", "Scalar", "Scalar"]
            else:
                raise AssertionError(nd.kind)
            with self.node(name, nd.seq, nd.fwd_start):
                _, old = swap(size)
                if op:
                    self.leaf(op, kerns, tid=tid, dims=dims, types=types)
                release(old)
            if nd.kind == "embedding":
                yield from self._accumulate([VOCAB, H], hook)
                hook = 0
        if hook:  # a bucket boundary on a node without parameters (not built by _forward)
            yield from self._allreduce(hook)

    def _attention_backward(self, nd: _Node, swap: Callable[[int], tuple[int | None, int | None]],
                            release: Callable[[int | None], None]) -> None:
        w, T, H, dt, tid, ds = self.w, self.w.tokens, self.w.hidden, self.dt, self.bwd, self.ds
        B, S = w.batch, w.seq
        _, names = _attention_kernels(w, self.hd)
        qkv = [B, self.heads, S, self.hd]
        grid = [math.ceil(S / 128), self.heads, B]
        main = self._gpu_ns(2.5 * nd.info["flops"] / (self.peak * w.gemm_efficiency * 0.75))
        kerns = [_Kernel(names[0], main, grid=[math.ceil(S / 64), self.heads, B], block=[256, 1, 1],
                         api="hipLaunchKernel" if self.amd else None)]
        if len(names) > 1:  # flash / ck: dO·O before, dQ conversion after
            bw = self.bw * w.memory_efficiency
            kerns.insert(0, _Kernel(names[1], self._gpu_ns(2 * T * H * ds / bw), grid=grid,
                                    block=[256, 1, 1]))
            kerns.append(_Kernel(names[2], self._gpu_ns(T * H * (4 + ds) / bw), grid=grid,
                                 block=[256, 1, 1]))
        kind = "Efficient" if _attention_impl(w) == "efficient" else "Flash"
        low = kind.lower()
        with self.node(f"ScaledDotProduct{kind}AttentionBackward0", nd.seq, nd.fwd_start):
            _, old = swap(3 * T * H * ds)
            dims, types = [qkv, qkv, qkv, qkv, [B, self.heads, S]], [dt, dt, dt, dt, "float"]
            with self.op(f"aten::_scaled_dot_product_{low}_attention_backward", tid=tid, dims=dims,
                         types=types):
                self.leaf(f"aten::_{low}_attention_backward", kerns, tid=tid, dims=dims,
                          types=types)
            release(old)

    def _adamw(self) -> None:
        """``aten::_fused_adamw_``: multi_tensor_apply chunks over all parameters (memory-bound)."""
        w = self.w
        P = w.params
        n_launch = max(1, min(64, math.ceil(P / ADAM_CHUNK_ELEMS)))
        per = P * (3 * self.ds + 16) / n_launch  # param, grad r/w + fp32 exp_avg, exp_avg_sq r/w
        tensors = 16 * w.layers + 3
        kerns = [self.mem_kernel("adam", per, P // n_launch) for _ in range(n_launch)]
        for k in kerns:
            k.grid, k.block = [320, 1, 1], [512, 1, 1]
        self.leaf("aten::_fused_adamw_", kerns, dims=[[tensors]] * 5 + [[]] * 10,
                  types=["TensorList"] * 5 + ["Scalar"] * 10)

    # --- output ---------------------------------------------------------------------------------
    def finish(self) -> KinetoTraceBuilder:
        w, b = self.w, self.b
        if w.memory:
            self._emit_memory()
        # Records go out in start order, so an op that ended before the current record can no
        # longer enclose anything still to come: park it, so the builder's enclosing-op lookup
        # stays short (it scans every op per launch), and put it back at the end.
        ops = getattr(b, "_ops", None)
        parked: list[Any] = []
        for i, (start, _neg, _order, fn) in enumerate(sorted(self.recs)):
            if isinstance(ops, list) and i % 64 == 0:
                live = [op for op in b._ops if op.end >= start]
                parked.extend(op for op in b._ops if op.end < start)
                b._ops = live
            fn()
        if isinstance(ops, list):
            b._ops = parked + b._ops
        for fn in self.late:
            fn()
        for fwd_start, bwd_start, _seq in self.flows:
            b.fwdbwd(fwd_start, bwd_start, fwd_tid=self.main, bwd_tid=self.bwd)
        self._post_process()
        return b

    def _emit_memory(self) -> None:
        w = self.w
        total = DEVICE_PRESETS[w.device]["totalGlobalMem"]
        events = sorted(self.mem)
        # real (unscaled) activation curve -> scale so the peak lands on the requested fraction
        cur = peak = 0
        for _ts, _o, _tid, kind, key in events:
            if key in self.mem_leak:
                continue
            cur += self.mem_size[key] if kind == "alloc" else -self.mem_size[key]
            peak = max(peak, cur)
        leak_total = w.leak_bytes_per_step * w.steps
        target_alloc = w.peak_memory_fraction * total / w.reserved_overhead
        avail = max(2 * GiB, target_alloc - leak_total)
        # true tensor sizes unless activations would exceed 60% of the budget; the rest is
        # persistent state (weights, grads, optimizer state, caches)
        act = min(peak, 0.6 * avail)
        baseline = avail - act
        scale = act / peak if peak else 0.0
        sizes = {k: (v if k in self.mem_leak else max(512, round(v * scale / 512) * 512))
                 for k, v in self.mem_size.items()}
        alloc = round(baseline / 512) * 512
        reserved = self._reserve(0, alloc)
        device_type = 6 if self.amd else 1
        addr = {k: 0x7F0000000000 + 0x200000 * i for i, k in enumerate(sizes)}
        ts = 0
        for ts, _o, tid, kind, key in events:
            nbytes = sizes[key] if kind == "alloc" else -sizes[key]
            alloc += nbytes
            reserved = self._reserve(reserved, alloc)
            self._rec(ts, 0, partial(self.b.memory, ts, nbytes, alloc, reserved, addr=addr[key],
                                     device_type=device_type, tid=tid))
        if w.oom:
            t_oom = max(ts, self.t[self.main]) + 1_000
            request = max(GiB, total - reserved + GiB)
            self._rec(t_oom, 0, partial(self.b.memory, t_oom, request, alloc, reserved,
                                        device_type=device_type, tid=self.main, oom=True))

    def _reserve(self, reserved: int, alloc: int) -> int:
        total = DEVICE_PRESETS[self.w.device]["totalGlobalMem"]
        want = math.ceil(alloc * self.w.reserved_overhead / (2 * MiB)) * 2 * MiB
        return min(total, max(reserved, want))

    def _post_process(self) -> None:
        """What the builder does not write: real cbids, ROCm arg shapes, thread/stream names."""
        b = self.b
        kernels_by_corr: dict[int, dict[str, Any]] = {}
        for ev in b.events:
            if ev.get("cat") in ("kernel", "gpu_memcpy") and ev.get("ph") == "X":
                kernels_by_corr[ev["args"]["correlation"]] = ev
        for ev in b.events:
            cat = ev.get("cat")
            if self.amd and cat == "kernel":
                for key in _AMD_DROP:
                    ev["args"].pop(key, None)
                ev["args"]["kind"] = "Dispatch Kernel"
            elif cat == "cuda_runtime":
                args = ev["args"]
                if self.amd:
                    args.pop("cbid", None)
                    args["cid"] = _CID.get(ev["name"], 0)
                    k = kernels_by_corr.get(args["correlation"])
                    if k is not None and k["cat"] == "kernel":
                        args["kernel"] = k["name"]
                        args["grid"], args["block"] = k["args"].get("grid"), k["args"].get("block")
                elif ev["name"] in _CBID:
                    args["cbid"] = _CBID[ev["name"]]
                if ev["name"] == "cuLaunchKernel":
                    ev["cat"] = "cuda_driver"
                    args["cbid"] = 307
        ts0 = _us(0, b.style, b.base_ns)
        names = []
        if self.bwd != self.main:
            names.append((b.pid, self.bwd, f"thread {self.bwd} (pt_autograd_0)"))
        names += [(0, s, f"stream {s} ") for s in sorted(self.free) if self._stream_used(s)]
        for pid, tid, name in names:
            b.events.append({"name": "thread_name", "ph": "M", "ts": ts0, "pid": pid, "tid": tid,
                             "args": {"name": name}})

    def _stream_used(self, stream: int) -> bool:
        return stream == self.compute or (self.w.world_size > 1 and self.w.comm_bytes > 0)


def _simulate(w: Workload, ranks: list[int]) -> list[_Rank]:
    """Runs ``ranks`` in lockstep: a collective ends when its last rank arrives plus its
    duration."""
    sims = [_Rank(w, r) for r in ranks]
    gens = [s.run() for s in sims]
    pending: list[tuple[int, int] | None] = []
    for g in gens:
        pending.append(next(g, None))
    while any(p is not None for p in pending):
        if any(p is None for p in pending):
            raise RuntimeError("ranks disagree on the number of collectives")
        arrivals = [p[0] for p in pending if p is not None]
        dur = max(p[1] for p in pending if p is not None)
        end = max(arrivals) + dur
        nxt: list[tuple[int, int] | None] = []
        for g in gens:
            try:
                nxt.append(g.send(end))
            except StopIteration:
                nxt.append(None)
        pending = nxt
    return sims


def build(w: Workload) -> KinetoTraceBuilder:
    """The trace of rank ``w.rank``. Ranks are simulated together when they can differ."""
    if w.world_size > 1 and w.comm_bytes and (w.straggler_rank is not None or w.jitter):
        sims = _simulate(w, list(range(w.world_size)))
        return sims[w.rank].finish()
    return _simulate(w, [w.rank])[0].finish()


def build_ranks(w: Workload) -> list[KinetoTraceBuilder]:
    """One trace per rank, ``0 .. world_size-1`` (``w.rank`` is ignored)."""
    return [s.finish() for s in _simulate(w, list(range(w.world_size)))]


# --- named scenarios ------------------------------------------------------------------------

_SMALL: dict[str, Any] = {"hidden": 2048, "seq": 1024, "batch": 4}

PRESETS: dict[str, Workload] = {
    # H100 bf16, big GEMMs at a realistic efficiency, host far ahead: GPU busy ~99%
    "healthy": Workload(),
    # small model, tiny kernels, slow Python: the GPU waits for launches
    "launch_bound": Workload(hidden=512, seq=256, batch=2, cpu_op_overhead_ns=40_000,
                             tiny_kernels_per_layer=12),
    # the DataLoader takes ~35% of every step; loss.item() at step end keeps host and GPU in step
    "input_bound": Workload(**_SMALL, dataloader_ns=7_000_000, syncs_per_step=1),
    # 16 .item() syncs per step drain the GPU queue again and again
    "host_sync": Workload(hidden=1024, seq=1024, batch=2, syncs_per_step=16),
    # small GEMMs, 6x the elementwise traffic at 30% of peak bandwidth
    "memory_bound": Workload(hidden=1024, seq=2048, batch=8, elementwise_scale=6.0,
                             memory_efficiency=0.3),
    # large GEMMs at 85% of peak
    "compute_bound": Workload(hidden=8192, seq=2048, batch=8, gemm_efficiency=0.85),
    # fp32 training on H100: SIMT GEMMs at 67 TFLOP/s
    "fp32_gemms": Workload(**_SMALL, dtype="fp32"),
    # 4 ranks, 768 MiB all-reduce per step, none of it overlapped with backward
    "comm_bound": Workload(hidden=2048, seq=2048, batch=2, world_size=4, comm_bytes=768 * MiB,
                           comm_overlap=0.0),
    # 4 ranks, rank 2's GPU 1.5x slower; the others wait inside NCCL
    "straggler": Workload(hidden=2048, seq=2048, batch=2, world_size=4, comm_bytes=256 * MiB,
                          comm_overlap=0.5, straggler_rank=2, straggler_slowdown=1.5),
    # start-up: the first launch loads modules for 2 s, then 2 ordinary steps (not steady state)
    "cold_start": Workload(**_SMALL, steps=3, syncs_per_step=1, cold_start_ns=2_000_000_000),
    # every 2nd step stalls the host for 30 ms (GC / checkpoint), plus 5% noise
    "jitter": Workload(**_SMALL, syncs_per_step=1, jitter=0.05, slow_step_every=2,
                       slow_step_extra_ns=30_000_000),
    # allocator caching: reserved 1.8x allocated at the peak (tens of GiB unused)
    "fragmentation": Workload(**_SMALL, reserved_overhead=1.8, peak_memory_fraction=0.6),
    # peak reserved at 96% of HBM
    "memory_pressure": Workload(**_SMALL, peak_memory_fraction=0.96),
    # 2 GiB more allocated at every step end
    "leak": Workload(**_SMALL, leak_bytes_per_step=2 * GiB),
    # healthy on MI300X (ROCm names, stream 0, Device Type 6)
    "mi300x": Workload(device="MI300X"),
    # captured without with_stack / record_shapes
    "no_stack": Workload(**_SMALL, with_stack=False, record_shapes=False),
}
