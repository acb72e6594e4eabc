"""Communication metrics: collectives, their bandwidth, and stragglers across ranks.

Bus bandwidth follows NVIDIA nccl-tests (doc/PERFORMANCE.md): algbw = bytes / time, busbw =
algbw x factor with n ranks: all-reduce 2(n-1)/n; all-gather, reduce-scatter, all-to-all
(n-1)/n; broadcast, reduce, send/recv 1.

A straggler is the rank whose compute takes longest in a step while the others wait for it
inside collectives; measured per step as the slowest rank's busy-compute time over the median
rank's, and by which rank arrives last at the collectives (n-th collective of each rank).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from traceinsight.analysis import Analysis, by_rank
from traceinsight.analysis.comm_kinds import (
    ALL_TO_ALL,
    BY_NONE,
    DTYPE_BYTES,
    bus_factor,
    collective_kind,
    launch_kinds,
)
from traceinsight.metrics.registry import MetricSet, declare
from traceinsight.util import capture_hints

declare(
    "collectives_per_step", "count", "communication kernels per step", needs="communication kernels"
)
declare(
    "comm_all_to_all_pct",
    "%",
    "all-to-all and send/recv (expert-parallel dispatch/combine, "
    "embedding exchange) share of communication kernel time",
    needs="communication kernels",
)
declare(
    "comm_all_reduce_pct",
    "%",
    "all-reduce (gradient synchronisation, tensor-parallel "
    "reductions) share of communication kernel time",
    needs="communication kernels",
)
for _name, _what in (
    ("comm_all_gather_pct", "all-gather (FSDP/ZeRO parameter gathering)"),
    ("comm_reduce_scatter_pct", "reduce-scatter (FSDP/ZeRO gradient sharding)"),
    ("comm_broadcast_pct", "broadcast and reduce"),
    ("comm_other_kind_pct", "collectives of no known kind (barrier, custom)"),
    (
        "comm_unattributed_pct",
        "communication kernels without a launch record (their collective unknown)",
    ),
):
    declare(
        _name,
        "%",
        f"{_what} share of communication kernel time; with the other comm_*_pct splits it "
        "adds to 100% (kinds from the launching op)",
        needs="communication kernels",
    )
declare(
    "straggler_excess_pct",
    "%",
    "slowest rank's per-step compute time over the median rank's, % of the median",
    needs="traces of 2 or more ranks with ProfilerSteps",
    setting=capture_hints.RANKS,
)
declare(
    "straggler_wait_pct",
    "%",
    "time the other ranks wait per step for the slowest rank's compute, % of the median step time",
    needs="traces of 2 or more ranks with ProfilerSteps",
    setting=capture_hints.RANKS,
)
declare(
    "straggler_rank",
    "rank",
    "the rank with the most per-step compute time",
    needs="traces of 2 or more ranks",
)
declare(
    "comm_wait_spread_pct",
    "%",
    "spread of per-rank communication time (max - min), "
    "% of step time: time fast ranks wait in collectives",
    needs="traces of 2 or more ranks",
)
declare(
    "last_arrival_share_pct",
    "%",
    "share of collectives where the straggler rank started last",
    needs="traces of 2 or more ranks with communication kernels",
)

declare(
    "device_fabric_gbs",
    "GB/s",
    "the device's GPU-to-GPU fabric bandwidth (NVLink, xGMI) per GPU in one direction, from "
    "the devices table",
    needs="a known device with an NVLink / Infinity Fabric figure in the devices table",
    setting=capture_hints.DEVICE,
)
declare(
    "comm_busbw_gbs",
    "GB/s",
    "bus bandwidth (nccl-tests formulas) of the collective kind with the most kernel time, "
    "median over its calls with a message size; kernel durations include any waiting for peers",
    needs="communication kernels launched by record_param_comms with message sizes",
)
declare(
    "comm_busbw_fabric_pct",
    "%",
    "comm_busbw_gbs against the device's fabric bandwidth: far below (< 10%) reads as ranks "
    "waiting for each other or a slow transport, not data volume",
    needs="collectives with message sizes on a device with a fabric figure",
)

UNATTRIBUTED = "unattributed"
#: the split of communication time by collective kind (kinds from the launching op; kernels
#: without a launch record in ``unattributed``): metric -> the kinds it sums
SPLIT = {
    "comm_all_reduce_pct": ("all_reduce",),
    "comm_all_gather_pct": ("all_gather",),
    "comm_reduce_scatter_pct": ("reduce_scatter",),
    "comm_all_to_all_pct": ALL_TO_ALL,
    "comm_broadcast_pct": ("broadcast", "reduce"),
    "comm_other_kind_pct": ("other",),
    "comm_unattributed_pct": (UNATTRIBUTED,),
}


def compute(an: Analysis, ms: MetricSet) -> None:
    g = an.attribution.gpu
    comm = g[(g["kind"] == "kernel") & (g["cls"] == "communication")]
    n_windows = max(1, len(an.attribution.steps))
    ms.set(
        "collectives_per_step",
        float(len(comm)) / n_windows if len(g) else None,
        why_missing="no GPU activity",
    )
    ms.evidence["collectives"] = colls = _collectives(an, comm)
    tot = sum(c["total_ns"] for c in colls)
    for name, kinds in SPLIT.items():
        ms.set(
            name,
            100.0 * sum(c["total_ns"] for c in colls if c["collective"] in kinds) / tot
            if tot
            else None,
            why_missing="no communication kernels",
        )
    if ms.get("comm_pct") == 0.0 and ms.get("comm_overlap_pct") is None:
        # the overlap is always stated: a run without communication hides none
        ms.set("comm_overlap_pct", 0.0)
    _stragglers(an, ms, comm)


def _collectives(an: Analysis, comm: pd.DataFrame) -> list[dict]:
    """Per collective kind (from the launching op; kernels without a launch record as
    ``unattributed``): calls, time, share of communication time, message size, bus
    bandwidth and which kernels ran it."""
    if not len(comm):
        return []
    ops = an.attribution.ops
    size_bytes = np.full(len(comm), np.nan)
    group = np.full(len(comm), np.nan)
    # the launching op (or its ancestors) is record_param_comms with the message size
    idx = comm["op_idx"].to_numpy()
    parent = ops["parent"].to_numpy()
    cur = idx.copy()
    # the store's cpu_ops rows are in attribution order (op_idx = row number)
    ops_full = an.store.table(
        "cpu_ops", ["in_msg_nelems", "out_msg_nelems", "group_size", "dtype", "collective_name"]
    ).to_pandas()
    in_n = ops_full["in_msg_nelems"].to_numpy()
    out_n = ops_full["out_msg_nelems"].to_numpy()
    gsz = ops_full["group_size"].to_numpy()
    dts = ops_full["dtype"].astype(object).to_numpy()
    cname = ops_full["collective_name"].astype(object).to_numpy()
    kinds, how = launch_kinds(an, comm)
    for _ in range(8):
        ok = (cur >= 0) & np.isnan(size_bytes)
        if not ok.any():
            break
        c = np.clip(cur, 0, None)
        has = ok & ~pd.isna(in_n[c])
        for i in np.flatnonzero(has):
            j = c[i]
            kind = str(cname[j] or "") if not pd.isna(cname[j]) else ""
            if not kind:
                kind = str(kinds[i])
            n_el = out_n[j] if "gather" in kind.lower() and not pd.isna(out_n[j]) else in_n[j]
            bpe = DTYPE_BYTES.get(str(dts[j]).lower().replace("c10::", ""), np.nan)
            size_bytes[i] = float(n_el) * bpe
            group[i] = gsz[j]
        cur = np.where(ok & ~has, parent[c], -1)
    names = comm["name"].astype(str).to_numpy()
    ws = max([r.get("distributed", {}).get("world_size") or 0 for r in an.store.ranks] or [0])
    df = pd.DataFrame(
        {
            "kind": np.where(how == BY_NONE, UNATTRIBUTED, kinds),
            "how": how,
            "kernel_kind": [collective_kind(x) for x in names],
            "dur": comm["dur_ns"].to_numpy(np.int64),
            "bytes": size_bytes,
            "n": np.where(np.isnan(group), ws or 1, group),
        }
    )
    total = int(df["dur"].sum())
    out: list[dict[str, Any]] = []
    for kind, d in df.groupby("kind"):
        sized = d[d["bytes"].notna() & (d["dur"] > 0)]
        busbw = None
        if len(sized) and kind != UNATTRIBUTED:
            alg = sized["bytes"] / (sized["dur"] / 1e9)
            fac = np.array([bus_factor(str(kind), int(n)) for n in sized["n"]])
            busbw = float(np.median(alg * fac))
        by_kernel = d.groupby("kernel_kind")["dur"].sum().sort_values(ascending=False)
        out.append(
            {
                "collective": str(kind),
                "count": len(d),
                "total_ns": int(d["dur"].sum()),
                "share_pct": 100.0 * float(d["dur"].sum()) / total if total else None,
                "mean_ns": float(d["dur"].mean()),
                "max_ns": int(d["dur"].max()),
                "median_bytes": float(sized["bytes"].median()) if len(sized) else None,
                "busbw_bytes_per_s": busbw,
                "kind_from": str(d["how"].mode().iloc[0]),
                "kernel_kinds": {str(k): int(v) for k, v in by_kernel.items()},
            }
        )
    out.sort(key=lambda x: -x["total_ns"])
    return out


def fabric(an: Analysis, ms: MetricSet, opts: Any = None) -> None:
    """The collectives' bus bandwidth against the device's fabric (one rank's reading of
    whether communication moves data at the fabric's rate at all)."""
    from traceinsight.metrics.options import RooflineOptions
    from traceinsight.metrics.roofline import resolve_device

    res, _ = resolve_device(an, opts or RooflineOptions())
    spec = res.spec
    peak = spec.fabric_bw if spec is not None else None
    ms.set(
        "device_fabric_gbs",
        peak / 1e9 if peak else None,
        why_missing="unknown device" if spec is None else f"no fabric figure for {spec.name}",
    )
    sized = [c for c in ms.evidence.get("collectives") or [] if c.get("busbw_bytes_per_s")]
    top = max(sized, key=lambda c: c["total_ns"], default=None)
    bw = top["busbw_bytes_per_s"] / 1e9 if top else None
    ms.set("comm_busbw_gbs", bw, why_missing="no collective with a message size")
    ms.set(
        "comm_busbw_fabric_pct",
        100.0 * bw / (peak / 1e9) if bw is not None and peak else None,
        why_missing="needs the bus bandwidth and the device's fabric bandwidth",
    )


def _stragglers(an: Analysis, ms: MetricSet, comm: pd.DataFrame) -> None:
    bd = an.breakdown
    ranks = sorted(bd.ranks)
    steps = [w for w in bd.steps if w.step is not None]
    if len(ranks) < 2 or not steps:
        why, setting = (
            ("needs traces of 2 or more ranks", capture_hints.RANKS)
            if len(ranks) < 2
            else ("the trace has no step markers", capture_hints.STEPS)
        )
        for name in (
            "straggler_excess_pct",
            "straggler_wait_pct",
            "straggler_rank",
            "comm_wait_spread_pct",
            "last_arrival_share_pct",
        ):
            ms.set(name, None, why_missing=why, setting=setting)
        return
    per_rank: dict[int, list] = {r: [] for r in ranks}
    for w in steps:
        if w.rank in per_rank:
            per_rank[w.rank].append(w)
    compute = {r: float(np.median([w.compute_ns for w in ws])) for r, ws in per_rank.items() if ws}
    comm_t = {r: float(np.median([w.comm_ns for w in ws])) for r, ws in per_rank.items() if ws}
    wall = float(np.median([w.wall_ns for w in steps])) or 1.0
    med = float(np.median(list(compute.values())))
    slow = max(compute, key=lambda r: compute[r])
    ms.set("straggler_rank", float(slow))
    ms.set("straggler_excess_pct", 100.0 * (compute[slow] - med) / med if med else None)
    ms.set("straggler_wait_pct", 100.0 * (compute[slow] - med) / wall)
    ms.set("comm_wait_spread_pct", 100.0 * (max(comm_t.values()) - min(comm_t.values())) / wall)
    table = [
        {
            "rank": r,
            "compute_ns_per_step": compute[r],
            "comm_ns_per_step": comm_t[r],
            "step_ns": float(np.median([w.wall_ns for w in per_rank[r]])),
        }
        for r in ranks
    ]
    ms.evidence["ranks"] = table
    # last arrival: align the n-th communication kernel of every rank
    starts = {r: np.sort(by_rank.rows(comm, r)["start_ns"].to_numpy(np.int64)) for r in ranks}
    n = min((len(v) for v in starts.values()), default=0)
    if n == 0:
        ms.set("last_arrival_share_pct", None, why_missing="no communication kernels")
        return
    mat = np.stack([starts[r][:n] for r in ranks])
    last = np.array(ranks)[np.argmax(mat, axis=0)]
    ms.set("last_arrival_share_pct", 100.0 * float((last == slow).mean()))
    spread = mat.max(axis=0) - mat.min(axis=0)
    ms.evidence["collective_skew"] = {
        "median_spread_ns": float(np.median(spread)),
        "max_spread_ns": float(spread.max()),
        "last_arrivals": {int(r): int((last == r).sum()) for r in ranks},
    }
