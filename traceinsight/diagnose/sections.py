"""The sections of a :class:`DiagnosisResult` built from an :class:`Analysis` and its
:class:`MetricSet`: trace info, per-rank summary, breakdown, rollups, the exact step basis,
roofline (or why it is empty), memory and the representative-step timeline (the headline is
:mod:`traceinsight.diagnose.verdict`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from traceinsight.analysis import Analysis, by_rank
from traceinsight.diagnose.signature import signature_fields
from traceinsight.metrics import MetricSet, idle_metrics
from traceinsight.metrics.options import RooflineOptions
from traceinsight.metrics.rank_summary import rank_rows
from traceinsight.metrics.steps import representative, step_stats
from traceinsight.metrics.timing import idle_split
from traceinsight.store.core import TraceStore
from traceinsight.util.vocab import NO_MODULE

if TYPE_CHECKING:
    from traceinsight.diagnose.chunks import StepFigures

MAX_ROWS = 500
MAX_STEP_ROWS = 4096
TIMELINE_MAX_ITEMS = 6000


def missing_ranks(store: TraceStore) -> str:
    """The headline's first words when rank files of the folder could not be read ("" when
    every rank was read): the figures then cover the other ranks only."""
    miss = [d.source or "?" for d in store.diagnostics if d.code == "rank-missing"]
    if not miss:
        return ""
    names = ", ".join(miss[:3]) + (f" and {len(miss) - 3} more" if len(miss) > 3 else "")
    return (
        f"Warning: {len(miss)} rank file{'s' if len(miss) != 1 else ''} could not be read "
        f"({names}); every figure covers the other ranks only. "
    )


# --- result sections ------------------------------------------------------------------------


def trace_format(store: TraceStore) -> str | None:
    """The input formats of the store's ranks (``kineto``, ``nsys``, ...), comma-joined."""
    return ", ".join(sorted({str(r["format"]) for r in store.ranks if r.get("format")})) or None


def trace_info(
    store: TraceStore,
    an: Analysis,
    dev: dict,
    *,
    ms: MetricSet | None = None,
    options: RooflineOptions | None = None,
) -> dict[str, Any]:
    """Sources, ranks, devices, capture flags, versions and span of the trace, and what
    ``compare`` needs to judge comparability (:mod:`.signature`)."""
    ranks = store.ranks
    dist = [r.get("distributed", {}) for r in ranks]
    markers = an.attribution.has_step_markers
    devices = sorted({d.get("name") for r in ranks for d in r.get("devices", []) if d.get("name")})
    flags: dict[str, Any] = {}
    for r in ranks:
        for k, v in (r.get("capture_flags") or {}).items():
            if v is not None:
                flags[k] = bool(flags.get(k)) or bool(v)
    return {
        "sources": [
            {"name": s["name"], "sha256": s["sha256"], "rank": s["rank"]}
            for s in store.meta.get("sources", [])
        ],
        "format": trace_format(store),
        "ranks": [r["rank"] for r in ranks],
        "world_size": max([d.get("world_size") or 0 for d in dist] or [0]) or len(ranks),
        "backend": next((d.get("backend") for d in dist if d.get("backend")), None),
        "devices": devices,
        "device": dev.get("resolved"),
        "vendor": ranks[0].get("vendor") if ranks else None,
        "capture_flags": flags,
        "versions": ranks[0].get("versions", {}) if ranks else {},
        "span_ns": max(
            (r["span_ns"][1] - r["span_ns"][0] for r in ranks if r.get("span_ns")), default=None
        ),
        "has_step_markers": all(markers.values()) if markers else False,
        **signature_fields(an, ms, options),
    }


def summary(an: Analysis, ms: MetricSet) -> dict[str, Any]:
    """The result's summary: one row of totals per rank (the rows a rank's summary carries
    too: :func:`traceinsight.metrics.rank_summary.rank_rows`): those of the ranks' summaries
    when each rank partition's worker made them, else computed here."""
    pre = an.cache.get("rank_summaries")
    ranks = [r.get("rank") for r in an.store.ranks]
    if pre and [p.get("rank") for p in pre] == ranks and all(p.get("totals") for p in pre):
        return {"ranks": [dict(p["totals"]) for p in pre]}
    return {"ranks": rank_rows(an, ms)}


def breakdown(an: Analysis) -> dict[str, Any]:
    own = {(s.rank, s.step, s.start_ns): s for s in step_stats(an)}

    def row(w) -> dict[str, Any]:
        d = w.to_dict()
        d.pop("by_class_ns", None)
        s = own.get((w.rank, w.step, w.start_ns))
        if s is not None:  # step windows: the GPU time of the step's own work, and its use
            d.update(gpu_ns=s.gpu_ns, excluded=s.excluded)
        return d

    steps = an.breakdown.steps
    if len(steps) > MAX_STEP_ROWS:  # keep the slowest windows; per-rank totals stay complete
        steps = sorted(
            sorted(steps, key=lambda w: -w.wall_ns)[:MAX_STEP_ROWS],
            key=lambda w: (w.rank, w.start_ns),
        )
    return {
        "ranks": [
            {**row(w), "by_class_ns": w.by_class_ns} for _, w in sorted(an.breakdown.ranks.items())
        ],
        "steps": [row(w) for w in steps],
        "steps_total": len(an.breakdown.steps),
        "definition": "compute + comm_exposed + memcpy_exposed + memset_exposed + idle = wall "
        "(unions over the rank's streams inside GPU-aware step windows)",
    }


def _df_records(df: pd.DataFrame, cols: list[str], n: int = MAX_ROWS) -> list[dict[str, Any]]:
    df = df[cols]
    rows = df.head(n).to_dict("records")
    if len(df) > n:
        rest = df.iloc[n:]
        other: dict[str, Any] = {c: None for c in cols}
        other[cols[0]] = f"[{len(rest):,} more]"
        for c in cols[1:]:
            numeric = pd.api.types.is_numeric_dtype(rest[c])
            if (numeric and not c.endswith("_pct")) or c == "share_pct":
                other[c] = rest[c].sum()
        rows.append(other)
    return rows


def rollups(an: Analysis, merged: StepFigures | None = None) -> dict[str, Any]:
    """The rollup tables of ``an``; with ``merged`` (a trace analysed in step chunks) the
    kernels, ops, layers and classes of every step, from the chunks' sums."""
    n_steps = max(1, len([w for w in an.attribution.steps]))
    sums = merged.rollups if merged is not None else None
    if sums is not None and merged is not None:
        n_steps = max(1, merged.windows_all)
        k, ops, layers, ann = sums.kernels(), sums.ops(), sums.layers(), sums.annotations()
        classes = sums.classes.sort_values("sum", ascending=False)
        total = float(sums.total_ns) or 1.0
    else:
        k = an.rollup("kernel")
        ann = an.rollup("annotation")
        ops = an.rollup("op")
        layers = an.rollup("layer")
        g = an.attribution.gpu
        classes = (
            g.assign(cls=g["cls"].astype(str))
            .groupby("cls")["dur_ns"]
            .agg(["sum", "size"])
            .reset_index()
            .sort_values("sum", ascending=False)
        )
        total = float(g["dur_ns"].sum()) or 1.0
    return {
        "windows": n_steps,
        "kernels": _df_records(
            k,
            [
                "name",
                "kind",
                "cls",
                "calls",
                "total_ns",
                "mean_ns",
                "min_ns",
                "max_ns",
                "share_pct",
                "top_op",
            ],
        ),
        "ops": _df_records(
            ops,
            [
                "name",
                "calls",
                "device_self_ns",
                "device_total_ns",
                "kernel_ns",
                "host_ns",
                "share_pct",
                "input_dims",
            ],
        ),
        "layers": _df_records(
            layers,
            [
                "module",
                "forward_ns",
                "backward_ns",
                "other_ns",
                "total_ns",
                "kernels",
                "share_pct",
                "depth",
            ],
            n=2000,
        ),
        "annotations": _df_records(ann, ["annotation", "device_ns", "kernels", "share_pct"], n=200),
        "classes": [
            {
                "cls": r.cls,
                "total_ns": int(r.sum),
                "kernels": int(r.size),
                "share_pct": 100.0 * r.sum / total,
            }
            for r in classes.itertuples()
        ],
        "has_modules": bool((layers["module"] != NO_MODULE).any()) if len(layers) else False,
    }


def step_basis(
    an: Analysis, ms: MetricSet, merged: StepFigures | None = None
) -> dict[str, Any] | None:
    """Sums over the representative step windows of all ranks (the steps the step statistics
    use, :func:`traceinsight.metrics.steps.representative`; every window of a trace without
    step markers) that decompose the step time exactly:

    wall = compute + comm_exposed + memcpy_exposed + memset_exposed + idle, where compute (a
    union) = compute kernel time (a sum, split by layer / op / class) - concurrency, and idle =
    the sum over its causes (launch, input, sync, copy, host, alloc, device wait, start-up,
    capture, compile, unknown). ``compare`` divides by ``windows``: its mean step is the mean
    of the same steps whose p50, p90 and max the diagnosis reports. With ``merged`` (a trace
    analysed in step chunks: ``an.breakdown`` is then every step's) the sums are the chunks'.
    """
    bd = an.breakdown
    if not bd.steps:
        return None
    stats = step_stats(an)
    rep = {(s.rank, s.step, s.start_ns) for s in representative(stats)} if stats else None
    partial = rep is not None and len(rep) < len(stats)
    wins = [w for w in bd.steps if rep is None or (w.rank, w.step, w.start_ns) in rep]
    tot = {
        k: int(sum(getattr(w, k) for w in wins))
        for k in (
            "wall_ns",
            "compute_ns",
            "comm_exposed_ns",
            "memcpy_exposed_ns",
            "memset_exposed_ns",
            "idle_ns",
        )
    }
    if merged is not None:
        split = merged.idle_rep_ns if partial else merged.idle_ns
        ints = {("device_wait" if k == "dependency" else k): int(x) for k, x in split.items()}
        ints["device_wait"] = ints.get("device_wait", 0) + tot["idle_ns"] - sum(ints.values())
        b = merged.basis_rep if partial else merged.basis
        return {
            "windows": len(wins),
            "windows_all": len(bd.steps),
            "statistic": "representative steps" if stats else "whole trace",
            "ranks": len(bd.ranks),
            **tot,
            "compute_kernel_sum_ns": int(sum(b.get("compute_kernel_sum_ns", {}).values())),
            "idle_split_ns": ints,
            **{k: dict(b.get(k, {})) for k in ("by_layer_ns", "by_op_ns", "by_class_ns")},
        }
    g = an.attribution.gpu
    in_win = g[g["step"].notna()] if any(w.step is not None for w in bd.steps) else g
    if partial and rep is not None:
        keys = pd.MultiIndex.from_tuples(sorted({(r, st) for r, st, _ in rep}))
        at = pd.MultiIndex.from_arrays(
            [in_win["rank"].to_numpy(np.int64), in_win["step"].astype(np.int64).to_numpy()]
        )
        in_win = in_win[at.isin(keys)]
    comp = in_win[(in_win["kind"] == "kernel") & (in_win["cls"] != "communication")]
    mods = comp["module"].where(comp["module"].notna(), NO_MODULE)
    by_layer = comp.groupby(mods.to_numpy())["dur_ns"].sum()
    by_op = comp.groupby(comp["top_op"].astype(str).to_numpy())["dur_ns"].sum()
    by_class = comp.groupby(comp["cls"].astype(str).to_numpy())["dur_ns"].sum()
    # the idle split by cause (metrics.idle), exact integers; "dependency" keeps its old name
    split = ms.evidence.get("idle_split_ns") or {}
    if partial and rep is not None:  # the split of the representative windows only
        split = _idle_split_of(an, rep)
    ints = {("device_wait" if k == "dependency" else k): int(x) for k, x in split.items()}
    ints["device_wait"] = ints.get("device_wait", 0) + tot["idle_ns"] - sum(ints.values())
    return {
        "windows": len(wins),
        "windows_all": len(bd.steps),
        "statistic": "representative steps" if stats else "whole trace",
        "ranks": len(bd.ranks),
        **tot,
        "compute_kernel_sum_ns": int(comp["dur_ns"].sum()),
        "idle_split_ns": ints,
        "by_layer_ns": {str(k): int(x) for k, x in by_layer.items()},
        "by_op_ns": {str(k): int(x) for k, x in by_op.items()},
        "by_class_ns": {str(k): int(x) for k, x in by_class.items()},
    }


def _idle_split_of(an: Analysis, rep: set[tuple[int, int, int]]) -> dict[str, int]:
    """The idle split by cause over the given step windows (rank, step, start) of every rank."""
    from traceinsight.analysis.idle import IdleSplit

    total = IdleSplit()
    by: dict[int, list] = {}
    for w in an.attribution.steps:
        if (w.rank, w.step, w.start_ns) in rep:
            by.setdefault(w.rank, []).append(w)
    for r, ws in sorted(by.items()):
        pre = idle_metrics.representative_split(an, r, ws)  # from the rank's worker
        if pre is not None:
            for c in total.ns:
                total.ns[c] += pre[c]
            continue
        s, _ = idle_split(an, r, by_rank.rows(an.attribution.gpu, r), ws, top=None)
        total.add(s)
    return dict(total.ns)


def roofline_why(ms: MetricSet) -> dict[str, Any]:
    """An empty roofline that says why there is nothing to plot."""
    why = (
        ms.missing.get("memory_bound_time_pct")
        or ms.missing.get("flops_modelled_pct")
        or "no op could be modelled"
    )
    if not ms.values.get("has_gpu"):
        why = "the trace holds no GPU kernels"
    return {"bandwidth": None, "peaks": {}, "points": [], "why": why}


def memory(ms: MetricSet) -> dict[str, Any] | None:
    tl = ms.evidence.get("memory_timeline")
    if not tl:
        ev = ms.evidence.get("memory_events") or {}
        # [memory] events recorded, but no curve can be drawn from them: say why
        return {"recorded": dict(ev)} if ev.get("events") else None
    return {
        "timeline": tl,
        "peak": ms.evidence.get("memory_peak"),
        "growth": ms.evidence.get("memory_growth"),
        "top_allocators": ms.evidence.get("memory_top_allocators", []),
    }


def timeline(an: Analysis, ms: MetricSet) -> dict[str, Any] | None:
    """Kernels of one representative step (median length) of the first rank, by stream, and
    the idle gaps of that step with their cause."""
    steps = an.breakdown.steps
    if not steps:
        return None
    rank = min(w.rank for w in steps)
    ws = sorted((w for w in steps if w.rank == rank), key=lambda w: w.wall_ns)
    w = ws[len(ws) // 2]
    g = an.attribution.gpu
    g = g[(g["rank"] == rank) & (g["end_ns"] > w.start_ns) & (g["start_ns"] < w.end_ns)]
    span = max(1, w.end_ns - w.start_ns)
    lanes = []
    names: dict[str, int] = {}
    n_lanes = max(1, g.groupby(["device", "stream"], dropna=False).ngroups)
    per_lane = TIMELINE_MAX_ITEMS // n_lanes
    for (dev, stream), d in g.sort_values("start_ns").groupby(["device", "stream"], dropna=False):
        s = np.clip(d["start_ns"].to_numpy(np.int64), w.start_ns, w.end_ns) - w.start_ns
        e = np.clip(d["end_ns"].to_numpy(np.int64), w.start_ns, w.end_ns) - w.start_ns
        cls = d["cls"].astype(str).to_numpy()
        nm = d["name"].astype(str).to_numpy()
        if len(s) > per_lane:
            # merge runs of same-class kernels closer than a pixel of a wide chart
            gaps = s[1:] - np.maximum.accumulate(e)[:-1]
            gap_ok = np.concatenate(([False], gaps <= span // 3000))
            same = np.concatenate(([False], cls[1:] == cls[:-1]))
            start_group = ~(gap_ok & same)
            idx = np.flatnonzero(start_group)
            counts = np.diff(np.append(idx, len(s)))
            g_s = s[idx]
            g_e = np.maximum.reduceat(e, idx)
            s, e, cls, nm = g_s, g_e, cls[idx], nm[idx]
        else:
            counts = np.ones(len(s), dtype=np.int64)
        items = []
        for i in range(len(s)):
            items.append(
                [
                    int(s[i]),
                    int(e[i] - s[i]),
                    cls[i],
                    names.setdefault(nm[i], len(names)),
                    int(counts[i]),
                ]
            )
        lanes.append(
            {
                "device": None if pd.isna(dev) else int(dev),
                "stream": None if pd.isna(stream) else int(stream),
                "items": items,
            }
        )
    window: list[Any] = [
        x
        for x in an.attribution.steps
        if x.rank == rank and x.step == w.step and x.start_ns == w.start_ns
    ] or [w]
    _, gaps = idle_split(
        an, rank, an.attribution.gpu[an.attribution.gpu["rank"] == rank], window[:1], top=None
    )
    idle = sorted([[int(x["start_ns"] - w.start_ns), int(x["dur_ns"]), x["cause"]] for x in gaps])
    return {
        "rank": rank,
        "step": w.step,
        "window": "step" if w.step is not None else "trace",
        "start_ns": int(w.start_ns),
        "span_ns": int(span),
        "idle": idle,
        "names": [n for n, _ in sorted(names.items(), key=lambda kv: kv[1])],
        "lanes": lanes,
        "item_format": ["start_ns", "dur_ns", "cls", "name_index", "merged_count"],
    }
