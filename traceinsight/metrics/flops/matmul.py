"""FLOPs models of matrix products (mm, addmm, bmm, baddbmm, mv, dot, scaled / int8 mm,
linear, matmul) and attention (flash, memory-efficient, cuDNN, SDPA; forward and backward)."""

from __future__ import annotations

from typing import Any

from traceinsight.metrics.flops.args import (
    _COMPOSITE_MODELS,
    _MODELS,
    _T,
    _Args,
    _broadcast,
    _cost,
    _main_dtype,
    _reg,
)
from traceinsight.metrics.flops.core import OpCost, _is_float_text, _prod
from traceinsight.metrics.flops.dtypes import _SCALAR_TYPE
from traceinsight.metrics.flops.pointwise import ELEMENTWISE_COST

# ---- GEMM


def _mat2(A: _T, B: _T) -> tuple[int, int, int] | None:
    if len(A.shape) != 2 or len(B.shape) != 2:
        return None
    M, K = A.shape
    K2, N = B.shape
    return (M, N, K) if K == K2 else None


@_reg(_MODELS, "aten::mm")
def _mm(a: _Args, name: str) -> OpCost | None:
    A, B = a.t(0), a.t(1)
    if A is None or B is None or (mnk := _mat2(A, B)) is None:
        return None
    M, N, K = mnk
    return _cost(2 * M * N * K, A.nbytes + B.nbytes + M * N * A.bpe, _main_dtype([A]), "gemm", a)


@_reg(_MODELS, "aten::addmm", "aten::addmm_", "aten::_addmm_activation")
def _addmm(a: _Args, name: str) -> OpCost | None:
    C, A, B = a.t(0), a.t(1), a.t(2)
    if A is None or B is None or (mnk := _mat2(A, B)) is None:
        return None
    M, N, K = mnk
    flops = 2 * M * N * K + M * N  # + beta*C
    if name == "aten::_addmm_activation":  # (self, mat1, mat2, beta, alpha, use_gelu)
        flops += M * N * (ELEMENTWISE_COST["gelu"] if a.c(5) is True else 1)
    nbytes = A.nbytes + B.nbytes + M * N * A.bpe + (C.nbytes if C else 0)
    return _cost(flops, nbytes, _main_dtype([A]), "gemm", a)


def _bat3(A: _T, B: _T) -> tuple[int, int, int, int] | None:
    if len(A.shape) != 3 or len(B.shape) != 3:
        return None
    b, M, K = A.shape
    b2, K2, N = B.shape
    if K != K2 or b != b2:
        return None
    return b, M, N, K


@_reg(_MODELS, "aten::bmm")
def _bmm(a: _Args, name: str) -> OpCost | None:
    A, B = a.t(0), a.t(1)
    if A is None or B is None or (d := _bat3(A, B)) is None:
        return None
    b, M, N, K = d
    return _cost(
        2 * b * M * N * K, A.nbytes + B.nbytes + b * M * N * A.bpe, _main_dtype([A]), "gemm", a
    )


@_reg(_MODELS, "aten::baddbmm", "aten::baddbmm_")
def _baddbmm(a: _Args, name: str) -> OpCost | None:
    C, A, B = a.t(0), a.t(1), a.t(2)
    if A is None or B is None or (d := _bat3(A, B)) is None:
        return None
    b, M, N, K = d
    nbytes = A.nbytes + B.nbytes + b * M * N * A.bpe + (C.nbytes if C else 0)
    return _cost(2 * b * M * N * K + b * M * N, nbytes, _main_dtype([A]), "gemm", a)


@_reg(_MODELS, "aten::addbmm", "aten::addbmm_")
def _addbmm(a: _Args, name: str) -> OpCost | None:
    C, A, B = a.t(0), a.t(1), a.t(2)
    if A is None or B is None or (d := _bat3(A, B)) is None:
        return None
    b, M, N, K = d
    nbytes = A.nbytes + B.nbytes + M * N * A.bpe + (C.nbytes if C else 0)
    return _cost(2 * b * M * N * K + M * N, nbytes, _main_dtype([A]), "gemm", a)


@_reg(_MODELS, "aten::mv")
def _mv(a: _Args, name: str) -> OpCost | None:
    A, x = a.t(0), a.t(1)
    if A is None or x is None or len(A.shape) != 2 or x.shape != (A.shape[1],):
        return None
    M, N = A.shape
    return _cost(2 * M * N, A.nbytes + x.nbytes + M * A.bpe, _main_dtype([A]), "gemm", a)


@_reg(_MODELS, "aten::addmv", "aten::addmv_")
def _addmv(a: _Args, name: str) -> OpCost | None:
    y, A, x = a.t(0), a.t(1), a.t(2)
    if A is None or x is None or len(A.shape) != 2 or x.shape != (A.shape[1],):
        return None
    M, N = A.shape
    nbytes = A.nbytes + x.nbytes + M * A.bpe + (y.nbytes if y else 0)
    return _cost(2 * M * N + M, nbytes, _main_dtype([A]), "gemm", a)


@_reg(_MODELS, "aten::dot", "aten::vdot")
def _dot(a: _Args, name: str) -> OpCost | None:
    x, y = a.t(0), a.t(1)
    if x is None or y is None or len(x.shape) != 1 or x.shape != y.shape:
        return None
    return _cost(2 * x.numel, x.nbytes + y.nbytes + x.bpe, _main_dtype([x]), "gemm", a)


@_reg(_MODELS, "aten::_scaled_mm")
def _scaled_mm(a: _Args, name: str) -> OpCost | None:
    # (self, mat2, scale_a, scale_b, bias?, scale_result?, out_dtype?, use_fast_accum)
    A, B = a.t(0), a.t(1)
    if A is None or B is None or (mnk := _mat2(A, B)) is None:
        return None
    M, N, K = mnk
    out_bpe = A.bpe
    code = a.c(6)
    if isinstance(code, int) and not isinstance(code, bool) and code in _SCALAR_TYPE:
        out_bpe = _SCALAR_TYPE[code][0]
    extra = sum(t.nbytes for t in (a.t(2), a.t(3), a.t(4), a.t(5)) if t is not None)
    bias = a.t(4)
    flops = 2 * M * N * K + (M * N if bias is not None else 0)
    return _cost(flops, A.nbytes + B.nbytes + M * N * out_bpe + extra, _main_dtype([A]), "gemm", a)


@_reg(_MODELS, "aten::_int_mm")
def _int_mm(a: _Args, name: str) -> OpCost | None:
    A, B = a.t(0), a.t(1)
    if A is None or B is None or (mnk := _mat2(A, B)) is None:
        return None
    M, N, K = mnk
    return _cost(2 * M * N * K, A.nbytes + B.nbytes + 4 * M * N, "int8", "gemm", a)


@_reg(_COMPOSITE_MODELS, "aten::linear")
def _linear(a: _Args, name: str) -> OpCost | None:
    x, W, b = a.t(0), a.t(1), a.t(2)
    if x is None or W is None or not x.shape or len(W.shape) != 2 or x.shape[-1] != W.shape[1]:
        return None
    M = _prod(x.shape[:-1])
    N, K = W.shape
    flops = 2 * M * N * K + (M * N if b is not None else 0)
    nbytes = x.nbytes + W.nbytes + M * N * x.bpe + (b.nbytes if b else 0)
    return _cost(flops, nbytes, _main_dtype([x]), "gemm", a)


@_reg(_COMPOSITE_MODELS, "aten::matmul")
def _matmul(a: _Args, name: str) -> OpCost | None:
    A, B = a.t(0), a.t(1)
    if A is None or B is None or not A.shape or not B.shape:
        return None
    sa = A.shape if len(A.shape) > 1 else (1, *A.shape)
    sb = B.shape if len(B.shape) > 1 else (*B.shape, 1)
    if sa[-1] != sb[-2]:
        return None
    batch = _broadcast([sa[:-2], sb[:-2]])
    if batch is None:
        return None
    nb = _prod(batch)
    M, K, N = sa[-2], sa[-1], sb[-1]
    return _cost(
        2 * nb * M * N * K, A.nbytes + B.nbytes + nb * M * N * A.bpe, _main_dtype([A]), "gemm", a
    )


# ---- attention

# name -> (index of q, layout, index of the causal flag, flag kind, backward)
#   layout "bshd": [B, S, H, D] (flash / mem-efficient kernels), "bhsd": [B, H, S, D] (SDPA)
#   flag kind "bool": is_causal; "mask": custom_mask_type (0 none, 1/2 causal)
# Indices follow PyTorch's native_functions.yaml; when the value there is not of the expected
# kind (an older signature), the flag is looked up as the first bool / int after the dropout
# probability (the only float argument before it in every version).
_ATTN: dict[str, tuple[int, str, int, str, bool]] = {
    "aten::_flash_attention_forward": (0, "bshd", 8, "bool", False),
    "aten::_flash_attention_backward": (1, "bshd", 11, "bool", True),
    "aten::_efficient_attention_forward": (0, "bshd", 9, "mask", False),
    "aten::_efficient_attention_backward": (1, "bshd", 14, "mask", True),
    "aten::_scaled_dot_product_flash_attention": (0, "bhsd", 4, "bool", False),
    "aten::_scaled_dot_product_flash_attention_backward": (1, "bhsd", 11, "bool", True),
    "aten::_scaled_dot_product_efficient_attention": (0, "bhsd", 6, "bool", False),
    "aten::_scaled_dot_product_efficient_attention_backward": (1, "bhsd", 11, "bool", True),
    "aten::_scaled_dot_product_cudnn_attention": (0, "bhsd", 6, "bool", False),
    "aten::_scaled_dot_product_cudnn_attention_backward": (1, "bhsd", 14, "bool", True),
    "aten::_scaled_dot_product_flash_attention_for_cpu": (0, "bhsd", 4, "bool", False),
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward": (1, "bhsd", 7, "bool", True),
    "aten::_scaled_dot_product_fused_attention_overrideable": (0, "bhsd", 5, "bool", False),
    "aten::_scaled_dot_product_fused_attention_overrideable_backward": (
        1,
        "bhsd",
        13,
        "bool",
        True,
    ),
    "aten::_cudnn_attention_forward": (0, "bhsd", 9, "bool", False),
}
_SDPA_COMPOSITE = {"aten::scaled_dot_product_attention": (0, "bhsd", 5, "bool", False)}


def _causal_flag(a: _Args, idx: int, kind: str, start: int) -> bool | None:
    def ok(v: Any) -> bool:
        if kind == "bool":
            return isinstance(v, bool)
        return isinstance(v, int) and not isinstance(v, bool)

    v = a.c(idx)
    if ok(v):
        return bool(v) if kind == "bool" else v != 0
    # older signatures: the flag is the first bool / int after the dropout float
    for i in range(start, len(a.concrete)):
        if _is_float_text(a.raw_c(i)):
            for j in range(i + 1, len(a.concrete)):
                w = a.c(j)
                if ok(w):
                    return bool(w) if kind == "bool" else w != 0
            break
    return None


def _attention(a: _Args, name: str, spec: tuple[int, str, int, str, bool]) -> OpCost | None:
    qi, layout, ci, ckind, backward = spec
    q, k, v = a.t(qi), a.t(qi + 1), a.t(qi + 2)
    if q is None or k is None or v is None:
        return None
    varlen_pairs: float | None = None
    if len(q.shape) == 4 and len(k.shape) == 4 and len(v.shape) == 4:
        if layout == "bshd":
            B, Sq, H, Dqk = q.shape
            Skv, Dv = k.shape[1], v.shape[3]
        else:
            B, H, Sq, Dqk = q.shape
            Skv, Dv = k.shape[2], v.shape[3]
        pairs: float = B * Sq * Skv
    elif len(q.shape) == 3 and len(k.shape) == 3 and len(v.shape) == 3 and layout == "bshd":
        # varlen (packed) flash / efficient: q [total_q, H, D] with cu_seqlens
        B, Sq = 1, q.shape[0]
        H, Dqk = q.shape[1], q.shape[2]
        Skv, Dv = k.shape[0], v.shape[2]
        cu = a.t(qi + 3)
        nseq = max(cu.numel - 1, 1) if cu is not None and len(cu.shape) == 1 else 1
        varlen_pairs = Sq * Skv / nseq  # Σ sq_i·skv_i if the sequences were of equal length
        pairs = varlen_pairs
        a.assumed.append("varlen attention: sequences assumed of equal length")
    else:
        return None
    causal = _causal_flag(a, ci, ckind, qi + 3)
    if causal is None:
        causal = False
        a.assumed.append("causal flag not recorded: assumed non-causal")
    if causal:
        if Sq == Skv:
            pairs = pairs / 2
        elif Sq < Skv:  # bottom-right aligned mask (flash convention)
            pairs = pairs * (Skv - Sq + Sq / 2) / Skv
            a.assumed.append("causal with Sq != Skv: bottom-right aligned mask assumed")
        else:
            pairs = pairs / 2
            a.assumed.append("causal with Sq > Skv: half the pairs assumed")
    fwd = 2 * H * pairs * (Dqk + Dv)
    out_bytes = B * Sq * H * Dv * q.bpe if varlen_pairs is None else Sq * H * Dv * q.bpe
    io = q.nbytes + k.nbytes + v.nbytes
    if backward:
        # read q, k, v, out, dout; write dq, dk, dv
        return _cost(2.5 * fwd, 2 * io + 2 * out_bytes, _main_dtype([q]), "attention", a)
    return _cost(fwd, io + out_bytes, _main_dtype([q]), "attention", a)


for _n, _spec in _ATTN.items():
    _MODELS[_n] = (lambda s: lambda a, n: _attention(a, n, s))(_spec)
for _n, _spec in _SDPA_COMPOSITE.items():
    _COMPOSITE_MODELS[_n] = (lambda s: lambda a, n: _attention(a, n, s))(_spec)
