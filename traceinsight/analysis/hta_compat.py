"""HTA-compatible breakdowns: Meta's Holistic Trace Analysis definitions, computed from a store.

Used by the parity tests and by users comparing numbers with HTA notebooks. HTA (0.6.1):

- keeps, when there are two or more ``ProfilerStep``s, the events *launched* before the start
  of the last step (CPU rows with ``ts`` before it; GPU rows whose correlation matches a kept
  CPU row) and analyses the rest as one window per rank, the span from the first to the last
  GPU event (no per-step windows);
- counts as GPU events every row with a stream: kernels, memcpy, memset and ``cuda_sync``
  rows (``Stream Wait Event``, ``Stream Sync``);
- classifies by anchored name regexes (COMMUNICATION ``^nccl|^hip|^hccl|ncclKernel``,
  MEMORY ``^Memcpy|^Memset|^dma``, COMPUTATION everything not excluded, else OTHER);
- parses ``ts``/``dur`` as float64 µs and rounds each event inward to whole µs
  (``ts = ceil(ts)``, ``end = floor(ts + dur)``).

Each of the last three can be switched off to compare definitions: with
``emulate_rounding=False, hta_classes=False, include_syncs=False`` the same window is measured
with traceinsight's exact nanoseconds and kernel classes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from traceinsight.analysis import intervals as iv
from traceinsight.analysis.categories import kernel_class
from traceinsight.store.core import TraceStore

HTA_COMM = re.compile(r"(^nccl.*)|(^hip)|(^hccl)|(.*ncclKernel.*)")
HTA_MEMORY = re.compile(r"(^(hip)?Memcpy)|(^(hip)?Memset)|(^dma)")
HTA_NOT_COMPUTE = re.compile(
    r"(^nccl)|(.*Memcpy)|(.*Memset)|(.*dma)|(^.*Sync)|(^Stream Wait Event)|(cuda.*LaunchKernel)|"
    r"(^runFunction)|(^hip)|(^job_exe)|(^packet)|(^pe_exe)|(^cpum_exe_subgraph)|(^hccl)|"
    r"(^collective_subgraph_execution)"
)
TYPES = ("COMPUTATION", "COMMUNICATION", "MEMORY")


def hta_type(name: str) -> str:
    if HTA_COMM.match(name):
        return "COMMUNICATION"
    if HTA_MEMORY.match(name):
        return "MEMORY"
    if not HTA_NOT_COMPUTE.match(name):
        return "COMPUTATION"
    return "OTHER"


def _our_type(name: str, kind: str) -> str:
    if kind in ("memcpy", "memset"):
        return "MEMORY"
    if kind == "sync":
        return "OTHER"
    c = kernel_class(name)
    return "COMMUNICATION" if c == "communication" else "COMPUTATION"


@dataclass
class HtaTemporal:
    rank: int
    steps: list[int]
    span_us: float
    idle_us: float
    compute_us: float
    non_compute_us: float
    idle_pct: float
    compute_pct: float
    non_compute_pct: float
    comm_comp_overlap_pct: float | None
    kernel_types_us: dict[str, float]


def hta_breakdown(
    store: TraceStore,
    *,
    emulate_rounding: bool = True,
    hta_classes: bool = True,
    include_syncs: bool = True,
) -> list[HtaTemporal]:
    gpu = store.table(
        "gpu_activities", ["rank", "kind", "name", "stream", "start_ns", "dur_ns", "correlation"]
    ).to_pandas()
    rt = store.table("runtime_calls", ["rank", "start_ns", "correlation"]).to_pandas()
    rng = store.table("ranges", ["rank", "kind", "name", "start_ns"]).to_pandas()
    for df in (gpu, rng):
        for c in ("kind", "name"):
            df[c] = df[c].astype(object)
    step_rows = rng[rng["kind"].isin(["step", "gpu_step"])]
    n_step_names = step_rows["name"].nunique()
    base = {r["rank"]: (r.get("base_time_ns") or 0) for r in store.ranks}
    out = []
    for rank in sorted(base):
        g = gpu[(gpu["rank"] == rank) & gpu["stream"].notna() & (gpu["stream"] != -1)]
        if not include_syncs:
            g = g[g["kind"] != "sync"]
        r = rt[rt["rank"] == rank]
        s_ns = g["start_ns"].to_numpy(np.int64) - base[rank]
        e_ns = s_ns + g["dur_ns"].to_numpy(np.int64)
        if emulate_rounding:
            start, end = _hta_round(s_ns, g["dur_ns"].to_numpy(np.int64))
            r_start = _hta_round(
                r["start_ns"].to_numpy(np.int64) - base[rank], np.zeros(len(r), np.int64)
            )[0]
        else:
            start, end = s_ns.astype(np.float64) / 1000, e_ns.astype(np.float64) / 1000
            r_start = (r["start_ns"].to_numpy(np.int64) - base[rank]) / 1000
        keep = np.ones(len(g), dtype=bool)
        steps = sorted(
            int(x)
            for x in step_rows.loc[step_rows["rank"] == rank, "name"]
            .str.extract(r"#(\d+)")[0]
            .dropna()
            .unique()
        )
        if n_step_names >= 2:
            sr = step_rows[step_rows["rank"] == rank]
            if len(sr):
                ls_ns = int(sr["start_ns"].max()) - base[rank]
                last = (
                    _hta_round(np.array([ls_ns]), np.zeros(1, np.int64))[0][0]
                    if emulate_rounding
                    else ls_ns / 1000
                )
                kept_corr = set(r.loc[r_start < last, "correlation"].dropna().astype("int64"))
                corr = g["correlation"]
                has_corr = corr.notna() & (corr >= 0)
                kept = corr.fillna(-1).astype("int64").isin(kept_corr)
                keep = np.where(has_corr, kept, start < last)
                steps = [s for s in steps if s != max(steps)]
        g = g[keep]
        start, end = start[keep], end[keep]
        names = g["name"].to_numpy()
        kinds = g["kind"].to_numpy()
        types = np.array(
            [hta_type(n) if hta_classes else _our_type(n, k) for n, k in zip(names, kinds)],
            dtype=object,
        )
        if not len(g):
            continue
        scale = 1 if emulate_rounding else 1000  # integer µs or ns units for the unions
        S = np.rint(start * scale).astype(np.int64)
        E = np.rint(end * scale).astype(np.int64)
        U = iv.union(S, E)
        span = int(U[1][-1] - U[0][0]) if len(U[0]) else 0
        busy = iv.length(U)
        comp_u = iv.union(S[types == "COMPUTATION"], E[types == "COMPUTATION"])
        comm_u = iv.union(S[types == "COMMUNICATION"], E[types == "COMMUNICATION"])
        mem_u = iv.union(S[types == "MEMORY"], E[types == "MEMORY"])
        compute = iv.length(comp_u)
        idle = span - busy
        non = busy - compute
        ov = (
            100.0 * iv.length(iv.intersect(comm_u, comp_u)) / iv.length(comm_u)
            if iv.length(comm_u)
            else None
        )
        out.append(
            HtaTemporal(
                rank=rank,
                steps=steps,
                span_us=span / scale,
                idle_us=idle / scale,
                compute_us=compute / scale,
                non_compute_us=non / scale,
                idle_pct=round(100 * idle / span, 2) if span else 0.0,
                compute_pct=round(100 * compute / span, 2) if span else 0.0,
                non_compute_pct=round(100 * non / span, 2) if span else 0.0,
                comm_comp_overlap_pct=None if ov is None else round(ov, 2),
                kernel_types_us={
                    k: v / scale for k, v in _type_overlaps(comp_u, comm_u, mem_u).items()
                },
            )
        )
    return out


def _hta_round(rel_ns: np.ndarray, dur_ns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """HTA's float64 parse (the double nearest the µs value) then ceil(ts), floor(ts + dur)."""
    us = rel_ns // 1000
    ts = us.astype(np.float64) + (rel_ns - us * 1000) / 1000.0
    du = dur_ns // 1000
    dur = du.astype(np.float64) + (dur_ns - du * 1000) / 1000.0
    return np.ceil(ts), np.floor(ts + dur)


def _type_overlaps(comp, comm, mem) -> dict[str, int]:
    """Time with exactly each set of types active, labelled as HTA does."""
    sets = {1: comp, 2: comm, 4: mem}
    pts = []
    for bit, (s, e) in sets.items():
        d = np.concatenate((np.full(len(s), bit), np.full(len(e), -bit)))
        pts.append(pd.DataFrame({"t": np.concatenate((s, e)), "d": d}))
    df = pd.concat(pts, ignore_index=True).sort_values("t", kind="stable")
    t = df["t"].to_numpy()
    running = np.cumsum(df["d"].to_numpy())
    seg = np.diff(t)
    out: dict[str, int] = {}
    for code, length in zip(running[:-1], seg):
        if code <= 0 or length <= 0:
            continue
        label = " overlapping ".join(n for b, n in zip((1, 2, 4), TYPES) if code & b)
        out[label] = out.get(label, 0) + int(length)
    return out
