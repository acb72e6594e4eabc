"""Element types of the FLOPs model: Kineto's type strings and c10 scalar-type codes, the dtype
that picks an op's compute roof (:func:`dtype_of`) and the device peak it maps to
(:data:`PEAK_DTYPE_FOR`, :func:`roof_dtype`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from traceinsight.metrics.flops.core import OpCost, _as_list

# ------------------------------------------------------------------------------------ dtypes

# Kineto "Input type" strings (c10 type names) -> (bytes per element, dtype name)
_TYPES: dict[str, tuple[int, str]] = {
    "float": (4, "fp32"),
    "double": (8, "fp64"),
    "c10::Half": (2, "fp16"),
    "c10::BFloat16": (2, "bf16"),
    "c10::Float8_e4m3fn": (1, "fp8"),
    "c10::Float8_e5m2": (1, "fp8"),
    "c10::Float8_e4m3fnuz": (1, "fp8"),
    "c10::Float8_e5m2fnuz": (1, "fp8"),
    "c10::Float8_e8m0fnu": (1, "fp8"),
    "c10::Float4_e2m1fn_x2": (1, "fp4x2"),
    "long int": (8, "int64"),
    "long": (8, "int64"),
    "long long": (8, "int64"),
    "long long int": (8, "int64"),
    "int64_t": (8, "int64"),
    "int": (4, "int32"),
    "short int": (2, "int16"),
    "short": (2, "int16"),
    "signed char": (1, "int8"),
    "unsigned char": (1, "uint8"),
    "bool": (1, "bool"),
    "unsigned short": (2, "uint16"),
    "unsigned short int": (2, "uint16"),
    "unsigned int": (4, "uint32"),
    "unsigned long": (8, "uint64"),
    "unsigned long int": (8, "uint64"),
    "unsigned long long": (8, "uint64"),
    "c10::complex<c10::Half>": (4, "complex32"),
    "c10::complex<float>": (8, "complex64"),
    "c10::complex<double>": (16, "complex128"),
    "c10::qint8": (1, "int8"),
    "c10::quint8": (1, "uint8"),
    "c10::qint32": (4, "int32"),
    "c10::quint4x2": (1, "uint8"),
    "c10::quint2x4": (1, "uint8"),
}
_FLOAT = {"fp64", "fp32", "fp16", "bf16", "fp8"}
_OUT_DTYPES = {"fp64", "fp32", "bf16", "fp16", "fp8", "int8"}  # OpCost.dtype values besides other

# c10::ScalarType codes (as printed in Concrete Inputs for dtype arguments)
_SCALAR_TYPE = {
    0: (1, "uint8"),
    1: (1, "int8"),
    2: (2, "int16"),
    3: (4, "int32"),
    4: (8, "int64"),
    5: (2, "fp16"),
    6: (4, "fp32"),
    7: (8, "fp64"),
    8: (4, "complex32"),
    9: (8, "complex64"),
    10: (16, "complex128"),
    11: (1, "bool"),
    12: (1, "int8"),
    13: (1, "uint8"),
    14: (4, "int32"),
    15: (2, "bf16"),
    23: (1, "fp8"),
    24: (1, "fp8"),
    25: (1, "fp8"),
    26: (1, "fp8"),
}
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


def dtype_of(
    input_types: str | Sequence[str] | None, input_dims: str | Sequence[Any] | None = None
) -> str:
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
    "fp64": "fp64",
    "fp32": "fp32",
    "tf32": "tf32",
    "bf16": "bf16",
    "fp16": "fp16",
    "fp8": "fp8",
    "int8": "int8",
    "other": None,
}


def roof_dtype(cost: OpCost, kernel_names: Iterable[str] = ()) -> str | None:
    """The device dtype whose peak bounds ``cost``, refining fp32 matrix work by kernel name
    (:func:`traceinsight.analysis.categories.kernel_dtype`): TF32 tensor-core kernels
    (``*tf32*``, ``*xf32*``, ``*s1688gemm*``, or a tensor-core kernel fed fp32 inputs) run at the
    TF32 peak, AMD fp32 MFMA kernels (``Cijk_..._S.._MI16x16x1``) at the fp32 matrix peak."""
    from traceinsight.analysis.categories import kernel_dtype

    base = PEAK_DTYPE_FOR.get(cost.dtype)
    if base != "fp32" or cost.kind not in ("gemm", "conv", "attention"):
        return base
    found = {kernel_dtype(k) for k in kernel_names if isinstance(k, str)}
    if found & {"tf32", "tensor"}:
        return "tf32"
    if "fp32_matrix" in found:
        return "fp32_matrix"
    return "fp32"
