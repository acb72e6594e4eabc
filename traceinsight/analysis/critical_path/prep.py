"""What every step window of a rank shares, computed once per rank: thread ids, the runtime
calls and GPU activities as numpy arrays with their kinds and categories, the CPU ops that mark
input loading and start-up, and the rank's launch latency."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from traceinsight.analysis.critical_path.graph import (
    BLOCKING_COPY_RE,
    CAT,
    DEVICE_SYNC_RE,
    EVENT_SYNC_RE,
    FP32_PATHS,
    H_CALL,
    H_COPY_SYNC,
    H_RECORD,
    H_SYNC,
    H_WAIT,
    HOST_CALL_RE,
    MAX_LATENCY_NS,
    NEG,
    QUEUED_NS,
    RECORD_RE,
    STARTUP_RE,
    STREAM_SYNC_RE,
    WAIT_EVENT_RE,
)
from traceinsight.analysis.host import DATALOADER_RE


def thread_codes(proc: np.ndarray, thr: np.ndarray, table: dict) -> np.ndarray:
    """Integer ids of (process, thread) pairs as strings, shared through ``table``."""
    from traceinsight.analysis.attribution import thread_keys

    p = pd.Series(proc, dtype=object).astype(str).to_numpy(dtype=object)
    t = pd.Series(thr, dtype=object).astype(str).to_numpy(dtype=object)
    return thread_keys(p, t, table)


@dataclass
class RankPrep:
    """What every step of a rank shares: thread ids and name flags, computed once."""

    table: dict
    rt_thread: np.ndarray
    ops_thread: np.ndarray
    ops_start: np.ndarray
    ops_end: np.ndarray
    ops_input: np.ndarray
    ops_startup: np.ndarray
    rt_cols: dict = field(default_factory=dict)  #: start, dur, name, corr, kind, cat
    gpu_cols: dict = field(default_factory=dict)  #: the rank's GPU activities as arrays
    sync_stream: dict = field(default_factory=dict)  #: correlation -> stream of a stream sync


def _call_kind(nm: str) -> int:
    if DEVICE_SYNC_RE.search(nm) or STREAM_SYNC_RE.search(nm) or EVENT_SYNC_RE.search(nm):
        return H_SYNC
    if BLOCKING_COPY_RE.search(nm):
        return H_COPY_SYNC
    if WAIT_EVENT_RE.search(nm):
        return H_WAIT
    return H_RECORD if RECORD_RE.search(nm) else H_CALL


def _call_cat(nm: str, kind: int) -> int:
    if STARTUP_RE.search(nm):
        return CAT["startup"]
    if kind in (H_SYNC, H_COPY_SYNC):
        return CAT["sync"]
    return CAT["host"] if HOST_CALL_RE.search(nm) else CAT["launch"]


def _columns(rt: pd.DataFrame, gpu: pd.DataFrame | None) -> tuple[dict, dict]:
    """The rank's runtime calls and GPU activities as numpy arrays, classified once."""
    names = pd.Series(rt["name"].to_numpy(dtype=object), dtype=object).astype(str)
    uniq = names.unique()
    kinds = {x: _call_kind(x) for x in uniq}
    cats = {x: _call_cat(x, kinds[x]) for x in uniq}
    rc = {
        "start": rt["start_ns"].to_numpy(np.int64),
        "dur": rt["dur_ns"].to_numpy(np.int64),
        "name": names.to_numpy(dtype=object),
        "corr": rt["correlation"].to_numpy(dtype=np.float64),
        "kind": names.map(kinds).to_numpy(np.int64) if len(names) else np.zeros(0, np.int64),
        "cat": names.map(cats).to_numpy(np.int64) if len(names) else np.zeros(0, np.int64),
    }
    if gpu is None:
        return rc, {}
    from traceinsight.analysis.categories import MATRIX_CLASSES, kernel_dtype

    cls = gpu["cls"].astype(object).to_numpy()
    kind = gpu["kind"].astype(object).to_numpy()
    gname = pd.Series(gpu["name"].to_numpy(dtype=object), dtype=object).astype(str)
    cat = np.full(len(gpu), CAT["compute"], np.int64)
    cat[(kind == "memcpy") | (kind == "memset")] = CAT["copies"]
    cat[cls == "communication"] = CAT["communication"]
    gm = np.isin(cls, MATRIX_CLASSES) & (kind == "kernel")
    fp32 = np.zeros(len(gpu), dtype=bool)
    if gm.any():  # matrix kernels on the fp32 path (CUDA cores, fp32 MFMA), by name
        f = {x: kernel_dtype(x) in FP32_PATHS for x in gname[gm].unique()}
        fp32[gm] = gname[gm].map(f).to_numpy(bool)
    step = pd.to_numeric(gpu["step"], errors="coerce").to_numpy(np.float64)
    copy = kind == "memcpy"
    pageable = np.zeros(len(gpu), dtype=bool)
    d2h = np.zeros(len(gpu), dtype=bool)
    if copy.any():
        cn = gname[copy]
        pageable[copy] = cn.str.contains("Pageable", regex=False).to_numpy(bool)
        d2h[copy] = (
            cn.str.contains("DtoH", regex=False) | cn.str.contains("Device -> ", regex=False)
        ).to_numpy(bool)
    gc = {
        "start": gpu["start_ns"].to_numpy(np.int64),
        "dur": gpu["dur_ns"].to_numpy(np.int64),
        "end": gpu["end_ns"].to_numpy(np.int64),
        "stream": gpu["stream"].fillna(-1).to_numpy(np.int64),
        "step": step,
        "cls": cls,
        "kind": kind,
        "name": gname.to_numpy(dtype=object),
        "corr": gpu["correlation"].to_numpy(dtype=np.float64),
        "op": gpu["op"].to_numpy(dtype=object) if "op" in gpu else np.full(len(gpu), None),
        "phase": gpu["phase"].astype(object).to_numpy()
        if "phase" in gpu
        else np.full(len(gpu), None),
        "cat": cat,
        "fp32": fp32,
        "pageable": pageable,  #: a copy to or from pageable memory (blocks the host)
        "d2h": d2h,  #: a device-to-host copy
    }
    return rc, gc


def prep(
    rt: pd.DataFrame,
    ops: pd.DataFrame,
    ann: pd.DataFrame | None = None,
    gpu: pd.DataFrame | None = None,
    syncs: pd.DataFrame | None = None,
) -> RankPrep:
    """``ann``: the rank's host annotations (record_function ranges such as
    ``enumerate(DataLoader)#...``), matched like CPU ops."""
    table: dict = {}
    if ann is not None and len(ann):
        cols = ["name", "process", "thread", "start_ns", "dur_ns"]
        ops = pd.concat([ops[cols], ann[cols]], ignore_index=True)
    rt_thread = thread_codes(rt["process"].to_numpy(), rt["thread"].to_numpy(), table)
    ops_thread = thread_codes(ops["process"].to_numpy(), ops["thread"].to_numpy(), table)
    names = pd.Series(ops["name"].to_numpy(dtype=object), dtype=object).astype(str)
    uniq = names.unique()
    dl = {x: bool(DATALOADER_RE.search(x)) for x in uniq}
    st = {x: bool(STARTUP_RE.search(x)) for x in uniq}
    s = ops["start_ns"].to_numpy(np.int64)
    return RankPrep(
        table,
        rt_thread,
        ops_thread,
        s,
        s + ops["dur_ns"].to_numpy(np.int64),
        names.map(dl).to_numpy(bool) if len(names) else np.zeros(0, bool),
        names.map(st).to_numpy(bool) if len(names) else np.zeros(0, bool),
        *_columns(rt, gpu),
        _sync_streams(syncs),
    )


def _sync_streams(syncs: pd.DataFrame | None) -> dict[int, int]:
    if syncs is None or not len(syncs):
        return {}
    sc = syncs["correlation"].to_numpy(dtype=np.float64)
    ss = syncs["stream"].fillna(-1).to_numpy(np.int64)
    return {int(c): int(x) for c, x in zip(sc, ss, strict=False) if c == c}


def rank_latency(gpu: pd.DataFrame) -> int:
    """The median launch latency of a rank: launch call start to kernel start, over kernels
    that found their stream idle (more than QUEUED_NS after the previous item ended)."""
    if not len(gpu):
        return 0
    ls = gpu["launch_start_ns"].to_numpy(np.int64)
    st = gpu["start_ns"].to_numpy(np.int64)
    en = gpu["end_ns"].to_numpy(np.int64)
    s = gpu["stream"].fillna(-1).to_numpy(np.int64)
    o = np.lexsort((st, s))
    ls, st, en, s = ls[o], st[o], en[o], s[o]
    prev_end = np.r_[NEG, en[:-1]]
    prev_end[np.r_[True, s[1:] != s[:-1]]] = NEG
    idle = (ls > 0) & (st - prev_end > QUEUED_NS) & (st >= ls)
    if not idle.any():
        return 5_000
    return int(min(np.median(st[idle] - ls[idle]), MAX_LATENCY_NS))
