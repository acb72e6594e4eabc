"""Rollups of attributed GPU time: by kernel, operator, layer (module path), module type,
annotation, step.

Every rollup of device time keeps the bracketed buckets (``[unattributed]``, ``[no module]``,
``[no annotation]``), so its rows always add up to the total GPU time of the rank(s).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from traceinsight.analysis.attribution import Attribution
from traceinsight.analysis.breakdown import Breakdown
from traceinsight.util.vocab import NO_MODULE

NO_ANNOTATION = "[no annotation]"
#: the columns of :func:`by_kernel`, and of the kernel rollup merged from runs of steps
KERNEL_COLUMNS = [
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
        return pd.DataFrame(columns=KERNEL_COLUMNS)
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
    total_t = _inclusive(g, attr)
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


def _inclusive(g: pd.DataFrame, attr: Attribution) -> pd.Series:
    """Inclusive device time per op name: kernel -> every ancestor op, each name once per
    kernel."""
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
    return total_t


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
    return _pick_dims(df.groupby(["op", "dims"])["dur"].sum().reset_index())


def _dims_parts(g: pd.DataFrame, attr: Attribution) -> pd.DataFrame:
    """Device time per (``op``, input ``dims``): what :func:`_pick_dims` chooses from."""
    has = g["op_idx"].to_numpy() >= 0
    if not has.any():
        return pd.DataFrame({"op": [], "dims": [], "dur": []})
    dims = attr.ops["input_dims"].to_numpy()[g["op_idx"].to_numpy()[has]]
    df = pd.DataFrame(
        {
            "op": g["op"].to_numpy()[has].astype(object),
            "dims": dims.astype(object),
            "dur": g["dur_ns"].to_numpy(np.int64)[has],
        }
    )
    df = df[df["dims"].notna()]
    return df.groupby(["op", "dims"])["dur"].sum().reset_index()


def _pick_dims(per: pd.DataFrame) -> dict[str, str]:
    if not len(per):
        return {}
    best = per.sort_values("dur", ascending=False)
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
    if not inclusive:
        return layers_from(layer_parts(df), total)
    rows = []
    for path, grp in df.groupby("module"):
        parts = str(path).split("/") if path != NO_MODULE else [NO_MODULE]
        for i in range(1, len(parts) + 1):
            rows.append(grp.assign(module="/".join(parts[:i])))
    df = pd.concat(rows, ignore_index=True) if rows else df
    return layers_from(layer_parts(df), total)


def layer_parts(df: pd.DataFrame) -> pd.DataFrame:
    """Per (module, phase) of rows ``module``, ``phase``, ``dur``: the time (``sum``) and the
    kernels (``size``), what :func:`layers_from` and :func:`module_types_from` need: sums, so
    the parts of runs of steps add up to the whole trace's."""
    return (
        df.groupby(["module", "phase"], sort=True)["dur"]
        .agg(["sum", "size"])
        .astype(np.int64)
        .reset_index()
    )


def layers_from(per: pd.DataFrame, total: float) -> pd.DataFrame:
    """:func:`by_layer`'s table from its :func:`layer_parts` (``total``: the GPU time)."""
    piv = per.pivot_table(
        index="module", columns="phase", values="sum", aggfunc="sum", fill_value=0
    )
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
    out["kernels"] = per.groupby("module")["size"].sum().reindex(out["module"]).to_numpy()
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
    mod = g["module"]
    has = mod.notna().to_numpy()
    if not has.any():
        return pd.DataFrame(columns=MODULE_TYPE_COLUMNS)
    df = pd.DataFrame(
        {
            "module": mod[has].astype(str).to_numpy(),
            "phase": g["phase"].astype(str).to_numpy()[has],
            "dur": g["dur_ns"].to_numpy(np.int64)[has],
        }
    )
    return module_types_from(
        df.groupby(["module", "phase"])["dur"].agg(["sum", "size"]).reset_index(), total
    )


MODULE_TYPE_COLUMNS = [
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


def module_types_from(per_path: pd.DataFrame, total: float) -> pd.DataFrame:
    """:func:`by_module_type`'s table from the time (``sum``) and kernels (``size``) per
    (``module``, ``phase``) of the rows with a module (``total``: the GPU time)."""
    cols = MODULE_TYPE_COLUMNS
    if not len(per_path):
        return pd.DataFrame(columns=cols)
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


# --- rollups of a trace analysed in runs of steps: exact sums, merged -------------------------


def _sum_by(frames: list[pd.DataFrame], keys: list[str]) -> pd.DataFrame:
    """The rows of ``frames`` summed per ``keys`` (sorted by them, as a groupby lists them)."""
    frames = [f for f in frames if len(f)]
    if not frames:
        return pd.DataFrame()
    if len(frames) == 1:
        return frames[0]
    return pd.concat(frames, ignore_index=True).groupby(keys, sort=True).sum().reset_index()


@dataclass
class RollupSums:
    """The kernel, op, layer, module-type, annotation and class rollups of some GPU rows as
    exact sums: the
    sums of the runs of steps a trace is analysed in (each row and CPU op counted in one run)
    add up (:meth:`add`) to the whole trace's, and the tables made from them
    (:meth:`kernels`, :meth:`ops`, :meth:`layers`, :meth:`module_types`) are the whole
    trace's rollups. A kernel's durations are kept as value counts, so its median and
    standard deviation are exact too."""

    durs: pd.DataFrame = field(default_factory=pd.DataFrame)  #: name, kind, dur_ns -> n
    cls: pd.DataFrame = field(default_factory=pd.DataFrame)  #: name, kind -> cls (first)
    top_op: pd.DataFrame = field(default_factory=pd.DataFrame)  #: name, kind, op -> dur_ns
    op_self: pd.DataFrame = field(default_factory=pd.DataFrame)  #: op -> self, kernels, kernel
    op_total: pd.DataFrame = field(default_factory=pd.DataFrame)  #: name -> inclusive dur
    op_host: pd.DataFrame = field(default_factory=pd.DataFrame)  #: name -> calls, host_ns
    op_dims: pd.DataFrame = field(default_factory=pd.DataFrame)  #: op, dims -> dur
    layer: pd.DataFrame = field(default_factory=pd.DataFrame)  #: module, phase -> sum, size
    classes: pd.DataFrame = field(default_factory=pd.DataFrame)  #: cls -> sum, size
    ann: pd.DataFrame = field(default_factory=pd.DataFrame)  #: annotation -> device_ns, kernels
    total_ns: int = 0  #: the GPU time of the rows

    @classmethod
    def of(cls, attr: Attribution, g: pd.DataFrame, ops: pd.DataFrame) -> RollupSums:
        """The sums of the GPU rows ``g`` (rows of ``attr.gpu``) and the CPU ops ``ops``
        (rows of ``attr.ops``)."""
        name = g["name"].astype(object).to_numpy()
        kind = g["kind"].astype(object).to_numpy()
        dur = g["dur_ns"].to_numpy(np.int64)
        op = g["op"].astype(object).to_numpy()
        base = pd.DataFrame({"name": name, "kind": kind, "dur_ns": dur})
        durs = base.groupby(["name", "kind", "dur_ns"]).size().rename("n").reset_index()
        first = pd.DataFrame({"name": name, "kind": kind, "cls": g["cls"].astype(object)})
        first = first.drop_duplicates(["name", "kind"])
        top = base.assign(op=op).groupby(["name", "kind", "op"])["dur_ns"].sum().reset_index()
        is_k = kind == "kernel"
        by_op = pd.DataFrame({"op": op, "dur": dur, "kdur": np.where(is_k, dur, 0)})
        op_self = (
            by_op.groupby("op")
            .agg(device_self_ns=("dur", "sum"), kernels=("dur", "size"), kernel_ns=("kdur", "sum"))
            .reset_index()
        )
        inc = _inclusive(g.reset_index(drop=True), attr)
        op_total = pd.DataFrame({"name": inc.index.astype(object), "dur": inc.to_numpy(np.int64)})
        host = (
            pd.DataFrame({"name": ops["name"].astype(object), "dur": ops["dur_ns"].to_numpy()})
            .groupby("name")
            .agg(calls=("dur", "size"), host_ns=("dur", "sum"))
            .reset_index()
        )
        mod = g["module"].astype(object)
        layer = layer_parts(
            pd.DataFrame(
                {
                    "module": mod.where(mod.notna(), NO_MODULE).to_numpy(),
                    "phase": g["phase"].astype(str).to_numpy(),
                    "dur": dur,
                }
            )
        )
        classes = (
            pd.DataFrame({"cls": g["cls"].astype(str).to_numpy(), "dur": dur})
            .groupby("cls")["dur"]
            .agg(["sum", "size"])
            .reset_index()
        )
        a = g["annotation"].astype(object)
        ann = (
            pd.DataFrame({"annotation": a.where(a.notna(), NO_ANNOTATION).to_numpy(), "dur": dur})
            .groupby("annotation")
            .agg(device_ns=("dur", "sum"), kernels=("dur", "size"))
            .reset_index()
        )
        return cls(
            durs,
            first,
            top,
            op_self,
            op_total,
            host,
            _dims_parts(g, attr),
            layer,
            classes,
            ann,
            int(dur.sum()),
        )

    def add(self, o: RollupSums) -> None:
        """Add the sums of other rows (a later run of steps)."""
        self.durs = _sum_by([self.durs, o.durs], ["name", "kind", "dur_ns"])
        self.cls = (
            pd.concat([f for f in (self.cls, o.cls) if len(f)] or [self.cls], ignore_index=True)
            .drop_duplicates(["name", "kind"])
            .reset_index(drop=True)
        )
        self.top_op = _sum_by([self.top_op, o.top_op], ["name", "kind", "op"])
        self.op_self = _sum_by([self.op_self, o.op_self], ["op"])
        self.op_total = _sum_by([self.op_total, o.op_total], ["name"])
        self.op_host = _sum_by([self.op_host, o.op_host], ["name"])
        self.op_dims = _sum_by([self.op_dims, o.op_dims], ["op", "dims"])
        self.layer = _sum_by([self.layer, o.layer], ["module", "phase"])
        self.classes = _sum_by([self.classes, o.classes], ["cls"])
        self.ann = _sum_by([self.ann, o.ann], ["annotation"])
        self.total_ns += o.total_ns

    def kernels(self) -> pd.DataFrame:
        """:func:`by_kernel`'s table."""
        d = self.durs
        if not len(d):
            return pd.DataFrame(columns=KERNEL_COLUMNS)
        d = d.sort_values(["name", "kind", "dur_ns"]).reset_index(drop=True)
        v = d["dur_ns"].to_numpy(np.int64)
        n = d["n"].to_numpy(np.int64)
        rows = []
        for (name, kind), idx in d.groupby(["name", "kind"], sort=False).indices.items():
            vals, cnt = v[idx], n[idx]
            calls = int(cnt.sum())
            total = int((vals * cnt).sum())
            cum = np.cumsum(cnt)
            lo = vals[np.searchsorted(cum, (calls - 1) // 2, side="right")]
            hi = vals[np.searchsorted(cum, calls // 2, side="right")]
            mean = total / calls
            var = float((cnt * (vals - mean) ** 2).sum()) / (calls - 1) if calls > 1 else 0.0
            rows.append(
                {
                    "name": name,
                    "kind": kind,
                    "calls": calls,
                    "total_ns": total,
                    "mean_ns": mean,
                    "median_ns": (float(lo) + float(hi)) / 2.0,
                    "min_ns": int(vals[0]),
                    "max_ns": int(vals[-1]),
                    "stddev_ns": math.sqrt(var),
                }
            )
        agg = pd.DataFrame(rows)
        cls = self.cls.set_index(["name", "kind"])["cls"]
        keys = pd.MultiIndex.from_frame(agg[["name", "kind"]])
        agg.insert(2, "cls", cls.reindex(keys).to_numpy())
        top = self.top_op
        if len(top):
            top = (
                top.sort_values("dur_ns", ascending=False)
                .drop_duplicates(["name", "kind"])
                .set_index(["name", "kind"])["op"]
            )
            agg["top_op"] = top.reindex(keys).to_numpy()
        else:
            agg["top_op"] = None
        agg["share_pct"] = _share(agg, "total_ns", float(self.total_ns))
        agg = agg.sort_values(["total_ns", "name"], ascending=[False, True])
        return agg[KERNEL_COLUMNS].reset_index(drop=True)

    def ops(self) -> pd.DataFrame:
        """:func:`by_op`'s table."""
        st = self.op_self.set_index("op") if len(self.op_self) else pd.DataFrame()
        tt = self.op_total.set_index("name")["dur"] if len(self.op_total) else pd.Series()
        hh = self.op_host.set_index("name") if len(self.op_host) else pd.DataFrame()
        idx = pd.Index(st.index).union(pd.Index(tt.index))
        out = pd.DataFrame(index=idx)

        def col(df: pd.DataFrame | pd.Series, c: str | None = None) -> pd.Series:
            if not len(df):
                return pd.Series(0, index=idx, dtype="int64")
            s = df if c is None else df[c]
            return s.reindex(idx).fillna(0).astype("int64")

        out["device_self_ns"] = col(st, "device_self_ns")
        out["kernel_ns"] = col(st, "kernel_ns")
        out["kernels"] = col(st, "kernels")
        out["device_total_ns"] = col(tt)
        out.loc[out["device_total_ns"] == 0, "device_total_ns"] = out["device_self_ns"]
        out["calls"] = col(hh, "calls")
        out["host_ns"] = col(hh, "host_ns")
        out["share_pct"] = _share(out, "device_self_ns", float(self.total_ns))
        out = out.reset_index().rename(columns={"index": "name"})
        out["input_dims"] = out["name"].map(_pick_dims(self.op_dims))
        return out.sort_values(
            ["device_self_ns", "device_total_ns", "name"], ascending=[False, False, True]
        ).reset_index(drop=True)

    def layers(self) -> pd.DataFrame:
        """:func:`by_layer`'s table (each kernel in its innermost module)."""
        return layers_from(self.layer, float(self.total_ns))

    def module_types(self) -> pd.DataFrame:
        """:func:`by_module_type`'s table."""
        per = self.layer[self.layer["module"] != NO_MODULE] if len(self.layer) else self.layer
        return module_types_from(per.reset_index(drop=True), float(self.total_ns))

    def annotations(self) -> pd.DataFrame:
        """:func:`by_annotation`'s table."""
        out = self.ann.copy()
        if not len(out):
            return pd.DataFrame(columns=["annotation", "device_ns", "kernels", "share_pct"])
        out["share_pct"] = _share(out, "device_ns", float(self.total_ns))
        out = out.sort_values(["device_ns", "annotation"], ascending=[False, True])
        return out.reset_index(drop=True)
