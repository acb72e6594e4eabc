"""Per-op FLOPs / bytes model: hand-computed answers, robustness, coverage of real traces."""

from __future__ import annotations

import gzip
import json
from collections import Counter

import pytest
from conftest import KINETO, requires_corpus

from traceinsight.metrics.flops import (
    COMPOSITE_OPS,
    PEAK_DTYPE_FOR,
    OpCost,
    bytes_per_element,
    dtype_of,
    is_composite,
    is_modelled,
    modelled_ops,
    op_cost,
    roof_dtype,
)

BF16, F32, F16, I64 = "c10::BFloat16", "float", "c10::Half", "long int"


def cost(name: str, dims: list, types: list, concrete: list | None = None, **kw) -> OpCost | None:
    """op_cost with the args as Kineto writes them (JSON text)."""
    return op_cost(
        name,
        json.dumps(dims),
        json.dumps(types),
        json.dumps(concrete) if concrete is not None else None,
        **kw,
    )


# ------------------------------------------------------------------------------------- GEMM


def test_mm_bf16() -> None:
    c = cost("aten::mm", [[64, 128], [128, 256]], [BF16, BF16])
    # M=64 K=128 N=256: 2*64*256*128 = 4,194,304 FLOPs
    # bytes (M*K + K*N + M*N) * 2 = (8,192 + 32,768 + 16,384) * 2 = 114,688
    assert c == OpCost(4_194_304.0, 114_688.0, "bf16", "gemm", True, "")
    assert c.intensity == pytest.approx(4_194_304 / 114_688)


def test_addmm_with_bias() -> None:
    c = cost(
        "aten::addmm",
        [[256], [64, 128], [128, 256], [], []],
        [BF16, BF16, BF16, "Scalar", "Scalar"],
        ["", "", "", "1", "1"],
    )
    # 2*64*256*128 + 64*256 (bias add) = 4,194,304 + 16,384 = 4,210,688
    # bytes 114,688 (as mm) + bias 256*2 = 115,200
    assert (c.flops, c.bytes, c.dtype, c.kind, c.exact) == (
        4_210_688,
        115_200,
        "bf16",
        "gemm",
        True,
    )


def test_bmm_and_baddbmm_fp16() -> None:
    c = cost("aten::bmm", [[8, 64, 128], [8, 128, 256]], [F16, F16])
    # 2*8*64*256*128 = 33,554,432; bytes (8*64*128 + 8*128*256 + 8*64*256)*2
    #   = (65,536 + 262,144 + 131,072)*2 = 917,504
    assert (c.flops, c.bytes, c.dtype) == (33_554_432, 917_504, "fp16")
    c = cost(
        "aten::baddbmm",
        [[8, 64, 256], [8, 64, 128], [8, 128, 256], [], []],
        [F16, F16, F16, "Scalar", "Scalar"],
    )
    # + B*M*N = 8*64*256 = 131,072 -> 33,685,504; bytes + self 8*64*256*2 = 262,144
    assert (c.flops, c.bytes) == (33_685_504, 917_504 + 262_144)


def test_mm_shape_mismatch_is_none() -> None:
    assert cost("aten::mm", [[64, 128], [127, 256]], [BF16, BF16]) is None


def test_scaled_mm_is_fp8_with_out_dtype() -> None:
    c = cost(
        "aten::_scaled_mm",
        [[128, 256], [256, 512], [], [], [], [], [], []],
        ["c10::Float8_e4m3fn", "c10::Float8_e4m3fn", F32, F32, "", "", "Scalar", "Scalar"],
        ["", "", "", "", "", "", "15", "False"],
    )
    # 2*128*512*256 = 33,554,432; bytes 128*256 + 256*512 (1 byte each) + 128*512*2 (bf16 out,
    # ScalarType 15) + two 0-dim fp32 scales 8 = 32,768 + 131,072 + 131,072 + 8 = 294,920
    assert (c.flops, c.bytes, c.dtype, c.kind) == (33_554_432, 294_920, "fp8", "gemm")


def test_addmv() -> None:
    c = cost("aten::addmv", [[100], [100, 50], [50], [], []], [F32, F32, F32, "Scalar", "Scalar"])
    # 2*100*50 + 100 = 10,100; bytes (100*50 + 50 + 100 (out) + 100 (self)) * 4 = 21,000
    assert (c.flops, c.bytes) == (10_100, 21_000)


# -------------------------------------------------------------------------------- attention

FLASH_TYPES = [
    BF16,
    BF16,
    BF16,
    "",
    "",
    "Scalar",
    "Scalar",
    "Scalar",
    "Scalar",
    "Scalar",
    "Scalar",
    "",
    "",
    "",
    "",
]
QKV = [[16, 559, 16, 64]] * 3 + [[]] * 12  # [B, S, H, D], from the Qwen H100 trace


def _flash_concrete(causal: str) -> list[str]:
    return ["", "", "", "", "", "559", "559", "0.", causal, "False", "0.125", "", "", "", ""]


def test_flash_forward_causal_and_not() -> None:
    # 4*B*H*S*S*D = 4*16*16*559*559*64 = 20,478,754,816; causal halves it: 10,239,377,408
    # bytes (q + k + v + out) = 4 * 16*559*16*64 * 2 = 73,269,248
    c = cost("aten::_flash_attention_forward", QKV, FLASH_TYPES, _flash_concrete("True"))
    assert (c.flops, c.bytes, c.dtype, c.kind, c.exact) == (
        10_239_377_408,
        73_269_248,
        "bf16",
        "attention",
        True,
    )
    c = cost("aten::_flash_attention_forward", QKV, FLASH_TYPES, _flash_concrete("False"))
    assert (c.flops, c.exact) == (20_478_754_816, True)


def test_flash_forward_without_concrete_inputs_assumes_non_causal() -> None:
    c = cost("aten::_flash_attention_forward", QKV, FLASH_TYPES)
    assert (c.flops, c.exact) == (20_478_754_816, False)
    assert "causal" in c.note


def test_sdpa_flash_bhsd_layout_reads_is_causal() -> None:
    dims = [[16, 16, 559, 64]] * 3 + [[]] * 4  # [B, H, S, D]
    types = [BF16] * 3 + ["Scalar"] * 4
    c = cost(
        "aten::_scaled_dot_product_flash_attention",
        dims,
        types,
        ["", "", "", "0.", "True", "False", "0.125"],
    )
    assert (c.flops, c.bytes, c.exact) == (10_239_377_408, 73_269_248, True)


def test_sdpa_efficient_gqa_uses_query_heads() -> None:
    # q [2, 32, 128, 64], k/v [2, 8, 128, 64] (4 query heads per KV head)
    dims = [[2, 32, 128, 64], [2, 8, 128, 64], [2, 8, 128, 64], [], [], [], [], []]
    types = [F16, F16, F16, "", "Scalar", "Scalar", "Scalar", ""]
    c = cost(
        "aten::_scaled_dot_product_efficient_attention",
        dims,
        types,
        ["", "", "", "", "False", "0.", "False", ""],
    )
    # 4*B*Hq*Sq*Skv*D = 4*2*32*128*128*64 = 268,435,456
    # bytes (q 2*32*128*64 + k,v 2*(2*8*128*64) + out 2*32*128*64) * 2 = 2,621,440
    assert (c.flops, c.bytes, c.exact) == (268_435_456, 2_621_440, True)


def test_flash_backward_is_two_and_a_half_forward() -> None:
    dims = [[16, 559, 16, 64]] * 5 + [[16, 16, 559]] + [[]] * 9
    types = [BF16] * 5 + [F32] + ["", "", "Scalar", "Scalar", "Scalar", "Scalar", "", "", "Scalar"]
    concrete = [""] * 8 + ["559", "559", "0.", "True", "", "", "0.125"]
    c = cost("aten::_flash_attention_backward", dims, types, concrete)
    # 2.5 * 10,239,377,408 (causal forward) = 25,598,443,520
    assert (c.flops, c.kind, c.exact) == (25_598_443_520, "attention", True)
    # reads q, k, v, out, dout, lse; writes dq, dk, dv: 2*(q+k+v) + 2*out (lse not counted)
    assert c.bytes == 2 * 3 * 18_317_312 + 2 * 18_317_312


def test_varlen_flash_forward_is_an_estimate() -> None:
    # q, k, v packed [total=1000, H=8, D=64]; cu_seqlens [5] -> 4 sequences, assumed 250 each:
    # Σ sq*skv = 1000*1000/4 = 250,000 pairs; 2*H*pairs*(Dqk + Dv) = 2*8*250,000*128
    dims = [[1000, 8, 64]] * 3 + [[5], [5]] + [[]] * 10
    types = [BF16] * 3 + ["int", "int"] + ["Scalar"] * 6 + ["", "", "", ""]
    concrete = ["", "", "", "", "", "250", "250", "0.", "False", "False", "0.125", "", "", "", ""]
    c = cost("aten::_flash_attention_forward", dims, types, concrete)
    assert (c.flops, c.exact) == (512_000_000, False) and "varlen" in c.note


def test_efficient_attention_forward_mask_type() -> None:
    dims = [[2, 128, 8, 64]] * 3 + [[]] * 11
    types = [F16] * 3 + ["", "", "", "Scalar", "Scalar", "Scalar", "Scalar", "Scalar", "", "", ""]
    # (q, k, v, bias, cu_q, cu_k, max_q, max_k, dropout_p, custom_mask_type=1 (causal), ...)
    concrete = ["", "", "", "", "", "", "", "", "0.", "1", "True", "", "", ""]
    c = cost("aten::_efficient_attention_forward", dims, types, concrete)
    # 4*2*8*128*128*64 / 2 = 33,554,432
    assert (c.flops, c.exact) == (33_554_432, True)


# ------------------------------------------------------------------------------ convolution

CONV_DIMS = [[512, 3, 224, 224], [64, 3, 7, 7], [], [], [], [], [], [], []]
RESNET_CONV_FLOPS = 120_846_286_848  # 2*512*64*112*112*3*7*7
# bytes (x 512*3*224*224 + w 64*3*7*7 + out 512*64*112*112) * 2 = 976,243,072
RESNET_CONV_BYTES = 976_243_072


def test_resnet_first_conv_miopen() -> None:
    # (self, weight, bias?, padding, stride, dilation, groups, benchmark, deterministic);
    # stride 2, pad 3: Ho = (224 + 2*3 - 7) // 2 + 1 = 112
    c = cost(
        "aten::miopen_convolution",
        CONV_DIMS,
        [BF16, BF16, "", "ScalarList", "ScalarList", "ScalarList", "Scalar", "Scalar", "Scalar"],
        ["", "", "", "[3, 3]", "[2, 2]", "[1, 1]", "1", "False", "False"],
    )
    assert (c.flops, c.bytes, c.dtype, c.kind, c.exact) == (
        RESNET_CONV_FLOPS,
        RESNET_CONV_BYTES,
        "bf16",
        "conv",
        True,
    )


def test_resnet_first_conv_cudnn_argument_order() -> None:
    # (self, weight, padding, stride, dilation, groups, benchmark, deterministic, allow_tf32)
    c = cost(
        "aten::cudnn_convolution",
        CONV_DIMS[:2] + [[]] * 7,
        [
            BF16,
            BF16,
            "ScalarList",
            "ScalarList",
            "ScalarList",
            "Scalar",
            "Scalar",
            "Scalar",
            "Scalar",
        ],
        ["", "", "[3, 3]", "[2, 2]", "[1, 1]", "1", "False", "False", "True"],
    )
    assert (c.flops, c.bytes, c.exact) == (RESNET_CONV_FLOPS, RESNET_CONV_BYTES, True)


def test_convolution_is_composite_unless_asked() -> None:
    types = [
        BF16,
        BF16,
        "",
        "ScalarList",
        "ScalarList",
        "ScalarList",
        "Scalar",
        "ScalarList",
        "Scalar",
    ]
    concrete = ["", "", "", "[2, 2]", "[3, 3]", "[1, 1]", "False", "[0, 0]", "1"]
    assert cost("aten::convolution", CONV_DIMS, types, concrete) is None
    c = cost("aten::convolution", CONV_DIMS, types, concrete, include_composite=True)
    assert (c.flops, c.bytes, c.exact) == (RESNET_CONV_FLOPS, RESNET_CONV_BYTES, True)


def test_conv_without_concrete_inputs_assumes_stride_1_same() -> None:
    c = cost(
        "aten::cudnn_convolution",
        CONV_DIMS[:2] + [[]] * 7,
        [
            BF16,
            BF16,
            "ScalarList",
            "ScalarList",
            "ScalarList",
            "Scalar",
            "Scalar",
            "Scalar",
            "Scalar",
        ],
    )
    # stride 1, 'same' padding: out 224x224 = 4x the real output -> 4x the FLOPs
    assert c.flops == 4 * RESNET_CONV_FLOPS and not c.exact
    assert "stride" in c.note


def test_conv_bias_grouped_1d_and_3d() -> None:
    # depthwise 2d with bias: x [2, 32, 16, 16], w [32, 1, 3, 3], pad 1 -> out 16x16, g = 32
    c = cost(
        "aten::miopen_convolution",
        [[2, 32, 16, 16], [32, 1, 3, 3], [32], [], [], [], []],
        [F32, F32, F32, "ScalarList", "ScalarList", "ScalarList", "Scalar"],
        ["", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "32"],
    )
    # 2*N*K*Ho*Wo*(C/g)*R*S + bias N*K*Ho*Wo = 2*2*32*256*1*9 + 2*32*256 = 294,912 + 16,384
    assert c.flops == 311_296
    # 1d: x [4, 8, 100], w [16, 8, 5], stride 1, pad 0 -> out 96
    c = cost(
        "aten::cudnn_convolution",
        [[4, 8, 100], [16, 8, 5], [], [], [], []],
        [F32, F32, "ScalarList", "ScalarList", "ScalarList", "Scalar"],
        ["", "", "[0]", "[1]", "[1]", "1"],
    )
    assert c.flops == 2 * 4 * 16 * 96 * 8 * 5  # 245,760
    # 3d: x [1, 4, 8, 8, 8], w [8, 4, 3, 3, 3], stride 2, pad 1 -> out 4x4x4
    c = cost(
        "aten::cudnn_convolution",
        [[1, 4, 8, 8, 8], [8, 4, 3, 3, 3], [], [], [], []],
        [F32, F32, "ScalarList", "ScalarList", "ScalarList", "Scalar"],
        ["", "", "[1, 1, 1]", "[2, 2, 2]", "[1, 1, 1]", "1"],
    )
    assert c.flops == 2 * 1 * 8 * 64 * 4 * 27  # 110,592


def test_transposed_conv() -> None:
    # cudnn_convolution_transpose(self, weight, padding, output_padding, stride, dilation,
    #                             groups, ...)
    # x [1, 8, 4, 4], w [C_in=8, K/g=4, 3, 3], stride 2, pad 1, output_padding 1:
    # out = (4-1)*2 - 2*1 + (3-1) + 1 + 1 = 8; MACs = N*C_in*H*W*(K/g)*R*S = 8*16*4*9 = 4,608
    c = cost(
        "aten::cudnn_convolution_transpose",
        [[1, 8, 4, 4], [8, 4, 3, 3]] + [[]] * 8,
        [
            F32,
            F32,
            "ScalarList",
            "ScalarList",
            "ScalarList",
            "ScalarList",
            "Scalar",
            "Scalar",
            "Scalar",
            "Scalar",
        ],
        ["", "", "[1, 1]", "[1, 1]", "[2, 2]", "[1, 1]", "1", "False", "False", "True"],
    )
    # bytes (x 128 + w 288 + out 4*8*8 = 256) * 4 = 2,688
    assert (c.flops, c.bytes, c.exact) == (9_216, 2_688, True)


def test_invalid_stride_is_not_used() -> None:
    c = cost(
        "aten::max_pool2d_with_indices",
        [[1, 4, 8, 8], [], [], [], [], []],
        [F32, "ScalarList", "ScalarList", "ScalarList", "ScalarList", "Scalar"],
        ["", "[2, 2]", "[0, 0]", "[0, 0]", "[1, 1]", "False"],
    )
    assert c is None
    c = cost(
        "aten::cudnn_convolution",
        [[1, 4, 8, 8], [4, 4, 3, 3], [], [], [], []],
        [F32, F32, "ScalarList", "ScalarList", "ScalarList", "Scalar"],
        ["", "", "[1, 1]", "[0, 0]", "[1, 1]", "1"],
    )
    assert not c.exact and c.flops == 2 * 4 * 64 * 4 * 9  # stride treated as unrecorded (1)


def test_convolution_backward_from_resnet_trace() -> None:
    dims = [[512, 512, 7, 7], [512, 512, 7, 7], [512, 512, 3, 3]] + [[]] * 8
    types = [
        BF16,
        BF16,
        BF16,
        "ScalarList",
        "ScalarList",
        "ScalarList",
        "ScalarList",
        "Scalar",
        "ScalarList",
        "Scalar",
        "ScalarList",
    ]
    concrete = [
        "",
        "",
        "",
        "[0]",
        "[1, 1]",
        "[1, 1]",
        "[1, 1]",
        "False",
        "[0, 0]",
        "1",
        "[True, True, False]",
    ]
    c = cost("aten::convolution_backward", dims, types, concrete)
    # forward MACs = N*K*Ho*Wo*(C/g)*R*S = 512*512*49*512*9; dgrad + wgrad = 2 forwards:
    # 2 * (2 * 592,000,000-ish) = 236,760,072,192 FLOPs
    assert (c.flops, c.kind, c.exact) == (236_760_072_192, "conv", True)
    # read grad_out, input, weight; write grad_input, grad_weight:
    # 3 * 512*512*49*2 + 2 * 512*512*9*2 = 77,070,336 + 9,437,184 = 86,507,520
    assert c.bytes == 86_507_520


# ------------------------------------------------------------------------------ elementwise


def test_broadcast_add() -> None:
    c = cost("aten::add", [[8, 1, 16], [1, 4, 16], []], [F32, F32, "Scalar"], ["", "", "1"])
    # output broadcast [8, 4, 16] = 512 elements, 1 FLOP each
    # bytes: inputs (128 + 64) * 4 = 768, output 512 * 4 = 2,048 -> 2,816
    assert c == OpCost(512.0, 2_816.0, "fp32", "elementwise", True, "")


def test_inplace_add_reads_self_once_and_writes_it_once() -> None:
    c = cost("aten::add_", [[4, 4], [4, 4], []], [BF16, BF16, "Scalar"])
    # read self 32 B + other 32 B, write self 32 B
    assert (c.flops, c.bytes) == (16, 96)


def test_per_element_costs_and_wrapped_scalars() -> None:
    assert cost("aten::gelu", [[1000], []], [BF16, ""]).flops == 8_000
    assert cost("aten::silu", [[10, 10]], [BF16]).flops == 400
    assert cost("aten::exp", [[10]], [F32]).flops == 40
    # mul(float tensor, wrapped double scalar): output fp32; the 0-dim double is read (8 B)
    c = cost("aten::mul", [[1, 559, 64], []], [F32, "double"])
    assert (c.flops, c.bytes, c.dtype) == (35_776, 35_776 * 4 + 8 + 35_776 * 4, "fp32")
    # comparisons write bool
    c = cost("aten::eq", [[100], [100]], [BF16, BF16])
    assert c.bytes == 100 * 2 * 2 + 100
    # where(cond, a, b)
    c = cost("aten::where", [[64], [64], [64]], ["bool", F16, F16])
    assert (c.flops, c.bytes, c.dtype) == (64, 64 + 64 * 2 * 2 + 64 * 2, "fp16")
    # native_dropout writes the output and a bool mask
    c = cost(
        "aten::native_dropout", [[32, 706], [], []], [F32, "Scalar", "Scalar"], ["", "0.1", "True"]
    )
    n = 32 * 706
    assert (c.flops, c.bytes) == (2 * n, n * 4 + n * 4 + n)


def test_threshold_backward_from_resnet_trace() -> None:
    n = 512 * 512 * 7 * 7
    c = cost(
        "aten::threshold_backward",
        [[512, 512, 7, 7], [512, 512, 7, 7], []],
        [BF16, BF16, "Scalar"],
        ["", "", "0"],
    )
    assert (c.flops, c.bytes, c.dtype) == (n, 3 * n * 2, "bf16")


# ---------------------------------------------------------------------- norms, softmax, etc.


def test_layer_norm() -> None:
    c = cost(
        "aten::native_layer_norm",
        [[32, 1024], [], [1024], [1024], []],
        [BF16, "ScalarList", BF16, BF16, "Scalar"],
        ["", "[1024]", "", "", "1e-05"],
    )
    # 5 FLOPs/element: 5 * 32*1024 = 163,840
    # bytes x 65,536 + gamma, beta 2*2,048 + y 65,536 = 135,168
    assert (c.flops, c.bytes, c.kind, c.dtype) == (163_840, 135_168, "norm", "bf16")


def test_batch_norm_train_vs_eval_and_backward() -> None:
    dims = [[8, 16, 32, 32], [16], [16], [16], [16], [], [], []]
    types = [F32] * 5 + ["Scalar"] * 3
    n = 8 * 16 * 32 * 32
    train = cost("aten::native_batch_norm", dims, types, [""] * 5 + ["True", "0.1", "1e-05"])
    evl = cost("aten::native_batch_norm", dims, types, [""] * 5 + ["False", "0.1", "1e-05"])
    assert (train.flops, evl.flops) == (5 * n, 2 * n)
    # x + 4 params read, y written
    assert train.bytes == n * 4 + 4 * 16 * 4 + n * 4
    bwd = cost(
        "aten::native_batch_norm_backward",
        [[8, 16, 32, 32], [8, 16, 32, 32], [16], [16], [16], [16], [16], [], [], []],
        [F32] * 7 + ["Scalar", "Scalar", "ScalarList"],
        [""] * 7 + ["True", "1e-05", "[True, True, True]"],
    )
    # read grad_out, x, 5 params; write grad_in and grad_weight (same size as weight)
    assert (bwd.flops, bwd.bytes) == (8 * n, 2 * n * 4 + 5 * 64 + n * 4 + 64)


def test_softmax() -> None:
    c = cost(
        "aten::_softmax", [[8, 128, 128], [], []], [F16, "Scalar", "Scalar"], ["", "-1", "False"]
    )
    # 3 FLOPs/element (max, exp-sum, divide): 3 * 131,072 = 393,216; bytes 2 * 131,072 * 2
    assert (c.flops, c.bytes, c.kind) == (393_216, 524_288, "softmax")
    c = cost(
        "aten::_softmax", [[8, 128, 128], [], []], [F16, "Scalar", "Scalar"], ["", "-1", "True"]
    )  # half_to_float: fp32 output
    assert c.bytes == 131_072 * 2 + 131_072 * 4


def test_reductions() -> None:
    c = cost(
        "aten::mean",
        [[16, 559, 1024], [], [], []],
        [F32, "ScalarList", "Scalar", ""],
        ["", "[-1]", "True", ""],
    )
    # 9,158,656 elements read, 16*559 = 8,944 written
    assert (c.flops, c.bytes, c.kind) == (9_158_656, 9_158_656 * 4 + 8_944 * 4, "reduction")
    c = cost("aten::sum", [[512, 1000], []], [BF16, ""])  # sum(self, dtype): one element
    assert c.bytes == 512_000 * 2 + 2
    c = cost("aten::argmax", [[32, 151936], [], []], [F32, "Scalar", "Scalar"], ["", "-1", "False"])
    assert c.bytes == 32 * 151936 * 4 + 32 * 8  # int64 indices out


def test_max_pool_forward_and_backward() -> None:
    c = cost(
        "aten::max_pool2d_with_indices",
        [[512, 64, 112, 112], [], [], [], [], []],
        [BF16, "ScalarList", "ScalarList", "ScalarList", "ScalarList", "Scalar"],
        ["", "[3, 3]", "[2, 2]", "[1, 1]", "[1, 1]", "False"],
    )
    # out 56x56 ((112 + 2 - 3)//2 + 1): 512*64*56*56 = 102,760,448 elements x 9 compares
    # bytes: x 512*64*112*112*2 + out (2-byte values + 8-byte indices) = 1,849,688,064
    assert (c.flops, c.bytes) == (924_844_032, 1_849_688_064)
    c = cost(
        "aten::max_pool2d_with_indices_backward",
        [[512, 64, 56, 56], [512, 64, 112, 112], [], [], [], [], [], [512, 64, 56, 56]],
        [BF16, BF16, "ScalarList", "ScalarList", "ScalarList", "ScalarList", "Scalar", I64],
        ["", "", "[3, 3]", "[2, 2]", "[1, 1]", "[1, 1]", "False", ""],
    )
    n_out, n_in = 512 * 64 * 56 * 56, 512 * 64 * 112 * 112
    assert c.bytes == n_out * 2 + n_in * 2 + n_out * 8  # grad_out, grad_in, indices


# ------------------------------------------------------------------------------------ copies


def test_copy_cat_index_select_fill() -> None:
    c = cost("aten::copy_", [[1, 559, 64], [1, 559, 64], []], [BF16, F32, "Scalar"])
    assert (c.flops, c.bytes, c.kind) == (0, 35_776 * 2 + 35_776 * 4, "copy")
    dims = [[[16, 16, 559, 32], [16, 16, 559, 32]], []]
    c = cost("aten::cat", dims, ["TensorList", "Scalar"], ["", "-1"], list_dtype="bf16")
    # read both inputs, write the same amount: 2 * (2 * 4,579,328 elements * 2 B)
    assert (c.bytes, c.dtype, c.exact) == (2 * 2 * 4_579_328 * 2, "bf16", True)
    c = cost("aten::cat", dims, ["TensorList", "Scalar"], ["", "-1"])  # element type unknown
    assert (c.bytes, c.exact) == (2 * 2 * 4_579_328 * 4, False)
    c = cost(
        "aten::index_select", [[151936, 1024], [], [8944]], [BF16, "Scalar", I64], ["", "0", ""]
    )
    # 8,944 rows of 1,024: read + write 2 * 9,158,656 * 2 B, plus the int64 index
    assert (c.bytes, c.kind) == (2 * 9_158_656 * 2 + 8_944 * 8, "embedding")
    c = cost("aten::fill_", [[512, 1000], []], [BF16, "Scalar"], ["", "0"])
    assert (c.flops, c.bytes) == (0, 1_024_000)


def test_upsample_nearest_from_output_size_or_scales() -> None:
    # [1, 512, 32, 32] -> [1, 512, 64, 64]: read 524,288 * 2 B, write 2,097,152 * 2 B
    c = cost(
        "aten::upsample_nearest2d",
        [[1, 512, 32, 32], [], [], []],
        [BF16, "ScalarList", "Scalar", "Scalar"],
        ["", "[64, 64]", "2.", "2."],
    )
    assert (c.flops, c.bytes, c.kind) == (0, 5_242_880, "copy")
    c = cost(
        "aten::upsample_nearest2d",
        [[1, 512, 32, 32], [], []],
        [BF16, "", "ScalarList"],
        ["", "", "[2., 2.]"],
    )
    assert c.bytes == 5_242_880


def test_copy_composites_are_none_by_default() -> None:
    for name in ("aten::clone", "aten::contiguous", "aten::_to_copy", "aten::embedding"):
        assert cost(name, [[4, 4]], [F32]) is None, name
    c = cost(
        "aten::_to_copy",
        [[1, 559, 64], [], [], [], [], [], []],
        [F32, "Scalar", "", "", "", "Scalar", ""],
        ["", "15", "", "", "", "False", ""],
        include_composite=True,
    )
    assert c.bytes == 35_776 * 4 + 35_776 * 2  # float -> bf16 (ScalarType 15)


# --------------------------------------------------------------------------- foreach / adam


def test_fused_adamw_with_tensor_lists() -> None:
    params = [[1024, 1024], [1024]]
    dims = [params, params, params, params, [], [[], []], [], [], [], [], [], [], [], [], []]
    types = ["TensorList"] * 6 + ["Scalar"] * 5 + ["Scalar", "Scalar", "", ""]
    c = cost("aten::_fused_adamw_", dims, types, list_dtype="fp32")
    # 1,049,600 parameter elements x 12 FLOPs = 12,595,200
    # reads: params, grads, exp_avg, exp_avg_sq 4 * 1,049,600 * 4 B + 2 step scalars 8 B
    # writes: params, exp_avg, exp_avg_sq 3 * 1,049,600 * 4 B  -> 29,388,808
    assert (c.flops, c.bytes, c.kind, c.exact) == (12_595_200, 29_388_808, "elementwise", True)
    assert not cost("aten::_fused_adamw_", dims, types).exact  # fp32 assumed


def test_foreach_ops() -> None:
    c = cost("aten::_foreach_mul_", [[[10], [20]], []], ["TensorList", "Scalar"], list_dtype="fp32")
    assert (c.flops, c.bytes) == (30, 30 * 4 * 2)
    c = cost(
        "aten::_foreach_add_",
        [[[10], [20]], [[10], [20]], []],
        ["TensorList", "TensorList", "Scalar"],
        list_dtype="bf16",
    )
    assert (c.flops, c.bytes) == (30, 30 * 2 * 3)
    # as recorded by older PyTorch: TensorList shapes missing -> not modelled
    assert (
        cost(
            "aten::_foreach_add_",
            [[], [], []],
            ["TensorList", "TensorList", "Scalar"],
            ["", "", "-0.001"],
        )
        is None
    )


# ------------------------------------------------------------------------ flops arg, dtypes


def test_flops_arg_overrides_and_covers_unmodelled_ops() -> None:
    c = cost("aten::mm", [[64, 128], [128, 256]], [BF16, BF16], flops_arg=123.0)
    assert (c.flops, c.bytes, c.exact) == (123.0, 114_688, True)
    c = cost("aten::some_custom_op", [[10, 10]], [F32], flops_arg=1e6)
    assert (c.flops, c.bytes, c.kind, c.exact) == (1e6, 400, "other", False)
    assert cost("aten::some_custom_op", [[10, 10]], [F32], flops_arg=0) is None
    assert cost("aten::linear", [[8, 16], [32, 16]], [F32, F32], flops_arg=8192) is None


def test_dtype_helpers() -> None:
    assert dtype_of('["c10::BFloat16","float","Scalar",""]') == "bf16"
    assert dtype_of(["float", "double"], [[1, 559, 64], []]) == "fp32"
    assert dtype_of(["double", "c10::Half"], [[], [4]]) == "fp16"  # wrapped scalar skipped
    assert dtype_of(["c10::Float8_e4m3fnuz"]) == "fp8"
    assert dtype_of(["long int", "signed char"]) == "int8"
    assert dtype_of(["long int", "bool"]) == "other"
    assert dtype_of("not json") == "other" and dtype_of(None) == "other"
    expected = {
        "float": 4,
        "double": 8,
        "c10::Half": 2,
        "c10::BFloat16": 2,
        "c10::Float8_e4m3fn": 1,
        "c10::Float8_e5m2": 1,
        "c10::Float8_e4m3fnuz": 1,
        "long int": 8,
        "long": 8,
        "int": 4,
        "short int": 2,
        "bool": 1,
        "unsigned char": 1,
        "signed char": 1,
        "c10::complex<float>": 8,
    }
    for t, n in expected.items():
        assert bytes_per_element(t) == n, t
    for t in ("Scalar", "ScalarList", "", "TensorList", "GenericList", "Int"):
        assert bytes_per_element(t) is None, t


def test_roof_dtype_from_kernel_names() -> None:
    fp32_gemm = cost("aten::mm", [[64, 64], [64, 64]], [F32, F32])
    assert PEAK_DTYPE_FOR["bf16"] == "bf16" and PEAK_DTYPE_FOR["other"] is None
    assert roof_dtype(fp32_gemm) == "fp32"
    assert roof_dtype(fp32_gemm, ["ampere_sgemm_128x64_nn"]) == "fp32"
    tc_kernel = "sm80_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128"
    assert roof_dtype(fp32_gemm, [tc_kernel]) == "tf32"
    assert roof_dtype(fp32_gemm, ["Cijk_Ailk_Bljk_SB_MT64x64x16_MI32x32x2x1_SN"]) == "fp32_matrix"
    bf16 = cost("aten::mm", [[64, 64], [64, 64]], [BF16, BF16])
    assert roof_dtype(bf16, ["whatever_tf32"]) == "bf16"
    fp32_add = cost("aten::add", [[4], [4]], [F32, F32])
    assert roof_dtype(fp32_add, ["tf32"]) == "fp32"


def test_composite_registry() -> None:
    for name in (
        "aten::linear",
        "aten::matmul",
        "aten::conv2d",
        "aten::convolution",
        "aten::_convolution",
        "aten::scaled_dot_product_attention",
        "aten::clone",
    ):
        assert is_composite(name) and name in COMPOSITE_OPS
        assert not is_modelled(name)
    assert cost("aten::linear", [[8, 16], [32, 16], [32]], [F32, F32, F32]) is None
    c = cost("aten::linear", [[8, 16], [32, 16], [32]], [F32, F32, F32], include_composite=True)
    assert c.flops == 2 * 8 * 32 * 16 + 8 * 32
    for name in ("aten::mm", "aten::relu_", "aten::_foreach_add_"):
        assert is_modelled(name), name
    ops = modelled_ops()
    assert "aten::_flash_attention_forward" in ops and "aten::linear" not in ops


# ------------------------------------------------------------------------------- robustness


@pytest.mark.parametrize(
    "dims, types",
    [
        ("not json", '["float","float"]'),
        ("[[64,128],[128", '["float","float"]'),
        (None, '["float","float"]'),
        ("[[64,128],[128,256]]", None),
        ("[[64,128],[128,256]]", "garbage"),
        ('[["s0",128],[128,256]]', '["float","float"]'),  # symbolic
        ("[[-1,128],[128,256]]", '["float","float"]'),
        ("[[64,128]]", '["float"]'),  # missing operand
        ("[[64,128],[128,256]]", '["float"]'),  # types shorter than dims
        ("[[64,128],[128,256]]", '["Scalar","Scalar"]'),
        ('{"a": 1}', '["float","float"]'),
        ("[[64.5,128],[128,256]]", '["float","float"]'),
        ("[[true,128],[128,256]]", '["float","float"]'),
        ("[]", "[]"),
    ],
)
def test_malformed_inputs_give_none(dims, types) -> None:
    assert op_cost("aten::mm", dims, types) is None


def test_never_raises_on_garbage() -> None:
    samples = [
        None,
        "",
        "null",
        "[",
        "[[]]",
        "[[1e400]]",
        "[[[[[[[[]]]]]]]]",
        '[["x"]]',
        5,
        "[[1,2],[3]]",
        "[[99999999999999999999,2]]",
        "[" * 2000 + "]" * 2000,
    ]
    # one name per model family (every model is reached by some name in the sample)
    names = [
        *modelled_ops(include_composite=True)[::5],
        "aten::mm",
        "aten::_fused_adamw_",
        "aten::convolution_backward",
        "aten::_flash_attention_forward",
        "aten::x",
        "",
        None,
        5,
    ]
    for name in names:
        for d in samples:
            for t in ('["float","float","float"]', '["TensorList","float"]', "[1]"):
                for c in (None, '["x","[1, 2]","True"]'):
                    op_cost(name, d, t, c)  # must not raise
    for bad in (None, "[1]", samples[-1]):
        op_cost("aten::mm", "[[2,2],[2,2]]", bad, bad)


def test_accepts_already_parsed_lists() -> None:
    c = op_cost("aten::mm", [[64, 128], [128, 256]], [BF16, BF16])
    assert c.flops == 4_194_304


# ----------------------------------------------------------------------- real-trace coverage


def _direct_kernel_time(path) -> tuple[list[dict], Counter]:
    """cpu_ops of a trace and the kernel time each launched directly (runtime -> External id)."""
    with gzip.open(path, "rt") as f:
        d = json.load(f)
    evs = d["traceEvents"]
    ops = [e for e in evs if e.get("cat") == "cpu_op"]
    by_ext = {o["args"].get("External id"): i for i, o in enumerate(ops)}
    runtime = {
        e["args"]["correlation"]: e
        for e in evs
        if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})
    }
    t: Counter = Counter()
    for e in evs:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            r = runtime.get(e.get("args", {}).get("correlation"))
            i = by_ext.get(r["args"].get("External id")) if r else None
            if i is not None:
                t[i] += e.get("dur", 0)
    return ops, t


@requires_corpus
@pytest.mark.corpus
@pytest.mark.parametrize(
    "rel, min_time_share",
    [
        ("tracelens/traces/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz", 0.999),
        ("tracelens/traces/mi300/ddp_resnet18_no_pool/train_resnet18.json.gz", 0.999),
    ],
)
def test_real_traces_kernel_time_is_modelled(rel: str, min_time_share: float) -> None:
    ops, t = _direct_kernel_time(KINETO / rel)
    total = modelled = 0.0
    for i, o in enumerate(ops):
        a = o["args"]
        c = op_cost(
            o["name"],
            json.dumps(a.get("Input Dims")),
            json.dumps(a.get("Input type")),
            json.dumps(a.get("Concrete Inputs")),
            a.get("flops"),
        )
        if i in t:
            total += t[i]
            modelled += t[i] if c is not None else 0
        else:
            # ops that launch nothing themselves get no cost unless they are leaves whose
            # kernels fell outside the trace window
            assert c is None or not is_composite(o["name"])
    assert total > 0
    assert modelled / total >= min_time_share
