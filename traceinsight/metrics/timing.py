"""Time metrics: step time and jitter, the GPU time breakdown, and why the GPU was idle.

Idle gaps (complement of the GPU busy union inside the step windows) are explained by what the
host was doing: a gap is a *host wait* when the activity that ends it was launched after the
GPU went idle (the GPU waited for the CPU); else a *device wait* (work was queued but waited on
a dependency: an event, another stream, a peer). Host waits are split by cause: input loading
(a DataLoader range overlaps the gap), a blocking synchronisation (a sync call was returning
when the GPU drained) and launch overhead (the rest: the CPU was busy issuing work).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow.compute as pc

from ..analysis import Analysis
from ..analysis import intervals as iv
from .registry import MetricSet, declare

NEEDS_STEPS = "ProfilerStep markers"
HINT_STEPS = "record with a torch.profiler schedule and call prof.step() every iteration"
NEEDS_GPU = "GPU kernels"
HINT_GPU = "record with activities=[CPU, CUDA] (ProfilerActivity.CUDA) on a GPU machine"

for _n, _u, _d in (
    ("steps", "count", "number of ProfilerStep windows (fewest over ranks)"),
    ("step_time_p50_ns", "ns", "median step time (GPU-aware step windows, all ranks)"),
    ("step_time_p90_ns", "ns", "90th percentile step time"),
    ("step_time_p99_ns", "ns", "99th percentile step time"),
    ("step_time_max_ns", "ns", "slowest step"),
    ("step_time_mean_ns", "ns", "mean step time"),
    ("step_time_cv_pct", "%", "coefficient of variation of step time (std / mean), worst rank"),
    ("step_time_max_over_p50_ratio", "ratio", "slowest step over the median step"),
    ("slow_steps", "count", "steps slower than 1.25x the median step"),
    ("jitter_loss_pct", "%", "time lost to steps slower than the median, % of total step time"),
):
    declare(_n, _u, _d, needs=NEEDS_STEPS, hint=HINT_STEPS)

for _n, _u, _d in (
    ("gpu_busy_pct", "%", "GPU busy (union of kernels, copies, memsets over streams), % of window"),
    ("gpu_idle_pct", "%", "GPU idle, % of window"),
    ("compute_pct", "%", "non-communication kernels running, % of window"),
    ("comm_pct", "%", "communication kernels running, % of window"),
    ("exposed_comm_pct", "%", "communication with no compute kernel running, % of window"),
    ("comm_overlap_pct", "%", "share of communication time hidden under compute"),
    ("memcpy_exposed_pct", "%", "copies with no kernel running, % of window"),
    ("memset_exposed_pct", "%", "memsets with nothing else running, % of window"),
    ("idle_input_pct", "%", "GPU idle while the host loads input (DataLoader), % of window"),
    ("idle_sync_pct", "%", "GPU idle after a blocking host synchronisation, % of window"),
    ("idle_host_pct", "%", "GPU idle while the host issues no GPU work for 0.5 ms or more (GC, "
                           "I/O, CPU compute, unrecorded host time), % of window"),
    ("idle_launch_pct", "%", "GPU idle waiting for the host to launch work, % of window"),
    ("idle_device_wait_pct", "%", "GPU idle with work queued but waiting on a dependency, % of window"),
    ("kernels_per_step", "count", "kernels launched per step (mean over ranks and steps)"),
    ("small_kernel_pct", "%", "kernels shorter than 10 µs, % of kernels"),
    ("small_kernel_time_pct", "%", "time in kernels shorter than 10 µs, % of kernel time"),
    ("median_kernel_ns", "ns", "median kernel duration"),
    ("launch_latency_p50_ns", "ns", "median time from the end of the launch call to the kernel start"),
    ("gemm_time_pct", "%", "GEMM kernels (incl. attention and convolution), % of kernel time"),
    ("elementwise_time_pct", "%", "elementwise and reduction kernels, % of kernel time"),
):
    declare(_n, _u, _d, needs=NEEDS_GPU, hint=HINT_GPU)

declare("dataloader_pct", "%", "host time in DataLoader ranges, % of step time",
        needs="DataLoader ranges (enumerate(DataLoader)#...) and steps", hint=HINT_STEPS)
declare("syncs_per_step", "count", "blocking host synchronisations per step (device/stream/event "
        "synchronize, synchronous copies)", needs="runtime calls and steps", hint=HINT_STEPS)
declare("sync_blocked_pct", "%", "host time blocked in synchronisation calls, % of step time",
        needs="runtime calls and steps", hint=HINT_STEPS)
declare("world_size", "count", "number of ranks in the job (from distributedInfo, else files)")
declare("ranks_analysed", "count", "number of ranks whose traces were read")
declare("has_gpu", "bool", "1 if the trace holds GPU activity")

SYNC_RE = re.compile(
    r"^(cuda|hip)(DeviceSynchronize|StreamSynchronize|EventSynchronize|Memcpy|MemcpyDtoH|"
    r"Memcpy2D|MemcpyFromSymbol)(_v\d+)?$|^cu(CtxSynchronize|StreamSynchronize|EventSynchronize|"
    r"MemcpyDtoH|MemcpyHtoD|Memcpy)(_v\d+)?$")
DATALOADER_RE = re.compile(r"enumerate\(DataLoader\)|DataLoader.*__next__|enumerate\(DataPipe\)|"
                           r"\[pl\]\[profile\].*(?:next|train_dataloader)|_next_data|get_batch",
                           re.IGNORECASE)
SMALL_KERNEL_NS = 10_000
SYNC_TOLERANCE_NS = 50_000


@dataclass
class IdleSplit:
    input_ns: int = 0
    host_ns: int = 0
    sync_ns: int = 0
    launch_ns: int = 0
    device_wait_ns: int = 0


STALL_MIN_NS = 500_000  #: host events shorter than this are ordinary launch overhead


def _host_stalls(an: Analysis, rank: int, rt: pd.DataFrame) -> tuple[tuple[np.ndarray, np.ndarray], pd.DataFrame]:
    """Host stretches in which the rank issued no GPU runtime call for at least 0.5 ms.

    A GPU that idles while the host calls the runtime every few microseconds is launch-bound;
    one that idles while the host issues nothing at all waits for host-side work (GC, I/O,
    CPU compute, or time the profiler did not record). The stretches are the spaces between
    consecutive runtime calls (any thread of the rank) longer than ``STALL_MIN_NS``; the
    evidence names the long host events inside them.
    """
    empty = (np.empty(0, np.int64), np.empty(0, np.int64))
    if not len(rt):
        return empty, pd.DataFrame()
    s = rt["start_ns"].to_numpy(np.int64)
    e = s + rt["dur_ns"].to_numpy(np.int64)
    busy = iv.union(s, np.maximum(e, s + 1))
    qs, qe = busy[1][:-1], busy[0][1:]
    long = (qe - qs) >= STALL_MIN_NS
    quiet = (qs[long], qe[long])
    # evidence: host events (>= 0.5 ms) that lie inside a quiet stretch
    frames = []
    py = an.store.table("python_frames", ["rank", "name", "start_ns", "dur_ns"])
    if py.num_rows:
        frames.append(py.filter(pc.and_(pc.equal(py["rank"], rank),
                                        pc.greater_equal(py["dur_ns"], STALL_MIN_NS))).to_pandas())
    ops = an.attribution.ops
    frames.append(ops[(ops["rank"] == rank) & (ops["dur_ns"] >= STALL_MIN_NS)][["name", "start_ns", "dur_ns"]])
    df = pd.concat([f[["name", "start_ns", "dur_ns"]].astype({"name": object}) for f in frames],
                   ignore_index=True)
    if len(df) and len(quiet[0]):
        es = df["start_ns"].to_numpy(np.int64)
        ee = es + df["dur_ns"].to_numpy(np.int64)
        k = np.searchsorted(quiet[0], es, side="right") - 1
        inside = (k >= 0) & (ee <= np.where(k >= 0, quiet[1][np.clip(k, 0, None)], 0) + 1_000)
        df = df[inside]
    else:
        df = df.iloc[0:0]
    return quiet, df


def _pct(x: float, total: float) -> float | None:
    return 100.0 * x / total if total else None


def rank_ranges(an: Analysis, rank: int, rx: re.Pattern) -> tuple[np.ndarray, np.ndarray, pd.DataFrame]:
    """Host intervals (any thread of the rank) of ranges/ops whose names match ``rx``."""
    key = ("rank_ranges", rank, rx.pattern)
    if key not in an.cache:
        an.cache[key] = _rank_ranges_uncached(an, rank, rx)
    return an.cache[key]


def _rank_ranges_uncached(an: Analysis, rank: int, rx: re.Pattern):
    rng = an.store.table("ranges", ["rank", "kind", "name", "start_ns", "dur_ns", "thread"]).to_pandas()
    rng = rng[(rng["rank"] == rank) & rng["kind"].astype(str).isin(["annotation"])]
    ops = an.attribution.ops
    ops = ops[ops["rank"] == rank][["name", "start_ns", "dur_ns", "thread"]]
    df = pd.concat([rng[["name", "start_ns", "dur_ns", "thread"]], ops], ignore_index=True)
    names = df["name"].astype(str)
    hits = {n for n in pd.unique(names) if rx.search(n)}
    sel = df[names.isin(hits)] if len(df) else df
    s = sel["start_ns"].to_numpy(np.int64)
    return s, s + sel["dur_ns"].to_numpy(np.int64), sel


def idle_split(an: Analysis, rank: int, g: pd.DataFrame, windows,
               top: int | None = 20) -> tuple[IdleSplit, list[dict]]:
    """Classify the idle gaps of one rank's step windows; returns totals and the largest
    ``top`` gaps (all of them with ``top=None``)."""
    out = IdleSplit()
    if not len(g):
        return out, []
    U = iv.union(g["start_ns"].to_numpy(np.int64), g["end_ns"].to_numpy(np.int64))
    dl_s, dl_e, _ = rank_ranges(an, rank, DATALOADER_RE)
    DL = iv.union(dl_s, dl_e)
    rt = an.attribution.runtime
    rt = rt[(rt["rank"] == rank)]
    sync = rt[rt["name"].astype(str).str.match(SYNC_RE)]
    sync_s = sync["start_ns"].to_numpy(np.int64)
    sync_e = sync_s + sync["dur_ns"].to_numpy(np.int64)
    ST, stall_events = _host_stalls(an, rank, rt)
    ST = iv.subtract(ST, DL) if len(DL[0]) else ST
    order = np.argsort(g["start_ns"].to_numpy(np.int64), kind="stable")
    gs = g["start_ns"].to_numpy(np.int64)[order]
    gl = g["launch_start_ns"].to_numpy(np.int64)[order]
    gaps = []
    for w in windows:
        inner = iv.clip(U, w.start_ns, w.end_ns)
        # gaps: complement of busy inside the window
        cs = np.concatenate(([w.start_ns], inner[1]))
        ce = np.concatenate((inner[0], [w.end_ns]))
        keep = ce > cs
        cs, ce = cs[keep], ce[keep]
        if not len(cs):
            continue
        # the activity that ends each gap, and when it was launched
        k = np.searchsorted(gs, ce, side="left")
        valid = k < len(gs)
        nxt_launch = np.where(valid, gl[np.clip(k, 0, len(gs) - 1)], -1)
        # a gap at the window's end is not ended by an activity of this window
        nxt_launch = np.where(ce >= w.end_ns, -1, nxt_launch)
        host_wait = (nxt_launch >= 0) & (nxt_launch >= cs - 1_000)
        lengths = ce - cs
        dl_over = iv.overlap_with_windows(DL, cs, ce) if len(DL[0]) else np.zeros(len(cs), np.int64)
        if len(sync_s):
            # a sync call returning around the gap start
            j = np.searchsorted(sync_s, cs + SYNC_TOLERANCE_NS, side="right") - 1
            cand_end = np.where(j >= 0, np.maximum.accumulate(sync_e)[np.clip(j, 0, None)], -1)
            synced = (j >= 0) & (cand_end >= cs - SYNC_TOLERANCE_NS)
        else:
            synced = np.zeros(len(cs), dtype=bool)
        inp = dl_over
        stall = (np.where(host_wait, iv.overlap_with_windows(ST, cs, ce), 0) if len(ST[0])
                 else np.zeros(len(cs), np.int64))
        rest = lengths - inp - stall
        out.input_ns += int(inp.sum())
        out.host_ns += int(stall.sum())
        out.sync_ns += int(np.where(host_wait & synced, rest, 0).sum())
        out.launch_ns += int(np.where(host_wait & ~synced, rest, 0).sum())
        out.device_wait_ns += int(np.where(~host_wait, rest, 0).sum())
        for a, b, hw, sy, d, h in zip(cs, ce, host_wait, synced, inp, stall):
            cause = ("input" if d > (b - a) / 2 else "host stall" if h > (b - a) / 2 else
                     "sync" if hw and sy else "launch" if hw else "device wait")
            gaps.append({"rank": rank, "step": w.step, "start_ns": int(a), "dur_ns": int(b - a),
                         "cause": cause})
    gaps.sort(key=lambda x: -x["dur_ns"])
    out.stall_events = stall_events  # type: ignore[attr-defined]
    return out, gaps if top is None else gaps[:top]


def compute(an: Analysis, ms: MetricSet) -> None:
    attr = an.attribution
    bd = an.breakdown
    g_all = attr.gpu
    ranks = sorted(bd.ranks)
    meta_ranks = an.store.ranks
    ws = [r.get("distributed", {}).get("world_size") for r in meta_ranks]
    ms.set("world_size", float(max([w for w in ws if w] or [len(meta_ranks)])))
    ms.set("ranks_analysed", float(len(meta_ranks)))
    has_gpu = len(g_all) > 0
    ms.set("has_gpu", 1.0 if has_gpu else 0.0)

    # --- steps and jitter --------------------------------------------------------------
    step_rows = [w for w in bd.steps if w.step is not None]
    has_steps = all(attr.has_step_markers.get(r, False) for r in ranks) and bool(step_rows)
    if has_steps:
        per_rank_n = [sum(1 for w in step_rows if w.rank == r) for r in ranks]
        ms.set("steps", float(min(per_rank_n)))
        times = np.array([w.wall_ns for w in step_rows], dtype=np.float64)
        ms.set("step_time_p50_ns", float(np.percentile(times, 50)))
        ms.set("step_time_p90_ns", float(np.percentile(times, 90)))
        ms.set("step_time_p99_ns", float(np.percentile(times, 99)))
        ms.set("step_time_max_ns", float(times.max()))
        ms.set("step_time_mean_ns", float(times.mean()))
        p50 = float(np.percentile(times, 50))
        ms.set("step_time_max_over_p50_ratio", float(times.max() / p50) if p50 else None)
        cvs = []
        for r in ranks:
            t = np.array([w.wall_ns for w in step_rows if w.rank == r], dtype=np.float64)
            if len(t) >= 3 and t.mean() > 0:
                cvs.append(100.0 * t.std() / t.mean())
                ms.rank_set(r, "step_time_cv_pct", cvs[-1])
        ms.set("step_time_cv_pct", max(cvs) if cvs else None,
               why_missing=None if cvs else "needs at least 3 ProfilerSteps per rank")
        slow = [w for w in step_rows if w.wall_ns > 1.25 * p50]
        ms.set("slow_steps", float(len(slow)))
        loss = float(np.clip(times - p50, 0, None).sum())
        ms.set("jitter_loss_pct", 100.0 * loss / times.sum() if times.sum() else None)
        ms.evidence["slow_steps"] = _slow_step_causes(an, step_rows, p50)
    else:
        for n in ("steps", "step_time_p50_ns", "step_time_p90_ns", "step_time_p99_ns",
                  "step_time_max_ns", "step_time_mean_ns", "step_time_cv_pct",
                  "step_time_max_over_p50_ratio", "slow_steps", "jitter_loss_pct"):
            ms.set(n, None, why_missing="the trace has no ProfilerStep markers")
        if not step_rows:
            ms.values["steps"] = 0.0
            ms.missing.pop("steps", None)

    # --- breakdown -------------------------------------------------------------------------
    if not has_gpu or not ranks:
        for n in ("gpu_busy_pct", "gpu_idle_pct", "compute_pct", "comm_pct", "exposed_comm_pct",
                  "comm_overlap_pct", "memcpy_exposed_pct", "memset_exposed_pct",
                  "idle_input_pct", "idle_sync_pct", "idle_host_pct", "idle_launch_pct", "idle_device_wait_pct",
                  "kernels_per_step", "small_kernel_pct", "small_kernel_time_pct",
                  "median_kernel_ns", "launch_latency_p50_ns", "gemm_time_pct",
                  "elementwise_time_pct"):
            ms.set(n, None, why_missing="the trace holds no GPU activity")
    else:
        tot = {k: sum(getattr(bd.ranks[r], k) for r in ranks) for k in (
            "wall_ns", "busy_ns", "idle_ns", "compute_ns", "comm_ns", "comm_exposed_ns",
            "comm_hidden_ns", "memcpy_exposed_ns", "memset_exposed_ns", "kernels")}
        wall = tot["wall_ns"]
        ms.set("gpu_busy_pct", _pct(tot["busy_ns"], wall))
        ms.set("gpu_idle_pct", _pct(tot["idle_ns"], wall))
        ms.set("compute_pct", _pct(tot["compute_ns"], wall))
        ms.set("comm_pct", _pct(tot["comm_ns"], wall))
        ms.set("exposed_comm_pct", _pct(tot["comm_exposed_ns"], wall))
        ms.set("comm_overlap_pct", _pct(tot["comm_hidden_ns"], tot["comm_ns"]),
               why_missing="no communication kernels")
        ms.set("memcpy_exposed_pct", _pct(tot["memcpy_exposed_ns"], wall))
        ms.set("memset_exposed_pct", _pct(tot["memset_exposed_ns"], wall))
        for r in ranks:
            b = bd.ranks[r]
            for n, v in (("gpu_busy_pct", b.busy_ns), ("gpu_idle_pct", b.idle_ns),
                         ("compute_pct", b.compute_ns), ("exposed_comm_pct", b.comm_exposed_ns),
                         ("comm_pct", b.comm_ns)):
                ms.rank_set(r, n, _pct(v, b.wall_ns))
            ms.rank_set(r, "wall_ns", float(b.wall_ns))
            ms.rank_set(r, "compute_ns", float(b.compute_ns))
        split = IdleSplit()
        all_gaps: list[dict] = []
        stalls: list[pd.DataFrame] = []
        for r in ranks:
            g = g_all[g_all["rank"] == r]
            s, gaps = idle_split(an, r, g, [w for w in attr.steps if w.rank == r])
            for k in ("input_ns", "host_ns", "sync_ns", "launch_ns", "device_wait_ns"):
                setattr(split, k, getattr(split, k) + getattr(s, k))
            ev = getattr(s, "stall_events", None)
            if ev is not None and len(ev):
                stalls.append(ev.assign(rank=r))
            ms.rank_set(r, "idle_launch_pct", _pct(s.launch_ns, bd.ranks[r].wall_ns))
            all_gaps.extend(gaps)
        ms.set("idle_input_pct", _pct(split.input_ns, wall))
        ms.set("idle_sync_pct", _pct(split.sync_ns, wall))
        ms.set("idle_host_pct", _pct(split.host_ns, wall))
        if stalls:
            st = pd.concat(stalls)
            agg = st.groupby(st["name"].astype(str))["dur_ns"].agg(["size", "sum", "max"]).reset_index()
            ms.evidence["host_stalls"] = [
                {"event": r.name, "count": int(r.size), "total_ns": int(r.sum), "max_ns": int(r.max)}
                for r in agg.sort_values("sum", ascending=False).head(8).itertuples()]
        ms.set("idle_launch_pct", _pct(split.launch_ns, wall))
        ms.set("idle_device_wait_pct", _pct(split.device_wait_ns, wall))
        all_gaps.sort(key=lambda x: -x["dur_ns"])
        ms.evidence["idle_gaps"] = all_gaps[:10]
        kern = g_all[g_all["kind"] == "kernel"]
        n_windows = max(1, len([w for w in attr.steps]))
        ms.set("kernels_per_step", float(len(kern)) / n_windows if len(kern) else 0.0)
        if len(kern):
            d = kern["dur_ns"].to_numpy(np.int64)
            small = d < SMALL_KERNEL_NS
            ms.set("small_kernel_pct", 100.0 * small.mean())
            ms.set("small_kernel_time_pct", 100.0 * d[small].sum() / d.sum() if d.sum() else 0.0)
            ms.set("median_kernel_ns", float(np.median(d)))
            has_l = kern["launch_start_ns"].to_numpy(np.int64) >= 0
            if has_l.any():
                rt = attr.runtime
                lat = _launch_latency(kern[has_l], rt)
                ms.set("launch_latency_p50_ns", float(np.median(lat)) if len(lat) else None)
            else:
                ms.set("launch_latency_p50_ns", None, why_missing="no kernel has a launch record")
            cls_t = kern.groupby("cls", observed=True)["dur_ns"].sum()
            tot_k = float(d.sum()) or 1.0
            ms.set("gemm_time_pct", 100.0 * float(cls_t.reindex(["gemm", "attention", "convolution"])
                                                  .fillna(0).sum()) / tot_k)
            ms.set("elementwise_time_pct", 100.0 * float(cls_t.reindex(["elementwise", "reduction"])
                                                         .fillna(0).sum()) / tot_k)
        else:
            for n in ("small_kernel_pct", "small_kernel_time_pct", "median_kernel_ns",
                      "launch_latency_p50_ns", "gemm_time_pct", "elementwise_time_pct"):
                ms.set(n, None, why_missing="no kernels (only copies)")

    # --- host: data loading and synchronisation --------------------------------------------
    _host_metrics(an, ms, ranks, has_steps)


def _launch_latency(kern: pd.DataFrame, rt: pd.DataFrame) -> np.ndarray:
    # launch end = launch start + dur of the runtime row with the same start in the same rank
    key = pd.MultiIndex.from_arrays([rt["rank"].to_numpy(), rt["start_ns"].to_numpy(np.int64)])
    dur = pd.Series(rt["dur_ns"].to_numpy(np.int64), index=key)
    dur = dur[~dur.index.duplicated()]
    k = pd.MultiIndex.from_arrays([kern["rank"].to_numpy(), kern["launch_start_ns"].to_numpy(np.int64)])
    d = dur.reindex(k).to_numpy()
    ok = ~pd.isna(d)
    return (kern["start_ns"].to_numpy(np.int64)[ok]
            - (kern["launch_start_ns"].to_numpy(np.int64)[ok] + d[ok].astype(np.int64)))


def _host_metrics(an: Analysis, ms: MetricSet, ranks: list[int], has_steps: bool) -> None:
    attr = an.attribution
    windows = [w for w in attr.steps if w.step is not None]
    if not has_steps or not windows:
        for n in ("dataloader_pct", "syncs_per_step", "sync_blocked_pct"):
            ms.set(n, None, why_missing="the trace has no ProfilerStep markers")
        return
    wall = float(sum(w.host_end_ns - w.host_start_ns for w in windows)) or 1.0
    dl_total = 0
    sync_count = 0
    sync_ns = 0
    sync_ops: dict[str, list[int]] = {}
    for r in ranks:
        ws = [w for w in windows if w.rank == r]
        dl_s, dl_e, _ = rank_ranges(an, r, DATALOADER_RE)
        DL = iv.union(dl_s, dl_e)
        dl_total += int(iv.overlap_with_windows(DL, np.array([w.host_start_ns for w in ws]),
                                                np.array([w.host_end_ns for w in ws])).sum())
        rt = attr.runtime
        rt = rt[rt["rank"] == r]
        sync = rt[rt["name"].astype(str).str.match(SYNC_RE)]
        hs = np.array([w.host_start_ns for w in ws])
        he = np.array([w.host_end_ns for w in ws])
        t = sync["start_ns"].to_numpy(np.int64)
        k = np.searchsorted(hs, t, side="right") - 1
        inside = (k >= 0) & (t < he[np.clip(k, 0, None)])
        sync = sync[inside]
        sync_count += len(sync)
        sync_ns += int(sync["dur_ns"].sum())
        names = attr.ops["name"].to_numpy()
        for idx, call, dur in zip(sync["op_idx"].to_numpy(), sync["name"].astype(str), sync["dur_ns"]):
            who = f"{names[idx]} → {call}" if idx >= 0 else call
            sync_ops.setdefault(who, []).append(int(dur))
    n_steps = len(windows)
    ms.set("dataloader_pct", 100.0 * dl_total / wall)
    ms.set("syncs_per_step", sync_count / n_steps)
    ms.set("sync_blocked_pct", 100.0 * sync_ns / wall)
    ms.evidence["sync_calls"] = sorted(
        ({"call": k, "count": len(v), "per_step": len(v) / n_steps, "total_ns": sum(v)}
         for k, v in sync_ops.items()), key=lambda x: -x["total_ns"])[:10]


def _slow_step_causes(an: Analysis, steps, p50: float) -> list[dict]:
    """For steps slower than 1.25x the median: which part of the step grew the most."""
    bd_steps = steps
    if not bd_steps:
        return []
    parts = ("compute_ns", "comm_exposed_ns", "memcpy_exposed_ns", "idle_ns")
    med = {p: float(np.median([getattr(w, p) for w in bd_steps])) for p in parts}
    out = []
    for w in bd_steps:
        if w.wall_ns <= 1.25 * p50:
            continue
        deltas = {p: getattr(w, p) - med[p] for p in parts}
        cause = max(deltas, key=lambda k: deltas[k])
        label = {"compute_ns": "more GPU compute", "comm_exposed_ns": "longer exposed communication",
                 "memcpy_exposed_ns": "longer copies", "idle_ns": "GPU idle (host-side delay)"}[cause]
        out.append({"rank": w.rank, "step": w.step, "wall_ns": w.wall_ns,
                    "over_median_ns": int(w.wall_ns - p50), "cause": label,
                    "cause_delta_ns": int(deltas[cause])})
    out.sort(key=lambda x: -x["over_median_ns"])
    return out[:10]
