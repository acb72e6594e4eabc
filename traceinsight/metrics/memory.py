"""Memory metrics from the allocator's ``[memory]`` events (``profile_memory=True``).

Each event carries the allocator-wide ``Total Allocated`` and ``Total Reserved`` bytes of its
device after the event. Reserved minus allocated is memory the caching allocator holds but
no tensor uses: cached for reuse, or fragmented (free blocks too small or split to serve the
next request). Without a snapshot, the evidence is the peak reserved against the peak
allocated (docs/FORMATS.md §2.1, §2.2): what the allocator needed to serve the run against the most
that tensors ever used at once. Reserved minus allocated at an arbitrary moment is not
fragmentation: after tensors are freed the cache keeps their blocks for the next step, and a
trace that starts mid-run shows the cache full while few tensors are live.

An inference engine pre-allocates on purpose (weights plus a KV cache sized to a fraction of the
GPU): reserved reaches its peak at or near the start and allocated memory stays flat.
``memory_preallocated`` marks that footprint in a forward-only run, so that a full GPU is not
reported as memory pressure.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd

from traceinsight.analysis import Analysis
from traceinsight.metrics.registry import MetricSet, declare
from traceinsight.util import capture_hints

NEEDS = "[memory] events"
GPU_DEVICE_TYPES = ("cuda", "hip", "xpu", "mtia", "privateuse1")  # store device_type
GIB = 2**30
#: pre-allocation: reserved reaches 95% of its peak within the first EARLY_FRACTION of the
#: [memory] event span, and allocated never falls below STATIC_MIN_PCT of its peak after that
EARLY_FRACTION = 0.2
STATIC_MIN_PCT = 90.0

for _n, _u, _d in (
    ("peak_allocated_bytes", "bytes", "peak allocator-wide allocated bytes on one GPU"),
    ("peak_reserved_bytes", "bytes", "peak reserved (cached) bytes on one GPU"),
    ("reserved_over_allocated_ratio", "ratio", "peak reserved / peak allocated (same device)"),
    ("reserved_gap_bytes", "bytes", "peak reserved minus peak allocated (same device)"),
    (
        "max_reserved_gap_bytes",
        "bytes",
        "largest reserved minus allocated at any moment (cache "
        "after frees included: not fragmentation by itself)",
    ),
    ("reserved_gap_pct", "%", "peak reserved minus peak allocated, % of peak reserved"),
    (
        "allocated_static_pct",
        "%",
        "lowest allocated after reserved reached 95% of its peak, % of "
        "peak allocated (100: a footprint that never shrinks)",
    ),
    (
        "allocated_growth_bytes_per_step",
        "bytes",
        "growth of allocated bytes per step (slope at step ends)",
    ),
    ("allocated_growth_steps_pct", "%", "share of step-to-step changes that grew allocated memory"),
    ("oom_events", "count", "[OutOfMemory] events"),
):
    declare(_n, _u, _d, needs=NEEDS, setting=capture_hints.MEMORY)
declare(
    "device_memory_bytes",
    "bytes",
    "GPU memory capacity (deviceProperties totalGlobalMem)",
    needs="deviceProperties in the trace header",
)
declare(
    "peak_reserved_capacity_pct",
    "%",
    "peak reserved bytes, % of the GPU's capacity",
    needs="[memory] events and deviceProperties",
    setting=capture_hints.MEMORY,
)
declare(
    "memory_preallocated",
    "bool",
    "1 for an inference engine's deliberate pre-allocation: a "
    "forward-only run whose reserved memory peaks early and whose allocated memory stays at "
    f"{STATIC_MIN_PCT:g}%+ of its peak",
    needs=NEEDS,
    setting=capture_hints.MEMORY,
)


def _gpu_events(mem: pd.DataFrame) -> pd.DataFrame:
    """The [memory] events of a GPU (a device id, a GPU device type)."""
    return mem[mem["device_type"].isin(GPU_DEVICE_TYPES) & (mem["device"].fillna(-1) >= 0)]


def _with_totals(gpu: pd.DataFrame) -> pd.DataFrame:
    """The GPU events that record totals, in time order."""
    return gpu[gpu["total_allocated_bytes"].notna()].sort_values("ts_ns", kind="stable")


def _device_totals(
    gpu: pd.DataFrame,
) -> Iterator[tuple[int, int, np.ndarray, np.ndarray, np.ndarray]]:
    """Per (rank, device), in that order, of the events ``gpu`` (:func:`_with_totals`): the
    times, total allocated and total reserved bytes."""
    for (rank, dev), d in gpu.groupby(["rank", "device"], sort=True):
        yield (
            int(rank),
            int(dev),
            d["ts_ns"].to_numpy(np.int64),
            d["total_allocated_bytes"].to_numpy(np.int64),
            d["total_reserved_bytes"].fillna(0).to_numpy(np.int64),
        )


def rank_peaks(an: Analysis, ms: MetricSet) -> None:
    """Only the per-rank peaks :func:`compute` sets (``peak_allocated_bytes``,
    ``peak_reserved_bytes`` by rank; a rank's last device's, as there), for a rank's summary
    without the rest of the memory group."""
    cols = ["rank", "device", "device_type", "ts_ns", "total_allocated_bytes"]
    mem = an.store.table("memory_events", [*cols, "total_reserved_bytes"]).to_pandas()
    for rank, _dev, _ts, alloc, res in _device_totals(_with_totals(_gpu_events(mem))):
        ms.rank_set(rank, "peak_reserved_bytes", float(res.max()))
        ms.rank_set(rank, "peak_allocated_bytes", float(alloc.max()))


def compute(an: Analysis, ms: MetricSet) -> None:
    mem = an.store.table("memory_events").to_pandas()
    mem["kind"] = mem["kind"].astype(str)
    gpu = _gpu_events(mem)
    ms.set(
        "oom_events",
        float((mem["kind"] == "oom").sum()) if len(mem) else None,
        why_missing="no [memory] events",
    )
    caps = _capacities(an)
    if caps:
        ms.set("device_memory_bytes", float(max(caps.values())))
    else:
        ms.set(
            "device_memory_bytes",
            None,
            why_missing="the GPU's memory capacity is not recorded",
            setting=capture_hints.DEVICE,
        )
    has_totals = len(gpu) and gpu["total_allocated_bytes"].notna().any()
    if not has_totals:
        why = (
            "no [memory] events"
            if not len(mem)
            else "no GPU [memory] events"
            if not len(gpu)
            else "[memory] events without Total Allocated/Reserved (PyTorch < 1.10)"
        )
        # [memory] events of the CPU only: the capture recorded memory, the run no GPU memory
        setting = (
            capture_hints.MEMORY if not len(mem) else capture_hints.GPU if not len(gpu) else ""
        )
        # what the trace holds, for the memory section to say the same as the rules
        ms.evidence["memory_events"] = {"events": len(mem), "gpu_events": len(gpu), "why": why}
        for n in (
            "peak_allocated_bytes",
            "peak_reserved_bytes",
            "reserved_over_allocated_ratio",
            "reserved_gap_bytes",
            "max_reserved_gap_bytes",
            "reserved_gap_pct",
            "allocated_growth_bytes_per_step",
            "allocated_growth_steps_pct",
            "peak_reserved_capacity_pct",
            "allocated_static_pct",
            "memory_preallocated",
        ):
            ms.set(n, None, why_missing=why, setting=setting)
        return
    gpu = _with_totals(gpu)
    worst: dict[str, Any] | None = None
    timelines = []
    growth = []
    for rank, dev, ts, alloc, res in _device_totals(gpu):
        ia, ir = int(np.argmax(alloc)), int(np.argmax(res))
        row: dict[str, Any] = {
            "rank": int(rank),
            "device": int(dev),
            "peak_allocated_bytes": int(alloc[ia]),
            "peak_reserved_bytes": int(res[ir]),
            "reserved_at_allocated_peak": int(res[ia]),
            "allocated_at_reserved_peak": int(alloc[ir]),
            "gap_at_peak_bytes": int(res[ir] - alloc[ia]),
            "max_gap_bytes": int((res - alloc).max()),
            "capacity_bytes": caps.get((int(rank), int(dev))) or caps.get((int(rank), None)),
            "peak_ts_ns": int(ts[ia]),
            "static_pct": _static_pct(ts, alloc, res),
        }
        ms.rank_set(int(rank), "peak_reserved_bytes", float(row["peak_reserved_bytes"]))
        ms.rank_set(int(rank), "peak_allocated_bytes", float(row["peak_allocated_bytes"]))
        if worst is None or row["peak_reserved_bytes"] > worst["peak_reserved_bytes"]:
            worst = row
        timelines.append({"rank": int(rank), "device": int(dev), **_downsample(ts, alloc, res)})
        g = _growth(an, int(rank), ts, alloc)
        if g is not None:
            growth.append(g)
    assert worst is not None
    ms.set("peak_allocated_bytes", float(worst["peak_allocated_bytes"]))
    ms.set("peak_reserved_bytes", float(worst["peak_reserved_bytes"]))
    pa, pr = worst["peak_allocated_bytes"], worst["peak_reserved_bytes"]
    ms.set(
        "reserved_over_allocated_ratio",
        pr / pa if pa else None,
        why_missing="nothing was allocated",
        setting="",
    )
    ms.set("reserved_gap_bytes", float(worst["gap_at_peak_bytes"]))
    ms.set("max_reserved_gap_bytes", float(max(t["max_gap"] for t in timelines)))
    ms.set("reserved_gap_pct", 100.0 * worst["gap_at_peak_bytes"] / pr if pr else None)
    cap = worst["capacity_bytes"]
    ms.set(
        "peak_reserved_capacity_pct",
        100.0 * pr / cap if cap else None,
        why_missing="the GPU's capacity is unknown",
        setting=capture_hints.DEVICE,
    )
    ms.set(
        "allocated_static_pct",
        worst["static_pct"],
        why_missing="reserved memory grew during the trace (no early pre-allocation)",
        setting="",
    )
    # a forward-only run only: a training run holding a static footprint near capacity is under
    # real pressure (the next batch size does not fit)
    pre = ms.get("is_training") == 0 and (worst["static_pct"] or 0.0) >= STATIC_MIN_PCT
    ms.set("memory_preallocated", 1.0 if pre else 0.0)
    worst["capacity_pct"] = 100.0 * pr / cap if cap else None
    worst["preallocated"] = bool(pre)
    if growth:
        g = max(growth, key=lambda x: x["slope"])
        ms.set("allocated_growth_bytes_per_step", float(g["slope"]))
        ms.set("allocated_growth_steps_pct", float(g["grew_pct"]))
        ms.evidence["memory_growth"] = g
    else:
        for n in ("allocated_growth_bytes_per_step", "allocated_growth_steps_pct"):
            # the [memory] events are there: what is missing is steps to measure growth over
            ms.set(n, None, why_missing="needs 3 or more steps", setting=capture_hints.STEPS)
    ms.evidence["memory_peak"] = worst
    ms.evidence["memory_timeline"] = timelines
    ms.evidence["memory_top_allocators"] = _top_allocators(an, gpu, worst)


def _static_pct(ts: np.ndarray, alloc: np.ndarray, res: np.ndarray) -> float | None:
    """Lowest allocated after reserved first reached 95% of its peak, % of peak allocated; None
    when that happens late in the trace (reserved grew during the run: no pre-allocation)."""
    if not len(ts) or alloc.max() <= 0:
        return None
    k = int(np.argmax(res >= 0.95 * res.max()))
    span = int(ts[-1] - ts[0])
    if span > 0 and ts[k] - ts[0] > EARLY_FRACTION * span:
        return None
    return 100.0 * float(alloc[k:].min()) / float(alloc.max())


def _capacities(an: Analysis) -> dict:
    caps: dict = {}
    for r in an.store.ranks:
        devs = r.get("devices") or []
        for d in devs:
            cap = d.get("totalGlobalMem")
            if cap:
                caps[(r["rank"], d.get("id"))] = int(cap)
        if len(devs) == 1 and devs[0].get("totalGlobalMem"):
            caps[(r["rank"], None)] = int(devs[0]["totalGlobalMem"])
        elif devs and any(d.get("totalGlobalMem") for d in devs):
            caps[(r["rank"], None)] = max(int(d.get("totalGlobalMem") or 0) for d in devs)
    return caps


def _downsample(ts: np.ndarray, alloc: np.ndarray, res: np.ndarray, n: int = 600) -> dict:
    """At most ``n`` points per series, keeping each bucket's maximum (peaks stay visible)."""
    if len(ts) <= n:
        return {
            "ts_ns": ts.tolist(),
            "allocated": alloc.tolist(),
            "reserved": res.tolist(),
            "max_gap": int((res - alloc).max()),
        }
    edges = np.linspace(ts[0], ts[-1], n + 1)
    b = np.clip(np.searchsorted(edges, ts, side="right") - 1, 0, n - 1)
    df = pd.DataFrame({"b": b, "t": ts, "a": alloc, "r": res})
    agg = df.groupby("b").agg(t=("t", "max"), a=("a", "max"), r=("r", "max"))
    return {
        "ts_ns": agg["t"].astype("int64").tolist(),
        "allocated": agg["a"].astype("int64").tolist(),
        "reserved": agg["r"].astype("int64").tolist(),
        "max_gap": int((res - alloc).max()),
    }


def _growth(an: Analysis, rank: int, ts: np.ndarray, alloc: np.ndarray) -> dict | None:
    wins = [w for w in an.attribution.steps if w.rank == rank and w.step is not None]
    if len(wins) < 3:
        return None
    ends = np.array([w.host_end_ns for w in wins])
    k = np.searchsorted(ts, ends, side="right") - 1
    ok = k >= 0
    if ok.sum() < 3:
        return None
    vals = alloc[k[ok]].astype(np.float64)
    x = np.arange(len(vals), dtype=np.float64)
    slope = float(np.polyfit(x, vals, 1)[0])
    diffs = np.diff(vals)
    return {
        "rank": rank,
        "slope": slope,
        "grew_pct": 100.0 * float((diffs > 0).mean()),
        "allocated_at_step_end": vals.astype(np.int64).tolist(),
        "steps": [w.step for w, o in zip(wins, ok) if o],
    }


def _top_allocators(an: Analysis, gpu: pd.DataFrame, worst: dict) -> list[dict]:
    """The ops that allocated most in the step (or trace) of the reserved peak."""
    from traceinsight.analysis.attribution import nest_by_thread  # shared time-nesting helper
    from traceinsight.analysis.intervals import take

    d = gpu[
        (gpu["rank"] == worst["rank"])
        & (gpu["device"] == worst["device"])
        & (gpu["bytes"].fillna(0) > 0)
    ]
    wins = [w for w in an.attribution.steps if w.rank == worst["rank"]]
    for w in wins:
        if w.start_ns <= worst["peak_ts_ns"] < w.end_ns:
            d = d[(d["ts_ns"] >= w.host_start_ns) & (d["ts_ns"] < w.end_ns)]
            break
    ops = an.attribution.ops
    ops = ops[ops["rank"] == worst["rank"]]
    if not len(d) or not len(ops):
        return []
    d = d.copy()
    d["process"] = d["process"].astype(object)
    d["thread"] = d["thread"].astype(object)
    pos, _ = nest_by_thread(
        ops, d, d["ts_ns"].to_numpy(np.int64), d["process"].to_numpy(), d["thread"].to_numpy()
    )
    names = take(ops["name"].to_numpy(), pos, "[outside ops]")
    mods = take(ops["module"].to_numpy(), pos, None)
    df = pd.DataFrame({"op": names, "module": mods, "bytes": d["bytes"].to_numpy()})
    agg = df.groupby("op").agg(bytes=("bytes", "sum"), allocations=("bytes", "size")).reset_index()
    agg = agg.sort_values("bytes", ascending=False).head(8)
    return [
        {"op": r.op, "bytes": int(r.bytes), "allocations": int(r.allocations)}
        for r in agg.itertuples()
    ]
