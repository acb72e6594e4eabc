"""One export -> one :class:`RankRead` per process that ran GPU work.

Every table is read once for the whole export; its rows are split by process (``globalPid`` /
``globalTid``). A process with kernels, copies or memsets is a rank (ranks in the order of the
first GPU each process used, then pid); an export with one such process is rank ``rank_hint``
(the file name's) or, for an MPI capture, the rank of its ``MPI Rank N`` thread name.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path, PurePath
from typing import Any

import numpy as np
import pyarrow as pa

from traceinsight.diagnostics import DiagnosticLog
from traceinsight.ingest.readers.base import RankMeta, RankRead
from traceinsight.ingest.readers.nsys import FORMAT
from traceinsight.ingest.readers.nsys.cuda import (
    RUNTIME,
    gpu_families,
    memory_family,
    runtime_families,
)
from traceinsight.ingest.readers.nsys.db import CUDA_TABLES, EVENT_CLASS_BACKTRACE, NsysDb, pid_of
from traceinsight.ingest.readers.nsys.families import NO_PID, Family
from traceinsight.ingest.readers.nsys.host import osrt_families, other_families
from traceinsight.ingest.readers.nsys.nvtx import NvtxRead, read_nvtx
from traceinsight.store import schema
from traceinsight.util.redact import clean_text, program_name, redact_text, version_value

_MPI_RANK = re.compile(r"^MPI Rank (\d+)$")
#: TARGET_INFO_GPU column -> the deviceProperties key Kineto uses (docs/STORE.md)
GPU_KEYS = {
    "id": "id",
    "name": "name",
    "totalMemory": "totalGlobalMem",
    "computeMajor": "computeMajor",
    "computeMinor": "computeMinor",
    "smCount": "numSms",
    "threadsPerWarp": "warpSize",
    "maxThreadsPerBlock": "maxThreadsPerBlock",
    "maxRegistersPerBlock": "regsPerBlock",
    "maxRegistersPerSm": "regsPerMultiprocessor",
    "maxShmemPerBlock": "sharedMemPerBlock",
    "maxShmemPerSm": "sharedMemPerMultiprocessor",
    "maxShmemPerBlockOptin": "sharedMemPerBlockOptin",
    "clockRate": "clockRateHz",
    "memoryBandwidth": "memoryBandwidthBytesPerS",
    "l2CacheSize": "l2CacheBytes",
    "maxWarpsPerSm": "maxWarpsPerSm",
    "maxBlocksPerSm": "maxBlocksPerSm",
    "chipName": "chipName",
}

ProgressFn = Callable[[str, float], None]


def read_export(
    path: Path, source: str, rank_hint: int | None, progress: ProgressFn, layout: str = "sqlite"
) -> list[RankRead]:
    """Read the export at ``path`` (named ``source`` in messages) into per-rank results."""
    with NsysDb(path, source) as db:
        diags = DiagnosticLog()
        bad: Counter = Counter()
        skipped: Counter = Counter()
        base = db.epoch_ns or 0
        gpus = gpu_info(db)
        progress("read", 0.05)
        fams = gpu_families(db, base, bad, gpus)
        progress("read", 0.3)
        fams += runtime_families(db, base, bad, skipped)
        mem = memory_family(db, base, bad)
        fams += [mem] if mem is not None else []
        progress("read", 0.5)
        nv = read_nvtx(db, base, bad)
        fams += nv.families
        progress("read", 0.75)
        fams += osrt_families(db, base, bad, _launch_threads(db))
        fams += other_families(db, base, bad)
        _fill_unknown_pids(fams)
        ranks = _ranks(fams, nv, rank_hint)
        _diagnose(db, source, diags, bad, skipped, nv, gpus, ranks, fams, mem is not None)
        progress("read", 0.9)
        reads = []
        for i, (rank, pids, how) in enumerate(ranks):
            meta = _meta(
                db,
                source,
                layout,
                rank,
                how,
                pids,
                gpus,
                nv,
                fams,
                base,
                len(ranks),
                mem is not None,
            )
            if i == 0:
                meta.diagnostics.extend(diags)
            reads.append(
                RankRead(tables=_tables(fams, pids, rank), meta=meta, counts=_counts(fams, pids))
            )
        for r in reads:
            r.tables["flows"] = launch_flows(r.tables, r.meta.rank)
        return reads


def gpu_info(db: NsysDb) -> dict[int, dict[str, Any]]:
    """``TARGET_INFO_GPU`` rows by device id, with Kineto's deviceProperties keys."""
    if not db.has("TARGET_INFO_GPU", "id"):
        return {}
    r = db.select("TARGET_INFO_GPU", list(GPU_KEYS))
    out: dict[int, dict[str, Any]] = {}
    for i in range(len(r["id"])):
        d: dict[str, Any] = {}
        for col, key in GPU_KEYS.items():
            v = r[col][i]
            if v is None:
                continue
            d[key] = redact_text(str(v))[:120] if isinstance(v, str) else v
        if isinstance(d.get("maxWarpsPerSm"), int) and isinstance(d.get("warpSize"), int):
            d["maxThreadsPerMultiprocessor"] = d["maxWarpsPerSm"] * d["warpSize"]
        if d.get("id") is not None:
            out[int(d["id"])] = d
    return out


def _launch_threads(db: NsysDb) -> set[int]:
    """globalTid of every thread that made a CUDA API call."""
    if not db.has(RUNTIME, "globalTid"):
        return set()
    where = f"eventClass != {EVENT_CLASS_BACKTRACE}" if db.has(RUNTIME, "eventClass") else ""
    sql = f"SELECT DISTINCT globalTid FROM {RUNTIME}" + (f" WHERE {where}" if where else "")
    return {int(g) for (g,) in db.scalar_rows(sql) if g is not None}


def _fill_unknown_pids(fams: list[Family]) -> None:
    """GPU rows without ``globalPid`` (hand-made exports) take the process of the API call
    with their correlation id, when one process has it."""
    import pandas as pd  # lazily: the Kineto ingest never needs it

    rt = [f for f in fams if f.table == "runtime_calls"]
    if not rt:
        return
    corr = np.concatenate([np.asarray(f.data["correlation"].fill_null(-1)) for f in rt])
    pid = np.concatenate([f.pid for f in rt])
    s = pd.Series(pid, index=corr)
    s = s[s.index >= 0]
    unique = s.groupby(level=0).nunique()
    s = s[~s.index.duplicated()][unique.reindex(s.index[~s.index.duplicated()]).to_numpy() == 1]
    for f in fams:
        if f.table != "gpu_activities" or not (f.pid == NO_PID).any():
            continue
        c = np.asarray(f.data["correlation"].fill_null(-1))
        got = s.reindex(c).to_numpy()
        fill = (f.pid == NO_PID) & ~pd.isna(got)
        f.pid = np.where(fill, np.nan_to_num(got, nan=NO_PID).astype(np.int64), f.pid)


def _ranks(
    fams: list[Family], nv: NvtxRead, rank_hint: int | None
) -> list[tuple[int, list[int], str]]:
    """(rank, pids, how the rank was found) per rank."""
    first_dev: dict[int, float] = {}
    for f in fams:
        if f.table != "gpu_activities" or f.source.endswith("SYNCHRONIZATION"):
            continue
        dev = np.asarray(f.data["device"].fill_null(1 << 30))
        for p in np.unique(f.pid):
            if p == NO_PID:
                continue
            first_dev[int(p)] = min(first_dev.get(int(p), np.inf), float(dev[f.pid == p].min()))
    if not first_dev:  # no GPU work: processes with CUDA calls, else everything
        pids = sorted(
            {int(p) for f in fams if f.table == "runtime_calls" for p in f.pid if p != NO_PID}
        )
        first_dev = {p: 0.0 for p in pids}
    order = sorted(first_dev, key=lambda p: (first_dev[p], p))
    if len(order) > 1:  # rows of no known process go to the first rank
        return [(i, [p, NO_PID] if i == 0 else [p], "process order") for i, p in enumerate(order)]
    pids = order or sorted({int(p) for f in fams for p in np.unique(f.pid)})
    unknown = [NO_PID] if NO_PID not in pids else []
    if rank_hint is not None:
        return [(rank_hint, pids + unknown, "file name")]
    for gtid, label in nv.thread_labels.items():
        m = _MPI_RANK.match(label)
        if m and (not order or pid_of(gtid) in order):
            return [(int(m.group(1)), pids + unknown, "MPI thread name")]
    return [(0, pids + unknown, "default")]


def _tables(fams: list[Family], pids: list[int], rank: int) -> dict[str, pa.Table]:
    out = {}
    for name in schema.TABLES:
        parts = [f.for_pids(pids, rank) for f in fams if f.table == name]
        parts = [p for p in parts if p.num_rows]
        if not parts:
            out[name] = schema.empty_table(name)
        elif len(parts) == 1:
            out[name] = parts[0]
        else:
            out[name] = pa.concat_tables(parts).unify_dictionaries().combine_chunks()
    return out


def _counts(fams: list[Family], pids: list[int]) -> dict[str, int]:
    c: Counter = Counter()
    for f in fams:
        c[f"{f.source} -> {f.table}"] += int(np.isin(f.pid, pids).sum())
    return {k: v for k, v in c.items() if v}


def launch_flows(tables: dict[str, pa.Table], rank: int) -> pa.Table:
    """``launch`` flows from each API call to the GPU activities of its correlation id (the
    links Kineto writes as ``ac2g`` flows; nsys keeps only the ids)."""
    import pandas as pd  # lazily: the Kineto ingest never needs it

    g = tables["gpu_activities"].select(["correlation", "device", "stream", "start_ns"])
    rt = tables["runtime_calls"].select(["correlation", "process", "thread", "start_ns"])
    if not g.num_rows or not rt.num_rows:
        return schema.empty_table("flows")
    gd = g.to_pandas().dropna(subset=["correlation"])
    rd = rt.to_pandas().dropna(subset=["correlation"]).drop_duplicates("correlation")
    m = gd.merge(rd, on="correlation", suffixes=("_gpu", "_api"))
    if not len(m):
        return schema.empty_table("flows")
    starts = m.drop_duplicates("correlation")
    n_s, n_e = len(starts), len(m)
    return schema.conform(
        "flows",
        {
            "rank": pa.array(np.full(n_s + n_e, rank, dtype=np.int32)),
            "kind": pa.array(["launch"] * (n_s + n_e)).dictionary_encode(),
            "phase": pa.array(["start"] * n_s + ["end"] * n_e).dictionary_encode(),
            "flow_id": pa.array(
                np.concatenate(
                    [starts["correlation"].to_numpy(np.int64), m["correlation"].to_numpy(np.int64)]
                )
            ),
            "process": pa.array(
                [str(x) for x in starts["process"]]
                + [str(int(x)) if not pd.isna(x) else None for x in m["device"]],
                pa.string(),
            ).dictionary_encode(),
            "thread": pa.array(
                [str(x) for x in starts["thread"]]
                + [str(int(x)) if not pd.isna(x) else None for x in m["stream"]],
                pa.string(),
            ).dictionary_encode(),
            "ts_ns": pa.array(
                np.concatenate(
                    [
                        starts["start_ns_api"].to_numpy(np.int64),
                        m["start_ns_gpu"].to_numpy(np.int64),
                    ]
                )
            ),
        },
    )


def _meta(
    db: NsysDb,
    source: str,
    layout: str,
    rank: int,
    how: str,
    pids: list[int],
    gpus: dict[int, dict[str, Any]],
    nv: NvtxRead,
    fams: list[Family],
    base: int,
    n_ranks: int,
    has_memory: bool,
) -> RankMeta:
    used: set[int] = set()
    lo, hi = None, None
    for f in fams:
        sel = np.isin(f.pid, pids)
        if not sel.any():
            continue
        t = f.data.filter(pa.array(sel))
        if f.table == "gpu_activities" and not f.source.endswith("SYNCHRONIZATION"):
            used |= {int(d) for d in t["device"].drop_null().to_pylist()}
        start = t["start_ns" if "start_ns" in t.column_names else "ts_ns"]
        s = np.asarray(start)
        e = s + np.asarray(t["dur_ns"].fill_null(0)) if "dur_ns" in t.column_names else s
        lo = int(s.min()) if lo is None else min(lo, int(s.min()))
        hi = int(e.max()) if hi is None else max(hi, int(e.max()))
    real = [p for p in pids if p != NO_PID]
    # a process name is often the whole command line: only the program's name is kept
    names = {p: program_name(n) for p, n in db.process_names.items()}
    label = None
    if n_ranks > 1 and real:  # name the process among the file's ranks
        gpus_txt = ", ".join(f"GPU {d}" for d in sorted(used)) or "no GPU work"
        label = f"pid {real[0]} {names.get(real[0], '')}, {gpus_txt}".replace("  ", " ")
    threads = {
        f"{pid_of(g)}/{g & 0xFFFFFF}": clean_text(n, limit=120)
        for g, n in db.thread_names.items()
        if pid_of(g) in real
    }
    meta = db.export_meta
    env = db.system_env(["CudaDriverVersion", "NvDriverVersion"])
    # versions are numbers or dotted digits; anything else reads as unrecognised
    versions = {
        k: version_value(v)
        for k, v in (
            ("nsys", _product_version(meta.get("EXPORT_PRODUCT_VERSION"))),
            ("export_schema", meta.get("EXPORT_SCHEMA_VERSION")),
            ("cuda_driver_version", env.get("CudaDriverVersion")),
            ("nvidia_driver_version", env.get("NvDriverVersion")),
        )
        if v
    }
    frames = any(
        f.table == "python_frames" and f.source == "NVTX_EVENTS" and np.isin(f.pid, pids).any()
        for f in fams
    )
    inp = meta.get("EXPORT_PARAM_INPUT_FILE")
    return RankMeta(
        rank=rank,
        rank_source=how,
        source=source,
        format=FORMAT,
        layout=layout,
        vendor="nvidia",
        base_time_ns=base or None,
        time_origin="epoch" if base else "trace",
        span_ns=[lo, hi] if lo is not None and hi is not None else None,
        devices=[gpus[d] for d in sorted(used) if d in gpus] or list(gpus.values()),
        devices_used=sorted(used),
        distributed={"world_size": n_ranks} if n_ranks > 1 else {},
        process_names={str(p): names[p] for p in real if p in names},
        thread_names=threads,
        capture_flags={
            "record_shapes": (nv.with_sizes > 0) if nv.torch_ranges else None,
            "with_stack": None,
            "profile_memory": True if has_memory else None,
            "with_flops": None,
            "with_modules": True if frames else None,
        },
        versions=versions,
        trace_name=PurePath(inp.replace("\\", "/")).name[:200] if inp else None,
        framework="PyTorch (emit_nvtx)" if nv.torch_ranges else None,
        schema_version=meta.get("EXPORT_SCHEMA_VERSION"),
        label=label,
    )


def _diagnose(
    db: NsysDb,
    source: str,
    diags: DiagnosticLog,
    bad: Counter,
    skipped: Counter,
    nv: NvtxRead,
    gpus: dict[int, dict[str, Any]],
    ranks: list[tuple[int, list[int], str]],
    fams: list[Family],
    has_memory: bool,
) -> None:
    """What the export lacks or what was adjusted, as diagnostics of the file."""

    def add(code: str, message: str, **kw: Any) -> None:
        diags.add(code, message, source=source, **kw)

    if not any(db.count(t) for t in CUDA_TABLES):
        add(
            "nsys-no-cuda-activity",
            "the export holds no CUDA activity (no kernel, copy, "
            "memset or CUDA API table): there is no GPU work to diagnose",
            hint="record with nsys profile --trace=cuda,nvtx (and --cuda-memory-usage=true)",
        )
    if "DERIVED_FROM" in db.export_meta or "DERIVED_WINDOW_NS" in db.export_meta:
        add(
            "nsys-time-sliced",
            "the export was cut to a time window by another tool: launches "
            "before the window and ranges that cross its edges may be missing",
            severity="info",
        )
    for what, n in sorted(bad.items()):
        add("nsys-bad-rows", what, count=n)
    for table, n in sorted(skipped.items()):
        add(
            "nsys-backtrace-rows",
            f"{table} rows of event class {EVENT_CLASS_BACKTRACE} (the "
            "CUDA backtrace copy of a call) are not calls: not counted",
            severity="info",
            count=n,
        )
    if nv.unclosed:
        add(
            "nsys-unclosed-ranges",
            "NVTX ranges never closed: ended at the end of the capture",
            count=nv.unclosed,
        )
    has_kernels = db.count("CUPTI_ACTIVITY_KIND_KERNEL") > 0
    if has_kernels and not nv.torch_ranges:
        add(
            "nsys-no-emit-nvtx",
            "no PyTorch emit_nvtx ranges: kernels are attributed to their "
            "launching API call and to the NVTX ranges around it, not to operators",
            severity="info",
            hint="wrap the profiled steps in torch.autograd.profiler.emit_nvtx()",
        )
    elif nv.torch_ranges and not nv.with_sizes:
        add(
            "nsys-no-shapes",
            "emit_nvtx ranges carry no input shapes: FLOP and roofline "
            "rules are not evaluated (Nsight Systems records no tensor shapes of its own)",
            severity="info",
            hint="record with torch.autograd.profiler.emit_nvtx(record_shapes=True)",
        )
    if has_kernels and not gpus:
        add(
            "nsys-gpu-unknown",
            "the export has no TARGET_INFO_GPU table: the GPU model, SM "
            "count and memory are unknown",
            severity="info",
            hint="pass --device NAME for the roofline (see `traceinsight devices`)",
        )
    if has_memory:
        add(
            "nsys-memory-segments",
            "CUDA memory usage events are device allocations "
            "(cudaMalloc / cudaFree), not the caching allocator's blocks: allocator rules "
            "are not evaluated",
            severity="info",
            hint="record with torch.profiler profile_memory=True for allocator data",
        )
    in_ranks = {p for _, pids, _ in ranks for p in pids}
    extra = {
        int(p)
        for f in fams
        if f.table in ("runtime_calls", "gpu_activities")
        for p in np.unique(f.pid)
        if p != NO_PID and int(p) not in in_ranks
    }
    if extra:
        add(
            "nsys-processes-skipped",
            "processes with CUDA API calls but no GPU work are not ranks: their calls are left out",
            severity="info",
            count=len(extra),
        )


def _product_version(value: object) -> str | None:
    """The dotted version in an Nsight product string ("2024.5.1.113-245134619542v0")."""
    if value is None:
        return None
    head = str(value).strip().split("-", 1)[0]
    return head if head.replace(".", "").isdigit() else str(value)
