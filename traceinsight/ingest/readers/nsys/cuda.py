"""CUDA tables of an export -> store families: kernels, copies, memsets, synchronisation,
runtime and driver calls, device memory usage.

Kernels are named by ``demangledName`` (else ``shortName``, else ``mangledName``) through
``StringIds``; copies and memsets get the names Kineto gives them (``Memcpy HtoD (Pageable ->
Device)``, ``Memset (Device)``); synchronisation rows the cuda_sync names (``Stream Sync``, ...).
API names lose one CUPTI version suffix (``cudaLaunchKernel_v7000`` -> ``cudaLaunchKernel``).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Any

import numpy as np
import pyarrow as pa

from traceinsight.ingest.columns import float_col
from traceinsight.ingest.readers.nsys.db import (
    COPY_KINDS,
    COPY_SUFFIX,
    EVENT_CLASS_BACKTRACE,
    EVENT_CLASS_DRIVER,
    MEM_KINDS,
    SYNC_SUFFIX,
    SYNC_TYPES,
    NsysDb,
    pid_of,
    tid_of,
)
from traceinsight.ingest.readers.nsys.families import (
    Family,
    constant,
    family,
    id_texts,
    ints,
    name_of,
    pick,
    texts,
    times,
)

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
SYNC = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
DRIVER = "CUPTI_ACTIVITY_KIND_DRIVER"
MEMORY = "CUDA_GPU_MEMORY_USAGE_EVENTS"

_VERSION_SUFFIX = re.compile(r"_v\d+$")


def api_name(name: str | None) -> str:
    """A CUDA API name without its CUPTI version suffix (one ``_vNNNN``)."""
    return _VERSION_SUFFIX.sub("", name) if name else ""


def gpu_families(
    db: NsysDb, base: int, bad: Counter, gpus: dict[int, dict[str, Any]]
) -> list[Family]:
    """Kernels, copies, memsets and synchronisation rows (``gpu_activities``)."""
    return [
        f
        for f in (
            _kernels(db, base, bad, gpus),
            _copies(db, base, bad),
            _memsets(db, base, bad),
            _syncs(db, base, bad),
        )
        if f is not None
    ]


def _gpu_common(
    db: NsysDb, table: str, extra: list[str], base: int, bad: Counter, what: str
) -> tuple[dict[str, list[Any]], np.ndarray, dict[str, Any]] | None:
    if not db.count(table):
        return None
    cols = [
        "start",
        "end",
        "deviceId",
        "streamId",
        "correlationId",
        "globalPid",
        "graphNodeId",
        *extra,
    ]
    r = db.select(table, cols)
    keep, start, dur = times(r["start"], r["end"], base, bad, what)
    out = {
        "device": ints(r["deviceId"], keep).cast(pa.int32()),
        "stream": ints(r["streamId"], keep),
        "start_ns": pa.array(start[keep]),
        "dur_ns": pa.array(dur[keep]),
        "correlation": ints(r["correlationId"], keep),
        "graph_node_id": ints(r["graphNodeId"], keep),
        "cat_raw": constant(int(keep.sum()), table),
    }
    r["pid"] = [pid_of(g) for g in r["globalPid"]]
    return r, keep, out


def _kernels(db: NsysDb, base: int, bad: Counter, gpus: dict[int, dict[str, Any]]) -> Family | None:
    extra = [
        "demangledName",
        "shortName",
        "mangledName",
        "gridX",
        "gridY",
        "gridZ",
        "blockX",
        "blockY",
        "blockZ",
        "registersPerThread",
        "staticSharedMemory",
        "dynamicSharedMemory",
        "graphId",
    ]
    got = _gpu_common(db, KERNEL, extra, base, bad, "kernel")
    if got is None:
        return None
    r, keep, out = got
    s = db.strings
    names = [
        name_of(s, d, sh, m) or ""
        for d, sh, m in zip(r["demangledName"], r["shortName"], r["mangledName"])
    ]
    n = int(keep.sum())
    smem = [
        None if a is None and b is None else (a or 0) + (b or 0)
        for a, b in zip(r["staticSharedMemory"], r["dynamicSharedMemory"])
    ]
    out.update(
        {
            "kind": constant(n, "kernel"),
            "name": texts(pick(names, keep)),
            **{f"grid_{a}": ints(r[f"grid{a.upper()}"], keep).cast(pa.int32()) for a in "xyz"},
            **{f"block_{a}": ints(r[f"block{a.upper()}"], keep).cast(pa.int32()) for a in "xyz"},
            "registers_per_thread": ints(r["registersPerThread"], keep).cast(pa.int32()),
            "shared_memory_bytes": ints(smem, keep),
            "graph_id": ints(r["graphId"], keep),
        }
    )
    out.update(
        _occupancy(
            pick(
                list(
                    zip(
                        r["deviceId"],
                        r["gridX"],
                        r["gridY"],
                        r["gridZ"],
                        r["blockX"],
                        r["blockY"],
                        r["blockZ"],
                        r["registersPerThread"],
                        smem,
                    )
                ),
                keep,
            ),
            gpus,
        )
    )
    return family("gpu_activities", KERNEL, out, pick(r["pid"], keep))


def _occupancy(rows: list[tuple[Any, ...]], gpus: dict[int, dict[str, Any]]) -> dict[str, pa.Array]:
    """Blocks and warps per SM, and Kineto's estimate of achieved occupancy: the blocks that
    fit on an SM (warps, blocks, registers and shared memory limits, without allocation
    granularity) capped by the grid's blocks per SM, times the block's threads over the SM's
    thread capacity."""
    bps: list[float | None] = []
    wps: list[float | None] = []
    occ: list[float | None] = []
    for dev, gx, gy, gz, bx, by, bz, regs, smem in rows:
        g = gpus.get(dev) if dev is not None else None
        sms = (g or {}).get("numSms")
        if not g or not sms or None in (gx, gy, gz, bx, by, bz):
            bps.append(None)
            wps.append(None)
            occ.append(None)
            continue
        warp = g.get("warpSize") or 32
        threads = bx * by * bz
        warps_per_block = math.ceil(threads / warp) if threads else 0
        blocks = gx * gy * gz / sms
        bps.append(blocks)
        wps.append(blocks * warps_per_block)
        occ.append(_estimate(g, blocks, threads, warps_per_block, regs, smem))
    return {
        "blocks_per_sm": float_col(bps),
        "warps_per_sm": float_col(wps),
        "occupancy_pct": float_col(occ),
    }


def _estimate(
    g: dict[str, Any],
    blocks: float,
    threads: int,
    warps_per_block: int,
    regs: int | None,
    smem: int | None,
) -> float | None:
    max_warps, max_blocks = g.get("maxWarpsPerSm"), g.get("maxBlocksPerSm")
    if not max_warps or not max_blocks or not warps_per_block:
        return None
    limits = [max_blocks, max_warps // warps_per_block]
    if regs and g.get("maxRegistersPerSm"):
        limits.append(
            g["maxRegistersPerSm"] // (regs * warps_per_block * (g.get("warpSize") or 32))
        )
    if smem and g.get("maxShmemPerSm"):
        limits.append(g["maxShmemPerSm"] // smem)
    active = min(limits)
    return 100.0 * min(active, blocks) * threads / (max_warps * (g.get("warpSize") or 32))


def _copies(db: NsysDb, base: int, bad: Counter) -> Family | None:
    got = _gpu_common(db, MEMCPY, ["bytes", "copyKind", "srcKind", "dstKind"], base, bad, "memcpy")
    if got is None:
        return None
    r, keep, out = got
    kinds = db.enum("ENUM_CUDA_MEMCPY_OPER", COPY_KINDS, COPY_SUFFIX)
    mem = db.enum("ENUM_CUDA_MEM_KIND", MEM_KINDS)
    ck = [kinds.get(k, "Unknown") if k is not None else "Unknown" for k in r["copyKind"]]
    names = [
        f"Memcpy {c} ({mem.get(s, 'Unknown')} -> {mem.get(d, 'Unknown')})"
        for c, s, d in zip(ck, r["srcKind"], r["dstKind"])
    ]
    n = int(keep.sum())
    out.update(
        {
            "kind": constant(n, "memcpy"),
            "name": texts(pick(names, keep)),
            "bytes": ints(r["bytes"], keep),
            "copy_kind": texts(pick(ck, keep)),
        }
    )
    return family("gpu_activities", MEMCPY, out, pick(r["pid"], keep))


def _memsets(db: NsysDb, base: int, bad: Counter) -> Family | None:
    got = _gpu_common(db, MEMSET, ["bytes", "memKind"], base, bad, "memset")
    if got is None:
        return None
    r, keep, out = got
    mem = db.enum("ENUM_CUDA_MEM_KIND", MEM_KINDS)
    names = [f"Memset ({mem.get(k, 'Unknown')})" for k in r["memKind"]]
    out.update(
        {
            "kind": constant(int(keep.sum()), "memset"),
            "name": texts(pick(names, keep)),
            "bytes": ints(r["bytes"], keep),
        }
    )
    return family("gpu_activities", MEMSET, out, pick(r["pid"], keep))


def _context_devices(db: NsysDb) -> dict[tuple[int, int], int]:
    """(globalPid, contextId) -> deviceId, from the kernels, copies and memsets."""
    out: dict[tuple[int, int], int] = {}
    for table in (KERNEL, MEMCPY, MEMSET):
        if db.has(table, "globalPid", "contextId", "deviceId"):
            for g, c, d in db.scalar_rows(
                f"SELECT DISTINCT globalPid, contextId, deviceId FROM {table}"
            ):
                if None not in (g, c, d):
                    out.setdefault((int(g), int(c)), int(d))
    return out


def _syncs(db: NsysDb, base: int, bad: Counter) -> Family | None:
    """Synchronisation rows. Their ``deviceId`` is not the synchronised GPU in every export
    (0 for every process of a 2-GPU capture): the device of their context is used."""
    got = _gpu_common(db, SYNC, ["syncType", "contextId"], base, bad, "synchronization")
    if got is None:
        return None
    r, keep, out = got
    ctx = _context_devices(db)
    if ctx:
        dev = [
            ctx.get((g, c), d) if g is not None and c is not None else d
            for g, c, d in zip(r["globalPid"], r["contextId"], r["deviceId"])
        ]
        out["device"] = ints(dev, keep).cast(pa.int32())
    types = db.enum("ENUM_CUPTI_SYNC_TYPE", SYNC_TYPES, SYNC_SUFFIX)
    names = [
        types.get(t, "Unknown Sync") if t is not None else "Unknown Sync" for t in r["syncType"]
    ]
    out.update({"kind": constant(int(keep.sum()), "sync"), "name": texts(pick(names, keep))})
    return family("gpu_activities", SYNC, out, pick(r["pid"], keep))


def runtime_families(db: NsysDb, base: int, bad: Counter, skipped: Counter) -> list[Family]:
    """CUDA runtime and driver calls (``runtime_calls``). ``eventClass`` 67 rows (the CUDA
    backtrace copy of a call, same correlation id) are not calls: counted in ``skipped``."""
    out = []
    for table in (RUNTIME, DRIVER):
        if not db.count(table):
            continue
        r = db.select(table, ["start", "end", "eventClass", "globalTid", "correlationId", "nameId"])
        cls = r["eventClass"]
        valid = np.array([c != EVENT_CLASS_BACKTRACE for c in cls], dtype=bool)
        if (~valid).any():
            skipped[table] += int((~valid).sum())
        keep, start, dur = times(r["start"], r["end"], base, bad, "CUDA API")
        keep &= valid
        n = int(keep.sum())
        s = db.strings
        names = [api_name(s.get(int(i)) if i is not None else None) for i in r["nameId"]]
        kinds = ["driver" if table == DRIVER or c == EVENT_CLASS_DRIVER else "runtime" for c in cls]
        gt = pick(r["globalTid"], keep)
        out.append(
            family(
                "runtime_calls",
                table,
                {
                    "kind": texts(pick(kinds, keep)),
                    "name": texts(pick(names, keep)),
                    "process": id_texts([pid_of(g) for g in gt]),
                    "thread": id_texts([tid_of(g) for g in gt]),
                    "start_ns": pa.array(start[keep]),
                    "dur_ns": pa.array(dur[keep]),
                    "correlation": ints(r["correlationId"], keep),
                    "cat_raw": constant(n, table),
                },
                [pid_of(g) for g in gt],
            )
        )
    return out


def memory_family(db: NsysDb, base: int, bad: Counter) -> Family | None:
    """``CUDA_GPU_MEMORY_USAGE_EVENTS`` (``--cuda-memory-usage=true``) -> ``memory_events``:
    device allocations and frees with the process's running total per device as the reserved
    total (the allocator-wide allocated total is not in the export)."""
    if not db.count(MEMORY):
        return None
    r = db.select(
        MEMORY,
        ["start", "globalPid", "deviceId", "address", "bytes", "memoryOperationType"],
        order="start",
    )
    keep, start, _ = times(r["start"], r["start"], base, bad, "memory usage")
    op = pick(r["memoryOperationType"], keep)
    size = pick(r["bytes"], keep)
    signed = [None if b is None else (-abs(b) if o == 1 else abs(b)) for b, o in zip(size, op)]
    pids = [pid_of(g) for g in pick(r["globalPid"], keep)]
    devs = pick(r["deviceId"], keep)
    running: dict[tuple[Any, Any], int] = {}
    total = []
    for p, d, b in zip(pids, devs, signed):
        running[(p, d)] = running.get((p, d), 0) + (b or 0)
        total.append(running[(p, d)])
    addr = [a if a is None or a < 2**63 else None for a in pick(r["address"], keep)]
    return family(
        "memory_events",
        MEMORY,
        {
            "kind": texts(["free" if o == 1 else "alloc" for o in op]),
            "process": id_texts(pids),
            "ts_ns": pa.array(start[keep]),
            "device_type": constant(len(op), "cuda"),
            "device": pa.array(devs, pa.int64()).cast(pa.int32()),
            "addr": pa.array(addr, pa.int64()),
            "bytes": pa.array(signed, pa.int64()),
            "total_reserved_bytes": pa.array(total, pa.int64()),
        },
        pids,
    )
