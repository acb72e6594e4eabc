"""What a communication kernel does: its collective kind from the op that launched it.

NCCL/RCCL implement most collectives with a few kernels: an all-gather, an all-to-all or even an
all-reduce of a small message may run as ``ncclKernel_SendRecv_*``. The kernel name therefore
names the transport, not the collective; the launching CPU op names the collective. A kernel's
kind comes from the nearest op above its launch (up to 8 levels) that is a collective call:

1. ``record_param_comms`` with a ``Collective name`` arg (``allreduce``, ``_allgather_base``...);
2. a collective op by its name: ``c10d::*`` (``c10d::allreduce_``, ``c10d::alltoall_base_``),
   ``_c10d_functional::*``, ``nccl:*`` / ``rccl:*`` (``nccl:all_reduce``), ``ProcessGroup*``,
   ``torch.distributed.*`` / ``dist.*``;

then, where the launch record (a CPU op or a runtime launch call) exists but no collective call
is above it (DeepEP or a custom all-reduce called from Python), from the kernel name. A kernel
without any launch record (neither an op nor a runtime call linked to it) has no launching op:
its kind is guessed from the kernel name for matching across ranks, but splits count it as
``unattributed``, so that the kinds and that share add to 100% of communication time.

Bus bandwidth follows NVIDIA nccl-tests (doc/PERFORMANCE.md): algbw = bytes / time, busbw =
algbw x factor with n ranks: all-reduce 2(n-1)/n; all-gather, reduce-scatter, all-to-all
(n-1)/n; broadcast, reduce, send/recv 1.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd

__all__ = [
    "ALL_TO_ALL",
    "BY_KERNEL",
    "BY_LAUNCH",
    "BY_NONE",
    "DTYPE_BYTES",
    "bus_factor",
    "collective_kind",
    "launch_kinds",
]

DTYPE_BYTES = {
    "float": 4,
    "float32": 4,
    "bfloat16": 2,
    "half": 2,
    "float16": 2,
    "double": 8,
    "float64": 8,
    "int": 4,
    "int32": 4,
    "long": 8,
    "int64": 8,
    "int8": 1,
    "uint8": 1,
    "char": 1,
    "byte": 1,
    "bool": 1,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
}
_COLL_RE = re.compile(
    r"(all_?reduce|allreduce|cross_device_reduce|all_?gather|allgather|"
    r"reduce_?scatter|reducescatter|all_?to_?all|alltoall|all2all|dispatch|"
    r"combine|broadcast|sendrecv|send|recv|reduce)",
    re.IGNORECASE,
)
#: CPU ops that are a collective call (their name names the collective)
_LAUNCHER_RE = re.compile(
    r"^(c10d::|_?c10d_functional::|nccl:|rccl:|ProcessGroup|torch\.distributed\.|dist\.)"
)
#: collective kinds of expert-parallel / embedding exchanges (all-to-all and its point-to-point
#: form): their overlap levers differ from gradient all-reduce
ALL_TO_ALL = ("all_to_all", "sendrecv", "send", "recv")
#: how a kernel's kind was found
BY_LAUNCH = "launch op"
BY_KERNEL = "kernel name"
BY_NONE = "no launch record"
#: levels above the launch searched for the collective call
MAX_DEPTH = 8


def bus_factor(kind: str, n: int) -> float:
    k = kind.lower().replace("_", "")
    if n <= 1:
        return 1.0
    if "allreduce" in k:
        return 2 * (n - 1) / n
    if any(x in k for x in ("allgather", "reducescatter", "alltoall")):
        return (n - 1) / n
    return 1.0


def collective_kind(name: str) -> str:
    m = _COLL_RE.search(name or "")
    if not m:
        return "other"
    k = m.group(1).lower().replace("_", "")
    return {
        "allreduce": "all_reduce",
        "crossdevicereduce": "all_reduce",
        "allgather": "all_gather",
        "reducescatter": "reduce_scatter",
        "alltoall": "all_to_all",
        "all2all": "all_to_all",
        "dispatch": "all_to_all",
        "combine": "all_to_all",
    }.get(k, k)


def _op_kinds(an: Any) -> np.ndarray:
    """Per op (op_idx order): the collective kind it calls, or None when it is no collective
    call. Cached per analysis."""
    got = an.cache.get("op_collective_kinds")
    if got is not None:
        return got
    from traceinsight.store import schema

    ops = an.attribution.ops
    names = ops["name"].astype(object).to_numpy()
    cname = np.full(len(names), None, dtype=object)
    if "collective_name" in schema.TABLES["cpu_ops"].column_names:
        col = an.store.table("cpu_ops", ["collective_name"]).to_pandas()["collective_name"]
        if len(col) == len(names):
            cname = col.astype(object).to_numpy()
    by_name: dict[Any, str | None] = {}
    out = np.full(len(names), None, dtype=object)
    for i, (n, c) in enumerate(zip(names, cname)):
        if c is not None and not pd.isna(c) and str(c):
            out[i] = collective_kind(str(c))
            continue
        if n not in by_name:
            s = str(n or "")
            by_name[n] = collective_kind(s) if _LAUNCHER_RE.match(s) else None
        out[i] = by_name[n]
    an.cache["op_collective_kinds"] = out
    return out


def launch_kinds(an: Any, comm: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per communication kernel of ``comm`` (rows of the attribution's GPU table): its
    collective kind and how it was found (:data:`BY_LAUNCH`, :data:`BY_KERNEL`,
    :data:`BY_NONE`; with :data:`BY_NONE` the kind is the kernel name's)."""
    n = len(comm)
    names = comm["name"].astype(str).to_numpy()
    kinds = np.array([collective_kind(x) for x in names], dtype=object)
    by = np.full(n, BY_NONE, dtype=object)
    if not n:
        return kinds, by
    opk = _op_kinds(an)
    parent = an.attribution.ops["parent"].to_numpy()
    m = len(opk)
    cur = comm["op_idx"].to_numpy(np.int64).copy()
    launched = (cur >= 0) & (cur < m)
    if "launch_name" in comm:
        launched |= comm["launch_name"].notna().to_numpy()
    by[launched] = BY_KERNEL
    done = np.zeros(n, dtype=bool)
    for _ in range(MAX_DEPTH):
        live = (cur >= 0) & (cur < m) & ~done
        if not live.any():
            break
        idx = np.flatnonzero(live)
        k = opk[cur[idx]]
        hit = np.array([x is not None for x in k], dtype=bool)
        kinds[idx[hit]] = k[hit]
        by[idx[hit]] = BY_LAUNCH
        done[idx[hit]] = True
        nxt = np.full(n, -1, dtype=np.int64)
        up = idx[~hit]
        nxt[up] = parent[cur[up]]
        cur = nxt
    return kinds, by
