"""Time metrics: the GPU time breakdown, host syncs and data loading; step time and jitter
(representative steps, slow-step causes) live in :mod:`.steps`.

Why the GPU was idle (every idle gap classified by what the launching host thread was doing)
lives in :mod:`.idle`; its metrics are computed from here, over the same step windows.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from traceinsight.analysis import WHOLE_STEPS, Analysis, attribution_parts, by_rank
from traceinsight.analysis import intervals as iv
from traceinsight.analysis.idle import DATALOADER_RE, SYNC_RE, IdleSplit, idle_split, rank_ranges  # noqa: F401
from traceinsight.metrics import completeness, idle_metrics, steps
from traceinsight.metrics.registry import MetricSet, declare
from traceinsight.util import capture_hints

NEEDS_STEPS = "step markers"
NEEDS_GPU = "GPU kernels"

for _n, _u, _d in (
    ("gpu_busy_pct", "%", "GPU busy (union of kernels, copies, memsets over streams), % of window"),
    ("gpu_idle_pct", "%", "GPU idle, % of window"),
    ("compute_pct", "%", "non-communication kernels running, % of window"),
    ("comm_pct", "%", "communication kernels running, % of window"),
    ("exposed_comm_pct", "%", "communication with no compute kernel running, % of window"),
    ("comm_overlap_pct", "%", "share of communication time hidden under compute"),
    ("memcpy_exposed_pct", "%", "copies with no kernel running, % of window"),
    ("memset_exposed_pct", "%", "memsets with nothing else running, % of window"),
    ("kernels_per_step", "count", "kernels launched per step (mean over ranks and steps)"),
    ("small_kernel_pct", "%", "kernels shorter than 10 µs, % of kernels"),
    ("small_kernel_time_pct", "%", "time in kernels shorter than 10 µs, % of kernel time"),
    ("median_kernel_ns", "ns", "median kernel duration"),
    (
        "launch_latency_p50_ns",
        "ns",
        "median time from the end of the launch call to the kernel start",
    ),
    ("gemm_time_pct", "%", "GEMM kernels (incl. attention and convolution), % of kernel time"),
    ("elementwise_time_pct", "%", "elementwise and reduction kernels, % of kernel time"),
):
    declare(_n, _u, _d, needs=NEEDS_GPU, setting=capture_hints.GPU)

declare(
    "dataloader_pct",
    "%",
    "host time in DataLoader ranges, % of step time",
    needs="DataLoader ranges (enumerate(DataLoader)#...) and steps",
    setting=capture_hints.STEPS,
)
declare(
    "syncs_per_step",
    "count",
    "blocking host synchronisations per step (device/stream/event synchronize, synchronous copies)",
    needs="runtime calls and steps",
    setting=capture_hints.STEPS,
)
declare(
    "sync_blocked_pct",
    "%",
    "host time blocked in synchronisation calls, % of step time",
    needs="runtime calls and steps",
    setting=capture_hints.STEPS,
)
declare("world_size", "count", "number of ranks in the job (from distributedInfo, else files)")
declare("ranks_analysed", "count", "number of ranks whose traces were read")
declare("has_gpu", "bool", "1 if the trace holds GPU activity")

SMALL_KERNEL_NS = 10_000


def _pct(x: float, total: float) -> float | None:
    return 100.0 * x / total if total else None


def compute(an: Analysis, ms: MetricSet) -> None:
    attr = an.attribution
    bd = an.breakdown
    #: a store analysed in step chunks: every step's breakdown and rollups (exact sums), so the
    #: time split and kernel shares below cover every step, not the window's last steps only
    whole = an.cache.get(WHOLE_STEPS)
    g_all = attr.gpu
    ranks = sorted(bd.ranks)
    meta_ranks = an.store.ranks
    ws = [r.get("distributed", {}).get("world_size") for r in meta_ranks]
    ms.set("world_size", float(max([w for w in ws if w] or [len(meta_ranks)])))
    ms.set("ranks_analysed", float(len(meta_ranks)))
    has_gpu = len(g_all) > 0
    ms.set("has_gpu", 1.0 if has_gpu else 0.0)

    # --- steps and jitter: representative steps, slow steps and their causes (.steps) ------
    has_steps = steps.compute(an, ms, ranks)

    # --- breakdown -------------------------------------------------------------------------
    if not has_gpu or not ranks:
        for n in (
            "gpu_busy_pct",
            "gpu_idle_pct",
            "compute_pct",
            "comm_pct",
            "exposed_comm_pct",
            "comm_overlap_pct",
            "memcpy_exposed_pct",
            "memset_exposed_pct",
            "kernels_per_step",
            "small_kernel_pct",
            "small_kernel_time_pct",
            "median_kernel_ns",
            "launch_latency_p50_ns",
            "gemm_time_pct",
            "elementwise_time_pct",
        ):
            ms.set(n, None, why_missing="the trace holds no GPU activity")
        idle_metrics.set_missing(ms, "the trace holds no GPU activity")
    else:
        _breakdown_metrics(ms, whole.breakdown if whole is not None else bd, ranks)
        idle_metrics.compute(an, ms, ranks)
        completeness.compute(an, ms, ranks)
        _kernel_metrics(ms, attr, whole)

    # --- host: data loading and synchronisation --------------------------------------------
    _host_metrics(an, ms, ranks, has_steps)


def _breakdown_metrics(ms: MetricSet, bd: Any, ranks: list[int]) -> None:
    """The GPU time split (busy, idle, compute, communication, copies) of the breakdown ``bd``,
    run-level and per rank."""
    tot = {
        k: sum(getattr(bd.ranks[r], k) for r in ranks)
        for k in (
            "wall_ns",
            "busy_ns",
            "idle_ns",
            "compute_ns",
            "comm_ns",
            "comm_exposed_ns",
            "comm_hidden_ns",
            "memcpy_exposed_ns",
            "memset_exposed_ns",
            "kernels",
        )
    }
    wall = tot["wall_ns"]
    ms.set("gpu_busy_pct", _pct(tot["busy_ns"], wall))
    ms.set("gpu_idle_pct", _pct(tot["idle_ns"], wall))
    ms.set("compute_pct", _pct(tot["compute_ns"], wall))
    ms.set("comm_pct", _pct(tot["comm_ns"], wall))
    ms.set("exposed_comm_pct", _pct(tot["comm_exposed_ns"], wall))
    ms.set(
        "comm_overlap_pct",
        _pct(tot["comm_hidden_ns"], tot["comm_ns"]),
        why_missing="no communication kernels",
    )
    ms.set("memcpy_exposed_pct", _pct(tot["memcpy_exposed_ns"], wall))
    ms.set("memset_exposed_pct", _pct(tot["memset_exposed_ns"], wall))
    for r in ranks:
        b = bd.ranks[r]
        for n, v in (
            ("gpu_busy_pct", b.busy_ns),
            ("gpu_idle_pct", b.idle_ns),
            ("compute_pct", b.compute_ns),
            ("exposed_comm_pct", b.comm_exposed_ns),
            ("comm_pct", b.comm_ns),
        ):
            ms.rank_set(r, n, _pct(v, b.wall_ns))
        ms.rank_set(r, "wall_ns", float(b.wall_ns))
        ms.rank_set(r, "compute_ns", float(b.compute_ns))


def _kernel_metrics(ms: MetricSet, attr: Any, whole: Any) -> None:
    """Kernels per step, small kernels, the median kernel, launch latency and the GEMM and
    elementwise shares of kernel time: of the attribution's GPU rows, or of every step's
    rollups when the store was analysed in step chunks (``whole``; the launch latency, which
    needs the runtime rows, stays the window's)."""
    g_all = attr.gpu
    kern = g_all[g_all["kind"] == "kernel"]
    sums = whole.figures.rollups if whole is not None else None
    if sums is not None and len(sums.durs):
        # every step's kernels as value counts (duration -> calls) with each name's class
        kd = sums.durs[sums.durs["kind"] == "kernel"]
        cls_of = sums.cls.set_index(["name", "kind"])["cls"]
        cls = cls_of.reindex(pd.MultiIndex.from_frame(kd[["name", "kind"]])).to_numpy()
        d, n = kd["dur_ns"].to_numpy(np.int64), kd["n"].to_numpy(np.int64)
        windows = whole.figures.windows_all
    else:
        d = kern["dur_ns"].to_numpy(np.int64)
        n = np.ones(len(d), dtype=np.int64)
        cls = kern["cls"].astype(object).to_numpy()
        windows = len(attr.steps)
    calls = int(n.sum())
    ms.set("kernels_per_step", float(calls) / max(1, windows) if calls else 0.0)
    if calls:
        small = d < SMALL_KERNEL_NS
        time = d * n
        total = int(time.sum())
        ms.set("small_kernel_pct", 100.0 * (int(n[small].sum()) / calls))
        ms.set("small_kernel_time_pct", 100.0 * int(time[small].sum()) / total if total else 0.0)
        ms.set("median_kernel_ns", _median(d, n))
        has_l = kern["launch_start_ns"].to_numpy(np.int64) >= 0
        if len(kern) and has_l.any():
            rt = attr.runtime
            lat = _launch_latency(kern[has_l], rt)
            # a kernel cannot start before its launch call returned: a negative latency is
            # the host and device clocks disagreeing, never a time to report
            neg = int((lat < 0).sum())
            if len(lat) and neg > len(lat) // 2:
                ms.set(
                    "launch_latency_p50_ns",
                    None,
                    why_missing=f"{neg:,} of {len(lat):,} kernels start before their launch "
                    "call ends (host and GPU clocks disagree)",
                )
            else:
                lat = lat[lat >= 0]
                ms.set("launch_latency_p50_ns", float(np.median(lat)) if len(lat) else None)
        else:
            ms.set("launch_latency_p50_ns", None, why_missing="no kernel has a launch record")
        cls_t = pd.Series(time).groupby(pd.Series(cls).astype(str).to_numpy()).sum()
        tot_k = float(total) or 1.0
        gemm_like = cls_t.reindex(["gemm", "attention", "convolution"]).fillna(0)
        ms.set("gemm_time_pct", 100.0 * float(gemm_like.sum()) / tot_k)
        ms.set(
            "elementwise_time_pct",
            100.0 * float(cls_t.reindex(["elementwise", "reduction"]).fillna(0).sum()) / tot_k,
        )
    else:
        for name in (
            "small_kernel_pct",
            "small_kernel_time_pct",
            "median_kernel_ns",
            "launch_latency_p50_ns",
            "gemm_time_pct",
            "elementwise_time_pct",
        ):
            ms.set(name, None, why_missing="no kernels (only copies)")


def _median(vals: np.ndarray, counts: np.ndarray) -> float:
    """The median of the values ``vals`` each taken ``counts`` times (as ``np.median`` of the
    values repeated)."""
    order = np.argsort(vals, kind="stable")
    v, cum = vals[order], np.cumsum(counts[order])
    total = int(cum[-1])
    lo = v[np.searchsorted(cum, (total - 1) // 2, side="right")]
    hi = v[np.searchsorted(cum, total // 2, side="right")]
    return (float(lo) + float(hi)) / 2.0


def _launch_latency(kern: pd.DataFrame, rt: pd.DataFrame) -> np.ndarray:
    # launch end = launch start + dur of the runtime row with the same start in the same rank
    key = pd.MultiIndex.from_arrays([rt["rank"].to_numpy(), rt["start_ns"].to_numpy(np.int64)])
    dur = pd.Series(rt["dur_ns"].to_numpy(np.int64), index=key)
    dur = dur[~dur.index.duplicated()]
    k = pd.MultiIndex.from_arrays(
        [kern["rank"].to_numpy(), kern["launch_start_ns"].to_numpy(np.int64)]
    )
    d = dur.reindex(k).to_numpy()
    ok = ~pd.isna(d)
    return kern["start_ns"].to_numpy(np.int64)[ok] - (
        kern["launch_start_ns"].to_numpy(np.int64)[ok] + d[ok].astype(np.int64)
    )


def _host_parts(an: Analysis, r: int, ws: list) -> tuple[int, int, int, dict[str, list[int]]]:
    """Rank ``r``'s host figures over its step windows ``ws``: the DataLoader ns inside them,
    the sync calls inside them (count, ns) and their durations by launching op and call."""
    attr = an.attribution
    dl_s, dl_e, _ = rank_ranges(an, r, DATALOADER_RE)
    DL = iv.union(dl_s, dl_e)
    dl = int(
        iv.overlap_with_windows(
            DL, np.array([w.host_start_ns for w in ws]), np.array([w.host_end_ns for w in ws])
        ).sum()
    )
    rt = by_rank.rows(attr.runtime, r)
    sync = rt[rt["name"].astype(str).str.match(SYNC_RE)]
    hs = np.array([w.host_start_ns for w in ws])
    he = np.array([w.host_end_ns for w in ws])
    t = sync["start_ns"].to_numpy(np.int64)
    k = np.searchsorted(hs, t, side="right") - 1
    inside = (k >= 0) & (t < he[np.clip(k, 0, None)])
    sync = sync[inside]
    sync_ops: dict[str, list[int]] = {}
    names = attr.ops["name"].to_numpy()
    for idx, call, dur in zip(sync["op_idx"].to_numpy(), sync["name"].astype(str), sync["dur_ns"]):
        who = f"{names[idx]} → {call}" if idx >= 0 else call
        sync_ops.setdefault(who, []).append(int(dur))
    return dl, len(sync), int(sync["dur_ns"].sum()), sync_ops


def _step_windows_of(an: Analysis) -> dict[int, list]:
    wins: dict[int, list] = {}
    for w in an.attribution.steps:
        if w.step is not None:
            wins.setdefault(w.rank, []).append(w)
    return wins


def rank_host_parts(an: Analysis) -> dict[int, tuple[int, int, int, dict[str, list[int]]]]:
    """:func:`_host_parts` of every rank of ``an`` (a rank partition's, in its worker)."""
    wins = _step_windows_of(an)
    return {r: _host_parts(an, r, wins.get(r, [])) for r in sorted(an.breakdown.ranks)}


# computed per rank partition next to its attribution (in the worker that reads it)
attribution_parts.product(
    "host_parts",
    __name__,
    rank_host_parts,
    attribution_parts.merge_dicts,
)


def _host_metrics(an: Analysis, ms: MetricSet, ranks: list[int], has_steps: bool) -> None:
    attr = an.attribution
    windows = [w for w in attr.steps if w.step is not None]
    if not has_steps or not windows:
        for n in ("dataloader_pct", "syncs_per_step", "sync_blocked_pct"):
            ms.set(n, None, why_missing="the trace has no step markers")
        return
    wall = float(sum(w.host_end_ns - w.host_start_ns for w in windows)) or 1.0
    dl_total = 0
    sync_count = 0
    sync_ns = 0
    sync_ops: dict[str, list[int]] = {}
    wins = _step_windows_of(an)
    pre = an.cache.get("host_parts") or {}  # the ranks' workers' figures
    for r in ranks:
        dl, n_sync, sync_dur, ops = pre[r] if r in pre else _host_parts(an, r, wins.get(r, []))
        dl_total += dl
        sync_count += n_sync
        sync_ns += sync_dur
        for who, durs in ops.items():
            sync_ops.setdefault(who, []).extend(durs)
    n_steps = len(windows)
    ms.set("dataloader_pct", 100.0 * dl_total / wall)
    ms.set("syncs_per_step", sync_count / n_steps)
    ms.set("sync_blocked_pct", 100.0 * sync_ns / wall)
    by_total = sorted(sync_ops.items(), key=lambda kv: -sum(kv[1]))[:10]
    ms.evidence["sync_calls"] = [
        {"call": k, "count": len(v), "per_step": len(v) / n_steps, "total_ns": sum(v)}
        for k, v in by_total
    ]
