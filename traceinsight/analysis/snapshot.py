"""Memory snapshots: fragmentation from the allocator's own state, OOM post-mortems, memory
over time (docs/FORMATS.md §2.3).

Per snapshot device: R reserved = Σ segment bytes; A allocated = Σ allocated blocks; Q their
requested bytes; P pending_free blocks; F inactive (free, cached) blocks, of which Fs lie in
segments that still hold a live or pending block (*stranded*: ``empty_cache()`` cannot return
them) and Fr in wholly free segments (*releasable*); Lmax the largest free block. Always
(A − Q) + F + P + Q = R, and PyTorch's ``segsum`` reads the same split as internal (A − Q) and
external (F + P) free memory. The trace (``allocator_replay``) adds the curves, the peak and
what was live at it, the state at each OOM and the iterations.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from traceinsight.analysis import allocator_replay as ar

MAX_MAP_SEGMENTS = 48
MAX_MAP_BLOCKS = 160
TOP = 10
OUTSIDE = "[allocated before the trace]"
SPLIT = "[the rest of a split segment]"
UNKNOWN_SITE = "[no frames recorded]"


def snapshot_views(an: Any) -> list[dict[str, Any]]:
    """One view per (rank, device) of the store's memory snapshots, computed once."""
    if "snapshots" not in an.cache:
        an.cache["snapshots"] = build(an.store)
    return an.cache["snapshots"]


def build(store: Any) -> list[dict[str, Any]]:
    segs = store.table("memory_segments")
    if not segs.num_rows and not store.table("memory_actions").num_rows:
        return []
    blocks = store.table("memory_blocks")
    actions = _actions(store.table("memory_actions"))
    keys = sorted(
        {(r, d) for r, d in zip(segs["rank"].to_pylist(), segs["device"].to_pylist())}
        | set(zip(actions["rank"], actions["device"]))
    )
    seg_rows, blk_rows = _rows(segs), _rows(blocks)
    out = []
    for rank, dev in keys:
        s = [x for x in seg_rows if x["rank"] == rank and x["device"] == dev]
        b = [x for x in blk_rows if x["rank"] == rank and x["device"] == dev]
        a = actions[(actions["rank"] == rank) & (actions["device"] == dev)]
        out.append(device_view(int(rank), int(dev), s, b, a.sort_values("seq", kind="stable")))
    return out


def _rows(t: pa.Table) -> list[dict[str, Any]]:
    return t.cast(
        pa.schema(
            [
                pa.field(f.name, pa.string() if pa.types.is_dictionary(f.type) else f.type)
                for f in t.schema
            ]
        )
    ).to_pylist()


def _actions(t: pa.Table) -> pd.DataFrame:
    df = t.select(
        [
            "rank",
            "device",
            "seq",
            "ts_ns",
            "action",
            "addr",
            "size_bytes",
            "device_free_bytes",
            "call_site",
            "frames",
        ]
    ).to_pandas()
    for c in ("action", "call_site", "frames"):
        df[c] = df[c].astype(object).where(df[c].notna(), None)
    df["addr"] = df["addr"].fillna(-1).astype(np.int64)
    df["size_bytes"] = df["size_bytes"].fillna(0).astype(np.int64)
    return df


def totals(segs: list[dict[str, Any]], blocks: list[dict[str, Any]]) -> dict[str, Any]:
    """R, A, Q, P, F, Fs, Fr, Lmax overall and per pool (small, large)."""
    busy = defaultdict(bool)
    for b in blocks:
        if b["state"] != "inactive":
            busy[b["segment_address"]] = True

    def of(pool: str | None) -> dict[str, int]:
        ss = [s for s in segs if pool is None or s["pool"] == pool]
        addrs = {s["address"] for s in ss}
        bs = [b for b in blocks if b["segment_address"] in addrs] if pool else blocks
        free = [b["size_bytes"] for b in bs if b["state"] == "inactive"]
        alloc = [b for b in bs if b["state"] == "allocated"]
        return {
            "segments": len(ss),
            "reserved": sum(s["total_bytes"] for s in ss),
            "allocated": sum(b["size_bytes"] for b in alloc),
            "requested": sum(b["requested_bytes"] or b["size_bytes"] for b in alloc),
            "pending": sum(b["size_bytes"] for b in bs if b["state"] == "pending_free"),
            "free": sum(free),
            "stranded": sum(
                b["size_bytes"]
                for b in bs
                if b["state"] == "inactive" and busy[b["segment_address"]]
            ),
            "largest_free": max(free, default=0),
            "free_blocks": len(free),
        }

    out: dict[str, Any] = of(None)
    out["releasable"] = out["free"] - out["stranded"]
    out["rounding"] = out["allocated"] - out["requested"]
    out["small"], out["large"] = of("small"), of("large")
    out["blocks_bytes"] = sum(b["size_bytes"] for b in blocks)
    return out


def device_view(
    rank: int,
    device: int,
    segs: list[dict[str, Any]],
    blocks: list[dict[str, Any]],
    actions: pd.DataFrame,
) -> dict[str, Any]:
    """Everything the metrics, rules and report say about one snapshot device."""
    t = totals(segs, blocks)
    view: dict[str, Any] = {
        "rank": rank,
        "device": device,
        "totals": t,
        "actions": len(actions),
        "notes": [],
    }
    if t["blocks_bytes"] != t["reserved"]:
        view["notes"].append(
            f"blocks cover {t['blocks_bytes']:,} of {t['reserved']:,} reserved bytes"
        )
    rp = ar.replay(actions, t["allocated"], t["reserved"])
    if rp.mismatch_bytes:
        view["notes"].append(
            f"the trace and the snapshot disagree by {rp.mismatch_bytes:,} "
            "bytes (the trace is incomplete)"
        )
        view["contradiction"] = {
            "bytes": rp.mismatch_bytes,
            "omitted_actions": rp.consistent_from,
            "actions": len(actions),
        }
    view["holes"] = holes(segs, blocks, actions)
    view["churn"] = churn(actions)
    view["ooms"] = ooms(rp, blocks, segs)
    view["oom_count"] = int((actions["action"] == "oom").sum())
    n = len(actions)
    k = (rp.peak_index or 0) if n else -1
    st = ar.state_at(rp, k, blocks, segs)
    smap = ar.segment_map(st)
    view["peak"] = {
        "index": k,
        "at_snapshot": k == n - 1,
        "axis": rp.time_axis,
        "x": int(rp.x[k]) if n else None,
        "allocated": int(rp.allocated[k]) if n else t["allocated"],
        "reserved": int(rp.reserved[k]) if n else t["reserved"],
        "reserved_peak": int(rp.reserved.max()) if n else t["reserved"],
        "map_totals": ar.map_totals(smap),
        "live": live_sites(st),
        "top_allocations": top_allocations(st),
    }
    view["history"] = ar.history(rp, view["peak"], view["ooms"]) if n else None
    view["segment_map"] = _cap_map(smap)
    view["segment_map_snapshot"] = (
        None if k == n - 1 else _cap_map(ar.segment_map(ar.state_at(rp, n - 1, blocks, segs)))
    )
    view["curve"] = ar.curve(rp) if len(actions) else None
    view["iterations"] = _iterations(rp, blocks, actions)
    return view


def holes(
    segs: list[dict[str, Any]], blocks: list[dict[str, Any]], actions: pd.DataFrame
) -> list[dict[str, Any]]:
    """The stranded free blocks grouped by the allocation that last held them (the trace's
    last ``alloc`` at that address, else the block's own frames): which call sites and sizes
    leave the holes."""
    busy = {b["segment_address"] for b in blocks if b["state"] != "inactive"}
    last_alloc: dict[int, str | None] = {}
    allocs = actions[actions["action"] == "alloc"]
    made = set(actions.loc[actions["action"].isin(["segment_alloc", "segment_map"]), "addr"])
    for addr, site in zip(allocs["addr"].to_numpy(), allocs["call_site"].to_numpy()):
        last_alloc[int(addr)] = site
    groups: dict[str, dict[str, Any]] = {}
    for b in blocks:
        if b["state"] != "inactive" or b["segment_address"] not in busy:
            continue
        site = last_alloc.get(b["address"]) if b["address"] in last_alloc else b["call_site"]
        if b["address"] in last_alloc:
            key = site or UNKNOWN_SITE
        else:
            key = site or (SPLIT if b["segment_address"] in made else OUTSIDE)
        g = groups.setdefault(key, {"call_site": key, "holes": 0, "bytes": 0, "sizes": []})
        g["holes"] += 1
        g["bytes"] += b["size_bytes"]
        g["sizes"].append(b["size_bytes"])
    out = sorted(groups.values(), key=lambda g: -g["bytes"])[:TOP]
    for g in out:
        g["largest"] = max(g["sizes"])
        g["sizes"] = sorted(set(g["sizes"]), reverse=True)[:6]
    return out


def churn(actions: pd.DataFrame) -> list[dict[str, Any]]:
    """Allocations per call site in the trace: how many, how many distinct sizes (many sizes
    from one site, e.g. variable sequence lengths, split segments into odd holes)."""
    a = actions[actions["action"] == "alloc"]
    if not len(a):
        return []
    df = pd.DataFrame(
        {"site": a["call_site"].fillna(UNKNOWN_SITE).to_numpy(), "size": a["size_bytes"].to_numpy()}
    )
    g = (
        df.groupby("site")
        .agg(
            allocations=("size", "size"),
            sizes=("size", "nunique"),
            bytes=("size", "sum"),
            largest=("size", "max"),
        )
        .reset_index()
    )
    g = g.sort_values(["sizes", "bytes"], ascending=False).head(TOP)
    return [
        {
            "call_site": r.site,
            "allocations": int(r.allocations),
            "sizes": int(r.sizes),
            "bytes": int(r.bytes),
            "largest": int(r.largest),
        }
        for r in g.itertuples()
    ]


def ooms(
    rp: ar.Replay, blocks: list[dict[str, Any]], segs: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Each OOM (the last 4): the request, what the driver had free, what the allocator held
    free then in total and in its largest block. ``cached_enough``: free device memory plus
    free cached bytes would have served the request, but no free block was large enough."""
    a = rp.actions
    idx = np.flatnonzero(a["action"].astype(str).to_numpy() == "oom")
    out = []
    for k in idx[-4:]:
        row = a.iloc[int(k)]
        totals_k = ar.map_totals(ar.segment_map(ar.state_at(rp, int(k), blocks, segs)))
        request = int(row["size_bytes"])
        dev_free = row["device_free_bytes"]
        dev_free = None if pd.isna(dev_free) else int(dev_free)
        avail = totals_k["free"] + (dev_free or 0)
        out.append(
            {
                "seq": int(row["seq"]),
                "x": int(rp.x[k]),
                "request": request,
                "device_free": dev_free,
                "reserved": int(rp.reserved[k]),
                "allocated": int(rp.allocated[k]),
                "free_cached": totals_k["free"],
                "stranded": totals_k["stranded"],
                "largest_free": totals_k["largest_free"],
                "cached_enough": avail >= request > totals_k["largest_free"],
                "call_site": row["call_site"],
                "frames": row["frames"],
            }
        )
    return out


def live_sites(st: ar.State) -> list[dict[str, Any]]:
    """What was live at a moment, by call site (bytes, allocations)."""
    g: dict[str, dict[str, Any]] = {}
    for size, site, _frames in st.live.values():
        key = site or UNKNOWN_SITE
        x = g.setdefault(key, {"call_site": key, "bytes": 0, "allocations": 0})
        x["bytes"] += size
        x["allocations"] += 1
    return sorted(g.values(), key=lambda x: -x["bytes"])[:TOP]


def top_allocations(st: ar.State, n: int = 8) -> list[dict[str, Any]]:
    """The largest live allocations at a moment, with their frames."""
    rows = sorted(st.live.items(), key=lambda kv: -kv[1][0])[:n]
    return [
        {"address": addr, "bytes": size, "call_site": site or UNKNOWN_SITE, "frames": frames or ""}
        for addr, (size, site, frames) in rows
    ]


def _iterations(
    rp: ar.Replay, blocks: list[dict[str, Any]], actions: pd.DataFrame
) -> dict[str, Any] | None:
    it = ar.iterations(rp.allocated)
    if it is None:
        return None
    first, last = it["troughs"][0], it["troughs"][-1]
    live_end = {b["address"] for b in blocks if b["state"] == "allocated"}
    open_allocs: dict[int, int] = {}  # addr -> index of its alloc, while not freed
    kinds = actions["action"].to_numpy()
    addrs = actions["addr"].to_numpy(np.int64)
    for i, (kind, addr) in enumerate(zip(kinds, addrs)):
        if kind == "alloc":
            open_allocs[int(addr)] = i
        elif kind in ("free_requested", "free"):
            open_allocs.pop(int(addr), None)
    sites = actions["call_site"].to_numpy()
    sizes = actions["size_bytes"].to_numpy(np.int64)
    g: dict[str, dict[str, Any]] = {}
    for addr, i in open_allocs.items():
        if not first < i <= last or addr not in live_end:
            continue
        key = sites[i] or UNKNOWN_SITE
        x = g.setdefault(key, {"call_site": key, "bytes": 0, "allocations": 0})
        x["bytes"] += int(sizes[i])
        x["allocations"] += 1
    it["survivors"] = sorted(g.values(), key=lambda x: -x["bytes"])[:TOP]
    it["x"] = [int(rp.x[i]) for i in it["troughs"]]
    return it


def _cap_map(smap: list[dict[str, Any]]) -> dict[str, Any]:
    """The largest segments (and their first blocks) for the report."""
    segs = sorted(smap, key=lambda s: (-s["bytes"], s["address"]))
    shown = []
    for s in segs[:MAX_MAP_SEGMENTS]:
        shown.append(
            {
                **s,
                "blocks": s["blocks"][:MAX_MAP_BLOCKS],
                "more_blocks": max(0, len(s["blocks"]) - MAX_MAP_BLOCKS),
            }
        )
    return {
        "segments": shown,
        "more_segments": max(0, len(segs) - MAX_MAP_SEGMENTS),
        "more_bytes": sum(s["bytes"] for s in segs[MAX_MAP_SEGMENTS:]),
    }
