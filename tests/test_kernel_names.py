"""The kernel-name table: real kernel names -> class and matrix dtype (tests/data/kernel_names.tsv).

The names come from the shared real-trace corpus (cuBLAS/cuDNN on V100/A100/H100, Tensile and
MIOpen on MI210/MI250/MI300X, Triton/Inductor, flash-attention, vLLM/SGLang, NCCL) and from the
communication and MoE libraries the corpus lacks (DeepEP, NVSHMEM, vLLM/SGLang custom all-reduce,
TensorRT-LLM, MSCCL++). A change to kernel_table.py that moves any of them fails here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from traceinsight.analysis.categories import (
    MATRIX_CLASSES,
    is_matrix_helper,
    kernel_class,
    kernel_dtype,
    op_class,
)
from traceinsight.metrics.flops import op_cost, roof_dtype

TABLE = Path(__file__).parent / "data" / "kernel_names.tsv"


def _rows() -> list[tuple[str, str, str, str]]:
    out = []
    for line in TABLE.read_text(encoding="utf-8").splitlines():
        if not line or line.startswith(("#", "class\t")):
            continue
        cls, dtype, source, name = line.split("\t")
        out.append((cls, dtype, source, name))
    return out


ROWS = _rows()


def test_table_is_broad() -> None:
    assert {r[0] for r in ROWS} >= {
        "communication",
        "gemm",
        "convolution",
        "attention",
        "reduction",
        "elementwise",
    }
    assert {r[1] for r in ROWS} >= {
        "fp32",
        "fp32_matrix",
        "tf32",
        "fp16",
        "bf16",
        "fp8",
        "fp4",
        "tensor",
    }
    assert 100 <= len(ROWS) <= 160
    assert sum(r[2].startswith("corpus:") for r in ROWS) >= 80  # mostly real corpus names


@pytest.mark.parametrize("cls,dtype,source,name", ROWS, ids=[f"{r[0]}:{r[3][:50]}" for r in ROWS])
def test_kernel_class_and_dtype(cls: str, dtype: str, source: str, name: str) -> None:
    assert kernel_class(name) == cls, source
    got = kernel_dtype(name) if cls in MATRIX_CLASSES else None
    assert (got or "-") == dtype, source


@pytest.mark.parametrize(
    "name,wrong",
    [
        # names that contain another class's keyword
        (
            (
                "void at::native::(anonymous namespace)::_typeConvert<float, c10::BFloat16>(float const*, "
                "c10::BFloat16*, long)"
            ),
            "convolution",
        ),
        (
            (
                "void vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, c10::BFloat16*, "
                "c10::BFloat16 const*, float, int, int)"
            ),
            "elementwise",
        ),
        ("_finalize_matmul_scatter_bf16", "gemm"),
        ("triton_poi_fused__scaled_dot_product_flash_attention_cat_transpose_view_10", "attention"),
        (
            "triton_red_fused__unsafe_view_add_clone_convolution_native_layer_norm_slice_transpose_view_4",
            "convolution",
        ),
        (
            (
                "void vllm::reshape_and_cache_flash_kernel<__hip_bfloat16, __hip_bfloat16, "
                "(vllm::Fp8KVCacheDataType)0>(__hip_bfloat16 const*)"
            ),
            "attention",
        ),
        ("SubTensorOpWithCastTensor1d", "gemm"),
        (
            "void fbgemm_gpu::permute_2D_lengths_kernel<int>(int, int, int const*, int const*, int*)",
            "gemm",
        ),
        ("cudnn_infer_volta_scudnn_128x64_relu_medium_nn_v1", "elementwise"),
        (
            (
                "void at::native::(anonymous namespace)::distribution_elementwise_grid_stride_kernel<float, "
                "4, at::native::templates::cuda::normal_and_transform<float, float>>"
            ),
            "reduction",
        ),
        ("void deep_ep::intranode::combine<__nv_bfloat16, 8, 768, 4096>(__nv_bfloat16*)", "gemm"),
    ],
)
def test_misleading_keywords(name: str, wrong: str) -> None:
    assert kernel_class(name) != wrong


def test_unknown_names_are_other_and_fall_back_to_the_op() -> None:
    assert kernel_class("my_custom_kernel_v2") == "other"
    assert op_class("aten::mm") == "gemm" and op_class("aten::addmm") == "gemm"
    assert op_class("autograd::engine::evaluate_function: MmBackward0") == "gemm"
    assert op_class("aten::cudnn_convolution") == "convolution"
    assert op_class("aten::_scaled_dot_product_flash_attention") == "attention"
    assert op_class("aten::native_layer_norm") == "reduction"
    assert op_class("aten::add_") == "elementwise"
    assert op_class("aten::_convert_indices_from_coo_to_csr") == "elementwise"
    for comm in (
        "c10d::allreduce_",
        "record_param_comms",
        "nccl:all_reduce",
        "ProcessGroupNCCL::allreduce",
        "all_to_all_single",
        "dist.all_gather",
        "_c10d_functional::all_reduce",
    ):
        assert op_class(comm) == "communication", comm
    assert (
        op_class("fbgemm::split_embedding_backward_codegen_rowwise_adagrad_function")
        == "elementwise"
    )  # an embedding update, not a GEMM (MTIA trace)
    assert op_class("MyModel.forward") is None


def test_matrix_helpers_are_not_matrix_math() -> None:
    assert is_matrix_helper(
        "void splitKreduce_kernel<float, float, float, float, true, false, "
        "false>(cublasSplitKParams<float>)"
    )
    assert is_matrix_helper(
        "void cudnn::winograd_nonfused::winogradForwardData4x4<float, float>"
        "(cudnn::winograd_nonfused::WinogradDataParams<float, float>)"
    )
    assert not is_matrix_helper("volta_sgemm_128x64_nt")
    assert not is_matrix_helper(
        "void cudnn::detail::dgrad_engine<float, 512, 6, 5, 3, 3, 3, false>(int)"
    )


def test_vllm_auto_kv_cache_tag_is_not_fp8() -> None:
    name = (
        "void paged_attention_ll4mi_QKV_mfma16_kernel<0, __hip_bfloat16, __hip_bfloat16, "
        "(vllm::Fp8KVCacheDataType)0, 1, 128, 256, false, 4, 1>(__hip_bfloat16 const*)"
    )
    assert kernel_dtype(name) == "bf16"
    assert (
        kernel_dtype(
            name.replace("__hip_bfloat16", "float").replace(
                "Fp8KVCacheDataType)0", "Fp8KVCacheDataType)1"
            )
        )
        == "fp8"
    )


def test_roofline_roof_follows_the_name_dtype() -> None:
    """An fp32 matmul on TF32 tensor cores is bounded by the TF32 peak, by its kernel name."""
    mm = op_cost("aten::mm", [[256, 256], [256, 256]], ["float", "float"])
    tf32 = "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>"
    assert roof_dtype(mm, [tf32]) == "tf32"
    assert roof_dtype(mm, ["volta_sgemm_128x64_nt"]) == "fp32"
    assert (
        roof_dtype(mm, ["Cijk_Ailk_Bjlk_SB_Bias_AS_SAV_UserArgs_MT64x16x16_MI16x16x1_SN"])
        == "fp32_matrix"
    )
