"""Waiting apart from transfer in collectives matched across ranks, and what the last rank to
arrive was doing meanwhile.

A collective cannot move data before its last participant arrives: every rank's kernel starts
when that rank reaches it and ends when the exchange ends on all. Per matched collective
(``collectives.py`` matches them), its **transfer** is the shortest duration among its ranks
(the last arrival's: it waits for no one) and each rank's **wait** its duration less the
transfer, spent at the start of its kernel. The waiting is the arrival skew's cost, not the
fabric's: a faster link or a smaller message does not shorten it.

- **Exposed waiting** of a rank: the part of its waits (``[start, start + wait)``) during which
  no compute kernel of that rank runs, summed over its collectives inside step windows, at most
  its exposed communication. ``exposed_comm_pct`` less this is the exposed *transfer*.
- **Who causes it**: a collective's waiting is charged to the rank that arrived last (after
  clock alignment); the straggler is the rank charged with the most waiting.
- **What it was doing** before it arrived: over each collective it reached last, the stretch
  of its own timeline ``[arrival - skew, arrival)`` (while the first rank was already waiting),
  split into compute kernels, other GPU work (copies, other communication), and GPU idle time by
  the cause of its idle gaps (``idle.py``): input (data loading), host (stalls, launch overhead,
  syncs, allocator, compile), device wait (queued behind other streams), unknown.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from traceinsight.analysis import Analysis, by_rank
from traceinsight.analysis import intervals as iv
from traceinsight.analysis.collectives import _clock_offsets, _match, _records

__all__ = ["BEFORE_PARTS", "before_arrival", "exposed_waits", "matched_waits"]

#: what the last rank did before arriving, in the order they are reported
BEFORE_PARTS = ("compute", "host", "input", "device wait", "other GPU work", "unknown")
#: idle-gap cause labels (``idle._LABEL``) -> the part they count in
_IDLE_PART = {
    "input": "input",
    "device wait": "device wait",
    "unknown": "unknown",
}


def matched_waits(summaries: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per rank and matched collective: ``rank``, ``key``, ``step``, ``start_ns``
    (the rank's own clock), ``dur_ns``, ``transfer_ns``, ``wait_ns``, ``last_rank`` (-1: all
    arrived together) and ``skew_ns`` (last arrival - first, aligned clocks)."""
    cols = ["rank", "key", "step", "start_ns", "dur_ns", "transfer_ns", "wait_ns"]
    recs = _records(summaries)
    m = _match(recs)
    if not len(m):
        return pd.DataFrame(columns=[*cols, "last_rank", "skew_ns"])
    ranks = sorted({int(s["rank"]) for s in summaries})
    offsets = _clock_offsets(m, ranks)
    d = m[["rank", "key", "step", "start_ns", "dur_ns"]].copy()
    d["transfer_ns"] = d.groupby("key")["dur_ns"].transform("min")
    d["wait_ns"] = d["dur_ns"] - d["transfer_ns"]
    d["astart"] = d["start_ns"] - d["rank"].map(offsets).astype(np.int64)
    g = d.groupby("key", sort=False)["astart"]
    d["skew_ns"] = g.transform("max") - g.transform("min")
    last = d.loc[g.idxmax().to_numpy(), ["key", "rank"]].set_index("key")["rank"]
    d["last_rank"] = d["key"].map(last).astype(np.int64)
    d.loc[d["skew_ns"] <= 0, "last_rank"] = -1
    return d.drop(columns="astart").reset_index(drop=True)


def _compute_union(an: Analysis, rank: int) -> tuple[np.ndarray, np.ndarray]:
    """The union of ``rank``'s compute (non-communication) kernels."""
    key = "collective_waits_compute"
    g = an.attribution.gpu
    if an.cache.get(key, (None,))[0] is not g:  # every rank's, selected once (not rank by rank)
        if len(g):
            m = (g["kind"].astype(object) == "kernel").to_numpy(bool) & (
                g["cls"].astype(object) != "communication"
            ).to_numpy(bool)
            r = g["rank"].to_numpy()[m]
            s = g["start_ns"].to_numpy(np.int64)[m]
            e = g["end_ns"].to_numpy(np.int64)[m]
            order = np.argsort(r, kind="stable")
            r, s, e = r[order], s[order], e[order]
            ranks, first = np.unique(r, return_index=True)
            bounds = [*first[1:], len(r)]
            per = {int(k): (s[a:b], e[a:b]) for k, a, b in zip(ranks, first, bounds, strict=True)}
        else:
            per = {}
        an.cache[key] = (g, per)
    s, e = an.cache[key][1].get(rank, (np.empty(0, np.int64), np.empty(0, np.int64)))
    return iv.union(s, e)


def exposed_waits(an: Analysis, waits: pd.DataFrame) -> pd.Series:
    """Per row of ``waits`` (:func:`matched_waits`): the ns of its wait with no compute kernel
    of its rank running (0 outside step windows); each rank's sum capped at its exposed
    communication."""
    out = pd.Series(np.zeros(len(waits), dtype=np.int64), index=waits.index)
    if not len(waits):
        return out
    bd = an.breakdown
    for rank, d in waits[(waits["wait_ns"] > 0) & waits["step"].notna()].groupby("rank"):
        C = _compute_union(an, int(rank))
        s = d["start_ns"].to_numpy(np.int64)
        e = s + d["wait_ns"].to_numpy(np.int64)
        exposed = (e - s) - iv.overlap_with_windows(C, s, e)
        cap = bd.ranks[int(rank)].comm_exposed_ns if int(rank) in bd.ranks else 0
        total = int(exposed.sum())
        if total > cap:  # overlapping comm kernels counted once, as the breakdown does
            exposed = np.floor(exposed * (cap / total)).astype(np.int64)
        out.loc[d.index] = exposed
    return out


def before_arrival(an: Analysis, waits: pd.DataFrame, rank: int) -> dict[str, Any] | None:
    """What ``rank`` was doing while the others waited for it: ns per part of
    :data:`BEFORE_PARTS` over the collectives it reached last, their count and the waiting
    they cost the others (None: it was never last)."""
    mine = waits[(waits["rank"] == rank) & (waits["last_rank"] == rank) & (waits["skew_ns"] > 0)]
    if not len(mine):
        return None
    ws = (mine["start_ns"] - mine["skew_ns"]).to_numpy(np.int64)
    we = mine["start_ns"].to_numpy(np.int64)
    W = iv.union(ws, we)
    g = by_rank.rows(an.attribution.gpu, rank)
    C = _compute_union(an, rank)
    busy = iv.union(g["start_ns"].to_numpy(np.int64), g["end_ns"].to_numpy(np.int64))
    parts = dict.fromkeys(BEFORE_PARTS, 0)
    parts["compute"] = iv.length(iv.intersect(W, C))
    parts["other GPU work"] = iv.length(iv.intersect(W, busy)) - parts["compute"]
    idle = iv.subtract(W, busy)
    idle_ns = iv.length(idle)
    from traceinsight.analysis.idle import idle_split

    wins = [w for w in an.attribution.steps if w.rank == rank]
    _, gaps = idle_split(an, rank, g, wins, top=None) if len(g) and wins else (None, [])
    told = 0
    for label in {str(x["cause"]) for x in gaps}:
        sel = [x for x in gaps if x["cause"] == label]
        gs = np.array([x["start_ns"] for x in sel], dtype=np.int64)
        ge = gs + np.array([x["dur_ns"] for x in sel], dtype=np.int64)
        n = iv.length(iv.intersect(idle, iv.union(gs, ge)))
        parts[_IDLE_PART.get(label, "host")] += n
        told += n
    parts["unknown"] += max(0, idle_ns - told)
    lead = max(BEFORE_PARTS, key=lambda k: parts[k])
    others = waits[(waits["key"].isin(set(mine["key"]))) & (waits["rank"] != rank)]
    return {
        "collectives": len(mine),
        "skew_ns": int(mine["skew_ns"].sum()),
        "caused_wait_ns": int(others["wait_ns"].sum()),
        "parts_ns": {k: int(v) for k, v in parts.items()},
        "cause": lead if parts[lead] > 0 else None,
    }
