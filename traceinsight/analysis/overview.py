"""The overview figures of the PyTorch profiler's TensorBoard plugin, from the store.

- **Tensor cores** (:func:`tensor_cores`): kernel time on tensor cores (matrix cores on AMD),
  by kernel name and dtype. A kernel uses them when its name says so (:data:`TC_NAME_RE`: the
  plugin's allow-list ``h884 s884 h1688 s1688 hmma i8816 16816 c1688 xmma_* conv1x1 ...`` and
  the newer families ``wgmma``/``hgmma``, ``*tensorop*`` (CUTLASS), ``nvjet`` (cuBLASLt),
  ``sm80_/sm90_/sm100_`` GEMM/conv kernels, flash attention / ``fmha``, AMD ``MFMA`` /
  ``MI16x16``) or when it is a GEMM/convolution/attention kernel whose name gives a
  tensor-core dtype (TF32, bf16, fp16, fp8, fp4, int8); a name that says fp32 or fp64 is never
  counted. The rule travels with the number (:data:`TC_RULE`).
- **Est. SM efficiency** (:func:`sm_efficiency`): per device, the kernels' blocks per SM
  (``blocks_per_sm`` as recorded, else grid blocks over the device's SM count) summed over the
  kernels running at each instant and capped at 1, integrated over the analysed window and
  divided by its length: the plugin's "Est. SM Efficiency" (idle time counts as 0).
- **Est. achieved occupancy** (:func:`achieved_occupancy`): the mean of the recorded
  ``occupancy_pct`` over the kernels that record it, each weighted by its time inside the
  analysed window (the plugin's "Est. Achieved Occupancy").
- **Step time breakdown** (:func:`step_breakdown`): per step window, every nanosecond is
  given to the first of kernel, memcpy, memset, runtime (CUDA/HIP API), data loader, CPU exec
  that covers it, else to other, so the parts sum exactly to the step (the plugin's "Step Time
  Breakdown", with its priority order).
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd

from traceinsight.analysis import attribution_parts
from traceinsight.analysis import intervals as iv
from traceinsight.analysis.categories import MATRIX_CLASSES, is_matrix_helper, kernel_dtype
from traceinsight.analysis.host import DATALOADER_RE
from traceinsight.util.safetext import for_terminal

#: kernel names that say the tensor / matrix cores are used
TC_NAME_RE = re.compile(
    r"h884|s884|h1688|s1688|hmma|i8816|16816|c1688|dgrad_1x1_stride_2x2|"
    r"first_layer_wgrad_kernel|conv1x1|conv2d_c1_k1|direct_group|xmma_implicit_gemm|"
    r"xmma_sparse_conv|xmma_warp_specialized_implicit_gemm|xmma_gemm|xmma_sparse_gemm|"
    r"wgmma|hgmma|tensorop|nvjet|sm(?:80|86|89|90|100|120)a?_\w*(?:gemm|conv|mma)|"
    r"flash_?(?:fwd|bwd|attn)|flash::|fmha|MFMA|_MI(?:16|32)x(?:16|32)x",
    re.IGNORECASE,
)
#: matrix-kernel dtypes (from the name) that run on tensor / matrix cores
TC_DTYPES = frozenset(
    ("tf32", "bf16", "fp16", "fp8", "fp4", "mxfp4", "mxfp6", "mxfp8", "nvfp4", "int8", "tensor")
)
#: name dtypes that never run on tensor cores here (CUDA cores, fp64)
NON_TC_DTYPES = frozenset(("fp32", "fp64"))
TC_RULE = (
    "a kernel uses tensor cores when its name says so (TensorBoard plugin allow-list: h884, "
    "s884, h1688, s1688, hmma, i8816, 16816, c1688, xmma_gemm/implicit_gemm, conv1x1, ...; "
    "and wgmma, hgmma, *tensorop*, nvjet, sm80/sm90/sm100 GEMM/conv, flash attention, fmha, "
    "AMD MFMA) or when it is a GEMM/convolution/attention kernel whose name gives a "
    "tensor-core dtype (TF32, bf16, fp16, fp8, fp4, int8); a name saying fp32 or fp64 is "
    "never counted"
)
SM_RULE = (
    "per device, blocks per SM (as recorded, else grid blocks / SM count) summed over the "
    "kernels running at each instant and capped at 1, averaged over the analysed window "
    "(idle time counts as 0); an estimate from launch sizes, not a hardware counter"
)
OCC_RULE = (
    "mean of the recorded estimated achieved occupancy, each kernel weighted by its time in "
    "the analysed window"
)
#: the parts of the step time breakdown, in the order a nanosecond is given to them
STEP_PARTS = ("kernel", "memcpy", "memset", "runtime", "dataloader", "cpu_exec", "other")
TOP_KERNELS = 30


@lru_cache(maxsize=65536)
def uses_tensor_cores(name: str, cls: str = "") -> bool:
    """Whether a kernel of this name (and class) runs on tensor / matrix cores (TC_RULE)."""
    dtype = kernel_dtype(name)
    if dtype in NON_TC_DTYPES:
        return False
    if TC_NAME_RE.search(name):
        return True
    return cls in MATRIX_CLASSES and dtype in TC_DTYPES and not is_matrix_helper(name)


def kernel_rows(g: pd.DataFrame, columns: tuple[str, ...]) -> pd.DataFrame:
    """The kernel rows of the GPU activities ``g`` with ``columns`` only (those the frame
    has): a copy of those columns of the kernel rows, not of every GPU column."""
    cols = [c for c in columns if c in g.columns]
    if not len(g):
        return g[cols]
    return g.loc[(g["kind"].astype(object) == "kernel").to_numpy(), cols]


def _kernels(an: Any, columns: tuple[str, ...]) -> pd.DataFrame:
    return kernel_rows(an.attribution.gpu, columns)


#: the kernel columns each figure below reads
_TC_COLUMNS = ("name", "cls", "dur_ns", "op_idx")
_SM_COLUMNS = (
    "dur_ns", "rank", "device", "start_ns", "end_ns", "blocks_per_sm", "grid_x", "grid_y", "grid_z"
)  # fmt: skip
_OCC_COLUMNS = ("dur_ns", "rank", "start_ns", "end_ns", "occupancy_pct")


@lru_cache(maxsize=65536)
def _first_dtype(types: str) -> str | None:
    """The first tensor dtype of an op's recorded ``Input type`` list (JSON text)."""
    try:
        val = json.loads(types)
    except (ValueError, RecursionError):
        return None
    for t in val if isinstance(val, list) else []:
        if isinstance(t, str) and t and t not in ("Scalar", "GenericList", "TensorList"):
            return for_terminal(t[:64])
    return None


def kernel_dtypes(an: Any, k: pd.DataFrame) -> np.ndarray:
    """Each kernel's dtype: from its name, else the launching op's first recorded input type
    (``op:float``: what the op was given, not proof of the unit used), else ``""``."""
    codes, uniq = pd.factorize(k["name"])
    by_name = [kernel_dtype(n) or "" if isinstance(n, str) else "" for n in uniq]
    out = np.array([*by_name, ""], dtype=object)[np.where(codes >= 0, codes, len(uniq))]
    ops = an.attribution.ops
    if "input_types" in ops.columns and len(ops):
        idx = k["op_idx"].to_numpy(np.int64) if "op_idx" in k.columns else np.full(len(k), -1)
        types = iv.take(ops["input_types"].to_numpy(object), idx, None)
        todo = np.flatnonzero((out == "") & pd.notna(types))
        if len(todo):
            tcodes, tuniq = pd.factorize(pd.Series(types[todo], dtype=object))
            label = np.array(
                [f"op:{d}" if (d := _first_dtype(str(t))) else "" for t in tuniq], object
            )
            out[todo] = label[tcodes]
    return out


def tensor_cores(an: Any) -> dict[str, Any] | None:
    """Tensor-core kernel time: the totals and the kernels by name and dtype (None without
    kernels)."""
    k = _kernels(an, _TC_COLUMNS)
    if not len(k):
        return None
    ncode, nuniq = pd.factorize(k["name"])
    if "cls" in k.columns:
        ccode, cuniq = pd.factorize(k["cls"])
    else:
        ccode, cuniq = np.zeros(len(k), np.int64), np.array([""], object)
    pcode, puniq = pd.factorize(ncode.astype(np.int64) * (len(cuniq) + 1) + ccode)
    m = len(cuniq) + 1
    tc = np.array(
        [uses_tensor_cores(str(nuniq[p // m]), str(cuniq[p % m])) for p in puniq], dtype=bool
    )[pcode]
    dur = k["dur_ns"].to_numpy(np.int64)
    dtypes = kernel_dtypes(an, k)
    dcode, duniq = pd.factorize(pd.Series(dtypes, dtype=object))
    total = int(dur.sum())
    tc_ns = int(dur[tc].sum())
    df = pd.DataFrame({"n": ncode, "d": dcode, "tc": tc, "dur": dur, "one": 1})
    grp = df.groupby(["n", "d", "tc"], sort=False).agg(
        total_ns=("dur", "sum"), calls=("one", "sum")
    )
    grp = grp.reset_index()
    grp["name"] = [str(nuniq[c]) for c in grp["n"]]
    grp = grp.sort_values(["total_ns", "name"], ascending=[False, True])
    rows = [
        {
            "name": for_terminal(r.name),
            "dtype": for_terminal(str(duniq[r.d])) or None,
            "tensor_cores": bool(r.tc),
            "calls": int(r.calls),
            "total_ns": int(r.total_ns),
            "pct": 100.0 * int(r.total_ns) / total if total else 0.0,
        }
        for r in grp.head(TOP_KERNELS).itertuples(index=False)
    ]
    per_dtype = np.bincount(dcode[tc], weights=dur[tc], minlength=len(duniq))
    by_dtype = {(str(duniq[i]) or "unknown"): int(v) for i, v in enumerate(per_dtype) if v > 0}
    return {
        "rule": TC_RULE,
        "kernel_time_ns": total,
        "tensor_core_ns": tc_ns,
        "tensor_core_pct": 100.0 * tc_ns / total if total else None,
        "tensor_core_kernels": int(tc.sum()),
        "kernels": len(k),
        "by_dtype_ns": dict(sorted(by_dtype.items(), key=lambda kv: -kv[1])),
        "top": rows,
    }


def sm_counts(store: Any) -> dict[tuple[int, int], int]:
    """(rank, device id) -> SM count from the trace's device properties."""
    out: dict[tuple[int, int], int] = {}
    for r in store.ranks:
        for d in r.get("devices") or []:
            sms = d.get("numSms") or d.get("multiProcessorCount")
            if isinstance(d.get("id"), int) and isinstance(sms, int) and sms > 0:
                out[(int(r["rank"]), int(d["id"]))] = sms
    return out


def blocks_per_sm(an: Any, k: pd.DataFrame) -> np.ndarray:
    """Each kernel's blocks per SM: as recorded, else grid blocks over its device's SM count
    (NaN when neither is known)."""
    bps = (
        k["blocks_per_sm"].to_numpy(np.float64, na_value=np.nan)
        if "blocks_per_sm" in k.columns
        else np.full(len(k), np.nan)
    )
    miss = ~np.isfinite(bps)
    if miss.any() and {"grid_x", "grid_y", "grid_z"} <= set(k.columns):
        sms = sm_counts(an.store)
        if sms:
            grid = np.ones(len(k))
            for c in ("grid_x", "grid_y", "grid_z"):
                grid *= k[c].to_numpy(np.float64, na_value=np.nan)
            ranks = k["rank"].to_numpy(np.int64)
            dev = k["device"].to_numpy(np.float64, na_value=-1).astype(np.int64)
            n_sm = np.array(
                [sms.get((int(r), int(d)), np.nan) for r, d in zip(ranks, dev)], np.float64
            )
            bps = np.where(miss, grid / n_sm, bps)
    return bps


def _window(an: Any, rank: int) -> tuple[int, int] | None:
    ws = [w for w in an.attribution.steps if w.rank == rank]
    if not ws:
        return None
    return min(w.start_ns for w in ws), max(w.end_ns for w in ws)


def sm_efficiency(an: Any) -> dict[str, Any]:
    """Est. SM efficiency per rank (%, None where no kernel records blocks per SM or a grid
    with a known SM count) and the share of kernel time it rests on."""
    k = _kernels(an, _SM_COLUMNS)
    out: dict[str, Any] = {"rule": SM_RULE, "per_rank": {}, "known_pct": None}
    if not len(k):
        return out
    bps = blocks_per_sm(an, k)
    dur = k["dur_ns"].to_numpy(np.int64)
    known = np.isfinite(bps) & (bps >= 0)
    out["known_pct"] = 100.0 * int(dur[known].sum()) / int(dur.sum()) if dur.sum() else None
    ranks = k["rank"].to_numpy(np.int64)
    dev = k["device"].to_numpy(np.float64, na_value=-1).astype(np.int64)
    s_all = k["start_ns"].to_numpy(np.int64)
    e_all = k["end_ns"].to_numpy(np.int64)
    for rank in sorted(set(ranks.tolist())):
        win = _window(an, rank)
        sel = (ranks == rank) & known
        if win is None or not sel.any() or win[1] <= win[0]:
            continue
        lo, hi = win
        total = 0.0
        for d in sorted(set(dev[sel].tolist())):
            m = sel & (dev == d)
            s = np.clip(s_all[m], lo, hi)
            e = np.clip(e_all[m], lo, hi)
            total += _capped_integral(s, e, bps[m])
        n_dev = len(set(dev[sel].tolist()))
        out["per_rank"][rank] = 100.0 * total / ((hi - lo) * n_dev)
    return out


def _capped_integral(s: np.ndarray, e: np.ndarray, w: np.ndarray) -> float:
    """∫ min(Σ w of the intervals covering t, 1) dt (a sweep over the boundaries)."""
    keep = e > s
    s, e, w = s[keep], e[keep], w[keep]
    if not len(s):
        return 0.0
    t = np.concatenate((s, e))
    dw = np.concatenate((w, -w))
    order = np.argsort(t, kind="stable")
    t, dw = t[order], dw[order]
    level = np.cumsum(dw)
    seg = np.diff(t).astype(np.float64)
    return float((np.clip(level[:-1], 0.0, 1.0) * seg).sum())


def achieved_occupancy(an: Any) -> dict[str, Any]:
    """Est. achieved occupancy per rank (%) and the share of kernel time recording it."""
    k = _kernels(an, _OCC_COLUMNS)
    out: dict[str, Any] = {"rule": OCC_RULE, "per_rank": {}, "known_pct": None}
    if not len(k) or "occupancy_pct" not in k.columns:
        return out
    occ = k["occupancy_pct"].to_numpy(np.float64, na_value=np.nan)
    dur = k["dur_ns"].to_numpy(np.int64)
    known = np.isfinite(occ) & (occ >= 0)  # a negative estimate is damaged input
    out["known_pct"] = 100.0 * int(dur[known].sum()) / int(dur.sum()) if dur.sum() else None
    ranks = k["rank"].to_numpy(np.int64)
    s_all = k["start_ns"].to_numpy(np.int64)
    e_all = k["end_ns"].to_numpy(np.int64)
    for rank in sorted(set(ranks[known].tolist())):
        win = _window(an, rank)
        m = known & (ranks == rank)
        if win is None:
            continue
        # each kernel weighted by its time inside the analysed window (as the plugin does)
        w = (np.minimum(e_all[m], win[1]) - np.maximum(s_all[m], win[0])).clip(0)
        if w.sum() > 0:
            out["per_rank"][rank] = float((occ[m] * w).sum() / w.sum())
    return out


# --- step time breakdown -----------------------------------------------------------------------


def _u(df: pd.DataFrame, mask: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    if not len(df):
        return np.empty(0, np.int64), np.empty(0, np.int64)
    s = df["start_ns"].to_numpy(np.int64)
    e = s + df["dur_ns"].to_numpy(np.int64)
    if mask is not None:
        s, e = s[mask], e[mask]
    return iv.union(s, e)


def _names_match(df: pd.DataFrame, rx: re.Pattern) -> np.ndarray:
    if not len(df):
        return np.zeros(0, dtype=bool)
    names = df["name"].astype(object).to_numpy()
    codes, uniq = pd.factorize(pd.Series(names, dtype=object))
    hit = np.array([bool(rx.search(str(u))) for u in uniq] + [False], dtype=bool)
    return hit[np.where(codes >= 0, codes, len(uniq))]


def _rank_sets(an: Any, rank: int, ranges: pd.DataFrame) -> list[tuple[np.ndarray, np.ndarray]]:
    """The unions of each part's activity on ``rank`` (STEP_PARTS order, without other);
    ``ranges``: the store's annotation ranges."""
    attr = an.attribution
    g = attr.gpu[attr.gpu["rank"] == rank] if len(attr.gpu) else attr.gpu
    kind = g["kind"].astype(object).to_numpy() if len(g) else np.zeros(0, object)
    rt = attr.runtime[attr.runtime["rank"] == rank] if len(attr.runtime) else attr.runtime
    ops = attr.ops[attr.ops["rank"] == rank] if len(attr.ops) else attr.ops
    rng = ranges[ranges["rank"] == rank] if len(ranges) else ranges
    loader_ops = _names_match(ops, DATALOADER_RE)
    loader = iv.union(
        *[
            np.concatenate(parts)
            for parts in zip(
                _u(ops, loader_ops) if len(ops) else _u(ops),
                _u(rng, _names_match(rng, DATALOADER_RE)) if len(rng) else _u(rng),
            )
        ]
    )
    return [
        _u(g, kind == "kernel") if len(g) else _u(g),
        _u(g, kind == "memcpy") if len(g) else _u(g),
        _u(g, kind == "memset") if len(g) else _u(g),
        _u(rt),
        loader,
        _u(ops, ~loader_ops) if len(ops) else _u(ops),
    ]


def step_breakdown(an: Any) -> dict[str, Any]:
    """Per rank and step window: the step's ns split into :data:`STEP_PARTS` (summing exactly
    to the window), and per rank the mean over its steps (a partitioned store's: its rank
    partitions' own, joined)."""
    joined = an.cache.get("step_breakdown")
    return joined if joined is not None else _step_breakdown(an)


def _step_breakdown(an: Any) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    by_rank: dict[int, list] = {}
    for w in an.attribution.steps:
        by_rank.setdefault(w.rank, []).append(w)
    ranges = an.store.df("ranges", ["rank", "kind", "name", "start_ns", "dur_ns"])
    ranges = (
        ranges[ranges["kind"].astype(object).isin(("annotation", "nvtx"))]
        if len(ranges)
        else ranges
    )
    for rank, ws in sorted(by_rank.items()):
        sets = _rank_sets(an, rank, ranges)
        for w in ws:
            taken: tuple[np.ndarray, np.ndarray] = (np.empty(0, np.int64), np.empty(0, np.int64))
            row: dict[str, Any] = {"rank": rank, "step": w.step, "start_ns": w.start_ns}
            row["step_ns"] = w.end_ns - w.start_ns
            for part, u in zip(STEP_PARTS, sets):
                mine = iv.subtract(iv.clip(u, w.start_ns, w.end_ns), taken)
                row[f"{part}_ns"] = iv.length(mine)
                taken = iv.union(
                    np.concatenate((taken[0], mine[0])), np.concatenate((taken[1], mine[1]))
                )
            row["other_ns"] = row["step_ns"] - iv.length(taken)
            rows.append(row)
    means = []
    for rank in sorted(by_rank):
        of_rank = [r for r in rows if r["rank"] == rank]
        n = len(of_rank)
        mean: dict[str, Any] = {"rank": rank, "steps": n}
        for key in ("step_ns", *[f"{p}_ns" for p in STEP_PARTS]):
            mean[key] = sum(r[key] for r in of_rank) / n if n else 0.0
        means.append(mean)
    return {
        "parts": list(STEP_PARTS),
        "definition": (
            "each ns of a step window goes to the first of kernel, memcpy, memset, runtime "
            "(CUDA/HIP API calls), data loader (DataLoader ops, annotations and NVTX ranges), "
            "CPU exec (other framework ops) that covers it, else to other; the parts sum to "
            "the step"
        ),
        "steps": rows,
        "mean": means,
    }


def _joined_breakdowns(values: list[dict[str, Any]]) -> dict[str, Any]:
    """The step breakdowns of rank partitions (in rank order) as the whole store's."""
    first = values[0]
    return {
        "parts": first["parts"],
        "definition": first["definition"],
        "steps": [r for v in values for r in v["steps"]],
        "mean": [m for v in values for m in v["mean"]],
    }


# measured per rank partition next to its attribution (in the worker that reads its ranges)
attribution_parts.product("step_breakdown", __name__, _step_breakdown, _joined_breakdowns)
