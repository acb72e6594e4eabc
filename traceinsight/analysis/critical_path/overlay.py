"""The critical path as an overlay trace: the original events plus the path, for Perfetto
and chrome://tracing.

The path is drawn twice: as flow events (``ph`` ``s``/``f``, category ``critical_path``) from
each item on the path to the next, bound to the original slices, and as a track of its own
(process ``critical path``, one slice per segment named by its category). The original
events are taken from the store (kernels, copies, runtime calls, CPU ops, steps), so the
overlay of an Nsight Systems input is a Chrome trace too. Times are ``ts`` in µs with three
decimals relative to ``baseTimeNanoseconds``: exact to the ns.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from traceinsight.analysis.critical_path.graph import CATEGORIES, CATEGORY_LABELS
from traceinsight.analysis.critical_path.path import GPU, HOST
from traceinsight.util.safetext import for_terminal

PATH_PID = "critical path"


def _us(ns: int, base: int) -> float:
    return round((int(ns) - base) / 1000.0, 3)


def _text(x: Any) -> str:
    return for_terminal(str(x))[:300]


def overlay_events(store, models: list) -> dict[str, Any]:
    """A Chrome-trace object: the store's events of the models' ranks and their paths."""
    ranks = sorted({m.graph.rank for m in models})
    g = store.df(
        "gpu_activities",
        ["rank", "kind", "name", "device", "stream", "start_ns", "dur_ns", "correlation"],
    )
    rt = store.df(
        "runtime_calls", ["rank", "name", "process", "thread", "start_ns", "dur_ns", "correlation"]
    )
    ops = store.df("cpu_ops", ["rank", "name", "process", "thread", "start_ns", "dur_ns"])
    rng = store.df("ranges", ["rank", "kind", "name", "process", "thread", "start_ns", "dur_ns"])
    rng = rng[rng["kind"].astype(str) == "step"]
    starts = [int(t["start_ns"].min()) for t in (g, rt, ops, rng) if len(t)]
    base = min(starts) if starts else 0
    base -= base % 1000
    ev: list[dict[str, Any]] = []
    multi = len(ranks) > 1

    def pid(rank: int, p: Any) -> str:
        return f"rank {rank} {_text(p)}" if multi else _text(p)

    for t, cat in ((ops, "cpu_op"), (rt, "cuda_runtime"), (rng, "user_annotation")):
        t = t[t["rank"].isin(ranks)]
        for r in t.itertuples(index=False):
            e = {
                "ph": "X",
                "cat": cat,
                "name": _text(r.name),
                "pid": pid(r.rank, r.process),
                "tid": _text(r.thread),
                "ts": _us(r.start_ns, base),
                "dur": round(int(r.dur_ns) / 1000.0, 3),
            }
            if cat == "cuda_runtime" and r.correlation == r.correlation:
                e["args"] = {"correlation": int(r.correlation)}
            ev.append(e)
    g = g[g["rank"].isin(ranks)]
    for r in g.itertuples(index=False):
        kind = str(r.kind)
        e = {
            "ph": "X",
            "cat": {"kernel": "kernel", "memcpy": "gpu_memcpy", "memset": "gpu_memset"}.get(
                kind, "cuda_sync"
            ),
            "name": _text(r.name),
            "pid": pid(r.rank, int(r.device) if r.device == r.device else 0),
            "tid": int(r.stream) if r.stream == r.stream else 0,
            "ts": _us(r.start_ns, base),
            "dur": round(int(r.dur_ns) / 1000.0, 3),
        }
        if r.correlation == r.correlation:
            e["args"] = {"correlation": int(r.correlation)}
        ev.append(e)
    # the path: flows between consecutive items, and its own track
    fid = 0
    host_place = {}
    for r in rt.itertuples(index=False):
        host_place[(int(r.rank), int(r.start_ns))] = (pid(r.rank, r.process), _text(r.thread))
    gpu_place = {}
    for r in g.itertuples(index=False):
        gpu_place[(int(r.rank), int(r.start_ns), int(r.stream) if r.stream == r.stream else 0)] = (
            pid(r.rank, int(r.device) if r.device == r.device else 0),
            int(r.stream) if r.stream == r.stream else 0,
        )
    for m in models:
        G = m.graph
        o = G.origin_ns
        prev = None
        for s in m.path.segments:
            a, b = o + s.start, o + s.end
            label = CATEGORY_LABELS[CATEGORIES[s.cat]]
            name = label
            place: tuple[str, Any] | None = None
            if s.node == GPU:
                name = f"{label}: {_text(G.g_name[s.item])}"
                place = gpu_place.get((G.rank, int(o + G.g_start[s.item]), int(G.g_stream[s.item])))
            elif s.node == HOST:
                name = f"{label}: {_text(G.h_name[s.item])}"
                place = host_place.get((G.rank, int(o + G.h_start[s.item])))
            ev.append(
                {
                    "ph": "X",
                    "cat": "critical_path",
                    "name": name,
                    "pid": PATH_PID,
                    "tid": f"rank {G.rank}" if multi else "path",
                    "ts": _us(a, base),
                    "dur": round((b - a) / 1000.0, 3),
                    "args": {"step": G.step, "category": CATEGORIES[s.cat]},
                }
            )
            if place is not None:
                if prev is not None and prev[0] != place:
                    fid += 1
                    ev.append(
                        {
                            "ph": "s",
                            "cat": "critical_path",
                            "name": "critical_path",
                            "id": fid,
                            "pid": prev[0][0],
                            "tid": prev[0][1],
                            "ts": prev[1],
                        }
                    )
                    ev.append(
                        {
                            "ph": "f",
                            "bp": "e",
                            "cat": "critical_path",
                            "name": "critical_path",
                            "id": fid,
                            "pid": place[0],
                            "tid": place[1],
                            "ts": _us(max(a, o + s.start), base),
                        }
                    )
                prev = (place, _us(b - min(b - a, 1), base))
    ev.append(
        {
            "ph": "M",
            "name": "process_name",
            "pid": PATH_PID,
            "args": {"name": "critical path (traceinsight)"},
        }
    )
    return {
        "schemaVersion": 1,
        "traceName": "critical path overlay",
        "baseTimeNanoseconds": int(base),
        "displayTimeUnit": "ms",
        "traceEvents": ev,
        **({"distributedInfo": {"rank": ranks[0]}} if len(ranks) == 1 else {}),
    }


def write_overlay(store, models: list, out: str | Path) -> int:
    """Write the overlay to ``out`` (gzip when it ends in .gz); returns the event count."""
    doc = overlay_events(store, models)
    text = json.dumps(doc, separators=(",", ":"))
    out = Path(out)
    if out.name.endswith(".gz"):
        out.write_bytes(gzip.compress(text.encode()))
    else:
        out.write_text(text, encoding="utf-8")
    return len(doc["traceEvents"])
