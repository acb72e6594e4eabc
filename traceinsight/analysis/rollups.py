"""Rollups of attributed GPU time: by kernel, operator, layer (module path), module type,
annotation, step.

Every rollup of device time keeps the bracketed buckets (``[unattributed]``, ``[no module]``,
``[no annotation]``), so its rows always add up to the total GPU time of the rank(s).
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import pandas as pd

from traceinsight.analysis.attribution import Attribution
from traceinsight.analysis.breakdown import Breakdown
from traceinsight.util.vocab import NO_MODULE

NO_ANNOTATION = "[no annotation]"


def _share(df: pd.DataFrame, col: str, total: float) -> pd.Series:
    return df[col] / total * 100.0 if total else df[col] * 0.0


def _stddev(s: pd.Series) -> float:
    """The sample standard deviation (n - 1), 0 for a single value: what ``nsys stats`` shows."""
    return float(s.std(ddof=1)) if len(s) > 1 else 0.0


def by_kernel(attr: Attribution, rank: int | None = None) -> pd.DataFrame:
    """Per kernel (and copy) name: calls, total, mean, median, min, max and sample standard
    deviation of the duration (the columns of ``nsys stats --report cuda_gpu_kern_sum``), its
    share of the GPU time and the op that launched most of its time."""
    g = _sel(attr, rank)
    if not len(g):
        return pd.DataFrame(
            columns=[
                "name",
                "kind",
                "cls",
                "calls",
                "total_ns",
                "mean_ns",
                "median_ns",
                "min_ns",
                "max_ns",
                "stddev_ns",
                "share_pct",
                "top_op",
            ]
        )
    agg = (
        g.groupby(["name", "kind"], observed=True, sort=False)
        .agg(
            cls=("cls", "first"),
            calls=("dur_ns", "size"),
            total_ns=("dur_ns", "sum"),
            mean_ns=("dur_ns", "mean"),
            median_ns=("dur_ns", "median"),
            min_ns=("dur_ns", "min"),
            max_ns=("dur_ns", "max"),
            stddev_ns=("dur_ns", _stddev),
        )
        .reset_index()
    )
    top_op = (
        g.groupby(["name", "kind", "op"], observed=True)["dur_ns"]
        .sum()
        .reset_index()
        .sort_values("dur_ns", ascending=False)
        .drop_duplicates(["name", "kind"])
        .set_index(["name", "kind"])["op"]
    )
    agg["top_op"] = top_op.reindex(pd.MultiIndex.from_frame(agg[["name", "kind"]])).to_numpy()
    agg["share_pct"] = _share(agg, "total_ns", float(g["dur_ns"].sum()))
    return agg.sort_values(["total_ns", "name"], ascending=[False, True]).reset_index(drop=True)


def by_op(attr: Attribution, rank: int | None = None) -> pd.DataFrame:
    """Per operator name: device self time (kernels it launched directly), device total time
    (kernels of it and its callees, each kernel counted once per name), host time and calls,
    and the input shapes that took most device time."""
    g = _sel(attr, rank)
    ops = attr.ops if rank is None else attr.ops[attr.ops["rank"] == rank]
    total = float(g["dur_ns"].sum())
    self_t = g.groupby("op", observed=True).agg(
        device_self_ns=("dur_ns", "sum"), kernels=("dur_ns", "size")
    )
    kern_ns = g[g["kind"] == "kernel"].groupby("op", observed=True)["dur_ns"].sum()
    self_t["kernel_ns"] = kern_ns.reindex(self_t.index).fillna(0).astype("int64")
    # inclusive device time: kernel -> every ancestor op, each name once per kernel
    parent = attr.ops["parent"].to_numpy()
    names = attr.ops["name"].to_numpy()
    pairs_k, pairs_a = [], []
    cur = g["op_idx"].to_numpy().copy()
    k = np.arange(len(g))
    for _ in range(512):
        ok = cur >= 0
        if not ok.any():
            break
        pairs_k.append(k[ok])
        pairs_a.append(cur[ok])
        k, cur = k[ok], parent[cur[ok]]
    if pairs_k:
        pk = np.concatenate(pairs_k)
        pa_ = np.concatenate(pairs_a)
        inc = pd.DataFrame({"k": pk, "name": names[pa_]}).drop_duplicates()
        inc["dur"] = g["dur_ns"].to_numpy()[inc["k"].to_numpy()]
        total_t = inc.groupby("name")["dur"].sum()
    else:
        total_t = pd.Series(dtype="int64")
    host = ops.groupby("name").agg(calls=("dur_ns", "size"), host_ns=("dur_ns", "sum"))
    idx = self_t.index.union(total_t.index)
    out = pd.DataFrame(index=idx)
    out["device_self_ns"] = self_t["device_self_ns"].reindex(idx).fillna(0).astype("int64")
    out["kernel_ns"] = self_t["kernel_ns"].reindex(idx).fillna(0).astype("int64")
    out["kernels"] = self_t["kernels"].reindex(idx).fillna(0).astype("int64")
    out["device_total_ns"] = total_t.reindex(idx).fillna(0).astype("int64")
    out.loc[out["device_total_ns"] == 0, "device_total_ns"] = out["device_self_ns"]
    out["calls"] = host["calls"].reindex(idx).fillna(0).astype("int64")
    out["host_ns"] = host["host_ns"].reindex(idx).fillna(0).astype("int64")
    out["share_pct"] = _share(out, "device_self_ns", total)
    out = out.reset_index().rename(columns={"index": "name"})
    # input shapes: the most device time per (leaf op, dims)
    dims = _top_dims(g, attr)
    out["input_dims"] = out["name"].map(dims)
    return out.sort_values(
        ["device_self_ns", "device_total_ns", "name"], ascending=[False, False, True]
    ).reset_index(drop=True)


def _top_dims(g: pd.DataFrame, attr: Attribution) -> dict[str, str]:
    has = g["op_idx"].to_numpy() >= 0
    if not has.any():
        return {}
    dims = attr.ops["input_dims"].to_numpy()[g["op_idx"].to_numpy()[has]]
    df = pd.DataFrame(
        {"op": g["op"].to_numpy()[has], "dims": dims, "dur": g["dur_ns"].to_numpy()[has]}
    )
    df = df[df["dims"].notna()]
    if not len(df):
        return {}
    best = df.groupby(["op", "dims"])["dur"].sum().reset_index().sort_values("dur", ascending=False)
    return dict(best.drop_duplicates("op")[["op", "dims"]].itertuples(index=False, name=None))


def by_layer(
    attr: Attribution, rank: int | None = None, *, inclusive: bool = False
) -> pd.DataFrame:
    """Device time per module path, split forward / backward / optimizer / other.

    ``inclusive=False``: each kernel counts for its innermost module only (rows add up to the
    total); ``inclusive=True``: a module also gets its sub-modules' time.
    """
    g = _sel(attr, rank)
    total = float(g["dur_ns"].sum())
    mod = g["module"].where(g["module"].notna(), NO_MODULE)
    df = pd.DataFrame(
        {
            "module": mod.to_numpy(),
            "phase": g["phase"].astype(str).to_numpy(),
            "dur": g["dur_ns"].to_numpy(),
        }
    )
    if inclusive:
        rows = []
        for path, grp in df.groupby("module"):
            parts = str(path).split("/") if path != NO_MODULE else [NO_MODULE]
            for i in range(1, len(parts) + 1):
                rows.append(grp.assign(module="/".join(parts[:i])))
        df = pd.concat(rows, ignore_index=True) if rows else df
    piv = df.pivot_table(index="module", columns="phase", values="dur", aggfunc="sum", fill_value=0)
    for p in ("forward", "backward", "optimizer", "unknown"):
        if p not in piv.columns:
            piv[p] = 0
    out = pd.DataFrame(
        {
            "module": piv.index,
            "forward_ns": piv["forward"].to_numpy(np.int64),
            "backward_ns": piv["backward"].to_numpy(np.int64),
            "other_ns": (piv["optimizer"] + piv["unknown"]).to_numpy(np.int64),
        }
    )
    out["total_ns"] = out["forward_ns"] + out["backward_ns"] + out["other_ns"]
    out["kernels"] = df.groupby("module").size().reindex(out["module"]).to_numpy()
    out["share_pct"] = _share(out, "total_ns", total)
    out["depth"] = out["module"].map(lambda m: 0 if m == NO_MODULE else str(m).count("/"))
    return out.sort_values(["total_ns", "module"], ascending=[False, True]).reset_index(drop=True)


def module_type(component: str) -> str:
    """The type of one module path component: ``Qwen2Attention_17`` -> ``Qwen2Attention``."""
    return re.sub(r"_\d+$", "", str(component))


def by_module_type(attr: Attribution, rank: int | None = None) -> pd.DataFrame:
    """Device time per nn.Module type over all its instances (``Qwen2Attention`` x 24),
    inclusive of sub-modules; an instance nested in another of its own type counts once.

    ``share_pct`` is of the total GPU time; types nest (a block holds its attention), so the
    shares of different types overlap and do not add up to 100%.
    """
    g = _sel(attr, rank)
    total = float(g["dur_ns"].sum())
    cols = [
        "module_type",
        "instances",
        "forward_ns",
        "backward_ns",
        "other_ns",
        "total_ns",
        "kernels",
        "share_pct",
        "example",
    ]
    mod = g["module"]
    has = mod.notna().to_numpy()
    if not has.any():
        return pd.DataFrame(columns=cols)
    df = pd.DataFrame(
        {
            "module": mod[has].astype(str).to_numpy(),
            "phase": g["phase"].astype(str).to_numpy()[has],
            "dur": g["dur_ns"].to_numpy(np.int64)[has],
        }
    )
    per_path = df.groupby(["module", "phase"])["dur"].agg(["sum", "size"]).reset_index()
    rows: dict[str, dict] = {}
    for path, phase, dur, n in per_path.itertuples(index=False, name=None):
        parts = str(path).split("/")
        seen: set[str] = set()
        for i, comp in enumerate(parts):
            typ = module_type(comp)
            if typ in seen:  # nested in an instance of its own type: counted there
                continue
            seen.add(typ)
            r = rows.setdefault(
                typ,
                {
                    "instances": set(),
                    "forward_ns": 0,
                    "backward_ns": 0,
                    "other_ns": 0,
                    "kernels": 0,
                    "example": "",
                },
            )
            inst = "/".join(parts[: i + 1])
            r["instances"].add(inst)
            r["example"] = r["example"] or inst
            key = {"forward": "forward_ns", "backward": "backward_ns"}.get(phase, "other_ns")
            r[key] += int(dur)
            r["kernels"] += int(n)
    out = pd.DataFrame(
        [
            {
                "module_type": t,
                "instances": len(r["instances"]),
                "forward_ns": r["forward_ns"],
                "backward_ns": r["backward_ns"],
                "other_ns": r["other_ns"],
                "total_ns": r["forward_ns"] + r["backward_ns"] + r["other_ns"],
                "kernels": r["kernels"],
                "example": r["example"],
            }
            for t, r in rows.items()
        ]
    )
    out["share_pct"] = _share(out, "total_ns", total)
    return (
        out[cols]
        .sort_values(["total_ns", "module_type"], ascending=[False, True])
        .reset_index(drop=True)
    )


def by_annotation(attr: Attribution, rank: int | None = None) -> pd.DataFrame:
    g = _sel(attr, rank)
    total = float(g["dur_ns"].sum())
    ann = g["annotation"].where(g["annotation"].notna(), NO_ANNOTATION)
    out = (
        pd.DataFrame({"annotation": ann.to_numpy(), "dur": g["dur_ns"].to_numpy()})
        .groupby("annotation")
        .agg(device_ns=("dur", "sum"), kernels=("dur", "size"))
        .reset_index()
    )
    out["share_pct"] = _share(out, "device_ns", total)
    out = out.sort_values(["device_ns", "annotation"], ascending=[False, True])
    return out.reset_index(drop=True)


def by_step(bd: Breakdown, rank: int | None = None) -> pd.DataFrame:
    df = bd.step_frame()
    if rank is not None and len(df):
        df = df[df["rank"] == rank]
    return df.drop(columns=["by_class_ns"], errors="ignore").reset_index(drop=True)


def _sel(attr: Attribution, rank: int | None) -> pd.DataFrame:
    g = attr.gpu
    return g if rank is None else g[g["rank"] == rank]


def _clean(v: Any) -> Any:
    if isinstance(v, float) and math.isnan(v):
        return None
    if hasattr(v, "item"):
        return v.item()
    return v


def records(df: pd.DataFrame) -> list[dict[str, Any]]:
    """All rows of a rollup table as JSON-ready dicts (NaN as None, numpy scalars as Python):
    what ``top --json`` prints and the terminal table renders."""
    return [{k: _clean(v) for k, v in row.items()} for row in df.to_dict("records")]


#: the statistics of one duration column, named as in ``nsys stats``
_DUR_STATS = {
    "total_ns": "sum",
    "mean_ns": "mean",
    "median_ns": "median",
    "min_ns": "min",
    "max_ns": "max",
    "stddev_ns": _stddev,
}

API_COLUMNS = ["name", "kind", "calls", *_DUR_STATS, "share_pct"]


def by_api(runtime: pd.DataFrame, rank: int | None = None) -> pd.DataFrame:
    """Per CUDA/HIP runtime or driver API name (``runtime_calls``): calls, total, mean, median,
    min, max and sample standard deviation of the host-side duration, and the share of all API
    time: ``nsys stats --report cuda_api_sum``. Names are as stored (one ``_vNNNN`` suffix
    dropped), so versions of one call form one row."""
    r = runtime if rank is None else runtime[runtime["rank"] == rank]
    if not len(r):
        return pd.DataFrame(columns=API_COLUMNS)
    g = r.assign(kind=r["kind"].astype(str), name=r["name"].astype(str)).groupby(
        ["name", "kind"], sort=False
    )["dur_ns"]
    out = g.agg(["size", *_DUR_STATS.values()]).reset_index()
    out.columns = ["name", "kind", "calls", *_DUR_STATS]
    out["share_pct"] = _share(out, "total_ns", float(r["dur_ns"].sum()))
    out = out.sort_values(["total_ns", "name"], ascending=[False, True])
    return out[API_COLUMNS].reset_index(drop=True)


#: ``copy_kind`` as ``nsys stats`` names the operation
COPY_KINDS = {
    "HtoD": "Host-to-Device",
    "DtoH": "Device-to-Host",
    "DtoD": "Device-to-Device",
    "HtoH": "Host-to-Host",
    "PtoP": "Peer-to-Peer",
}

MEMCPY_COLUMNS = [
    "operation",
    "kind",
    "copy_kind",
    "count",
    *_DUR_STATS,
    "share_pct",
    "total_bytes",
    "mean_bytes",
    "median_bytes",
    "min_bytes",
    "max_bytes",
    "stddev_bytes",
]


def by_memcpy(gpu: pd.DataFrame, rank: int | None = None) -> pd.DataFrame:
    """Memory copies by direction and memsets (``gpu_activities`` of kind memcpy / memset):
    count, the duration statistics with the share of all copy and set time
    (``nsys stats --report cuda_gpu_mem_time_sum``) and the byte statistics
    (``cuda_gpu_mem_size_sum``; a row without a recorded size counts as unknown, not 0)."""
    g = gpu if rank is None else gpu[gpu["rank"] == rank]
    g = g[g["kind"].astype(str).isin(["memcpy", "memset"])]
    if not len(g):
        return pd.DataFrame(columns=MEMCPY_COLUMNS)
    kind = g["kind"].astype(str).to_numpy()
    ck = g["copy_kind"].astype(object).where(g["copy_kind"].notna(), None).to_numpy()
    ck = np.where(kind == "memset", None, ck)
    ck = np.array([c if c is None else str(c) for c in ck], dtype=object)
    op = [
        "[memset]" if k == "memset" else f"[memcpy {COPY_KINDS.get(c, c or 'unknown')}]"
        for k, c in zip(kind, ck, strict=True)
    ]
    df = pd.DataFrame(
        {
            "operation": op,
            "kind": kind,
            "copy_kind": ck,
            "dur_ns": g["dur_ns"].to_numpy(np.int64),
            "bytes": g["bytes"].to_numpy(),
        }
    )
    keys = ["operation", "kind"]
    dur = df.groupby(keys, sort=False)["dur_ns"].agg(["size", *_DUR_STATS.values()])
    dur.columns = ["count", *_DUR_STATS]
    byt = df.groupby(keys, sort=False)["bytes"].agg(
        ["sum", "mean", "median", "min", "max", _stddev, "count"]
    )
    byt.columns = [
        "total_bytes",
        "mean_bytes",
        "median_bytes",
        "min_bytes",
        "max_bytes",
        "stddev_bytes",
        "sized",
    ]
    out = dur.join(byt).reset_index()
    unsized = out["sized"] == 0
    for c in ("total_bytes", "mean_bytes", "median_bytes", "min_bytes", "max_bytes"):
        out[c] = out[c].astype(float).where(~unsized)
    out["stddev_bytes"] = out["stddev_bytes"].where(~unsized)
    ck_of = df.drop_duplicates("operation").set_index("operation")["copy_kind"]
    out["copy_kind"] = out["operation"].map(ck_of)
    out["share_pct"] = _share(out, "total_ns", float(df["dur_ns"].sum()))
    out = out.sort_values(["total_ns", "operation"], ascending=[False, True])
    return out[MEMCPY_COLUMNS].reset_index(drop=True)
