"""FLOPs models of spatial ops: convolution (forward and backward), pooling (max, average,
adaptive) and upsampling."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from traceinsight.metrics.flops.args import (
    _COMPOSITE_MODELS,
    _MODELS,
    _Args,
    _cost,
    _main_dtype,
    _reg,
)
from traceinsight.metrics.flops.core import OpCost, _prod

# ---- convolution

# name -> argument positions (None = argument absent from the signature)
_CONV: dict[str, dict[str, Any]] = {
    "aten::cudnn_convolution": dict(bias=None, padding=2, stride=3, dilation=4, groups=5),
    "aten::cudnn_convolution_transpose": dict(
        bias=None, padding=2, output_padding=3, stride=4, dilation=5, groups=6, transposed=True
    ),
    "aten::cudnn_convolution_relu": dict(bias=2, stride=3, padding=4, dilation=5, groups=6, act=1),
    "aten::cudnn_convolution_add_relu": dict(
        bias=4, stride=5, padding=6, dilation=7, groups=8, act=2
    ),
    "aten::miopen_convolution": dict(bias=2, padding=3, stride=4, dilation=5, groups=6),
    "aten::miopen_depthwise_convolution": dict(bias=2, padding=3, stride=4, dilation=5, groups=6),
    "aten::miopen_convolution_transpose": dict(
        bias=2, padding=3, output_padding=4, stride=5, dilation=6, groups=7, transposed=True
    ),
    "aten::miopen_convolution_relu": dict(bias=2, stride=3, padding=4, dilation=5, groups=6, act=1),
    "aten::miopen_convolution_add_relu": dict(
        bias=4, stride=5, padding=6, dilation=7, groups=8, act=2
    ),
    "aten::mkldnn_convolution": dict(bias=2, padding=3, stride=4, dilation=5, groups=6),
    "aten::_conv_depthwise2d": dict(bias=3, stride=4, padding=5, dilation=6),
    "aten::conv_depthwise3d": dict(bias=3, stride=4, padding=5, dilation=6),
    "aten::_slow_conv2d_forward": dict(bias=3, stride=4, padding=5),
    "aten::slow_conv3d_forward": dict(bias=3, stride=4, padding=5),
    "aten::slow_conv_dilated2d": dict(bias=3, stride=4, padding=5, dilation=6),
    "aten::slow_conv_dilated3d": dict(bias=3, stride=4, padding=5, dilation=6),
    "aten::slow_conv_transpose2d": dict(
        bias=3, stride=4, padding=5, output_padding=6, dilation=7, transposed=True
    ),
    "aten::slow_conv_transpose3d": dict(
        bias=3, stride=4, padding=5, output_padding=6, dilation=7, transposed=True
    ),
}
_CONV_COMPOSITE: dict[str, dict[str, Any]] = {
    "aten::convolution": dict(
        bias=2, stride=3, padding=4, dilation=5, transposed=6, output_padding=7, groups=8
    ),
    "aten::_convolution": dict(
        bias=2, stride=3, padding=4, dilation=5, transposed=6, output_padding=7, groups=8
    ),
    "aten::conv1d": dict(bias=2, stride=3, padding=4, dilation=5, groups=6),
    "aten::conv2d": dict(bias=2, stride=3, padding=4, dilation=5, groups=6),
    "aten::conv3d": dict(bias=2, stride=3, padding=4, dilation=5, groups=6),
    "aten::conv_transpose1d": dict(
        bias=2, stride=3, padding=4, output_padding=5, groups=6, dilation=7, transposed=True
    ),
    "aten::conv_transpose2d": dict(
        bias=2, stride=3, padding=4, output_padding=5, groups=6, dilation=7, transposed=True
    ),
    "aten::conv_transpose3d": dict(
        bias=2, stride=3, padding=4, output_padding=5, groups=6, dilation=7, transposed=True
    ),
}


def _ints(v: Any, n: int, minimum: int = 1) -> list[int] | None:
    """A concrete int-list argument expanded to n spatial dims; None when absent, malformed
    or below ``minimum`` (1 for sizes, strides and dilations; 0 for paddings)."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        v = [v]
    if (
        isinstance(v, list)
        and v
        and all(isinstance(x, int) and not isinstance(x, bool) and x >= minimum for x in v)
    ):
        if len(v) == n:
            return list(v)
        if len(v) == 1:
            return list(v) * n
    return None


def _seen_output(a: _Args, N: int, K: int, nsp: int, unbatched: bool) -> list[int] | None:
    """The spatial output dims from the context's output shape when it fits [N, K, *spatial]."""
    o = a.out_shape
    if o is None:
        return None
    lead = [K] if unbatched else [N, K]
    if len(o) != len(lead) + nsp or list(o[: len(lead)]) != lead or min(o) <= 0:
        return None
    return list(o[len(lead) :])


def _geometry(sp: Sequence[int], ks: Sequence[int], dil: Sequence[int], out: Sequence[int]):
    """The (stride, padding) per spatial dim that turn input ``sp`` into ``out`` with kernel
    ``ks`` and dilation ``dil`` (the smallest stride, then the padding nearest to half the
    kernel's reach); None when no stride 1..8 with padding 0..reach gives ``out``."""
    stride, padding = [], []
    for i in range(len(sp)):
        reach = dil[i] * (ks[i] - 1)
        found = None
        for s in range(1, 9):
            fits = [p for p in range(reach + 1) if (sp[i] + 2 * p - reach - 1) // s + 1 == out[i]]
            if fits:
                found = (s, min(fits, key=lambda p: abs(2 * p - reach)))
                break
        if found is None:
            return None
        stride.append(found[0])
        padding.append(found[1])
    return stride, padding


def _dims_text(v: Sequence[int]) -> str:
    return "[" + ", ".join(str(x) for x in v) + "]"


def _conv(a: _Args, name: str, pos: dict[str, Any]) -> OpCost | None:
    x, w = a.t(0), a.t(1)
    if x is None or w is None or len(w.shape) < 3:
        return None
    nsp = len(w.shape) - 2
    if len(x.shape) == nsp + 2:
        N, C, sp = x.shape[0], x.shape[1], x.shape[2:]
    elif len(x.shape) == nsp + 1:  # unbatched
        N, C, sp = 1, x.shape[0], x.shape[1:]
    else:
        return None
    ks = w.shape[2:]
    missing: list[str] = []  # what the record lacks, assumed unless the output shape tells

    def arg(key: str, default: int, what: str) -> list[int]:
        i = pos.get(key)
        if i is None:
            return [default] * nsp
        v = _ints(a.c(i), nsp, minimum=1)
        if v is None:
            missing.append(f"{what} not recorded: assumed {default}")
            return [default] * nsp
        return v

    transposed = pos.get("transposed", False)
    if isinstance(transposed, int) and not isinstance(transposed, bool):
        tv = a.c(transposed)
        transposed = tv if isinstance(tv, bool) else False
    stride = arg("stride", 1, "stride")
    dilation = arg("dilation", 1, "dilation")
    pad_i = pos.get("padding")
    pad_raw = a.c(pad_i) if pad_i is not None else None
    same = False
    if isinstance(pad_raw, str) and pad_raw.strip("'\"") in ("same", "valid"):
        same = pad_raw.strip("'\"") == "same"
        padding = [0] * nsp
    else:
        given = _ints(pad_raw, nsp, minimum=0)
        if given is None:
            same = True  # "same" output size
            missing.append("padding not recorded: assumed 'same' output size")
        padding = given if given is not None else [0] * nsp
    g_pos = pos.get("groups")
    gv = a.c(g_pos) if g_pos is not None else None
    if isinstance(gv, int) and not isinstance(gv, bool) and gv > 0:
        groups = gv
    elif not transposed and w.shape[1] and C % w.shape[1] == 0:
        groups = C // w.shape[1]  # exact: the weight is [K, C/g, ...]
    elif transposed and g_pos is None:
        groups = 1  # signature without groups
    else:
        groups = 1
        a.assumed.append("groups not recorded: assumed 1")
    if transposed:
        a.assumed.extend(missing)
        op_pos = pos.get("output_padding")
        out_pad = _ints(a.c(op_pos), nsp, minimum=0) if op_pos is not None else None
        if out_pad is None:
            out_pad = [0] * nsp
        Kout = w.shape[1] * groups
        out = [
            (sp[i] - 1) * stride[i] - 2 * padding[i] + dilation[i] * (ks[i] - 1) + out_pad[i] + 1
            for i in range(nsp)
        ]
        macs = N * C * _prod(sp) * w.shape[1] * _prod(ks)
    else:
        Kout = w.shape[0]
        seen = _seen_output(a, N, Kout, nsp, len(x.shape) == nsp + 1)
        geom = _geometry(sp, ks, dilation, seen) if missing and seen is not None else None
        if seen is not None and geom is not None:
            # the output shape is known from the op that reads it: the FLOPs need no stride
            out = list(seen)
            a.inferred.append(
                f"stride and padding from the output shape "
                f"({a.out_source or 'context'}): stride {_dims_text(geom[0])}, padding "
                f"{_dims_text(geom[1])}, output {_dims_text(a.out_shape or ())}"
            )
        else:
            a.assumed.extend(missing)
            if same:
                out = [-(-sp[i] // stride[i]) for i in range(nsp)]
            else:
                out = [
                    (sp[i] + 2 * padding[i] - dilation[i] * (ks[i] - 1) - 1) // stride[i] + 1
                    for i in range(nsp)
                ]
        macs = N * Kout * _prod(out) * w.shape[1] * _prod(ks)
    if any(o <= 0 for o in out):
        return None
    out_numel = N * Kout * _prod(out)
    b_pos = pos.get("bias")
    bias = a.t(b_pos) if isinstance(b_pos, int) else None
    flops = 2 * macs + (out_numel if bias is not None and bias.numel else 0)
    flops += out_numel * pos.get("act", 0)  # fused (add +) relu
    nbytes = x.nbytes + w.nbytes + out_numel * x.bpe + (bias.nbytes if bias else 0)
    if pos.get("act") == 2:  # z input of conv_add_relu
        z = a.t(2)
        nbytes += z.nbytes if z else 0
    return _cost(flops, nbytes, _main_dtype([x]), "conv", a)


for _n, _pos in _CONV.items():
    _MODELS[_n] = (lambda p: lambda a, n: _conv(a, n, p))(_pos)
for _n, _pos in _CONV_COMPOSITE.items():
    _COMPOSITE_MODELS[_n] = (lambda p: lambda a, n: _conv(a, n, p))(_pos)


@_reg(_MODELS, "aten::convolution_backward")
def _conv_bwd(a: _Args, name: str) -> OpCost | None:
    # (grad_output, input, weight, bias_sizes?, stride, padding, dilation, transposed,
    #  output_padding, groups, output_mask)
    go, x, w = a.t(0), a.t(1), a.t(2)
    if go is None or x is None or w is None or len(w.shape) < 3:
        return None
    ks = _prod(w.shape[2:])
    tv = a.c(7)
    transposed = tv if isinstance(tv, bool) else False
    if not isinstance(tv, bool):
        a.assumed.append("transposed flag not recorded: assumed False")
    # MACs of the forward: every element of the (forward) output meets C/g·prod(kernel) inputs
    macs = (x.numel if transposed else go.numel) * w.shape[1] * ks
    mask = a.c(10)
    if isinstance(mask, list) and len(mask) == 3 and all(isinstance(m, bool) for m in mask):
        gi, gw, gb = mask
    else:
        gi, gw, gb = True, True, False
        a.assumed.append("output_mask not recorded: assumed input and weight gradients")
    flops = 2 * macs * (int(gi) + int(gw)) + (go.numel if gb else 0)
    Kout = go.shape[1] if len(go.shape) >= 2 else 1
    nbytes = go.nbytes
    if gi:
        nbytes += w.nbytes + x.numel * x.bpe  # read weight, write grad_input
    if gw:
        nbytes += x.nbytes + w.numel * w.bpe  # read input, write grad_weight
    if gb:
        nbytes += Kout * go.bpe
    return _cost(flops, nbytes, _main_dtype([go, x]), "conv", a)


@_reg(_MODELS, "aten::cudnn_convolution_backward_input", "aten::miopen_convolution_backward_input")
def _conv_bwd_input(a: _Args, name: str) -> OpCost | None:
    # PyTorch <= 1.10: (self_size, grad_output, weight, padding, stride, dilation, groups, ...)
    go, w = a.t(1), a.t(2)
    if go is None or w is None or len(w.shape) < 3 or len(go.shape) != len(w.shape):
        return None
    flops = 2 * go.numel * w.shape[1] * _prod(w.shape[2:])
    size = _ints(a.c(0), len(go.shape))
    if size is not None and len(size) == len(go.shape):
        gi_numel = _prod(size)
    elif a.in_shape is not None and len(a.in_shape) == len(go.shape):
        gi_numel = _prod(a.in_shape)  # the input's shape, from the op's parent
        a.inferred.append(f"input size from {a.in_source or 'context'}: {_dims_text(a.in_shape)}")
    else:
        gv = a.c(6)
        g = gv if isinstance(gv, int) and not isinstance(gv, bool) and gv > 0 else 1
        gi_numel = go.shape[0] * w.shape[1] * g * _prod(go.shape[2:])
        a.assumed.append("input size not recorded: assumed stride 1")
    return _cost(flops, go.nbytes + w.nbytes + gi_numel * go.bpe, _main_dtype([go]), "conv", a)


@_reg(
    _MODELS, "aten::cudnn_convolution_backward_weight", "aten::miopen_convolution_backward_weight"
)
def _conv_bwd_weight(a: _Args, name: str) -> OpCost | None:
    # PyTorch <= 1.10: (weight_size, grad_output, self, padding, stride, dilation, groups, ...)
    go, x = a.t(1), a.t(2)
    if go is None or x is None or len(go.shape) < 3:
        return None
    wsize = _ints(a.c(0), len(go.shape))
    if wsize is None and a.w_shape is not None and len(a.w_shape) == len(go.shape):
        wsize = list(a.w_shape)  # the weight's shape, from the op's parent
        a.inferred.append(f"weight size from {a.w_source or 'context'}: {_dims_text(wsize)}")
    if wsize is None or len(wsize) != len(go.shape):
        return None  # kernel size unknown: no FLOPs
    flops = 2 * go.numel * wsize[1] * _prod(wsize[2:])
    return _cost(
        flops, go.nbytes + x.nbytes + _prod(wsize) * x.bpe, _main_dtype([go, x]), "conv", a
    )


# ---- pooling


def _pool_out(
    sp: Sequence[int], k: list[int], s: list[int], p: list[int], d: list[int], ceil: bool
) -> list[int] | None:
    out = []
    for i in range(len(sp)):
        num = sp[i] + 2 * p[i] - d[i] * (k[i] - 1) - 1
        o = (-(-num // s[i]) if ceil else num // s[i]) + 1
        if ceil and (o - 1) * s[i] >= sp[i] + p[i]:
            o -= 1
        if o <= 0:
            return None
        out.append(o)
    return out


def _pool_geom(
    a: _Args, nsp: int, k_i: int, s_i: int, p_i: int, d_i: int | None, ceil_i: int
) -> tuple[list[int], list[int], list[int], list[int], bool] | None:
    k = _ints(a.c(k_i), nsp)
    if k is None:
        return None
    s_raw = a.c(s_i)
    s = k if s_raw in ([], None) else _ints(s_raw, nsp)
    p = _ints(a.c(p_i), nsp, minimum=0) or [0] * nsp
    d = (_ints(a.c(d_i), nsp) if d_i is not None else None) or [1] * nsp
    if s is None:
        return None
    return k, s, p, d, a.c(ceil_i) is True


def _pool(a: _Args, name: str, nsp: int, maxpool: bool) -> OpCost | None:
    x = a.t(0)
    if x is None or len(x.shape) < nsp + 1:
        return None
    # max: (self, kernel_size, stride, padding, dilation, ceil_mode)
    # avg: (self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
    g = _pool_geom(a, nsp, 1, 2, 3, 4 if maxpool else None, 5 if maxpool else 4)
    if g is None:
        return None
    k, s, p, d, ceil = g
    out = _pool_out(x.shape[-nsp:], k, s, p, d, ceil)
    if out is None:
        return None
    out_numel = _prod(x.shape[:-nsp]) * _prod(out)
    out_bpe = x.bpe + (8 if maxpool and "with_indices" in name else 0)
    return _cost(
        out_numel * _prod(k), x.nbytes + out_numel * out_bpe, _main_dtype([x]), "reduction", a
    )


def _pool_bwd(a: _Args, name: str) -> OpCost | None:
    # (grad_output, self, ...[, indices]); grad_input has the shape of self
    go, x = a.t(0), a.t(1)
    if go is None or x is None:
        return None
    # `self` only lends its shape: not read, but grad_input (same size) is written, so the
    # sum of the tensor inputs (grad_output, self, indices) is the ideal traffic
    return _cost(
        max(go.numel, x.numel),
        sum(t.nbytes for t in a.tensors()),
        _main_dtype([go]),
        "reduction",
        a,
    )


for _n, _nsp in (
    ("aten::max_pool1d_with_indices", 1),
    ("aten::max_pool2d_with_indices", 2),
    ("aten::max_pool3d_with_indices", 3),
):
    _MODELS[_n] = (lambda k: lambda a, n: _pool(a, n, k, True))(_nsp)
for _n, _nsp in (("aten::avg_pool1d", 1), ("aten::avg_pool2d", 2), ("aten::avg_pool3d", 3)):
    _MODELS[_n] = (lambda k: lambda a, n: _pool(a, n, k, False))(_nsp)
for _n in (
    "aten::max_pool2d_with_indices_backward",
    "aten::max_pool3d_with_indices_backward",
    "aten::avg_pool2d_backward",
    "aten::avg_pool3d_backward",
    "aten::_adaptive_avg_pool2d_backward",
    "aten::_adaptive_avg_pool3d_backward",
    "aten::adaptive_max_pool2d_backward",
    "aten::adaptive_max_pool3d_backward",
):
    _MODELS[_n] = _pool_bwd


def _adaptive(a: _Args, name: str, nsp: int, maxpool: bool) -> OpCost | None:
    x = a.t(0)
    osz = _ints(a.c(1), nsp)
    if x is None or osz is None or len(x.shape) < nsp + 1 or any(o <= 0 for o in osz):
        return None
    out_numel = _prod(x.shape[:-nsp]) * _prod(osz)
    out_bpe = x.bpe + (8 if maxpool else 0)
    return _cost(x.numel, x.nbytes + out_numel * out_bpe, _main_dtype([x]), "reduction", a)


for _n, _nsp, _mx in (
    ("aten::_adaptive_avg_pool2d", 2, False),
    ("aten::_adaptive_avg_pool3d", 3, False),
    ("aten::adaptive_max_pool2d", 2, True),
    ("aten::adaptive_max_pool3d", 3, True),
):
    _MODELS[_n] = (lambda k, m: lambda a, n: _adaptive(a, n, k, m))(_nsp, _mx)


def _upsample(a: _Args, name: str, nsp: int, per_out: int) -> OpCost | None:
    x = a.t(0)
    if x is None or len(x.shape) < nsp + 1:
        return None
    sp = x.shape[-nsp:]
    out = None
    for i in range(1, len(a.concrete)):
        v = a.c(i)
        if isinstance(v, list) and len(v) == nsp:
            if all(isinstance(e, int) and not isinstance(e, bool) for e in v):
                out = v
                break
            if all(isinstance(e, (int, float)) and not isinstance(e, bool) for e in v):
                out = [math.floor(sp[j] * v[j]) for j in range(nsp)]
                break
    if out is None:  # separate scale arguments (scales_h, scales_w) as floats
        scales = [a.c(i) for i in range(1, len(a.concrete)) if isinstance(a.c(i), float)]
        if len(scales) >= nsp:
            out = [math.floor(sp[j] * scales[-nsp + j]) for j in range(nsp)]
    if out is None or any(o <= 0 for o in out):
        return None
    out_numel = _prod(x.shape[:-nsp]) * _prod(out)
    return _cost(
        out_numel * per_out,
        x.nbytes + out_numel * x.bpe,
        _main_dtype([x]),
        "copy" if per_out == 0 else "elementwise",
        a,
    )


for _n, _nsp, _c in (
    ("aten::upsample_nearest1d", 1, 0),
    ("aten::upsample_nearest2d", 2, 0),
    ("aten::upsample_nearest3d", 3, 0),
    ("aten::_upsample_nearest_exact1d", 1, 0),
    ("aten::_upsample_nearest_exact2d", 2, 0),
    ("aten::_upsample_nearest_exact3d", 3, 0),
    ("aten::upsample_linear1d", 1, 4),
    ("aten::upsample_bilinear2d", 2, 8),
    ("aten::_upsample_bilinear2d_aa", 2, 8),
    ("aten::upsample_bicubic2d", 2, 32),
    ("aten::upsample_trilinear3d", 3, 16),
):
    _MODELS[_n] = (lambda k, c: lambda a, n: _upsample(a, n, k, c))(_nsp, _c)
