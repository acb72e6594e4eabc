"""FLOPs and ideal bytes per operator, from the shapes Kineto records (``record_shapes``).

:func:`op_cost` takes one ``cpu_op`` as the store keeps it (``input_dims``, ``input_types``,
``concrete_inputs`` as JSON text, the profiler's ``flops`` when present) and returns an
:class:`OpCost` or None when the op is not modelled or its shapes are missing / malformed. It
never raises.

Conventions
-----------
* **Leaf ops only.** Costs are given to the ops that launch the kernels (``aten::mm``,
  ``aten::cudnn_convolution``, ``aten::copy_``, ...). Ops that only call other ops return
  None by default so that summing over every ``cpu_op`` counts nothing twice: ``aten::linear``,
  ``aten::matmul``, ``aten::conv2d``, ``aten::convolution``/``aten::_convolution`` (they call
  ``cudnn_convolution``/``miopen_convolution``/``mkldnn_convolution``), ``aten::clone``,
  ``aten::contiguous``, ``aten::_to_copy``/``aten::to`` (they call ``aten::copy_``),
  ``aten::embedding`` (calls ``aten::index_select``), ``aten::zero_`` (calls ``aten::fill_``),
  ``aten::layer_norm``, ``aten::scaled_dot_product_attention``... (:data:`COMPOSITE_OPS`). On
  the real H100 and MI300X traces none of these launches a kernel itself. Pass
  ``include_composite=True`` to cost the common ones anyway (per-module tables, traces that
  lack the child op).
* **Bytes are ideal traffic**: every tensor input read once, every output written once, at its
  element size; caches are assumed perfect (as in TraceLens PerfModel), so measured bandwidth
  can exceed the roof on small, cache-resident ops.
* **In-place ops** (``add_``, ``relu_``, ...): the output is the first input; bytes =
  Σ input tensor bytes + output bytes, i.e. ``self`` is read once and written once.
* **dtype** is the dtype of the op's main (first floating) input: "fp64", "fp32", "bf16",
  "fp16", "fp8", "int8" or "other". fp32 GEMMs are reported as "fp32"; whether they ran on
  tensor cores (TF32) or AMD matrix cores is a property of the kernel, not of the shapes: see
  :func:`roof_dtype` and :data:`PEAK_DTYPE_FOR`.
* ``exact`` is False when an assumption was needed (stride/padding not recorded, causal flag
  not recorded, element type of a TensorList unknown, varlen attention lengths unknown).

FLOP formulas (a multiply-add is 2 FLOPs)
-----------------------------------------
* GEMM: ``mm`` A[M,K]·B[K,N] 2MNK; ``addmm`` + MN (bias); ``bmm`` 2BMNK; ``baddbmm`` + BMN;
  ``mv``/``addmv`` 2MN (+M); ``_scaled_mm`` 2MNK in fp8; ``_int_mm`` 2MNK in int8.
* Attention forward: 2·B·H·Sq·Skv·(Dqk + Dv) (= 4·B·H·Sq·Skv·D), H from q (GQA), halved
  when causal with Sq = Skv. Backward: 2.5x forward: five GEMMs of the forward's size (recomputed
  S = QKᵀ, dV = Pᵀ·dO, dP = dO·Vᵀ, dQ = dS·K, dK = dSᵀ·Q) against the forward's two.
* Convolution: 2·N·K·prod(out)·(C/g)·prod(kernel) (+ N·K·prod(out) with bias);
  ``convolution_backward`` one forward per requested gradient (input, weight) + the bias sum.
* Elementwise: numel(output) × per-element cost (:data:`ELEMENTWISE_COST`: 1 for arithmetic,
  4 for transcendental, gelu 8, silu 4, ...); the output shape is the broadcast of the tensor
  inputs.
* Norms: forward 5/element (LayerNorm, BatchNorm training, GroupNorm), 4 (RMSNorm), 2
  (BatchNorm eval); backward 8 (RMSNorm 6). Softmax / log-softmax 3/element (TraceLens 3MN),
  backward 3. Reductions 1/element (norm 2, var/std 3). Copies, gathers, fills: 0 FLOPs.
* Fused optimizers: ``_fused_adam_``/``_fused_adamw_`` 12 FLOPs per parameter element.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from traceinsight.metrics.flops import conv, matmul, movement, pointwise  # noqa: F401 - each registers its op models
from traceinsight.metrics.flops.args import _COMPOSITE_MODELS, _MODELS, _Args, _main_dtype, _Model
from traceinsight.metrics.flops.core import KINDS, OpContext, OpCost, _as_list
from traceinsight.metrics.flops.dtypes import (
    PEAK_DTYPE_FOR,
    bytes_per_element,
    dtype_of,
    roof_dtype,
)
from traceinsight.metrics.flops.pointwise import (
    _FOREACH_COST,
    _FUSED_OPT,
    ELEMENTWISE_COST,
    _elementwise,
    _foreach,
)

__all__ = [
    "COMPOSITE_OPS",
    "ELEMENTWISE_COST",
    "KINDS",
    "PEAK_DTYPE_FOR",
    "OpContext",
    "OpCost",
    "bytes_per_element",
    "dtype_of",
    "is_composite",
    "is_modelled",
    "modelled_ops",
    "op_cost",
    "roof_dtype",
]


# ------------------------------------------------------------------------------- dispatch

#: ops that only call other ops (the kernels are launched by their children): None by default
COMPOSITE_OPS = frozenset(
    {
        "aten::linear",
        "aten::matmul",
        "aten::einsum",
        "aten::bilinear",
        "aten::tensordot",
        "aten::conv1d",
        "aten::conv2d",
        "aten::conv3d",
        "aten::conv_transpose1d",
        "aten::conv_transpose2d",
        "aten::conv_transpose3d",
        "aten::convolution",
        "aten::_convolution",
        "aten::_convolution_nogroup",
        "aten::_convolution_double_backward",
        "aten::cudnn_convolution_backward",
        "aten::miopen_convolution_backward",
        "aten::cudnn_convolution_transpose_backward",
        "aten::miopen_convolution_transpose_backward",
        "aten::thnn_conv2d",
        "aten::layer_norm",
        "aten::group_norm",
        "aten::batch_norm",
        "aten::_batch_norm_impl_index",
        "aten::_batch_norm_impl_index_backward",
        "aten::instance_norm",
        "aten::rms_norm",
        "aten::dropout",
        "aten::dropout_",
        "aten::feature_dropout",
        "aten::alpha_dropout",
        "aten::scaled_dot_product_attention",
        "aten::_scaled_dot_product_attention_math",
        "aten::softmax",
        "aten::log_softmax",
        "aten::cross_entropy_loss",
        "aten::nll_loss",
        "aten::nll_loss_nd",
        "aten::embedding",
        "aten::embedding_backward",
        "aten::to",
        "aten::_to_copy",
        "aten::clone",
        "aten::contiguous",
        "aten::zero_",
        "aten::zeros",
        "aten::zeros_like",
        "aten::ones",
        "aten::ones_like",
        "aten::full",
        "aten::full_like",
        "aten::new_zeros",
        "aten::new_ones",
        "aten::new_full",
        "aten::stack",
        "aten::hstack",
        "aten::vstack",
        "aten::max_pool2d",
        "aten::max_pool1d",
        "aten::max_pool3d",
        "aten::adaptive_avg_pool1d",
        "aten::adaptive_avg_pool2d",
        "aten::adaptive_avg_pool3d",
        "aten::repeat",
        "aten::expand_as",
        "aten::type_as",
        "aten::flatten",
        "aten::reshape",
        "aten::lstm",
        "aten::gru",
        "aten::rnn_tanh",
        "aten::pad",
        "aten::constant_pad_nd",
        "aten::linalg_norm",
        "aten::frobenius_norm",
        "aten::logsumexp",
        "aten::binary_cross_entropy_with_logits",
    }
)


def _name_base(name: str) -> tuple[str, bool]:
    base = name.split("::", 1)[-1]
    inplace = base.endswith("_") and not base.endswith("__")
    if inplace:
        base = base[:-1]
    return base, inplace


def is_composite(name: str) -> bool:
    """True for ops that only call other ops (see :data:`COMPOSITE_OPS`)."""
    return name in COMPOSITE_OPS


def _model_for(name: str, include_composite: bool) -> _Model | None:
    if name in COMPOSITE_OPS:
        return _COMPOSITE_MODELS.get(name) if include_composite else None
    fn = _MODELS.get(name)
    if fn is not None:
        return fn
    if (
        name.startswith("aten::_foreach_")
        or name in _FUSED_OPT
        or name == "aten::_amp_foreach_non_finite_check_and_unscale_"
    ):
        return _foreach
    if name.startswith("aten::"):
        base, inplace = _name_base(name)
        if base in ELEMENTWISE_COST:
            return lambda a, n: _elementwise(a, n, base, inplace)
    return None


def is_modelled(name: str, include_composite: bool = False) -> bool:
    """True when :func:`op_cost` has a model for ``name`` (shapes permitting)."""
    if name.startswith("aten::_foreach_"):
        base = name[len("aten::_foreach_") :].rstrip("_")
        return base in _FOREACH_COST
    return _model_for(name, include_composite) is not None


def modelled_ops(include_composite: bool = False) -> list[str]:
    """Op names with a model (elementwise names listed with and without the in-place ``_``)."""
    names = set(_MODELS) | set(_FUSED_OPT) | {"aten::_amp_foreach_non_finite_check_and_unscale_"}
    names |= {f"aten::{b}" for b in ELEMENTWISE_COST} | {f"aten::{b}_" for b in ELEMENTWISE_COST}
    names |= {f"aten::_foreach_{b}" for b in _FOREACH_COST}
    names |= {f"aten::_foreach_{b}_" for b in _FOREACH_COST}
    if include_composite:
        names |= set(_COMPOSITE_MODELS)
    return sorted(names)


def op_cost(
    name: str,
    input_dims: str | None,
    input_types: str | None,
    concrete_inputs: str | None = None,
    flops_arg: float | None = None,
    *,
    include_composite: bool = False,
    list_dtype: str | None = None,
    context: OpContext | None = None,
) -> OpCost | None:
    """FLOPs and ideal bytes of one op call, or None (not modelled, shapes missing/malformed).

    ``input_dims`` / ``input_types`` / ``concrete_inputs`` are Kineto's ``Input Dims``,
    ``Input type`` and ``Concrete Inputs`` (JSON text or already-parsed lists). ``flops_arg``
    (the profiler's ``flops``), when > 0, replaces the modelled FLOPs (exact=True); an op
    without a model then still gets an OpCost (kind "other", bytes = its tensor inputs).
    ``list_dtype`` is the element dtype to assume for TensorList arguments, whose type Kineto
    does not record ("fp32" when not given, and the result is then not exact).
    ``include_composite`` costs composite ops (:data:`COMPOSITE_OPS`) too. ``context`` gives
    shapes the record lacks (:class:`OpContext`: a convolution without recorded stride/padding
    is costed from the output shape the next op reads; the cost's ``inferred`` says so). Never
    raises.
    """
    try:
        return _op_cost(
            name,
            input_dims,
            input_types,
            concrete_inputs,
            flops_arg,
            include_composite,
            list_dtype,
            context,
        )
    except (
        ValueError,
        TypeError,
        KeyError,
        IndexError,
        ZeroDivisionError,
        OverflowError,
        AttributeError,
        RecursionError,
    ):
        return None


def _op_cost(
    name: str,
    input_dims: Any,
    input_types: Any,
    concrete_inputs: Any,
    flops_arg: Any,
    include_composite: bool,
    list_dtype: str | None,
    context: OpContext | None = None,
) -> OpCost | None:
    if not isinstance(name, str):
        return None
    name = name.strip()
    if name in COMPOSITE_OPS and not include_composite:
        return None
    dims = _as_list(input_dims)
    types = _as_list(input_types)
    if dims is None or types is None:
        return None
    concrete = _as_list(concrete_inputs)
    ld = None
    if isinstance(list_dtype, str):
        ld = list_dtype.strip().lower()
        ld = {
            "float32": "fp32",
            "float": "fp32",
            "bfloat16": "bf16",
            "float16": "fp16",
            "half": "fp16",
            "float64": "fp64",
            "double": "fp64",
        }.get(ld, ld)
    args = _Args(dims, types, concrete, ld)
    if context is not None:
        args.out_shape, args.out_source = context.output, context.output_source
        args.in_shape, args.in_source = context.input, context.input_source
        args.w_shape, args.w_source = context.weight, context.weight_source
    fn = _model_for(name, include_composite)
    cost = fn(args, name) if fn is not None else None
    fa = None
    if (
        isinstance(flops_arg, (int, float))
        and not isinstance(flops_arg, bool)
        and math.isfinite(flops_arg)
        and flops_arg > 0
    ):
        fa = float(flops_arg)
    if fa is None:
        return cost
    if cost is not None:
        return replace(cost, flops=fa, exact=True)
    # unmodelled op with a profiler FLOP count: bytes are a lower bound (its tensor inputs)
    args.assumed.clear()
    ts = args.tensors()
    return OpCost(
        fa,
        float(sum(t.nbytes for t in ts)),
        _main_dtype(ts),
        "other",
        False,
        "no model: bytes are the tensor inputs only",
    )
