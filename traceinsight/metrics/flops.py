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

import json
import math
import re
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable, Sequence

__all__ = [
    "OpCost", "op_cost", "bytes_per_element", "dtype_of", "PEAK_DTYPE_FOR", "roof_dtype",
    "COMPOSITE_OPS", "ELEMENTWISE_COST", "KINDS", "is_composite", "is_modelled", "modelled_ops",
]

KINDS = ("gemm", "attention", "conv", "elementwise", "norm", "softmax", "reduction", "copy",
         "embedding", "other")


@dataclass(frozen=True)
class OpCost:
    """Cost of one op call. ``bytes`` is ideal DRAM traffic; ``note`` says what was assumed."""

    flops: float
    bytes: float
    dtype: str
    kind: str
    exact: bool = True
    note: str = ""

    @property
    def intensity(self) -> float | None:
        """FLOPs per byte (None when no bytes)."""
        return self.flops / self.bytes if self.bytes > 0 else None


# ------------------------------------------------------------------------------------ dtypes

# Kineto "Input type" strings (c10 type names) -> (bytes per element, dtype name)
_TYPES: dict[str, tuple[int, str]] = {
    "float": (4, "fp32"), "double": (8, "fp64"),
    "c10::Half": (2, "fp16"), "c10::BFloat16": (2, "bf16"),
    "c10::Float8_e4m3fn": (1, "fp8"), "c10::Float8_e5m2": (1, "fp8"),
    "c10::Float8_e4m3fnuz": (1, "fp8"), "c10::Float8_e5m2fnuz": (1, "fp8"),
    "c10::Float8_e8m0fnu": (1, "fp8"),
    "c10::Float4_e2m1fn_x2": (1, "fp4x2"),
    "long int": (8, "int64"), "long": (8, "int64"), "long long": (8, "int64"),
    "long long int": (8, "int64"), "int64_t": (8, "int64"),
    "int": (4, "int32"), "short int": (2, "int16"), "short": (2, "int16"),
    "signed char": (1, "int8"), "unsigned char": (1, "uint8"), "bool": (1, "bool"),
    "unsigned short": (2, "uint16"), "unsigned short int": (2, "uint16"),
    "unsigned int": (4, "uint32"), "unsigned long": (8, "uint64"),
    "unsigned long int": (8, "uint64"), "unsigned long long": (8, "uint64"),
    "c10::complex<c10::Half>": (4, "complex32"), "c10::complex<float>": (8, "complex64"),
    "c10::complex<double>": (16, "complex128"),
    "c10::qint8": (1, "int8"), "c10::quint8": (1, "uint8"), "c10::qint32": (4, "int32"),
    "c10::quint4x2": (1, "uint8"), "c10::quint2x4": (1, "uint8"),
}
_FLOAT = {"fp64", "fp32", "fp16", "bf16", "fp8"}
_OUT_DTYPES = {"fp64", "fp32", "bf16", "fp16", "fp8", "int8"}  # OpCost.dtype values besides other

# c10::ScalarType codes (as printed in Concrete Inputs for dtype arguments)
_SCALAR_TYPE = {0: (1, "uint8"), 1: (1, "int8"), 2: (2, "int16"), 3: (4, "int32"),
                4: (8, "int64"), 5: (2, "fp16"), 6: (4, "fp32"), 7: (8, "fp64"),
                8: (4, "complex32"), 9: (8, "complex64"), 10: (16, "complex128"),
                11: (1, "bool"), 12: (1, "int8"), 13: (1, "uint8"), 14: (4, "int32"),
                15: (2, "bf16"), 23: (1, "fp8"), 24: (1, "fp8"), 25: (1, "fp8"), 26: (1, "fp8")}
_DTYPE_BPE = {"fp64": 8, "fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1}


def _type_info(t: Any) -> tuple[int, str] | None:
    if not isinstance(t, str):
        return None
    info = _TYPES.get(t.strip())
    if info is None and "Float8" in t:
        info = (1, "fp8")
    return info


def bytes_per_element(type_str: str) -> int | None:
    """Element size for a Kineto ``Input type`` string; None for non-tensors ("Scalar",
    "ScalarList", "TensorList", "" ...) and unknown types."""
    info = _type_info(type_str)
    return info[0] if info else None


def _out_dtype(name: str) -> str:
    return name if name in _OUT_DTYPES else "other"


def dtype_of(input_types: str | Sequence[str] | None,
             input_dims: str | Sequence[Any] | None = None) -> str:
    """The dtype that picks an op's compute roof: its first floating tensor input.

    With ``input_dims`` given, 0-dim tensors (wrapped Python scalars) are skipped when a
    dimensioned floating tensor exists. Falls back to "int8" when an int8 tensor is the only
    candidate, else "other". Returns one of "fp64", "fp32", "bf16", "fp16", "fp8", "int8",
    "other".
    """
    types = _as_list(input_types)
    if not types:
        return "other"
    dims = _as_list(input_dims) or []
    first_float = None
    for i, t in enumerate(types):
        info = _type_info(t)
        if info is None:
            continue
        if info[1] in _FLOAT:
            d = dims[i] if i < len(dims) else None
            if isinstance(d, list) and len(d) == 0 and input_dims is not None:
                first_float = first_float or info[1]
                continue
            return info[1]
    if first_float:
        return first_float
    for t in types:
        info = _type_info(t)
        if info and info[1] == "int8":
            return "int8"
    return "other"


#: OpCost.dtype -> device peak dtype (see devices.DeviceSpec.peak). For "fp32" GEMM / conv /
#: attention the caller should use "tf32" when the kernel ran on tensor cores (NVIDIA kernel
#: names containing "tf32", AMD "xf32") and "fp32_matrix" for AMD MFMA FP32 kernels (Tensile
#: names with "_MI<m>x<n>x<k>"); :func:`roof_dtype` does this from kernel names. fp8/int8 map
#: to themselves (no roof on parts without those units); "other" has no compute roof.
PEAK_DTYPE_FOR: dict[str, str | None] = {
    "fp64": "fp64", "fp32": "fp32", "tf32": "tf32", "bf16": "bf16", "fp16": "fp16",
    "fp8": "fp8", "int8": "int8", "other": None,
}

def roof_dtype(cost: OpCost, kernel_names: Iterable[str] = ()) -> str | None:
    """The device dtype whose peak bounds ``cost``, refining fp32 matrix work by kernel name
    (:func:`traceinsight.analysis.categories.kernel_dtype`): TF32 tensor-core kernels
    (``*tf32*``, ``*xf32*``, ``*s1688gemm*``, or a tensor-core kernel fed fp32 inputs) run at the
    TF32 peak, AMD fp32 MFMA kernels (``Cijk_..._S.._MI16x16x1``) at the fp32 matrix peak."""
    from ..analysis.categories import kernel_dtype

    base = PEAK_DTYPE_FOR.get(cost.dtype)
    if base != "fp32" or cost.kind not in ("gemm", "conv", "attention"):
        return base
    found = {kernel_dtype(k) for k in kernel_names if isinstance(k, str)}
    if found & {"tf32", "tensor"}:
        return "tf32"
    if "fp32_matrix" in found:
        return "fp32_matrix"
    return "fp32"


# ----------------------------------------------------------------------------------- parsing

def _as_list(x: Any) -> list | None:
    if x is None:
        return None
    if isinstance(x, (list, tuple)):
        return list(x)
    if isinstance(x, (bytes, bytearray)):
        try:
            x = x.decode("utf-8")
        except UnicodeDecodeError:
            return None
    if not isinstance(x, str):
        return None
    s = x.strip()
    if not s or s == "null":
        return None
    try:
        v = json.loads(s)
    except (ValueError, RecursionError):
        return None
    return v if isinstance(v, list) else None


def _shape(d: Any) -> tuple[int, ...] | None:
    if not isinstance(d, list):
        return None
    out = []
    for v in d:
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            return None  # symbolic / negative / nested
        out.append(v)
    return tuple(out)


def _prod(xs: Iterable[int]) -> int:
    p = 1
    for x in xs:
        p *= x
    return p


_INT_RE = re.compile(r"^-?\d+$")


def _scalar(s: str) -> Any:
    s = s.strip()
    if s in ("True", "true"):
        return True
    if s in ("False", "false"):
        return False
    if _INT_RE.match(s):
        return int(s)
    try:
        return float(s)
    except ValueError:
        return s


def _cval(s: Any) -> Any:
    """Concrete input text -> None / bool / int / float / list / str."""
    if s is None:
        return None
    if isinstance(s, (bool, int, float, list)):
        return s
    if not isinstance(s, str):
        return None
    t = s.strip()
    if not t:
        return None
    if t.startswith("[") and t.endswith("]"):
        inner = t[1:-1].strip()
        if not inner:
            return []
        return [_scalar(p) for p in inner.split(",")]
    if t.startswith("(") and t.endswith(")"):
        return _cval("[" + t[1:-1] + "]")
    return _scalar(t)


def _is_float_text(s: Any) -> bool:
    if not isinstance(s, str):
        return False
    t = s.strip()
    return bool(t) and not _INT_RE.match(t) and isinstance(_scalar(t), float)


@dataclass(frozen=True)
class _T:
    """One tensor argument."""

    shape: tuple[int, ...]
    bpe: int
    dtype: str

    @property
    def numel(self) -> int:
        return _prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * self.bpe


class _Args:
    def __init__(self, dims: list, types: list, concrete: list | None, list_dtype: str | None):
        self.dims = dims
        self.types = types
        self.concrete = concrete or []
        #: element dtype of TensorList arguments (Kineto records only "TensorList")
        self.list_dtype_given = list_dtype in _DTYPE_BPE
        self.list_dtype = list_dtype if list_dtype in _DTYPE_BPE else "fp32"
        self.list_bpe = _DTYPE_BPE[self.list_dtype]
        self.assumed: list[str] = []

    def __len__(self) -> int:
        return len(self.dims)

    def t(self, i: int) -> _T | None:
        """Tensor at position i (None when absent, not a tensor, or its shape is unusable)."""
        if i >= len(self.dims) or i >= len(self.types):
            return None
        info = _type_info(self.types[i])
        if info is None:
            return None
        shp = _shape(self.dims[i])
        if shp is None:
            return None
        return _T(shp, info[0], info[1])

    def tensors(self) -> list[_T]:
        return [t for t in (self.t(i) for i in range(len(self.dims))) if t is not None]

    def tlist(self, i: int) -> list[_T] | None:
        """TensorList at position i (shapes recorded as nested lists); element type assumed."""
        if i >= len(self.dims):
            return None
        d = self.dims[i]
        if not isinstance(d, list) or not d or not all(isinstance(x, list) for x in d):
            return None
        typ = self.types[i] if i < len(self.types) else None
        if typ not in ("TensorList", "c10::List<std::optional<at::Tensor>>", "GenericList"):
            return None
        out = []
        for x in d:
            s = _shape(x)
            if s is None:
                return None
            out.append(_T(s, self.list_bpe, self.list_dtype))
        return out

    def c(self, i: int) -> Any:
        return _cval(self.concrete[i]) if i < len(self.concrete) else None

    def raw_c(self, i: int) -> Any:
        return self.concrete[i] if i < len(self.concrete) else None


def _broadcast(shapes: Sequence[tuple[int, ...]]) -> tuple[int, ...] | None:
    nd = max((len(s) for s in shapes), default=0)
    out = []
    for k in range(nd):
        size = 1
        for s in shapes:
            j = k - (nd - len(s))
            if j < 0 or s[j] == 1:
                continue
            if size == 1:
                size = s[j]
            elif s[j] != size:
                return None  # not broadcastable (0 only meets 0 or 1)
        out.append(size)
    return tuple(out)


def _main_dtype(ts: Sequence[_T]) -> str:
    for t in ts:
        if t.dtype in _FLOAT:
            return _out_dtype(t.dtype)
    for t in ts:
        if t.dtype == "int8":
            return "int8"
    return "other"


# --------------------------------------------------------------------------------- op models

_Model = Callable[[_Args, str], "OpCost | None"]
_MODELS: dict[str, _Model] = {}
_COMPOSITE_MODELS: dict[str, _Model] = {}


def _reg(table: dict[str, _Model], *names: str) -> Callable[[_Model], _Model]:
    def deco(fn: _Model) -> _Model:
        for n in names:
            table[n] = fn
        return fn
    return deco


def _cost(flops: float, nbytes: float, dtype: str, kind: str, a: _Args,
          exact: bool = True) -> OpCost:
    notes = "; ".join(dict.fromkeys(a.assumed))
    return OpCost(float(flops), float(nbytes), dtype, kind, exact and not a.assumed, notes)


# ---- GEMM

def _mat2(A: _T | None, B: _T | None) -> tuple[int, int, int] | None:
    if A is None or B is None or len(A.shape) != 2 or len(B.shape) != 2:
        return None
    M, K = A.shape
    K2, N = B.shape
    return (M, N, K) if K == K2 else None


@_reg(_MODELS, "aten::mm")
def _mm(a: _Args, name: str) -> OpCost | None:
    A, B = a.t(0), a.t(1)
    mnk = _mat2(A, B)
    if mnk is None:
        return None
    M, N, K = mnk
    return _cost(2 * M * N * K, A.nbytes + B.nbytes + M * N * A.bpe, _main_dtype([A]), "gemm", a)


@_reg(_MODELS, "aten::addmm", "aten::addmm_", "aten::_addmm_activation")
def _addmm(a: _Args, name: str) -> OpCost | None:
    C, A, B = a.t(0), a.t(1), a.t(2)
    mnk = _mat2(A, B)
    if mnk is None:
        return None
    M, N, K = mnk
    flops = 2 * M * N * K + M * N  # + beta*C
    if name == "aten::_addmm_activation":  # (self, mat1, mat2, beta, alpha, use_gelu)
        flops += M * N * (ELEMENTWISE_COST["gelu"] if a.c(5) is True else 1)
    nbytes = A.nbytes + B.nbytes + M * N * A.bpe + (C.nbytes if C else 0)
    return _cost(flops, nbytes, _main_dtype([A]), "gemm", a)


def _bat3(A: _T | None, B: _T | None) -> tuple[int, int, int, int] | None:
    if A is None or B is None or len(A.shape) != 3 or len(B.shape) != 3:
        return None
    b, M, K = A.shape
    b2, K2, N = B.shape
    if K != K2 or b != b2:
        return None
    return b, M, N, K


@_reg(_MODELS, "aten::bmm")
def _bmm(a: _Args, name: str) -> OpCost | None:
    A, B = a.t(0), a.t(1)
    d = _bat3(A, B)
    if d is None:
        return None
    b, M, N, K = d
    return _cost(2 * b * M * N * K, A.nbytes + B.nbytes + b * M * N * A.bpe, _main_dtype([A]),
                 "gemm", a)


@_reg(_MODELS, "aten::baddbmm", "aten::baddbmm_")
def _baddbmm(a: _Args, name: str) -> OpCost | None:
    C, A, B = a.t(0), a.t(1), a.t(2)
    d = _bat3(A, B)
    if d is None:
        return None
    b, M, N, K = d
    nbytes = A.nbytes + B.nbytes + b * M * N * A.bpe + (C.nbytes if C else 0)
    return _cost(2 * b * M * N * K + b * M * N, nbytes, _main_dtype([A]), "gemm", a)


@_reg(_MODELS, "aten::addbmm", "aten::addbmm_")
def _addbmm(a: _Args, name: str) -> OpCost | None:
    C, A, B = a.t(0), a.t(1), a.t(2)
    d = _bat3(A, B)
    if d is None:
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
    mnk = _mat2(A, B)
    if mnk is None:
        return None
    M, N, K = mnk
    out_bpe = A.bpe
    code = a.c(6)
    if isinstance(code, int) and not isinstance(code, bool) and code in _SCALAR_TYPE:
        out_bpe = _SCALAR_TYPE[code][0]
    extra = sum(t.nbytes for t in (a.t(2), a.t(3), a.t(4), a.t(5)) if t is not None)
    bias = a.t(4)
    flops = 2 * M * N * K + (M * N if bias is not None else 0)
    return _cost(flops, A.nbytes + B.nbytes + M * N * out_bpe + extra, _main_dtype([A]), "gemm",
                 a)


@_reg(_MODELS, "aten::_int_mm")
def _int_mm(a: _Args, name: str) -> OpCost | None:
    A, B = a.t(0), a.t(1)
    mnk = _mat2(A, B)
    if mnk is None:
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
    sa = A.shape if len(A.shape) > 1 else (1,) + A.shape
    sb = B.shape if len(B.shape) > 1 else B.shape + (1,)
    if sa[-1] != sb[-2]:
        return None
    batch = _broadcast([sa[:-2], sb[:-2]])
    if batch is None:
        return None
    nb = _prod(batch)
    M, K, N = sa[-2], sa[-1], sb[-1]
    return _cost(2 * nb * M * N * K, A.nbytes + B.nbytes + nb * M * N * A.bpe,
                 _main_dtype([A]), "gemm", a)


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
    "aten::_scaled_dot_product_fused_attention_overrideable_backward":
        (1, "bhsd", 13, "bool", True),
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
    varlen_pairs = None
    if len(q.shape) == 4 and len(k.shape) == 4 and len(v.shape) == 4:
        if layout == "bshd":
            B, Sq, H, Dqk = q.shape
            Skv, Dv = k.shape[1], v.shape[3]
        else:
            B, H, Sq, Dqk = q.shape
            Skv, Dv = k.shape[2], v.shape[3]
        pairs = B * Sq * Skv
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
    _MODELS[_n] = (lambda s: (lambda a, n: _attention(a, n, s)))(_spec)
for _n, _spec in _SDPA_COMPOSITE.items():
    _COMPOSITE_MODELS[_n] = (lambda s: (lambda a, n: _attention(a, n, s)))(_spec)


# ---- convolution

# name -> argument positions (None = argument absent from the signature)
_CONV: dict[str, dict[str, Any]] = {
    "aten::cudnn_convolution": dict(bias=None, padding=2, stride=3, dilation=4, groups=5),
    "aten::cudnn_convolution_transpose": dict(bias=None, padding=2, output_padding=3, stride=4,
                                              dilation=5, groups=6, transposed=True),
    "aten::cudnn_convolution_relu": dict(bias=2, stride=3, padding=4, dilation=5, groups=6,
                                         act=1),
    "aten::cudnn_convolution_add_relu": dict(bias=4, stride=5, padding=6, dilation=7, groups=8,
                                             act=2),
    "aten::miopen_convolution": dict(bias=2, padding=3, stride=4, dilation=5, groups=6),
    "aten::miopen_depthwise_convolution": dict(bias=2, padding=3, stride=4, dilation=5,
                                               groups=6),
    "aten::miopen_convolution_transpose": dict(bias=2, padding=3, output_padding=4, stride=5,
                                               dilation=6, groups=7, transposed=True),
    "aten::miopen_convolution_relu": dict(bias=2, stride=3, padding=4, dilation=5, groups=6,
                                          act=1),
    "aten::miopen_convolution_add_relu": dict(bias=4, stride=5, padding=6, dilation=7,
                                              groups=8, act=2),
    "aten::mkldnn_convolution": dict(bias=2, padding=3, stride=4, dilation=5, groups=6),
    "aten::_conv_depthwise2d": dict(bias=3, stride=4, padding=5, dilation=6),
    "aten::conv_depthwise3d": dict(bias=3, stride=4, padding=5, dilation=6),
    "aten::_slow_conv2d_forward": dict(bias=3, stride=4, padding=5),
    "aten::slow_conv3d_forward": dict(bias=3, stride=4, padding=5),
    "aten::slow_conv_dilated2d": dict(bias=3, stride=4, padding=5, dilation=6),
    "aten::slow_conv_dilated3d": dict(bias=3, stride=4, padding=5, dilation=6),
    "aten::slow_conv_transpose2d": dict(bias=3, stride=4, padding=5, output_padding=6,
                                        dilation=7, transposed=True),
    "aten::slow_conv_transpose3d": dict(bias=3, stride=4, padding=5, output_padding=6,
                                        dilation=7, transposed=True),
}
_CONV_COMPOSITE: dict[str, dict[str, Any]] = {
    "aten::convolution": dict(bias=2, stride=3, padding=4, dilation=5, transposed=6,
                              output_padding=7, groups=8),
    "aten::_convolution": dict(bias=2, stride=3, padding=4, dilation=5, transposed=6,
                               output_padding=7, groups=8),
    "aten::conv1d": dict(bias=2, stride=3, padding=4, dilation=5, groups=6),
    "aten::conv2d": dict(bias=2, stride=3, padding=4, dilation=5, groups=6),
    "aten::conv3d": dict(bias=2, stride=3, padding=4, dilation=5, groups=6),
    "aten::conv_transpose1d": dict(bias=2, stride=3, padding=4, output_padding=5, groups=6,
                                   dilation=7, transposed=True),
    "aten::conv_transpose2d": dict(bias=2, stride=3, padding=4, output_padding=5, groups=6,
                                   dilation=7, transposed=True),
    "aten::conv_transpose3d": dict(bias=2, stride=3, padding=4, output_padding=5, groups=6,
                                   dilation=7, transposed=True),
}


def _ints(v: Any, n: int, minimum: int = 1) -> list[int] | None:
    """A concrete int-list argument expanded to n spatial dims; None when absent, malformed
    or below ``minimum`` (1 for sizes, strides and dilations; 0 for paddings)."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        v = [v]
    if isinstance(v, list) and v and all(isinstance(x, int) and not isinstance(x, bool)
                                         and x >= minimum for x in v):
        if len(v) == n:
            return list(v)
        if len(v) == 1:
            return list(v) * n
    return None


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

    def arg(key: str, default: int, what: str) -> list[int]:
        i = pos.get(key)
        if i is None:
            return [default] * nsp
        v = _ints(a.c(i), nsp, minimum=1)
        if v is None:
            a.assumed.append(f"{what} not recorded: assumed {default}")
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
        padding = _ints(pad_raw, nsp, minimum=0)
        if padding is None:
            same = True  # "same" output size
            padding = [0] * nsp
            a.assumed.append("padding not recorded: assumed 'same' output size")
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
        op_pos = pos.get("output_padding")
        out_pad = _ints(a.c(op_pos), nsp, minimum=0) if op_pos is not None else None
        if out_pad is None:
            out_pad = [0] * nsp
        Kout = w.shape[1] * groups
        out = [(sp[i] - 1) * stride[i] - 2 * padding[i] + dilation[i] * (ks[i] - 1)
               + out_pad[i] + 1 for i in range(nsp)]
        macs = N * C * _prod(sp) * w.shape[1] * _prod(ks)
    else:
        Kout = w.shape[0]
        if same:
            out = [-(-sp[i] // stride[i]) for i in range(nsp)]
        else:
            out = [(sp[i] + 2 * padding[i] - dilation[i] * (ks[i] - 1) - 1) // stride[i] + 1
                   for i in range(nsp)]
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
    _MODELS[_n] = (lambda p: (lambda a, n: _conv(a, n, p)))(_pos)
for _n, _pos in _CONV_COMPOSITE.items():
    _COMPOSITE_MODELS[_n] = (lambda p: (lambda a, n: _conv(a, n, p)))(_pos)


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


@_reg(_MODELS, "aten::cudnn_convolution_backward_input",
      "aten::miopen_convolution_backward_input")
def _conv_bwd_input(a: _Args, name: str) -> OpCost | None:
    # PyTorch <= 1.10: (self_size, grad_output, weight, padding, stride, dilation, groups, ...)
    go, w = a.t(1), a.t(2)
    if go is None or w is None or len(w.shape) < 3 or len(go.shape) != len(w.shape):
        return None
    flops = 2 * go.numel * w.shape[1] * _prod(w.shape[2:])
    size = _ints(a.c(0), len(go.shape))
    if size is not None and len(size) == len(go.shape):
        gi_numel = _prod(size)
    else:
        gv = a.c(6)
        g = gv if isinstance(gv, int) and not isinstance(gv, bool) and gv > 0 else 1
        gi_numel = go.shape[0] * w.shape[1] * g * _prod(go.shape[2:])
        a.assumed.append("input size not recorded: assumed stride 1")
    return _cost(flops, go.nbytes + w.nbytes + gi_numel * go.bpe, _main_dtype([go]), "conv", a)


@_reg(_MODELS, "aten::cudnn_convolution_backward_weight",
      "aten::miopen_convolution_backward_weight")
def _conv_bwd_weight(a: _Args, name: str) -> OpCost | None:
    # PyTorch <= 1.10: (weight_size, grad_output, self, padding, stride, dilation, groups, ...)
    go, x = a.t(1), a.t(2)
    if go is None or x is None or len(go.shape) < 3:
        return None
    wsize = _ints(a.c(0), len(go.shape))
    if wsize is None or len(wsize) != len(go.shape):
        return None  # kernel size unknown: no FLOPs
    flops = 2 * go.numel * wsize[1] * _prod(wsize[2:])
    return _cost(flops, go.nbytes + x.nbytes + _prod(wsize) * x.bpe, _main_dtype([go, x]),
                 "conv", a)


# ---- elementwise

#: FLOPs per output element. Transcendentals count 4 (as a polynomial / SFU sequence would);
#: activations count the arithmetic of their usual formulas.
ELEMENTWISE_COST: dict[str, int] = {
    **dict.fromkeys(
        ["add", "sub", "rsub", "mul", "div", "true_divide", "floor_divide", "neg", "abs",
         "relu", "clamp", "clamp_min", "clamp_max", "where", "masked_fill", "threshold",
         "threshold_backward", "maximum", "minimum", "fmax", "fmin", "reciprocal", "sqrt",
         "rsqrt", "square", "sign", "sgn", "floor", "ceil", "round", "trunc", "frac", "fmod",
         "remainder", "pow", "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or",
         "logical_xor", "logical_not", "bitwise_and", "bitwise_or", "bitwise_xor",
         "bitwise_not", "isnan", "isinf", "isfinite", "nan_to_num", "relu6", "hardtanh",
         "native_dropout_backward", "uniform", "masked_scale", "heaviside", "copysign"], 1),
    **dict.fromkeys(
        ["exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sigmoid", "tanh", "sin",
         "cos", "tan", "asin", "acos", "atan", "atan2", "sinh", "cosh", "asinh", "acosh",
         "atanh", "erf", "erfc", "erfinv", "logit", "xlogy", "normal", "elu", "selu", "celu",
         "elu_backward", "hardswish", "hardswish_backward", "silu"], 4),
    **dict.fromkeys(["leaky_relu", "leaky_relu_backward", "hardtanh_backward",
                     "sigmoid_backward", "tanh_backward", "addcmul", "addcdiv",
                     "native_dropout", "bernoulli"], 2),
    "lerp": 3, "hardsigmoid": 3, "hardsigmoid_backward": 2, "softplus": 5,
    "softplus_backward": 5, "silu_backward": 6, "gelu": 8, "gelu_backward": 10, "mish": 8,
    "mish_backward": 10,
}
_BOOL_OUT = {"eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor",
             "logical_not", "isnan", "isinf", "isfinite"}
_RNG_FILL = {"uniform", "normal", "bernoulli"}  # in-place fills: write only (bernoulli_(p) too)


def _elementwise(a: _Args, name: str, base: str, inplace: bool) -> OpCost | None:
    ts = a.tensors()
    if not ts:
        return None
    if base in _RNG_FILL and inplace:
        t0 = a.t(0)
        if t0 is None:
            return None
        return _cost(t0.numel * ELEMENTWISE_COST[base], t0.nbytes, _main_dtype([t0]),
                     "elementwise", a)
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

def _norm(a: _Args, name: str, per_elem: int, main: int = 0, main2: int | None = None,
          params: Iterable[int] = ()) -> OpCost | None:
    x = a.t(main)
    if x is None or not x.shape:
        return None
    ins = [t for t in a.tensors()]
    nbytes = sum(t.nbytes for t in ins) + x.numel * x.bpe  # + the normalized output / grad_input
    # backward: parameter gradients written (same size as the parameters read)
    nbytes += sum(t.nbytes for t in (a.t(i) for i in params) if t is not None)
    dts = [x] + ([a.t(main2)] if main2 is not None and a.t(main2) is not None else [])
    return _cost(per_elem * x.numel, nbytes, _main_dtype(dts), "norm", a)


@_reg(_MODELS, "aten::native_layer_norm")
def _ln(a: _Args, name: str) -> OpCost | None:
    return _norm(a, name, 5)


@_reg(_MODELS, "aten::native_layer_norm_backward")
def _ln_bwd(a: _Args, name: str) -> OpCost | None:
    # (grad_out, input, normalized_shape, mean, rstd, weight?, bias?, output_mask)
    return _norm(a, name, 8, main=0, main2=1, params=(5, 6))


@_reg(_MODELS, "aten::native_batch_norm", "aten::cudnn_batch_norm", "aten::miopen_batch_norm",
      "aten::_native_batch_norm_legit", "aten::_native_batch_norm_legit_no_training",
      "aten::_batch_norm_with_update", "aten::_batch_norm_no_update")
def _bn(a: _Args, name: str) -> OpCost | None:
    training = a.c(5)
    if name.endswith("no_training") or name.endswith("_no_update"):
        training = False
    elif name.endswith("_with_update"):
        training = True
    return _norm(a, name, 5 if training is not False else 2)


@_reg(_MODELS, "aten::native_batch_norm_backward", "aten::cudnn_batch_norm_backward",
      "aten::miopen_batch_norm_backward", "aten::batch_norm_backward")
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


@_reg(_COMPOSITE_MODELS, "aten::layer_norm", "aten::group_norm", "aten::batch_norm",
      "aten::instance_norm")
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
    return _cost(3 * g.numel, g.nbytes + y.nbytes + g.numel * out_bpe, _main_dtype([g]),
                 "softmax", a)


@_reg(_COMPOSITE_MODELS, "aten::softmax", "aten::log_softmax")
def _softmax_composite(a: _Args, name: str) -> OpCost | None:
    x = a.t(0)
    if x is None:
        return None
    return _cost(3 * x.numel, 2 * x.nbytes, _main_dtype([x]), "softmax", a)


# ---- reductions

_REDUCE_COST = {"norm": 2, "linalg_vector_norm": 2, "var": 3, "std": 3, "var_mean": 3,
                "std_mean": 3}
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


_reg(_MODELS, "aten::sum", "aten::mean", "aten::nansum", "aten::prod", "aten::amax",
     "aten::amin", "aten::argmax", "aten::argmin", "aten::norm", "aten::linalg_vector_norm",
     "aten::var", "aten::std", "aten::var_mean", "aten::std_mean", "aten::cumsum",
     "aten::cumprod", "aten::logcumsumexp", "aten::cummax", "aten::cummin", "aten::all",
     "aten::any", "aten::aminmax")(_reduction)


@_reg(_MODELS, "aten::mse_loss")
def _mse(a: _Args, name: str) -> OpCost | None:
    x, y = a.t(0), a.t(1)
    if x is None or y is None:
        return None
    red = a.c(2)
    out = x.numel if red == 0 else 1
    return _cost(3 * x.numel, x.nbytes + y.nbytes + out * x.bpe, _main_dtype([x]),
                 "reduction" if red != 0 else "elementwise", a)


@_reg(_MODELS, "aten::mse_loss_backward", "aten::l1_loss_backward",
      "aten::smooth_l1_loss_backward", "aten::huber_loss_backward")
def _loss_bwd(a: _Args, name: str) -> OpCost | None:
    # (grad_output, self, target, reduction, ...)
    x = a.t(1)
    if x is None:
        return None
    ts = a.tensors()
    return _cost(3 * x.numel, sum(t.nbytes for t in ts) + x.numel * x.bpe, _main_dtype([x]),
                 "elementwise", a)


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


# ---- pooling

def _pool_out(sp: Sequence[int], k: list[int], s: list[int], p: list[int], d: list[int],
              ceil: bool) -> list[int] | None:
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


def _pool_geom(a: _Args, nsp: int, k_i: int, s_i: int, p_i: int, d_i: int | None,
               ceil_i: int) -> tuple[list[int], list[int], list[int], list[int], bool] | None:
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
    return _cost(out_numel * _prod(k), x.nbytes + out_numel * out_bpe, _main_dtype([x]),
                 "reduction", a)


def _pool_bwd(a: _Args, name: str) -> OpCost | None:
    # (grad_output, self, ...[, indices]); grad_input has the shape of self
    go, x = a.t(0), a.t(1)
    if go is None or x is None:
        return None
    # `self` only lends its shape: not read, but grad_input (same size) is written, so the
    # sum of the tensor inputs (grad_output, self, indices) is the ideal traffic
    return _cost(max(go.numel, x.numel), sum(t.nbytes for t in a.tensors()), _main_dtype([go]),
                 "reduction", a)


for _n, _nsp in (("aten::max_pool1d_with_indices", 1), ("aten::max_pool2d_with_indices", 2),
                 ("aten::max_pool3d_with_indices", 3)):
    _MODELS[_n] = (lambda k: (lambda a, n: _pool(a, n, k, True)))(_nsp)
for _n, _nsp in (("aten::avg_pool1d", 1), ("aten::avg_pool2d", 2), ("aten::avg_pool3d", 3)):
    _MODELS[_n] = (lambda k: (lambda a, n: _pool(a, n, k, False)))(_nsp)
for _n in ("aten::max_pool2d_with_indices_backward", "aten::max_pool3d_with_indices_backward",
           "aten::avg_pool2d_backward", "aten::avg_pool3d_backward",
           "aten::_adaptive_avg_pool2d_backward", "aten::_adaptive_avg_pool3d_backward",
           "aten::adaptive_max_pool2d_backward", "aten::adaptive_max_pool3d_backward"):
    _MODELS[_n] = _pool_bwd


def _adaptive(a: _Args, name: str, nsp: int, maxpool: bool) -> OpCost | None:
    x = a.t(0)
    osz = _ints(a.c(1), nsp)
    if x is None or osz is None or len(x.shape) < nsp + 1 or any(o <= 0 for o in osz):
        return None
    out_numel = _prod(x.shape[:-nsp]) * _prod(osz)
    out_bpe = x.bpe + (8 if maxpool else 0)
    return _cost(x.numel, x.nbytes + out_numel * out_bpe, _main_dtype([x]), "reduction", a)


for _n, _nsp, _mx in (("aten::_adaptive_avg_pool2d", 2, False),
                      ("aten::_adaptive_avg_pool3d", 3, False),
                      ("aten::adaptive_max_pool2d", 2, True),
                      ("aten::adaptive_max_pool3d", 3, True)):
    _MODELS[_n] = (lambda k, m: (lambda a, n: _adaptive(a, n, k, m)))(_nsp, _mx)


# ---- copies, gathers, fills

@_reg(_MODELS, "aten::copy_")
def _copy(a: _Args, name: str) -> OpCost | None:
    dst, src = a.t(0), a.t(1)
    if dst is None or src is None:
        return None
    return _cost(0, dst.nbytes + src.numel * src.bpe, _main_dtype([dst, src]), "copy", a)


@_reg(_MODELS, "aten::fill_", "aten::zero_fill_")
def _fill(a: _Args, name: str) -> OpCost | None:
    t = a.t(0)
    if t is None:
        return None
    return _cost(0, t.nbytes, _main_dtype([t]), "copy", a)


@_reg(_MODELS, "aten::_local_scalar_dense")
def _item(a: _Args, name: str) -> OpCost | None:
    t = a.t(0)
    if t is None:
        return None
    return _cost(0, t.bpe, _main_dtype([t]), "copy", a)


@_reg(_MODELS, "aten::flip", "aten::roll", "aten::tril", "aten::triu", "aten::tril_",
      "aten::triu_")
def _permute_copy(a: _Args, name: str) -> OpCost | None:
    t = a.t(0)
    if t is None:
        return None
    return _cost(0, 2 * t.nbytes, _main_dtype([t]), "copy", a)


@_reg(_MODELS, "aten::cat", "aten::_cat")
def _cat(a: _Args, name: str) -> OpCost | None:
    ts = a.tlist(0)
    if not ts:
        return None
    if not a.list_dtype_given:
        a.assumed.append(f"TensorList element type not recorded: assumed {a.list_dtype}")
    total = sum(t.nbytes for t in ts)
    return _cost(0, 2 * total, _out_dtype(a.list_dtype), "copy", a)


@_reg(_MODELS, "aten::index_select")
def _index_select(a: _Args, name: str) -> OpCost | None:
    # (self, dim, index)
    x, idx = a.t(0), a.t(2)
    dim = a.c(1)
    if x is None or idx is None or not isinstance(dim, int) or isinstance(dim, bool):
        return None
    if not x.shape:
        rows = 1
    else:
        if not -len(x.shape) <= dim < len(x.shape):
            return None
        rows = x.shape[dim]
    row = x.numel // rows if rows else 0
    out = idx.numel * row
    return _cost(0, 2 * out * x.bpe + idx.nbytes, _main_dtype([x]), "embedding", a)


@_reg(_COMPOSITE_MODELS, "aten::embedding")
def _embedding(a: _Args, name: str) -> OpCost | None:
    # (weight, indices, padding_idx, scale_grad_by_freq, sparse)
    W, idx = a.t(0), a.t(1)
    if W is None or idx is None or len(W.shape) != 2:
        return None
    out = idx.numel * W.shape[1]
    return _cost(0, 2 * out * W.bpe + idx.nbytes, _main_dtype([W]), "embedding", a)


@_reg(_MODELS, "aten::embedding_dense_backward")
def _embedding_bwd(a: _Args, name: str) -> OpCost | None:
    # (grad_output, indices, num_weights, padding_idx, scale_grad_by_freq)
    g, idx = a.t(0), a.t(1)
    nw = a.c(2)
    if g is None or idx is None or not g.shape or not isinstance(nw, int) or isinstance(nw, bool) \
            or nw < 0:
        return None
    D = g.shape[-1]
    return _cost(g.numel, g.nbytes + idx.nbytes + nw * D * g.bpe, _main_dtype([g]), "embedding",
                 a)


@_reg(_MODELS, "aten::_embedding_bag", "aten::_embedding_bag_forward_only")
def _embedding_bag(a: _Args, name: str) -> OpCost | None:
    # (weight, indices, offsets, scale_grad_by_freq, mode, sparse, per_sample_weights?, ...)
    W, idx, off = a.t(0), a.t(1), a.t(2)
    if W is None or idx is None or len(W.shape) != 2:
        return None
    D = W.shape[1]
    bags = off.numel if off is not None else 1
    nbytes = idx.numel * D * W.bpe + idx.nbytes + (off.nbytes if off else 0) + bags * D * W.bpe
    return _cost(idx.numel * D, nbytes, _main_dtype([W]), "embedding", a)


@_reg(_MODELS, "aten::gather")
def _gather(a: _Args, name: str) -> OpCost | None:
    # (self, dim, index, sparse_grad)
    x, idx = a.t(0), a.t(2)
    if x is None or idx is None:
        return None
    return _cost(0, 2 * idx.numel * x.bpe + idx.nbytes, _main_dtype([x]), "copy", a)


@_reg(_MODELS, "aten::scatter", "aten::scatter_", "aten::scatter_add", "aten::scatter_add_",
      "aten::scatter_reduce", "aten::scatter_reduce_", "aten::index_add", "aten::index_add_",
      "aten::index_copy", "aten::index_copy_")
def _scatter(a: _Args, name: str) -> OpCost | None:
    # scatter*(self, dim, index, src|value, ...); index_*(self, dim, index, source, ...)
    x, idx, src = a.t(0), a.t(2), a.t(3)
    if x is None or idx is None:
        return None
    n = src.numel if src is not None else idx.numel
    if name.startswith("aten::index_") and src is not None:
        n = src.numel
    nbytes = idx.nbytes + (src.nbytes if src else 0) + n * x.bpe
    if not name.endswith("_"):
        nbytes += 2 * x.nbytes  # out-of-place: self copied into the output first
    reduce = "add" in name or "reduce" in name
    return _cost(n if reduce else 0, nbytes, _main_dtype([x]), "copy", a)


def _index_lists(a: _Args, i: int) -> list[_T] | None:
    """Index tensors of aten::index / index_put_ (List[Optional[Tensor]]), if recorded."""
    if i >= len(a.dims):
        return None
    d = a.dims[i]
    if not isinstance(d, list) or not d or not all(isinstance(x, list) for x in d):
        return None
    out = []
    for x in d:
        s = _shape(x)
        if s is None:
            return None
        out.append(_T(s, 8, "int64"))
    return out


@_reg(_MODELS, "aten::index")
def _index(a: _Args, name: str) -> OpCost | None:
    x = a.t(0)
    idx = _index_lists(a, 1)
    if x is None or not idx:
        return None
    b = _broadcast([t.shape for t in idx])
    if b is None:
        return None
    rest = x.shape[len(idx):]
    out = _prod(b) * _prod(rest)
    a.assumed.append("advanced indexing: index tensors assumed int64 on leading dims")
    return _cost(0, 2 * out * x.bpe + sum(t.nbytes for t in idx), _main_dtype([x]), "copy", a)


@_reg(_MODELS, "aten::index_put_", "aten::_index_put_impl_", "aten::index_put")
def _index_put(a: _Args, name: str) -> OpCost | None:
    # (self, indices, values, accumulate[, unsafe])
    x, v = a.t(0), a.t(2)
    idx = _index_lists(a, 1)
    if x is None or v is None or not idx:
        return None
    a.assumed.append("advanced indexing: index tensors assumed int64")
    acc = a.c(3) is True
    nbytes = v.nbytes + sum(t.nbytes for t in idx) + v.numel * x.bpe * (2 if acc else 1)
    if not name.endswith("_"):
        nbytes += 2 * x.nbytes
    return _cost(v.numel if acc else 0, nbytes, _main_dtype([x]), "copy", a)


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
                out = [int(math.floor(sp[j] * v[j])) for j in range(nsp)]
                break
    if out is None:  # separate scale arguments (scales_h, scales_w) as floats
        scales = [a.c(i) for i in range(1, len(a.concrete)) if isinstance(a.c(i), float)]
        if len(scales) >= nsp:
            out = [int(math.floor(sp[j] * scales[-nsp + j])) for j in range(nsp)]
    if out is None or any(o <= 0 for o in out):
        return None
    out_numel = _prod(x.shape[:-nsp]) * _prod(out)
    return _cost(out_numel * per_out, x.nbytes + out_numel * x.bpe, _main_dtype([x]),
                 "copy" if per_out == 0 else "elementwise", a)


for _n, _nsp, _c in (("aten::upsample_nearest1d", 1, 0), ("aten::upsample_nearest2d", 2, 0),
                     ("aten::upsample_nearest3d", 3, 0), ("aten::_upsample_nearest_exact1d", 1, 0),
                     ("aten::_upsample_nearest_exact2d", 2, 0),
                     ("aten::_upsample_nearest_exact3d", 3, 0),
                     ("aten::upsample_linear1d", 1, 4), ("aten::upsample_bilinear2d", 2, 8),
                     ("aten::_upsample_bilinear2d_aa", 2, 8), ("aten::upsample_bicubic2d", 2, 32),
                     ("aten::upsample_trilinear3d", 3, 16)):
    _MODELS[_n] = (lambda k, c: (lambda a, n: _upsample(a, n, k, c)))(_nsp, _c)


@_reg(_COMPOSITE_MODELS, "aten::clone", "aten::contiguous")
def _clone(a: _Args, name: str) -> OpCost | None:
    t = a.t(0)
    if t is None:
        return None
    return _cost(0, 2 * t.nbytes, _main_dtype([t]), "copy", a)


@_reg(_COMPOSITE_MODELS, "aten::_to_copy", "aten::to")
def _to_copy(a: _Args, name: str) -> OpCost | None:
    t = a.t(0)
    if t is None:
        return None
    out_bpe = t.bpe
    for i in (1, 2):  # dtype is argument 1 (_to_copy, to.dtype) or 2 (to.device)
        v = a.c(i)
        typ = a.types[i] if i < len(a.types) else None
        if typ == "Scalar" and isinstance(v, int) and not isinstance(v, bool) and \
                v in _SCALAR_TYPE:
            out_bpe = _SCALAR_TYPE[v][0]
            break
    return _cost(0, t.nbytes + t.numel * out_bpe, _main_dtype([t]), "copy", a)


# ---- multi-tensor (foreach) and fused optimizers

_FOREACH_COST = {"add": 1, "sub": 1, "mul": 1, "div": 1, "addcmul": 2, "addcdiv": 2, "lerp": 3,
                 "sqrt": 1, "rsqrt": 1, "exp": 4, "log": 4, "neg": 1, "abs": 1, "sign": 1,
                 "reciprocal": 1, "pow": 1, "maximum": 1, "minimum": 1, "clamp_min": 1,
                 "clamp_max": 1, "clamp": 1, "norm": 2, "zero": 0, "copy": 0, "sigmoid": 4,
                 "tanh": 4}
# fused optimizers: (FLOPs per parameter element, indices of the lists written)
_FUSED_OPT = {"aten::_fused_adam_": (12, (0, 2, 3, 4)), "aten::_fused_adamw_": (12, (0, 2, 3, 4)),
              "aten::_fused_adam": (12, (0, 2, 3, 4)), "aten::_fused_adamw": (12, (0, 2, 3, 4)),
              "aten::_fused_sgd_": (3, (0, 2)), "aten::_fused_adagrad_": (6, (0, 2))}


def _foreach(a: _Args, name: str) -> OpCost | None:
    lists = {i: a.tlist(i) for i in range(len(a.dims))}
    lists = {i: v for i, v in lists.items() if v}
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
    base = name[len("aten::_foreach_"):].rstrip("_")
    if name == "aten::_amp_foreach_non_finite_check_and_unscale_":
        base, per = "amp_unscale", 2
    else:
        per = _FOREACH_COST.get(base)
        if per is None:
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


# ------------------------------------------------------------------------------- dispatch

#: ops that only call other ops (the kernels are launched by their children): None by default
COMPOSITE_OPS = frozenset({
    "aten::linear", "aten::matmul", "aten::einsum", "aten::bilinear", "aten::tensordot",
    "aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::conv_transpose1d",
    "aten::conv_transpose2d", "aten::conv_transpose3d", "aten::convolution",
    "aten::_convolution", "aten::_convolution_nogroup", "aten::_convolution_double_backward",
    "aten::cudnn_convolution_backward", "aten::miopen_convolution_backward",
    "aten::cudnn_convolution_transpose_backward", "aten::miopen_convolution_transpose_backward",
    "aten::thnn_conv2d", "aten::layer_norm", "aten::group_norm", "aten::batch_norm",
    "aten::_batch_norm_impl_index", "aten::_batch_norm_impl_index_backward",
    "aten::instance_norm", "aten::rms_norm", "aten::dropout", "aten::dropout_",
    "aten::feature_dropout", "aten::alpha_dropout", "aten::scaled_dot_product_attention",
    "aten::_scaled_dot_product_attention_math", "aten::softmax", "aten::log_softmax",
    "aten::cross_entropy_loss", "aten::nll_loss", "aten::nll_loss_nd", "aten::embedding",
    "aten::embedding_backward", "aten::to", "aten::_to_copy", "aten::clone", "aten::contiguous",
    "aten::zero_", "aten::zeros", "aten::zeros_like", "aten::ones", "aten::ones_like",
    "aten::full", "aten::full_like", "aten::new_zeros", "aten::new_ones", "aten::new_full",
    "aten::stack", "aten::hstack", "aten::vstack", "aten::max_pool2d", "aten::max_pool1d",
    "aten::max_pool3d", "aten::adaptive_avg_pool1d", "aten::adaptive_avg_pool2d",
    "aten::adaptive_avg_pool3d", "aten::repeat", "aten::expand_as", "aten::type_as",
    "aten::flatten", "aten::reshape", "aten::lstm", "aten::gru", "aten::rnn_tanh",
    "aten::pad", "aten::constant_pad_nd", "aten::linalg_norm", "aten::frobenius_norm",
    "aten::logsumexp", "aten::binary_cross_entropy_with_logits",
})


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
    if name.startswith("aten::_foreach_") or name in _FUSED_OPT or \
            name == "aten::_amp_foreach_non_finite_check_and_unscale_":
        return _foreach
    if name.startswith("aten::"):
        base, inplace = _name_base(name)
        if base in ELEMENTWISE_COST:
            return lambda a, n: _elementwise(a, n, base, inplace)
    return None


def is_modelled(name: str, include_composite: bool = False) -> bool:
    """True when :func:`op_cost` has a model for ``name`` (shapes permitting)."""
    if name.startswith("aten::_foreach_"):
        base = name[len("aten::_foreach_"):].rstrip("_")
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


def op_cost(name: str, input_dims: str | None, input_types: str | None,
            concrete_inputs: str | None = None, flops_arg: float | None = None, *,
            include_composite: bool = False, list_dtype: str | None = None) -> OpCost | None:
    """FLOPs and ideal bytes of one op call, or None (not modelled, shapes missing/malformed).

    ``input_dims`` / ``input_types`` / ``concrete_inputs`` are Kineto's ``Input Dims``,
    ``Input type`` and ``Concrete Inputs`` (JSON text or already-parsed lists). ``flops_arg``
    (the profiler's ``flops``), when > 0, replaces the modelled FLOPs (exact=True); an op
    without a model then still gets an OpCost (kind "other", bytes = its tensor inputs).
    ``list_dtype`` is the element dtype to assume for TensorList arguments, whose type Kineto
    does not record ("fp32" when not given, and the result is then not exact).
    ``include_composite`` costs composite ops (:data:`COMPOSITE_OPS`) too. Never raises.
    """
    try:
        return _op_cost(name, input_dims, input_types, concrete_inputs, flops_arg,
                        include_composite, list_dtype)
    except (ValueError, TypeError, KeyError, IndexError, ZeroDivisionError, OverflowError,
            AttributeError, RecursionError):
        return None


def _op_cost(name: str, input_dims: Any, input_types: Any, concrete_inputs: Any,
             flops_arg: Any, include_composite: bool, list_dtype: str | None) -> OpCost | None:
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
        ld = {"float32": "fp32", "float": "fp32", "bfloat16": "bf16", "float16": "fp16",
              "half": "fp16", "float64": "fp64", "double": "fp64"}.get(ld, ld)
    args = _Args(dims, types, concrete, ld)
    fn = _model_for(name, include_composite)
    cost = fn(args, name) if fn is not None else None
    fa = None
    if isinstance(flops_arg, (int, float)) and not isinstance(flops_arg, bool) and \
            math.isfinite(flops_arg) and flops_arg > 0:
        fa = float(flops_arg)
    if fa is None:
        return cost
    if cost is not None:
        return replace(cost, flops=fa, exact=True)
    # unmodelled op with a profiler FLOP count: bytes are a lower bound (its tensor inputs)
    args.assumed.clear()
    ts = args.tensors()
    return OpCost(fa, float(sum(t.nbytes for t in ts)), _main_dtype(ts), "other", False,
                  "no model: bytes are the tensor inputs only")
