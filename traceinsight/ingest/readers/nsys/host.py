"""Host-side tables that are neither CUDA calls nor NVTX: OS runtime calls, profiler overhead,
CUDA graph creation, CUDA event records.

OS runtime calls (``OSRT_API``: ``pthread_cond_wait``, ``poll``, ``read``, ``ioctl``, ...) on a
thread that launches GPU work explain why that thread issued nothing: they become host frames
(``python_frames``, kind ``builtin``), which the idle-gap analysis names as the host events of a
quiet stretch. The calls of other threads, the profiler's overhead, graph creation and event
records are kept in ``other_events``.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pyarrow as pa

from traceinsight.ingest.readers.nsys.db import NsysDb, pid_of, tid_of
from traceinsight.ingest.readers.nsys.families import (
    Family,
    constant,
    family,
    id_texts,
    name_of,
    pick,
    texts,
    times,
)

OSRT = "OSRT_API"
#: host tables kept as spans of ``other_events``: table -> (name column, fallback name)
SPAN_TABLES = {
    "PROFILER_OVERHEAD": ("nameId", "profiler overhead"),
    "CUPTI_ACTIVITY_KIND_OVERHEAD": ("nameId", "CUPTI overhead"),
    "CUDA_GRAPH_EVENTS": ("nameId", "CUDA graph"),
    "CUDA_GRAPH_NODE_EVENTS": ("nameId", "CUDA graph node"),
}
CUDA_EVENT = "CUPTI_ACTIVITY_KIND_CUDA_EVENT"


def osrt_families(db: NsysDb, base: int, bad: Counter, launch_threads: set[int]) -> list[Family]:
    """OS runtime calls: host frames on ``launch_threads`` (globalTid), the rest other events."""
    if not db.count(OSRT):
        return []
    r = db.select(OSRT, ["start", "end", "globalTid", "nameId"])
    keep, start, dur = times(r["start"], r["end"], base, bad, "OS runtime")
    s = db.strings
    names = [name_of(s, i) or "" for i in pick(r["nameId"], keep)]
    gt = pick(r["globalTid"], keep)
    on_launch = np.array([g in launch_threads for g in gt], dtype=bool)
    st, du = start[keep], dur[keep]
    out = []
    for sel, table in ((on_launch, "python_frames"), (~on_launch, "other_events")):
        if not sel.any():
            continue
        g = [x for x, k in zip(gt, sel) if k]
        cols = {
            "name": texts([x for x, k in zip(names, sel) if k]),
            "process": id_texts([pid_of(x) for x in g]),
            "thread": id_texts([tid_of(x) for x in g]),
            "start_ns": pa.array(st[sel]),
            "dur_ns": pa.array(du[sel]),
            "cat_raw": constant(int(sel.sum()), OSRT),
        }
        if table == "python_frames":
            cols["frame_kind"] = constant(int(sel.sum()), "builtin")
        else:
            cols["event_shape"] = constant(int(sel.sum()), "span")
        out.append(family(table, OSRT, cols, [pid_of(x) for x in g]))
    return out


def other_families(db: NsysDb, base: int, bad: Counter) -> list[Family]:
    """Profiler overhead, graph creation (spans) and CUDA event records (instants)."""
    out = []
    s = db.strings
    for table, (name_col, fallback) in SPAN_TABLES.items():
        if not db.count(table):
            continue
        r = db.select(table, ["start", "end", "globalTid", name_col])
        keep, start, dur = times(r["start"], r["end"], base, bad, table)
        gt = pick(r["globalTid"], keep)
        out.append(
            family(
                "other_events",
                table,
                {
                    "event_shape": constant(int(keep.sum()), "span"),
                    "name": texts([name_of(s, i) or fallback for i in pick(r[name_col], keep)]),
                    "process": id_texts([pid_of(g) for g in gt]),
                    "thread": id_texts([tid_of(g) for g in gt]),
                    "start_ns": pa.array(start[keep]),
                    "dur_ns": pa.array(dur[keep]),
                    "cat_raw": constant(int(keep.sum()), table),
                },
                [pid_of(g) for g in gt],
            )
        )
    if db.has(CUDA_EVENT, "timestamp"):
        r = db.select(
            CUDA_EVENT,
            ["timestamp", "globalPid", "deviceId", "streamId", "eventId"],
            where="timestamp > 0",
        )
        if r["timestamp"]:
            keep, start, _ = times(r["timestamp"], r["timestamp"], base, bad, "CUDA event")
            gp = pick(r["globalPid"], keep)
            out.append(
                family(
                    "other_events",
                    CUDA_EVENT,
                    {
                        "event_shape": constant(int(keep.sum()), "instant"),
                        "name": texts([f"CUDA event record {e}" for e in pick(r["eventId"], keep)]),
                        "process": id_texts([pid_of(g) for g in gp]),
                        "thread": id_texts(pick(r["streamId"], keep)),
                        "start_ns": pa.array(start[keep]),
                        "cat_raw": constant(int(keep.sum()), CUDA_EVENT),
                    },
                    [pid_of(g) for g in gp],
                )
            )
    return out
