"""Kernel names a real profiler records for each device and dtype, and the kernel record
the simulator launches."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tracegen.model import Workload

CTYPE = {"bf16": "c10::BFloat16", "fp16": "c10::Half", "fp32": "float"}
_CUTLASS = {"bf16": "cutlass::bfloat16_t", "fp16": "cutlass::half_t", "fp32": "float"}
_NCCL_DT = {"bf16": "bf16", "fp16": "f16", "fp32": "f32"}
COLL_DT = {"bf16": "BFloat16", "fp16": "Half", "fp32": "Float"}
DSIZE = {"bf16": 2, "fp16": 2, "fp32": 4}


def gemm_kernel(w: Workload, layout: str, n: int) -> tuple[str, str | None]:
    """(kernel name, launch API or None for the default) of a GEMM; layout tn | nn | nt."""
    dev, dt = w.device, w.dtype
    if dev == "H100":
        if dt == "fp32":
            if layout == "tn":
                name = (
                    f"sm90_xmma_gemm_f32f32_f32f32_f32_{layout}_n_tilesize128x128x32_"
                    "warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"
                )
                return name, "cudaLaunchKernelExC"
            k = f"cutlass_80_simt_sgemm_128x64_8x5_{layout}_align1"
            return f"void cutlass::Kernel2<{k}>({k}::Params)", "cuLaunchKernel"
        if n >= 8192:
            return f"nvjet_tst_128x256_64x4_1x2_h_bz_coopA_{layout.upper()}T", "cudaLaunchKernelExC"
        tag = "bf16bf16_bf16f32" if dt == "bf16" else "f16f16_f16f32"
        name = (
            f"sm90_xmma_gemm_{tag}_f32_{layout}_n_tilesize128x128x64_warpgroupsize1x1x1_"
            "execute_segment_k_off_kernel__5x_cublas"
        )
        return name, "cudaLaunchKernelExC"
    if dev == "A100":
        return {
            "bf16": f"ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_{layout}",
            "fp16": f"ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_{layout}",
            "fp32": f"ampere_sgemm_128x64_{layout}",
        }[dt], None
    if dev == "V100":
        return {
            "bf16": (
                f"sm70_xmma_gemm_bf16bf16_bf16f32_f32_{layout}_n_tilesize128x128x32_"
                "stage1_warpsize2x2x1_ffma_aligna8_alignc8_execute_kernel__5x_cublas"
            ),
            "fp16": f"volta_fp16_s884gemm_fp16_128x128_ldg8_f2f_{layout}",
            "fp32": f"volta_sgemm_128x64_{layout}",
        }[dt], None
    lay = {"tn": "Alik_Bljk", "nn": "Ailk_Bljk", "nt": "Ailk_Bjlk"}[layout]
    if dt == "fp32":
        body = "SB_MT128x64x16_SN_LDSB0_AFC1_AFEM1_ASEM1_CLR1_CADS0_EPS0_GRVWA4_GRVWB4"
    else:
        body = (
            ("BBS_BH" if dt == "bf16" else "HHS_BH")
            + "_Bias_HA_S_SAV_UserArgs_MT128x128x64_MI16x16x1_SN_LDSB1_AFC1_AFEM1_ASEM1_CLR1_"
            "CADS0_EPS0_GRVWA8_GRVWB8"
        )
    name = (
        f"Cijk_{lay}_{body}_GSUAMBSK_ISA942_IU1_K1_LBSPPA256_LBSPPB256_MIAV0_MIWT4_4_NTn1_"
        "ONLL1_PGR2_PLR1_SIA3_SS1_SVW8_TLDS1_USL1_VWA1_VWB1_WSGRA0_WSGRB0_WS64_WG32_8_1"
    )
    return name, "hipExtModuleLaunchKernel"


def attention_impl(w: Workload) -> str:
    if w.device == "MI300X":
        return "ck"
    if w.device == "V100" or w.dtype == "fp32":
        return "efficient"
    return "flash"


def attention_kernels(w: Workload, hd: int) -> tuple[str, list[str]]:
    """(forward kernel, backward kernels [main first]) of scaled_dot_product_attention."""
    impl, dt = attention_impl(w), w.dtype
    if impl == "flash":
        cut = _CUTLASS[dt]
        bt = (
            f"pytorch_flash::Flash_bwd_kernel_traits<{hd}, 64, 128, 8, 2, 4, 2, false, false, "
            f"{cut}, pytorch_flash::Flash_kernel_traits<{hd}, 64, 128, 8, {cut}> >"
        )
        fwd = (
            f"void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<{hd}, "
            f"128, 64, 4, false, false, {cut}, pytorch_flash::Flash_kernel_traits<{hd}, 128, "
            f"64, 4, {cut}> >, false, true, false, false, false, true, false>"
            "(pytorch_flash::Flash_fwd_params)"
        )
        return fwd, [
            (
                "void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel"
                f"<{bt}, false, true, false, false, false, false>(pytorch_flash::Flash_bwd_params)"
            ),
            (
                f"void pytorch_flash::flash_bwd_dot_do_o_kernel<true, {bt} >"
                "(pytorch_flash::Flash_bwd_params)"
            ),
            (
                f"void pytorch_flash::flash_bwd_convert_dq_kernel<{bt} >"
                "(pytorch_flash::Flash_bwd_params, int)"
            ),
        ]
    if impl == "efficient":
        tag = {"bf16": "bf16", "fp16": "f16", "fp32": "f32"}[dt]
        sm = "70" if w.device == "V100" else "80"
        ct = _CUTLASS[dt]
        fwd = (
            f"fmha_cutlassF_{tag}_aligned_64x64_rf_sm{sm}(PyTorchMemEffAttention::"
            f"AttentionKernel<{ct}, cutlass::arch::Sm{sm}, true, 64, 64, {hd}, true, true>"
            "::Params)"
        )
        bwd = (
            f"fmha_cutlassB_{tag}_aligned_64x64_k{hd}_sm{sm}(PyTorchMemEffAttention::"
            f"AttentionBackwardKernel<cutlass::arch::Sm{sm}, {ct}, true, false, true, 64, 64, "
            f"{hd}, false>::Params)"
        )
        return fwd, [bwd]
    t = {"bf16": "DF16b", "fp16": "DF16_", "fp32": "f"}[dt]
    shape = "NS_13TileFmhaShapeINS_8sequenceIJLi128ELi128ELi32ELi128ELi32ELi128EEEE"
    fwd = (
        f"_ZN7ck_tile6kentryILi256ELi1ENS_13FmhaFwdKernelINS_30BlockFmhaPipelineQRKSVSAsyncINS_"
        f"24BlockFmhaPipelineProblemI{t}{t}{t}ff{t}hf{t}{shape}Lb1EEELb0ENS_17ComposedAttention"
        f"ILj0ELb1EEENS_30SimplifiedGenericAttentionMaskILb1EEEEEENS_17Default2DEpilogueINS_"
        f"24Default2DEpilogueProblemIf{t}Lb0ELb0ELb1EEEEEEEEEvT1_"
    )
    return fwd, [
        (
            f"_ZN7ck_tile6kentryILi256ELi1ENS_19FmhaBwdDQDKDVKernelINS_36BlockFmhaBwdDQDKDV"
            f"PipelineKRKTRVRINS_27BlockFmhaBwdPipelineProblemI{t}{t}{t}ff{t}{t}{t}{shape}"
            "Lb0EEEEEEEEvT1_"
        ),
        (
            f"_ZN7ck_tile6kentryILi256ELi1ENS_22FmhaBwdOGradDotOKernelINS_29BlockFmhaBwdOGradDotO"
            f"ProblemI{t}{t}fLi256ELi128EEEEEEvT1_"
        ),
        (
            f"_ZN7ck_tile6kentryILi256ELi1ENS_24FmhaBwdConvertQGradKernelINS_32BlockFmhaBwd"
            f"ConvertQGradProblemIf{t}Li256ELi128EEEEEEvT1_"
        ),
    ]


def _ew(vec: int, functor: str, arity: int) -> str:
    return (
        f"void at::native::vectorized_elementwise_kernel<{vec}, {functor}, std::array<char*, "
        f"{arity}ul> >(int, {functor}, std::array<char*, {arity}ul>)"
    )


def _lambda_functor(impl: str, ct: str, args: int) -> str:
    lam = ", ".join([ct] * args)
    return (
        f"at::native::{impl}(at::TensorIteratorBase&, at::native::GeluType)::{{lambda()#2}}::"
        f"operator()() const::{{lambda()#4}}::operator()() const::{{lambda({lam})#1}}"
    )


def kernel_names(w: Workload) -> dict[str, str]:
    ct = CTYPE[w.dtype]
    vec = 8 if w.device == "MI300X" else 4
    anon = "at::native::(anonymous namespace)"
    sum_op = (
        f"at::native::ReduceOp<{ct}, at::native::func_wrapper_t<{ct}, at::native::sum_functor"
        f"<{ct}, float, {ct}>::operator()(at::TensorIterator&)::{{lambda(float, float)#1}}>, "
        f"unsigned int, {ct}, 4>"
    )
    mean_op = (
        f"at::native::ReduceOp<{ct}, at::native::MeanOps<float, float, float, float>, "
        f"unsigned int, {ct}, 4>"
    )
    mse = (
        f"at::native::(anonymous namespace)::mse_kernel_cuda(at::TensorIteratorBase&)::"
        f"{{lambda()#1}}::operator()() const::{{lambda()#4}}::operator()() const::"
        f"{{lambda({ct}, {ct})#1}}"
    )
    mse_bwd = (
        f"at::native::mse_backward_cuda_kernel(at::TensorIterator&, c10::Scalar const&)::"
        f"{{lambda()#1}}::operator()() const::{{lambda()#4}}::operator()() const::"
        f"{{lambda({ct}, {ct}, {ct})#1}}"
    )
    meta = f"{anon}::FusedOptimizerTensorListMetadata<4>"
    functor = f"{anon}::FusedAdamMathFunctor<{ct}, 4, (at::native::ADAM_MODE)1, false>"
    adam_args = "double*, double, double, double, double, double, bool, double*, double*"
    adam = (
        f"void {anon}::multi_tensor_apply_kernel<{meta}, {functor}, {adam_args}>"
        f"({meta}, {functor}, {adam_args})"
    )
    return {
        "add": _ew(vec, f"at::native::CUDAFunctor_add<{ct}>", 3),
        "mul": _ew(
            vec,
            (
                f"at::native::BinaryFunctor<{ct}, {ct}, {ct}, "
                "at::native::binary_internal::MulFunctor<float> >"
            ),
            3,
        ),
        "gelu": _ew(vec, _lambda_functor("GeluCUDAKernelImpl", ct, 1), 2),
        "gelu_bwd": _ew(vec, _lambda_functor("GeluBackwardCUDAKernelImpl", ct, 2), 3),
        "fill": _ew(vec, f"at::native::FillFunctor<{ct}>", 1),
        "mse": _ew(vec, mse, 3),
        "mse_bwd": _ew(vec, mse_bwd, 4),
        "tiny_add": _ew(vec, "at::native::CUDAFunctorOnSelf_add<float>", 2),
        "tiny_mul": _ew(
            vec,
            (
                "at::native::AUnaryFunctor<float, float, float, "
                "at::native::binary_internal::MulFunctor<float> >"
            ),
            2,
        ),
        "tiny_fill": _ew(vec, "at::native::FillFunctor<float>", 1),
        "ln": (
            f"void {anon}::vectorized_layer_norm_kernel<{ct}, float>(int, float, {ct} const*, "
            f"{ct} const*, {ct} const*, float*, float*, {ct}*)"
        ),
        "ln_bwd_input": (
            f"void {anon}::layer_norm_grad_input_kernel_vectorized<{ct}, float>("
            f"{ct} const*, {ct} const*, float const*, float const*, {ct} const*, "
            f"{ct}*, int)"
        ),
        "ln_bwd_gamma": (
            f"void {anon}::GammaBetaBackwardCUDAKernel_32x32<{ct}, float>(long, long, "
            f"{ct} const*, {ct} const*, float const*, float const*, {ct}*, {ct}*)"
        ),
        "sum": f"void at::native::reduce_kernel<512, 1, {sum_op} >({sum_op})",
        "mean": f"void at::native::reduce_kernel<512, 1, {mean_op} >({mean_op})",
        "index_select": (
            f"void {anon}::indexSelectLargeIndex<{ct}, long, unsigned int, 2, 2, -2, "
            f"true>(at::cuda::detail::TensorInfo<{ct}, unsigned int>, "
            f"at::cuda::detail::TensorInfo<{ct} const, unsigned int>, "
            "at::cuda::detail::TensorInfo<long const, unsigned int>, int, int, "
            "unsigned int, unsigned int, long)"
        ),
        "embedding_bwd": (
            f"void {anon}::embedding_backward_feature_kernel<{ct}, float, long>(long "
            f"const*, {ct} const*, {ct}*, int, long, int)"
        ),
        "adam": adam,
        "nccl": (
            f"ncclDevKernel_AllReduce_Sum_{_NCCL_DT[w.dtype]}_RING_LL(ncclDevComm*, "
            "unsigned long, ncclWork*)"
        ),
    }


@dataclass
class Kernel:
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
