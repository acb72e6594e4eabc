"""FLOPs models of per-element work: elementwise ops (:data:`ELEMENTWISE_COST`), norms,
softmax, reductions and losses, and the multi-tensor (foreach) ops and fused optimizers."""

from __future__ import annotations

from collections.abc import Iterable
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
from traceinsight.metrics.flops.core import OpCost, _prod
from traceinsight.metrics.flops.dtypes import _FLOAT, _SCALAR_TYPE, _out_dtype

# ---- elementwise

#: FLOPs per output element. Transcendentals count 4 (as a polynomial / SFU sequence would);
#: activations count the arithmetic of their usual formulas.
ELEMENTWISE_COST: dict[str, int] = {
    **dict.fromkeys(
        [
            "add",
            "sub",
            "rsub",
            "mul",
            "div",
            "true_divide",
            "floor_divide",
            "neg",
            "abs",
            "relu",
            "clamp",
            "clamp_min",
            "clamp_max",
            "where",
            "masked_fill",
            "threshold",
            "threshold_backward",
            "maximum",
            "minimum",
            "fmax",
            "fmin",
            "reciprocal",
            "sqrt",
            "rsqrt",
            "square",
            "sign",
            "sgn",
            "floor",
            "ceil",
            "round",
            "trunc",
            "frac",
            "fmod",
            "remainder",
            "pow",
            "eq",
            "ne",
            "lt",
            "le",
            "gt",
            "ge",
            "logical_and",
            "logical_or",
            "logical_xor",
            "logical_not",
            "bitwise_and",
            "bitwise_or",
            "bitwise_xor",
            "bitwise_not",
            "isnan",
            "isinf",
            "isfinite",
            "nan_to_num",
            "relu6",
            "hardtanh",
            "native_dropout_backward",
            "uniform",
            "masked_scale",
            "heaviside",
            "copysign",
        ],
        1,
    ),
    **dict.fromkeys(
        [
            "exp",
            "exp2",
            "expm1",
            "log",
            "log2",
            "log10",
            "log1p",
            "sigmoid",
            "tanh",
            "sin",
            "cos",
            "tan",
            "asin",
            "acos",
            "atan",
            "atan2",
            "sinh",
            "cosh",
            "asinh",
            "acosh",
            "atanh",
            "erf",
            "erfc",
            "erfinv",
            "logit",
            "xlogy",
            "normal",
            "elu",
            "selu",
            "celu",
            "elu_backward",
            "hardswish",
            "hardswish_backward",
            "silu",
        ],
        4,
    ),
    **dict.fromkeys(
        [
            "leaky_relu",
            "leaky_relu_backward",
            "hardtanh_backward",
            "sigmoid_backward",
            "tanh_backward",
            "addcmul",
            "addcdiv",
            "native_dropout",
            "bernoulli",
        ],
        2,
    ),
    "lerp": 3,
    "hardsigmoid": 3,
    "hardsigmoid_backward": 2,
    "softplus": 5,
    "softplus_backward": 5,
    "silu_backward": 6,
    "gelu": 8,
    "gelu_backward": 10,
    "mish": 8,
    "mish_backward": 10,
}
_BOOL_OUT = {
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "logical_and",
    "logical_or",
    "logical_xor",
    "logical_not",
    "isnan",
    "isinf",
    "isfinite",
}
_RNG_FILL = {"uniform", "normal", "bernoulli"}  # in-place fills: write only (bernoulli_(p) too)


def _elementwise(a: _Args, name: str, base: str, inplace: bool) -> OpCost | None:
    ts = a.tensors()
    if not ts:
        return None
    if base in _RNG_FILL and inplace:
        t0 = a.t(0)
        if t0 is None:
            return None
        return _cost(
            t0.numel * ELEMENTWISE_COST[base], t0.nbytes, _main_dtype([t0]), "elementwise", a
        )
    shape = _broadcast([t.shape for t in ts])
    if shape is None:
        return None
    numel = _prod(shape)
    first = a.t(0)
    if inplace and first is not None:
        out_bpe = first.bpe
    else:
        dimmed = [t for t in ts if t.shape] or ts
        floats = [t for t in dimmed if t.dtype in _FLOAT]
        if floats:
            out_bpe = max(t.bpe for t in floats)
        elif any(t.dtype in _FLOAT for t in ts):
            out_bpe = 4  # int tensor op float scalar -> default float
        else:
            out_bpe = max(t.bpe for t in dimmed)
    if base in _BOOL_OUT:
        out_bpe = 1
    extra = 0
    if base == "native_dropout":
        train = a.c(2)
        if train is not False:
            extra = numel  # bool mask output
    nbytes = sum(t.nbytes for t in ts) + numel * out_bpe + extra
    # compute dtype: the first floating input, dimensioned tensors before wrapped scalars
    cdtype = _main_dtype([t for t in ts if t.shape] + [t for t in ts if not t.shape])
    return _cost(numel * ELEMENTWISE_COST[base], nbytes, cdtype, "elementwise", a)


@_reg(_MODELS, "aten::max", "aten::min")
def _max_min(a: _Args, name: str) -> OpCost | None:
    if a.t(1) is not None:  # max(self, other): elementwise maximum
        return _elementwise(a, name, "maximum", False)
    return _reduction(a, name)


# ---- norms


def _norm(
    a: _Args,
    name: str,
    per_elem: int,
    main: int = 0,
    main2: int | None = None,
    params: Iterable[int] = (),
) -> OpCost | None:
    x = a.t(main)
    if x is None or not x.shape:
        return None
    ins = [t for t in a.tensors()]
    nbytes = sum(t.nbytes for t in ins) + x.numel * x.bpe  # + the normalized output / grad_input
    # backward: parameter gradients written (same size as the parameters read)
    nbytes += sum(t.nbytes for t in (a.t(i) for i in params) if t is not None)
    x2 = a.t(main2) if main2 is not None else None
    dts = [x] if x2 is None else [x, x2]
    return _cost(per_elem * x.numel, nbytes, _main_dtype(dts), "norm", a)


@_reg(_MODELS, "aten::native_layer_norm")
def _ln(a: _Args, name: str) -> OpCost | None:
    return _norm(a, name, 5)


@_reg(_MODELS, "aten::native_layer_norm_backward")
def _ln_bwd(a: _Args, name: str) -> OpCost | None:
    # (grad_out, input, normalized_shape, mean, rstd, weight?, bias?, output_mask)
    return _norm(a, name, 8, main=0, main2=1, params=(5, 6))


@_reg(
    _MODELS,
    "aten::native_batch_norm",
    "aten::cudnn_batch_norm",
    "aten::miopen_batch_norm",
    "aten::_native_batch_norm_legit",
    "aten::_native_batch_norm_legit_no_training",
    "aten::_batch_norm_with_update",
    "aten::_batch_norm_no_update",
)
def _bn(a: _Args, name: str) -> OpCost | None:
    training = a.c(5)
    if name.endswith("no_training") or name.endswith("_no_update"):
        training = False
    elif name.endswith("_with_update"):
        training = True
    return _norm(a, name, 5 if training is not False else 2)


@_reg(
    _MODELS,
    "aten::native_batch_norm_backward",
    "aten::cudnn_batch_norm_backward",
    "aten::miopen_batch_norm_backward",
    "aten::batch_norm_backward",
)
def _bn_bwd(a: _Args, name: str) -> OpCost | None:
    # native: (grad_out, input, weight, ...); cudnn/miopen: (input, grad_output, weight, ...)
    return _norm(a, name, 8, main=0, main2=1, params=(2,))


@_reg(_MODELS, "aten::native_group_norm")
def _gn(a: _Args, name: str) -> OpCost | None:
    return _norm(a, name, 5)


@_reg(_MODELS, "aten::native_group_norm_backward")
def _gn_bwd(a: _Args, name: str) -> OpCost | None:
    # (grad_out, input, mean, rstd, weight?, N, C, HxW, group, output_mask)
    return _norm(a, name, 8, main=0, main2=1, params=(4,))


@_reg(_MODELS, "aten::_fused_rms_norm")
def _rms(a: _Args, name: str) -> OpCost | None:
    return _norm(a, name, 4)


@_reg(_MODELS, "aten::_fused_rms_norm_backward")
def _rms_bwd(a: _Args, name: str) -> OpCost | None:
    # (grad_out, input, normalized_shape, rstd, weight?, output_mask)
    return _norm(a, name, 6, main=0, main2=1, params=(4,))


@_reg(
    _COMPOSITE_MODELS,
    "aten::layer_norm",
    "aten::group_norm",
    "aten::batch_norm",
    "aten::instance_norm",
)
def _norm_composite(a: _Args, name: str) -> OpCost | None:
    return _norm(a, name, 5)


@_reg(_COMPOSITE_MODELS, "aten::rms_norm")
def _rms_composite(a: _Args, name: str) -> OpCost | None:
    return _norm(a, name, 4)


# ---- softmax


@_reg(_MODELS, "aten::_softmax", "aten::_log_softmax", "aten::_safe_softmax")
def _softmax(a: _Args, name: str) -> OpCost | None:
    x = a.t(0)
    if x is None:
        return None
    out_bpe = x.bpe
    if name != "aten::_safe_softmax" and a.c(2) is True:  # half_to_float
        out_bpe = 4
    code = a.c(2) if name == "aten::_safe_softmax" else None
    if isinstance(code, int) and not isinstance(code, bool) and code in _SCALAR_TYPE:
        out_bpe = _SCALAR_TYPE[code][0]
    return _cost(3 * x.numel, x.nbytes + x.numel * out_bpe, _main_dtype([x]), "softmax", a)


@_reg(_MODELS, "aten::_softmax_backward_data", "aten::_log_softmax_backward_data")
def _softmax_bwd(a: _Args, name: str) -> OpCost | None:
    # (grad_output, output, dim, input_dtype)
    g, y = a.t(0), a.t(1)
    if g is None or y is None:
        return None
    out_bpe = g.bpe
    code = a.c(3)
    if isinstance(code, int) and not isinstance(code, bool) and code in _SCALAR_TYPE:
        out_bpe = _SCALAR_TYPE[code][0]
    return _cost(
        3 * g.numel, g.nbytes + y.nbytes + g.numel * out_bpe, _main_dtype([g]), "softmax", a
    )


@_reg(_COMPOSITE_MODELS, "aten::softmax", "aten::log_softmax")
def _softmax_composite(a: _Args, name: str) -> OpCost | None:
    x = a.t(0)
    if x is None:
        return None
    return _cost(3 * x.numel, 2 * x.nbytes, _main_dtype([x]), "softmax", a)


# ---- reductions

_REDUCE_COST = {
    "norm": 2,
    "linalg_vector_norm": 2,
    "var": 3,
    "std": 3,
    "var_mean": 3,
    "std_mean": 3,
}
# where the `dim` argument sits
_REDUCE_DIM = {"norm": 2, "linalg_vector_norm": 2}


def _reduced_numel(shape: tuple[int, ...], dims: Any) -> int | None:
    """Elements left after reducing ``dims`` (None / [] / a bool flag: all of them)."""
    if dims is None or dims == [] or isinstance(dims, bool):
        return 1
    if isinstance(dims, int) and not isinstance(dims, bool):
        dims = [dims]
    if not isinstance(dims, list) or not all(isinstance(d, int) for d in dims):
        return None
    nd = len(shape)
    if nd == 0:
        return 1
    out = list(shape)
    for d in dims:
        if not -nd <= d < nd:
            return None
        out[d % nd] = 1
    return _prod(out)


def _reduction(a: _Args, name: str) -> OpCost | None:
    base = name.split("::", 1)[-1]
    x = a.t(0)
    if x is None:
        return None
    numel = x.numel
    dim_arg = a.c(_REDUCE_DIM.get(base, 1))
    if base in ("sum", "mean", "nansum", "prod") and len(a.types) <= 2:
        dim_arg = None  # sum(self, dtype) / prod(self, dtype): whole tensor
    out_numel: int | None
    if base in ("cumsum", "cumprod", "logcumsumexp", "cummax", "cummin"):
        out_numel = numel
    else:
        out_numel = _reduced_numel(x.shape, dim_arg)
    if out_numel is None:
        return None
    out_bpe = x.bpe
    if base in ("argmax", "argmin"):
        out_bpe = 8
    elif base in ("all", "any"):
        out_bpe = 1
    elif base in ("max", "min", "cummax", "cummin") and isinstance(dim_arg, int):
        out_bpe = x.bpe + 8  # values + indices
    elif base in ("var_mean", "std_mean"):
        out_bpe = 2 * x.bpe
    nbytes = x.nbytes + out_numel * out_bpe
    return _cost(numel * _REDUCE_COST.get(base, 1), nbytes, _main_dtype([x]), "reduction", a)


_reg(
    _MODELS,
    "aten::sum",
    "aten::mean",
    "aten::nansum",
    "aten::prod",
    "aten::amax",
    "aten::amin",
    "aten::argmax",
    "aten::argmin",
    "aten::norm",
    "aten::linalg_vector_norm",
    "aten::var",
    "aten::std",
    "aten::var_mean",
    "aten::std_mean",
    "aten::cumsum",
    "aten::cumprod",
    "aten::logcumsumexp",
    "aten::cummax",
    "aten::cummin",
    "aten::all",
    "aten::any",
    "aten::aminmax",
)(_reduction)


@_reg(_MODELS, "aten::mse_loss")
def _mse(a: _Args, name: str) -> OpCost | None:
    x, y = a.t(0), a.t(1)
    if x is None or y is None:
        return None
    red = a.c(2)
    out = x.numel if red == 0 else 1
    return _cost(
        3 * x.numel,
        x.nbytes + y.nbytes + out * x.bpe,
        _main_dtype([x]),
        "reduction" if red != 0 else "elementwise",
        a,
    )


@_reg(
    _MODELS,
    "aten::mse_loss_backward",
    "aten::l1_loss_backward",
    "aten::smooth_l1_loss_backward",
    "aten::huber_loss_backward",
)
def _loss_bwd(a: _Args, name: str) -> OpCost | None:
    # (grad_output, self, target, reduction, ...)
    x = a.t(1)
    if x is None:
        return None
    ts = a.tensors()
    return _cost(
        3 * x.numel, sum(t.nbytes for t in ts) + x.numel * x.bpe, _main_dtype([x]), "elementwise", a
    )


@_reg(_MODELS, "aten::nll_loss_forward", "aten::nll_loss2d_forward")
def _nll(a: _Args, name: str) -> OpCost | None:
    # (self [N, C, ...], target [N, ...], weight?, reduction, ignore_index)
    x, tgt = a.t(0), a.t(1)
    if x is None or tgt is None:
        return None
    w = a.t(2)
    n = tgt.numel
    out = n if a.c(3) == 0 else 1
    nbytes = tgt.nbytes + n * x.bpe + (w.nbytes if w else 0) + out * x.bpe + 4
    return _cost(n, nbytes, _main_dtype([x]), "reduction", a)


@_reg(_MODELS, "aten::nll_loss_backward", "aten::nll_loss2d_backward")
def _nll_bwd(a: _Args, name: str) -> OpCost | None:
    # (grad_output, self, target, weight?, reduction, ignore_index, total_weight)
    g, x, tgt = a.t(0), a.t(1), a.t(2)
    if x is None or tgt is None:
        return None
    nbytes = x.numel * x.bpe + tgt.nbytes + (g.nbytes if g else 0)
    return _cost(tgt.numel, nbytes, _main_dtype([x]), "elementwise", a)


# ---- multi-tensor (foreach) and fused optimizers

_FOREACH_COST = {
    "add": 1,
    "sub": 1,
    "mul": 1,
    "div": 1,
    "addcmul": 2,
    "addcdiv": 2,
    "lerp": 3,
    "sqrt": 1,
    "rsqrt": 1,
    "exp": 4,
    "log": 4,
    "neg": 1,
    "abs": 1,
    "sign": 1,
    "reciprocal": 1,
    "pow": 1,
    "maximum": 1,
    "minimum": 1,
    "clamp_min": 1,
    "clamp_max": 1,
    "clamp": 1,
    "norm": 2,
    "zero": 0,
    "copy": 0,
    "sigmoid": 4,
    "tanh": 4,
}
# fused optimizers: (FLOPs per parameter element, indices of the lists written)
_FUSED_OPT = {
    "aten::_fused_adam_": (12, (0, 2, 3, 4)),
    "aten::_fused_adamw_": (12, (0, 2, 3, 4)),
    "aten::_fused_adam": (12, (0, 2, 3, 4)),
    "aten::_fused_adamw": (12, (0, 2, 3, 4)),
    "aten::_fused_sgd_": (3, (0, 2)),
    "aten::_fused_adagrad_": (6, (0, 2)),
}


def _foreach(a: _Args, name: str) -> OpCost | None:
    lists: dict[int, list[_T]] = {}
    for i in range(len(a.dims)):
        tl = a.tlist(i)
        if tl:
            lists[i] = tl
    if 0 not in lists:
        return None
    if not a.list_dtype_given:
        a.assumed.append(f"TensorList element type not recorded: assumed {a.list_dtype}")
    self_numel = sum(t.numel for t in lists[0])
    reads = sum(t.nbytes for v in lists.values() for t in v)
    reads += sum(t.nbytes for t in a.tensors())  # single tensors (scalars as tensors)
    if name in _FUSED_OPT:
        per, written = _FUSED_OPT[name]
        writes = sum(t.nbytes for i in written for t in lists.get(i, []))
        return _cost(per * self_numel, reads + writes, _out_dtype(a.list_dtype), "elementwise", a)
    base = name[len("aten::_foreach_") :].rstrip("_")
    if name == "aten::_amp_foreach_non_finite_check_and_unscale_":
        base, per = "amp_unscale", 2
    elif base in _FOREACH_COST:
        per = _FOREACH_COST[base]
    else:
        return None
    self_bytes = sum(t.nbytes for t in lists[0])
    if base == "zero":
        nbytes = self_bytes
    elif base == "copy":
        nbytes = reads  # src read, self written (not read): same total
    elif base == "norm":
        nbytes = reads + 4 * len(lists[0])
    else:
        nbytes = reads + self_bytes
    return _cost(per * self_numel, nbytes, _out_dtype(a.list_dtype), "elementwise", a)
