"""Roofline and MFU metrics from per-op FLOPs and bytes (shapes and dtypes); precision metrics
are in :mod:`traceinsight.metrics.precision`.

For every op instance that launched kernels, :func:`traceinsight.metrics.flops.op_cost` models
FLOPs and ideal bytes from ``Input Dims``/``Input type``; its device time is the sum of its
kernels. Against the device's roofs (peak FLOP/s of the op's dtype, memory bandwidth):
arithmetic intensity AI = FLOPs / bytes; ridge = peak / bandwidth; roof = min(peak, AI x
bandwidth); achieved = FLOPs / time; the op is memory-bound when AI < ridge. Bytes are ideal
traffic (perfect caching), so achieved bandwidth is a lower bound of the real traffic, as in
TraceLens' PerfModel.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceinsight.analysis import Analysis, attribution_parts
from traceinsight.analysis.attribution import name_matches
from traceinsight.analysis.categories import FP32_GEMM_RE, TENSOR_CORE_RE
from traceinsight.analysis.overview import kernel_rows
from traceinsight.metrics.options import RooflineOptions
from traceinsight.metrics.registry import MetricSet, declare
from traceinsight.metrics.roofline_checks import above_peak, excluded_rows, note_rows
from traceinsight.util import capture_hints

NEEDS = "input shapes (record_shapes=True) and a known device"

COVERAGE = "flops_modelled_pct"
declare(
    COVERAGE,
    "%",
    "kernel time of ops whose FLOPs/bytes could be modelled (the coverage of "
    "every roofline metric)",
    needs=NEEDS,
    setting=capture_hints.SHAPES,
)
#: name, unit, meaning, lower bound (only grows as more of the run is modelled)
for _n, _u, _d, _lb in (
    (
        "memory_bound_time_pct",
        "%",
        "modelled kernel time in memory-bound ops (AI below the ridge)",
        False,
    ),
    ("compute_bound_time_pct", "%", "modelled kernel time in compute-bound ops", False),
    ("roof_efficiency_pct", "%", "time-weighted achieved / roof over modelled ops", False),
    (
        "memory_bound_efficiency_pct",
        "%",
        "time-weighted achieved bandwidth / peak over memory-bound ops",
        False,
    ),
    (
        "compute_bound_efficiency_pct",
        "%",
        "time-weighted achieved FLOP/s / peak over compute-bound ops",
        False,
    ),
    (
        "memory_bound_recoverable_pct",
        "%",
        "time above the bandwidth roof in memory-bound ops, % of step time",
        True,
    ),
    (
        "compute_bound_recoverable_pct",
        "%",
        "time above the compute roof in compute-bound ops, % of step time",
        True,
    ),
    ("achieved_tflops", "TFLOP/s", "modelled FLOPs per second of step time, per GPU", True),
    (
        "mfu_pct",
        "%",
        "model FLOPs utilisation: modelled FLOPs / (step time x peak of the main dtype)",
        True,
    ),
):
    declare(
        _n, _u, _d, needs=NEEDS, setting=capture_hints.SHAPES, coverage=COVERAGE, lower_bound=_lb
    )
declare(
    "mfu_estimate_pct",
    "%",
    "MFU from 6·N·tokens (training) or 2·N·tokens (inference) per step",
    needs="--params and --tokens-per-step",
    hint="pass --params N --tokens-per-step T",
)
declare(
    "device_peak_tflops",
    "TFLOP/s",
    "dense bf16/fp16 peak of the device",
    needs="a known device",
    setting=capture_hints.DEVICE,
)
declare(
    "device_bandwidth_gbs",
    "GB/s",
    "peak memory bandwidth of the device",
    needs="a known device",
    setting=capture_hints.DEVICE,
)
#: per-dtype dense peaks of the device table: 0 when the part has no such unit (bf16 and TF32
#: on V100, fp8 before Hopper/MI300), missing when the device is unknown. Advice about a dtype
#: is conditional on its peak.
DTYPE_PEAKS = ("bf16", "fp16", "tf32", "fp8")
for _d in DTYPE_PEAKS:
    declare(
        f"device_{_d}_tflops",
        "TFLOP/s",
        f"dense {_d} peak of the device (0: the part has no {_d} unit)",
        needs="a known device",
        setting=capture_hints.DEVICE,
    )


def resolve_device(an: Analysis, opts: RooflineOptions):
    """The device spec for the run (from the first rank's deviceProperties, or the options)."""
    from traceinsight.devices import table as devices

    props = None
    for r in an.store.ranks:
        devs = r.get("devices") or []
        used = r.get("devices_used") or []
        pick = [d for d in devs if d.get("id") in used] or devs
        if pick:
            props = pick[0]
            break
    return devices.resolve(
        props, override_key=opts.device, peak_tflops=opts.peak_tflops, peak_bw_gbs=opts.peak_bw_gbs
    ), props


#: the kernel columns the roofline reads
_KERNEL_COLUMNS = ("name", "dur_ns", "op_idx", "rank")


def compute(an: Analysis, ms: MetricSet, opts: RooflineOptions) -> None:
    res, props = resolve_device(an, opts)
    ms.evidence["device"] = {
        "name": (props or {}).get("name"),
        "resolved": res.spec.name if res.spec else None,
        "key": res.spec.key if res.spec else None,
        "how": res.how,
        "message": res.message,
        "peaks": dict(res.spec.peak_flops) if res.spec else None,
        "bandwidth": res.spec.mem_bw if res.spec else None,
    }
    spec = res.spec
    g = an.attribution.gpu
    kern = kernel_rows(g, _KERNEL_COLUMNS)
    windows = [w for w in an.attribution.steps]
    wall = float(sum(w.dur_ns for w in windows)) or 0.0
    n_ranks = max(1, len({w.rank for w in windows}))
    if spec is None:
        why = capture_hints.reason_only(res.message) or "unknown device"
        for n in (
            "device_peak_tflops",
            "device_bandwidth_gbs",
            *(f"device_{d}_tflops" for d in DTYPE_PEAKS),
        ):
            ms.set(n, None, why_missing=why, setting=capture_hints.DEVICE)
    else:
        main = spec.peak("bf16") or spec.peak("fp16")
        ms.set("device_peak_tflops", main / 1e12 if main else None)
        ms.set("device_bandwidth_gbs", spec.mem_bw / 1e9 if spec.mem_bw else None)
        for d in DTYPE_PEAKS:  # the table's own value: tf32 does not fall back to fp32 here
            ms.set(f"device_{d}_tflops", (spec.peak_flops.get(d) or 0.0) / 1e12)
    names = [n for n in REG_ROOFLINE]
    if not len(kern):
        for n in names:
            ms.set(n, None, why_missing="no GPU kernels", setting=capture_hints.GPU)
        _mfu_estimate(an, ms, opts, spec, wall, n_ranks)
        return
    inst = an.cache.get("op_instances")  # the rank partitions' own, joined
    if inst is None:
        inst = _op_instances(an, kern)
    total_k = float(kern["dur_ns"].sum())
    modelled = inst[inst["flops"].notna()]
    ms.set(
        "flops_modelled_pct", 100.0 * float(modelled["dev_ns"].sum()) / total_k if total_k else None
    )
    if spec is None:
        for n in names:
            if n != "flops_modelled_pct":
                ms.set(
                    n,
                    None,
                    why_missing=capture_hints.reason_only(res.message) or "unknown device",
                    setting=capture_hints.DEVICE,
                )
        _mfu_estimate(an, ms, opts, spec, wall, n_ranks)
        return
    lp = spec.peak("bf16") or spec.peak("fp16")
    if not len(modelled):
        for n in names:
            if n != "flops_modelled_pct":
                ms.set(n, None, why_missing="no op could be modelled (no input shapes)")
        _mfu_estimate(an, ms, opts, spec, wall, n_ranks)
        return
    m = modelled.copy()
    combos = m[["dtype", "kind", "tensor_core", "roof"]].astype(object).drop_duplicates()
    peak_of = {tuple(c): _peak(spec, *c) for c in combos.itertuples(index=False, name=None)}
    m["peak"] = [
        peak_of[c]
        for c in m[["dtype", "kind", "tensor_core", "roof"]]
        .astype(object)
        .itertuples(index=False, name=None)
    ]
    m = m[m["peak"].notna() & (m["dev_ns"] > 0)]
    if not spec.mem_bw:
        for n in names:
            if n != "flops_modelled_pct":
                ms.set(
                    n,
                    None,
                    why_missing="the device's memory bandwidth is unknown",
                    setting=capture_hints.DEVICE,
                )
        return
    bw = float(spec.mem_bw)
    above = above_peak(m, bw)
    excluded = excluded_rows(m[above], bw) if above.any() else []
    if above.any():
        # a modelled rate above the device's peak is impossible: the model's assumption is
        # wrong for that op; it counts nowhere (sums, efficiencies, points, coverage)
        modelled = modelled.drop(index=m.index[above])
        m = m[~above]
        ms.set(COVERAGE, 100.0 * float(modelled["dev_ns"].sum()) / total_k if total_k else None)
    ms.evidence["model_above_peak"] = excluded
    if not len(m):
        why = "every modelled op is above the device's peak (its model does not fit it)"
        for n in names:
            if n != "flops_modelled_pct":
                ms.set(n, None, why_missing=why)
        ms.evidence["roofline"] = {
            "bandwidth": bw,
            "peaks": {k: v for k, v in spec.peak_flops.items() if v},
            "points": [],
            "why": why,
            "excluded": excluded,
            "coverage_pct": ms.get(COVERAGE),
            "coverage_metric": COVERAGE,
        }
        _mfu_estimate(an, ms, opts, spec, wall, n_ranks)
        return
    t = m["dev_ns"].to_numpy(np.float64) / 1e9
    F = m["flops"].to_numpy(np.float64)
    B = np.maximum(m["bytes"].to_numpy(np.float64), 1.0)
    P = m["peak"].to_numpy(np.float64)
    ai = F / B
    ridge = P / bw
    roof = np.minimum(P, ai * bw)
    achieved = F / t
    eff = np.minimum(np.divide(achieved, roof, out=np.zeros_like(achieved), where=roof > 0), 1.0)
    mem_bound = ai < ridge
    tt = t.sum()
    ms.set("memory_bound_time_pct", 100.0 * t[mem_bound].sum() / tt if tt else None)
    ms.set("compute_bound_time_pct", 100.0 * t[~mem_bound].sum() / tt if tt else None)
    ms.set("roof_efficiency_pct", 100.0 * float((eff * t).sum() / tt) if tt else None)
    bw_eff = np.minimum((B / t) / bw, 1.0)
    ms.set(
        "memory_bound_efficiency_pct",
        100.0 * float((bw_eff[mem_bound] * t[mem_bound]).sum() / t[mem_bound].sum())
        if mem_bound.any()
        else None,
        why_missing="no memory-bound op",
    )
    c_eff = np.minimum(achieved / P, 1.0)
    ms.set(
        "compute_bound_efficiency_pct",
        100.0 * float((c_eff[~mem_bound] * t[~mem_bound]).sum() / t[~mem_bound].sum())
        if (~mem_bound).any()
        else None,
        why_missing="no compute-bound op",
    )
    wall_s = wall / 1e9
    over_mem = np.clip(t - B / bw, 0, None)
    over_cmp = np.clip(t - F / P, 0, None)
    ms.set(
        "memory_bound_recoverable_pct",
        100.0 * float(over_mem[mem_bound].sum()) / wall_s if wall_s else None,
    )
    ms.set(
        "compute_bound_recoverable_pct",
        100.0 * float(over_cmp[~mem_bound].sum()) / wall_s if wall_s else None,
    )
    total_flops = float(modelled["flops"].sum())
    ms.set("achieved_tflops", total_flops / (wall_s / n_ranks) / 1e12 / n_ranks if wall_s else None)
    # MFU against the peak of the dominant GEMM dtype
    gem = m[m["kind"].isin(["gemm", "conv", "attention"])]
    dom = gem.groupby("dtype")["dev_ns"].sum().idxmax() if len(gem) else "bf16"
    dom_peak = _peak(spec, dom, "gemm", bool(gem["tensor_core"].any()) if len(gem) else True) or lp
    ms.set(
        "mfu_pct",
        100.0 * total_flops / ((wall_s / n_ranks) * dom_peak * n_ranks)
        if wall_s and dom_peak
        else None,
    )
    m = m.assign(
        ai=ai,
        achieved=achieved,
        roof=roof,
        eff=eff,
        bound=np.where(mem_bound, "memory", "compute"),
        over_ns=np.where(mem_bound, over_mem, over_cmp) * 1e9,
    )
    ms.evidence["roofline"] = {
        **_points(m, spec, bw),
        "excluded": excluded,
        "assumptions": note_rows(m, "assumed"),
        "inferences": note_rows(m, "inferred"),
        "coverage_pct": ms.get(COVERAGE),
        "coverage_metric": COVERAGE,
    }
    ms.evidence["memory_bound_ops"] = _top_rows(m[m["bound"] == "memory"], 8, roofline=True)
    ms.evidence["compute_bound_ops"] = _top_rows(m[m["bound"] == "compute"], 8, roofline=True)
    _mfu_estimate(an, ms, opts, spec, wall, n_ranks)


REG_ROOFLINE = (
    "flops_modelled_pct",
    "memory_bound_time_pct",
    "compute_bound_time_pct",
    "roof_efficiency_pct",
    "memory_bound_efficiency_pct",
    "compute_bound_efficiency_pct",
    "memory_bound_recoverable_pct",
    "compute_bound_recoverable_pct",
    "achieved_tflops",
    "mfu_pct",
)


def _peak(spec, dtype: str, kind: str, tensor_core: bool, roof: str | None = None) -> float | None:
    """The roof of one op: the peak of its dtype; fp32 matrix work uses TF32 tensor cores or
    AMD's fp32 matrix units when its kernels show them."""
    if dtype == "fp32" and kind in ("gemm", "conv", "attention"):
        if roof == "fp32_matrix":
            return spec.peak("fp32_matrix") or spec.peak("fp32")
        if roof == "tf32" or tensor_core:
            return spec.peak("tf32") or spec.peak("fp32")
        return spec.peak("fp32")
    if dtype in ("bf16", "fp16", "fp8", "int8", "fp64", "tf32"):
        return spec.peak(dtype) or spec.peak("fp16") or spec.peak("fp32")
    return spec.peak("fp32")


def _op_instances(an: Analysis, kern: pd.DataFrame) -> pd.DataFrame:
    """One row per op instance that launched kernels and has a cost model: the model and its
    device time (the instances without one count in no figure but through the kernels' total,
    so they are not kept: a rank partition's worker sends back the modelled ones only)."""
    has = kern[kern["op_idx"] >= 0]
    agg = has.groupby("op_idx").agg(
        dev_ns=("dur_ns", "sum"), rank=("rank", "first"), kname=("name", "first")
    )
    kn = has["name"].astype(object).to_numpy()
    tc = has.assign(tc=name_matches(kn, TENSOR_CORE_RE) & ~name_matches(kn, FP32_GEMM_RE))
    agg["tensor_core"] = tc.groupby("op_idx")["tc"].any()
    from traceinsight.metrics import flops
    from traceinsight.metrics.flops.context import op_contexts

    ops = an.attribution.ops.loc[agg.index]
    ctx = op_contexts(an.attribution.ops, agg.index.to_numpy())
    key = ops[["name", "input_dims", "input_types", "concrete_inputs", "flops"]].astype(object)
    key = key.where(key.notna(), None)
    cache: dict[tuple, flops.OpCost | None] = {}
    costs: list[flops.OpCost | None] = []
    for lab, row in zip(agg.index, key.itertuples(index=False, name=None)):
        oc = ctx.get(int(lab))
        k = (*row, oc)
        c = cache.get(k)
        if c is None and k not in cache:
            c = flops.op_cost(
                row[0],
                row[1],
                row[2],
                row[3],
                float(row[4]) if row[4] is not None else None,
                context=oc,
            )
            cache[k] = c
        costs.append(c)
    agg["op"] = ops["name"].to_numpy()
    agg["module"] = ops["module"].to_numpy()
    agg["input_dims"] = ops["input_dims"].to_numpy()
    agg["flops"] = [c.flops if c else np.nan for c in costs]
    agg["bytes"] = [c.bytes if c else np.nan for c in costs]
    agg["dtype"] = [c.dtype if c else None for c in costs]
    agg["kind"] = [c.kind if c else None for c in costs]
    agg["exact"] = [c.exact if c else None for c in costs]
    agg["assumed"] = [c.note if c else "" for c in costs]
    agg["inferred"] = [c.inferred if c else "" for c in costs]
    agg["roof"] = [
        flops.roof_dtype(c, [k]) if c else None for c, k in zip(costs, agg["kname"].astype(str))
    ]
    return agg[agg["flops"].notna()].reset_index()


def _rank_instances(an: Analysis) -> tuple[int, pd.DataFrame]:
    """A rank partition's op instances, with its op count (the join's index offset)."""
    kern = kernel_rows(an.attribution.gpu, _KERNEL_COLUMNS)
    return len(an.attribution.ops), _op_instances(an, kern) if len(kern) else pd.DataFrame()


def _joined_instances(values: list[tuple[int, pd.DataFrame]]) -> pd.DataFrame | None:
    """The partitions' op instances as the whole store's: each one's ``op_idx`` moved by the
    ops of the partitions before it (as the attribution's join moves them), in that order."""
    frames, offset = [], 0
    for n_ops, df in values:
        if len(df):
            df = df.copy()
            df["op_idx"] = df["op_idx"].to_numpy(np.int64) + offset
            frames.append(df)
        offset += n_ops
    if not frames:
        return None  # measured here (the empty frame of the whole store's columns)
    return frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)


# each op instance's cost model (device-independent), per rank partition in its worker
attribution_parts.product("op_instances", __name__, _rank_instances, _joined_instances)


def _top_rows(df: pd.DataFrame, n: int, roofline: bool = False) -> list[dict]:
    if not len(df):
        return []
    grp = (
        df.groupby(["op", "input_dims"], dropna=False)
        .agg(
            dev_ns=("dev_ns", "sum"),
            calls=("dev_ns", "size"),
            flops=("flops", "sum"),
            bytes=("bytes", "sum"),
            dtype=("dtype", "first"),
            kname=("kname", "first"),
        )
        .reset_index()
    )
    grp = grp.sort_values("dev_ns", ascending=False).head(n)
    out = []
    for r in grp.itertuples():
        row = {
            "op": r.op,
            "input_dims": r.input_dims if isinstance(r.input_dims, str) else None,
            "calls": int(r.calls),
            "device_ns": int(r.dev_ns),
            "dtype": r.dtype,
            "kernel": r.kname,
        }
        if roofline and r.dev_ns:
            row["achieved_flops_per_s"] = float(r.flops) / (r.dev_ns / 1e9)
            row["achieved_bytes_per_s"] = float(r.bytes) / (r.dev_ns / 1e9)
            row["arithmetic_intensity"] = float(r.flops) / max(float(r.bytes), 1.0)
        out.append(row)
    return out


def _points(m: pd.DataFrame, spec, bw: float) -> dict:
    grp = (
        m.groupby(["op", "input_dims", "dtype"], dropna=False)
        .agg(
            dev_ns=("dev_ns", "sum"),
            flops=("flops", "sum"),
            bytes=("bytes", "sum"),
            calls=("dev_ns", "size"),
            peak=("peak", "first"),
            assumed=("assumed", "first"),
            inferred=("inferred", "first"),
        )
        .reset_index()
    )
    grp = grp.sort_values("dev_ns", ascending=False).head(300)
    pts = []
    for r in grp.itertuples():
        t = r.dev_ns / 1e9
        ai = float(r.flops) / max(float(r.bytes), 1.0)
        roof = min(float(r.peak), ai * bw)
        pts.append(
            {
                "op": r.op,
                "dims": r.input_dims if isinstance(r.input_dims, str) else None,
                "dtype": r.dtype,
                "calls": int(r.calls),
                "device_ns": int(r.dev_ns),
                "flops": float(r.flops),
                "bytes": float(r.bytes),
                "ai": ai,
                "flops_per_s": float(r.flops) / t if t else 0.0,
                "peak_flops_per_s": float(r.peak),
                "roof_flops_per_s": roof,
                "pct_of_roof": 100.0 * (float(r.flops) / t) / roof if t and roof else None,
                "bound": "memory" if ai < float(r.peak) / bw else "compute",
                "assumption": r.assumed or None,
                "inferred": r.inferred or None,
            }
        )
    roofs = {k: v for k, v in spec.peak_flops.items() if v}
    return {"bandwidth": bw, "peaks": roofs, "points": pts}


def _mfu_estimate(
    an: Analysis, ms: MetricSet, opts: RooflineOptions, spec, wall: float, n_ranks: int
) -> None:
    if not (opts.params and opts.tokens_per_step):
        ms.set("mfu_estimate_pct", None, why_missing="pass --params and --tokens-per-step")
        return
    steps = [w for w in an.attribution.steps if w.step is not None]
    peak = (spec.peak("bf16") or spec.peak("fp16")) if spec else None
    if not steps or not peak:
        ms.set("mfu_estimate_pct", None, why_missing="needs ProfilerSteps and a known device peak")
        return
    mode = opts.mode
    if mode is None:
        mode = "train" if ms.get("is_training") == 1 else "infer"
    per_token = 6.0 if mode == "train" else 2.0
    step_s = float(np.median([w.dur_ns for w in steps])) / 1e9
    world = max(int(ms.get("world_size") or n_ranks), 1)
    ms.set(
        "mfu_estimate_pct",
        100.0 * per_token * opts.params * opts.tokens_per_step / (step_s * peak * world),
    )
    ms.evidence["mfu_estimate"] = {
        "mode": mode,
        "params": opts.params,
        "tokens_per_step": opts.tokens_per_step,
        "step_time_s": step_s,
        "world_size": world,
    }
