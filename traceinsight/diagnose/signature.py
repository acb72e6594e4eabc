"""What ``compare`` needs to judge whether two runs can be compared, recorded in the result's
``trace`` section as small, stable values: the run mode, the number of steps, a module-tree and
an op-shape signature, the dominant compute dtypes, compiled vs eager, and the model size,
tokens and modelled FLOPs per step (see docs/COMPARE.md)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from traceinsight.analysis import Analysis
from traceinsight.metrics import MetricSet
from traceinsight.metrics.flops import dtype_of
from traceinsight.metrics.mode import mode_of
from traceinsight.metrics.options import RooflineOptions

#: hex digits kept of a signature's sha256
SIG_HEX = 16
#: kernel classes whose dtype is "the compute dtype" of a run
MATRIX_CLASSES = ("gemm", "attention", "convolution")
#: a dtype is dominant when it takes at least this share of the matrix kernels' time
DTYPE_MIN_SHARE = 0.10

#: kernel-name hints of the dtype, in order of precedence (used when the op has no input types)
_NAME_DTYPES = tuple(
    (d, re.compile(p, re.IGNORECASE))
    for d, p in (
        ("fp8", r"e4m3|e5m2|fp8|f8f8"),
        ("bf16", r"bf16|bfloat16"),
        ("fp16", r"fp16|f16f16|_f16|half|h884|h1688|h16816|hgemm"),
        ("tf32", r"tf32|xf32|tensorop_s1688|tensorop_s16816"),
        ("int8", r"int8|i8816|imma|s8s8"),
        ("fp32", r"sgemm|fp32|f32f32|s1688|s884"),
        ("fp64", r"dgemm|fp64"),
    )
)
#: Tensile / hipBLASLt names: Cijk_<A layout>_<B layout>_<data types>_...
_TENSILE = re.compile(r"Cijk_A[a-z]+_B[a-z]+_([A-Z][A-Z0-9]*)_")
_TENSILE_TYPES = {"B": "bf16", "H": "fp16", "S": "fp32", "D": "fp64", "I": "int8", "F": "fp8"}
_TF32_KERNEL = re.compile(r"tf32|xf32", re.IGNORECASE)

#: what torch.compile leaves in a trace: Inductor's Triton kernels, AOTAutograd's
#: CompiledFunction ops, Dynamo's regions and cache lookups
_COMPILED_KERNEL = re.compile(r"^triton_")
_COMPILED_OP = re.compile(r"^(CompiledFunction(Backward)?$|Torch-Compiled Region|TorchDynamo)")


def signature_fields(
    an: Analysis, ms: MetricSet | None, options: RooflineOptions | None
) -> dict[str, Any]:
    """The comparability fields of ``trace`` (docs/RESULT.md)."""
    opts = options or RooflineOptions()
    g = an.attribution.gpu
    ops = an.attribution.ops
    values = ms.values if ms is not None else {}
    steps = values.get("steps")
    mods, n_mods = _modules(g)
    shapes, n_shapes = _op_shapes(g, ops)
    return {
        "mode": _mode(g, opts, values),
        "steps": int(steps) if steps is not None else 0,
        "module_signature": mods,
        "module_count": n_mods,
        "op_shape_signature": shapes,
        "op_shape_count": n_shapes,
        "params": opts.params,
        "tokens_per_step": opts.tokens_per_step,
        "flops_per_step": _flops_per_step(an, values),
        "dtypes": _dtypes(g, ops),
        "compiled": _compiled(g, ops),
    }


def digest(items: Iterable[str]) -> str:
    """A short stable hash of a set of strings (order and duplicates do not matter)."""
    text = "\n".join(sorted(set(items)))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:SIG_HEX]


def _mode(g: pd.DataFrame, opts: RooflineOptions, values: dict[str, Any]) -> str | None:
    """train | infer: the option, else the metric ``is_training`` (:mod:`..metrics.mode`:
    backward or optimizer ops recorded; null without CPU ops), else (no metrics) train when
    backward or optimizer kernels ran."""
    if opts.mode:
        return opts.mode
    if "is_training" in values:
        return mode_of(values)
    if not len(g):
        return None
    return "train" if g["phase"].isin(["backward", "optimizer"]).any() else "infer"


def _modules(g: pd.DataFrame) -> tuple[str | None, int]:
    """Signature and count of the module paths (type_instance/...) that ran GPU work."""
    paths = {str(m) for m in g["module"].dropna().unique()} if len(g) else set()
    return (digest(paths) if paths else None), len(paths)


def _op_shapes(g: pd.DataFrame, ops: pd.DataFrame) -> tuple[str | None, int]:
    """Signature and count of the distinct (top-level op, input dims) pairs that ran GPU work
    (top-level ops, not leaves: vendors dispatch the same op to different leaves)."""
    if not len(g) or not len(ops) or "input_dims" not in ops.columns:
        return None, 0
    idx = g["op_idx"].to_numpy()
    cur = np.unique(idx[idx >= 0])
    if not len(cur):
        return None, 0
    parent = ops["parent"].to_numpy()
    for _ in range(512):
        up = parent[cur]
        more = up >= 0
        if not more.any():
            break
        cur = np.where(more, up, cur)
    names = ops["name"].to_numpy()[cur]
    dims = ops["input_dims"].to_numpy()[cur]
    pairs = {
        f"{n}\t{d}"
        for n, d in zip(names, dims, strict=True)
        if isinstance(d, str) and d not in ("", "[]")
    }
    return (digest(pairs) if pairs else None), len(pairs)


def _flops_per_step(an: Analysis, values: dict[str, Any]) -> float | None:
    """Modelled FLOPs per step window (per rank), from the roofline's achieved TFLOP/s."""
    tflops = values.get("achieved_tflops")
    windows = an.attribution.steps
    if not tflops or not windows:
        return None
    wall_s = sum(w.dur_ns for w in windows) / 1e9
    return float(tflops) * 1e12 * wall_s / len(windows)


def name_dtype(name: str) -> str | None:
    """The dtype a GEMM / attention kernel's name says, if any."""
    m = _TENSILE.search(name)
    if m:
        return _TENSILE_TYPES.get(m.group(1)[0])
    for d, rx in _NAME_DTYPES:
        if rx.search(name):
            return d
    return None


def _dtypes(g: pd.DataFrame, ops: pd.DataFrame) -> list[str]:
    """The dtypes of the matrix kernels (GEMM, attention, convolution) with at least
    DTYPE_MIN_SHARE of their time, largest first: from the launching op's input types, else
    from the kernel name."""
    if not len(g):
        return []
    k = g[(g["kind"] == "kernel") & g["cls"].astype(str).isin(MATRIX_CLASSES)]
    if not len(k):
        return []
    idx = k["op_idx"].to_numpy()
    has = idx >= 0
    types = np.full(len(k), "", dtype=object)
    dims = np.full(len(k), "", dtype=object)
    if len(ops) and "input_types" in ops.columns:
        types[has] = ops["input_types"].to_numpy()[idx[has]]
        if "input_dims" in ops.columns:
            dims[has] = ops["input_dims"].to_numpy()[idx[has]]
    df = pd.DataFrame(
        {
            "types": [x if isinstance(x, str) else "" for x in types],
            "dims": [x if isinstance(x, str) else "" for x in dims],
            "name": k["name"].astype(str).to_numpy(),
            "dur": k["dur_ns"].to_numpy(),
        }
    )
    time: dict[str, int] = {}
    for (t, dm, name), dur in df.groupby(["types", "dims", "name"])["dur"].sum().items():
        d = dtype_of(t, dm or None) if t else None
        d = None if d == "other" else d
        if d == "fp32" and _TF32_KERNEL.search(name):
            d = "tf32"
        d = d or name_dtype(name)
        if d:
            time[d] = time.get(d, 0) + int(dur)
    total = sum(time.values())
    if not total:
        return []
    return [
        d
        for d, t in sorted(time.items(), key=lambda x: (-x[1], x[0]))
        if t >= DTYPE_MIN_SHARE * total
    ]


def _compiled(g: pd.DataFrame, ops: pd.DataFrame) -> bool | None:
    """True when torch.compile left its marks, False for an eager run, None without GPU
    kernels or ops to tell."""
    if len(g) and g["name"].astype(str).str.match(_COMPILED_KERNEL).any():
        return True
    if len(ops) and ops["name"].astype(str).str.match(_COMPILED_OP).any():
        return True
    return False if len(g) or len(ops) else None
