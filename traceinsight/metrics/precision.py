"""Precision metrics: matrix math that runs in fp32 where the device has a faster dtype.

Every GEMM / convolution / attention kernel (class from :mod:`traceinsight.analysis.categories`,
helpers such as split-K reductions and Winograd transforms left out) gets an input dtype:

1. from its name (:func:`~traceinsight.analysis.categories.kernel_dtype`): ``volta_sgemm``,
   ``*scudnn*``, cuDNN ``<float>`` engines are fp32 on the CUDA cores; ``*s1688gemm*``,
   ``*tf32*`` TF32; ``*h884*``, ``*f16*`` fp16; ``*bf16*``, ``Cijk_..._BBS_BH`` bf16;
   ``Cijk_..._SB_..._MI16x16x1`` fp32 on AMD matrix cores; ``nvjet``/``xmma`` tensor cores;
2. else from the launching op's recorded ``Input type`` (``record_shapes=True``): ``float``
   on a tensor-core kernel is TF32, otherwise fp32;
3. else unknown.

``fp32_gemm_time_pct`` is the fp32 (CUDA-core or fp32-MFMA) share of all kernel time,
``fp32_gemm_step_pct`` the same time as a share of step time (what a fix can win), and
``matrix_dtype_known_pct`` the share of matrix-kernel time whose dtype is known: below 50% the
fp32 share is not measured (a rule on it is "not evaluated", never "passed" at 0%).

The device table (:mod:`traceinsight.devices.table`) says which dtypes the part accelerates; the
``*_speedup_ratio`` metrics are its peaks over the peak the fp32 work runs at (missing where the
part has no such units: no bf16 or TF32 on V100, fp8 only on Hopper/Blackwell/MI300), and every
precision recommendation of the low-precision rule is conditional on them.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from traceinsight.analysis import Analysis
from traceinsight.analysis.categories import MATRIX_CLASSES, is_matrix_helper, kernel_dtype
from traceinsight.metrics.options import RooflineOptions
from traceinsight.metrics.registry import MetricSet, declare
from traceinsight.util import capture_hints

MIN_KNOWN_PCT = 50.0  #: below this share of known matrix time the fp32 share is not measured
FP32_PATHS = ("fp32", "fp32_matrix")
LOW_PRECISION = (
    "tf32",
    "bf16",
    "fp16",
    "fp8",
    "fp4",
    "mxfp4",
    "mxfp8",
    "mxfp6",
    "nvfp4",
    "int8",
    "tensor",
)
NEEDS_KERNELS = "GEMM/convolution kernels whose dtype the names or input types show"
NEEDS_DEVICE = "a known device"

declare(
    "matrix_dtype_known_pct",
    "%",
    "GEMM/convolution/attention kernel time whose input dtype "
    "is known (kernel name or recorded input type), % of matrix kernel time",
    needs="GEMM/convolution/attention kernels",
    setting=capture_hints.SHAPES,
)
declare(
    "fp32_gemm_time_pct",
    "%",
    "GEMM/convolution/attention time in fp32 on CUDA cores or AMD "
    "fp32 matrix cores (not TF32, not 16/8/4-bit), % of kernel time",
    needs=NEEDS_KERNELS,
    setting=capture_hints.SHAPES,
    coverage="matrix_dtype_known_pct",
)
declare(
    "fp32_gemm_time_ns",
    "ns",
    "the kernel time behind fp32_gemm_time_pct: GEMM/convolution/"
    "attention kernels in fp32 on CUDA cores or AMD fp32 matrix cores",
    needs=NEEDS_KERNELS,
    setting=capture_hints.SHAPES,
    coverage="matrix_dtype_known_pct",
)
declare(
    "fp32_gemm_step_pct",
    "%",
    "the same fp32 matrix time, % of step time",
    needs=NEEDS_KERNELS,
    setting=capture_hints.SHAPES,
    coverage="matrix_dtype_known_pct",
)
for _d, _what in (("bf16", "bf16"), ("fp16", "fp16"), ("tf32", "TF32 (AMD: xf32)")):
    declare(
        f"{_d}_speedup_ratio",
        "ratio",
        f"the device's dense {_what} matrix peak over the peak its fp32 matrix work runs at",
        needs=f"a known device with {_what} units",
        setting=capture_hints.DEVICE,
    )
declare(
    "fp8_speedup_ratio",
    "ratio",
    "the device's dense fp8 peak over its bf16 (or fp16) peak",
    needs="a known device with fp8 units",
    setting=capture_hints.DEVICE,
)
declare(
    "low_precision_speedup_ratio",
    "ratio",
    "the device's fastest 16-bit matrix peak (bf16, "
    "else fp16) over the peak its fp32 matrix work runs at",
    needs=NEEDS_DEVICE,
    setting=capture_hints.DEVICE,
)


def compute(an: Analysis, ms: MetricSet, opts: RooflineOptions | None = None) -> None:
    from traceinsight.metrics.roofline import resolve_device

    g = an.attribution.gpu
    kern = g[g["kind"].astype(object) == "kernel"] if len(g) else g
    mat = _matrix_kernels(an, kern)
    fp32 = mat[mat["dtype"].isin(FP32_PATHS)]
    total = float(kern["dur_ns"].sum()) if len(kern) else 0.0
    mat_ns = float(mat["dur_ns"].sum())
    known_ns = float(mat.loc[mat["dtype"].notna(), "dur_ns"].sum())
    fp32_ns = float(fp32["dur_ns"].sum())
    wall = float(sum(b.wall_ns for b in an.breakdown.ranks.values()))
    ms.evidence["fp32_matrix_kernels"] = _top(fp32, total)
    by_dtype = mat.groupby(mat["dtype"].fillna("unknown"))["dur_ns"].sum()
    ms.evidence["matrix_dtypes"] = {str(d): float(v) for d, v in by_dtype.items()}
    if not total:
        for n in (
            "matrix_dtype_known_pct",
            "fp32_gemm_time_pct",
            "fp32_gemm_time_ns",
            "fp32_gemm_step_pct",
        ):
            ms.set(n, None, why_missing="no GPU kernels", setting=capture_hints.GPU)
    elif not mat_ns:
        ms.set(
            "matrix_dtype_known_pct",
            None,
            why_missing="no GEMM/convolution/attention kernels",
            setting="",
        )
        ms.set("fp32_gemm_time_pct", 0.0)
        ms.set("fp32_gemm_time_ns", 0.0)
        ms.set("fp32_gemm_step_pct", 0.0 if wall else None, why_missing="no step windows")
    else:
        known = 100.0 * known_ns / mat_ns
        ms.set("matrix_dtype_known_pct", known)
        if known < MIN_KNOWN_PCT:
            why = (
                f"the input dtype of {100 - known:.0f}% of GEMM/convolution/attention kernel "
                "time is unknown: the kernel names do not show it and no input types were "
                "recorded"
            )
            ms.set("fp32_gemm_time_pct", None, why_missing=why)
            ms.set("fp32_gemm_time_ns", None, why_missing=why)
            ms.set("fp32_gemm_step_pct", None, why_missing=why)
        else:
            ms.set("fp32_gemm_time_pct", 100.0 * fp32_ns / total)
            ms.set("fp32_gemm_time_ns", fp32_ns)
            ms.set(
                "fp32_gemm_step_pct",
                min(100.0, 100.0 * fp32_ns / wall) if wall else None,
                why_missing="no step windows",
            )
    # the device: which dtypes it accelerates, and by how much over the fp32 path in use
    res, _ = resolve_device(an, opts or RooflineOptions())
    spec = res.spec
    names = (
        "bf16_speedup_ratio",
        "fp16_speedup_ratio",
        "tf32_speedup_ratio",
        "fp8_speedup_ratio",
        "low_precision_speedup_ratio",
    )
    if spec is None:
        for n in names:
            ms.set(
                n,
                None,
                why_missing=capture_hints.reason_only(res.message) or "unknown device",
                setting=capture_hints.DEVICE,
            )
        return
    matrix_fp32 = float(fp32.loc[fp32["dtype"] == "fp32_matrix", "dur_ns"].sum())
    mfma = matrix_fp32 > fp32_ns / 2 and spec.accelerates("fp32_matrix")
    path = "fp32_matrix" if mfma else "fp32"
    for d in ("bf16", "fp16", "tf32"):
        ratio = spec.speedup(d, over=path)
        ms.set(
            f"{d}_speedup_ratio",
            ratio if ratio and ratio > 1 else None,
            why_missing=f"{spec.name} has no {d} matrix units faster than its fp32 path",
            setting="",
        )
    base16 = "bf16" if spec.accelerates("bf16") else "fp16"
    fp8 = spec.speedup("fp8", over=base16) if spec.accelerates("fp8") else None
    ms.set("fp8_speedup_ratio", fp8, why_missing=f"{spec.name} has no fp8 units", setting="")
    ms.set(
        "low_precision_speedup_ratio",
        ms.get("bf16_speedup_ratio") or ms.get("fp16_speedup_ratio"),
        why_missing=f"{spec.name} has no 16-bit matrix units faster than fp32",
        setting="",
    )
    ms.evidence["precision_device"] = {
        "device": spec.name,
        "fp32_path": path,
        "accelerates": [
            d
            for d in ("fp4", "fp8", "int8", "bf16", "fp16", "tf32", "fp32_matrix")
            if spec.accelerates(d)
        ],
    }


def _matrix_kernels(an: Analysis, kern: pd.DataFrame) -> pd.DataFrame:
    """Matrix kernels (helpers left out) with their input dtype (None = unknown)."""
    cols = ["name", "dur_ns", "op_idx", "op", "cls"]
    if not len(kern):
        return pd.DataFrame({c: [] for c in [*cols, "dtype", "how"]})
    mat = kern[kern["cls"].astype(object).isin(MATRIX_CLASSES)][cols].copy()
    names = mat["name"].astype(object).to_numpy()
    codes, uniq = pd.factorize(pd.Series(names, dtype=object))
    helper = np.array([is_matrix_helper(str(u)) for u in uniq], dtype=bool)
    by_name = np.array([_mx(str(u)) or kernel_dtype(str(u)) for u in uniq], dtype=object)
    keep = ~helper[codes] if len(uniq) else np.zeros(len(mat), dtype=bool)
    mat = mat[keep]
    dt = by_name[codes[keep]] if len(uniq) else np.empty(0, dtype=object)
    how = np.where(pd.isna(dt), np.array(None, dtype=object), "kernel name").astype(object)
    need = pd.isna(dt) | (dt == "tensor")
    if need.any():
        op_dt = _op_dtypes(an, mat["op_idx"].to_numpy(np.int64)[need])
        cur = dt[need]
        new = np.where(
            pd.isna(op_dt),
            cur,
            np.where(cur == "tensor", np.where(op_dt == "fp32", "tf32", op_dt), op_dt),
        )
        changed = ~pd.isna(op_dt)
        sel = np.flatnonzero(need)
        dt[sel] = new
        how[sel[changed]] = "input type"
    mat["dtype"] = dt
    mat["how"] = how
    return mat


_MX = re.compile(r"(mxfp4|mxfp8|nvfp4|mxfp6)", re.IGNORECASE)


def _mx(name: str) -> str | None:
    """The block-scaled microscaling formats (mxfp4, mxfp8, nvfp4) named by a kernel."""
    m = _MX.search(name)
    return m.group(1).lower() if m else None


def _op_dtypes(an: Analysis, op_idx: np.ndarray) -> np.ndarray:
    """The recorded input dtype of each launching op (None when not recorded or not floating)."""
    from traceinsight.metrics.flops import dtype_of

    out = np.full(len(op_idx), None, dtype=object)
    ops = an.attribution.ops
    if not len(ops) or "input_types" not in ops:
        return out
    ok = op_idx >= 0
    if not ok.any():
        return out
    types = ops["input_types"].to_numpy()[op_idx[ok]]
    dims = ops["input_dims"].to_numpy()[op_idx[ok]] if "input_dims" in ops else [None] * ok.sum()
    cache: dict = {}
    vals = []
    for t, d in zip(types, dims):
        key = (t if isinstance(t, str) else None, d if isinstance(d, str) else None)
        if key not in cache:
            v = dtype_of(key[0], key[1]) if key[0] else "other"
            cache[key] = v if v in ("fp64", "fp32", "bf16", "fp16", "fp8", "int8") else None
        vals.append(cache[key])
    out[np.flatnonzero(ok)] = vals
    return out


def _top(fp32: pd.DataFrame, total: float, n: int = 8) -> list[dict]:
    if not len(fp32):
        return []
    grp = fp32.groupby("name", sort=False).agg(
        calls=("dur_ns", "size"),
        total_ns=("dur_ns", "sum"),
        op=("op", "first"),
        dtype=("dtype", "first"),
        how=("how", "first"),
        cls=("cls", "first"),
    )
    grp = grp.sort_values("total_ns", ascending=False).head(n)
    return [
        {
            "kernel": str(k),
            "op": r["op"],
            "cls": str(r["cls"]),
            "dtype": r["dtype"],
            "how": r["how"],
            "calls": int(r["calls"]),
            "total_ns": int(r["total_ns"]),
            "share_pct": 100.0 * float(r["total_ns"]) / total if total else None,
        }
        for k, r in grp.iterrows()
    ]
