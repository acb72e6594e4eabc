"""What the capture left out: checks of the recorded GPU activity against what the host launched.

Each check counts what is missing; the diagnostics (``metrics/completeness.py``) say how many
and what that does to the verdicts, and the idle split (:mod:`.idle`) calls idle inside an
incompletely recorded graph replay ``unrecorded`` instead of giving it a host-side cause.

- **graph replays** (``cudaGraphLaunch`` / ``hipGraphLaunch``: one correlation id for all the
  nodes of one replay). The nodes of a replay run back to back on the device, so a replay is
  *incompletely recorded* when the union of its recorded nodes has a hole of ``HOLE_MIN_NS`` or
  more between its first and last node, when a memset is followed by such a hole or ends the
  replay (the kernel it zeroes a buffer for, e.g. a split-K GEMM, was not recorded), or when it
  holds under ``SHORT_RATIO`` of the kernels of the largest replay of the same graph (same
  stream, launching op and first node: the replays of one graph run the same nodes).
- **kernels without a launch record**: GPU kernels whose correlation id names no runtime call
  (outside a graph replay): their op is unknown and the idle before them has no host side.
- **truncated tail**: kernel and graph launches after the launch of the last recorded GPU
  activity whose activity was never recorded: the profiler stopped before the GPU ran them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from traceinsight.analysis import Analysis, attribution_parts, by_rank
from traceinsight.analysis import intervals as iv
from traceinsight.analysis.attribution import name_matches

HOLE_MIN_NS = 10_000  #: a hole between the recorded nodes of one replay at or above this
SHORT_RATIO = 0.5  #: a replay with fewer than this share of its graph's largest kernel count
GRAPH_LAUNCH = "GraphLaunch"


@dataclass
class RankCompleteness:
    """One rank's completeness checks."""

    replays: int = 0  #: graph replays (correlation ids of graph launches with activity)
    incomplete: int = 0  #: replays flagged incompletely recorded
    short: int = 0  #: ... of which hold too few kernels against their graph's largest replay
    holed: int = 0  #: ... of which hold a hole between recorded nodes
    memsets_alone: int = 0  #: memsets in replays followed by a hole or ending the replay
    hole_ns: int = 0  #: the holes between recorded nodes of incomplete replays
    spans: tuple[np.ndarray, np.ndarray] = field(
        default_factory=lambda: (np.zeros(0, np.int64), np.zeros(0, np.int64))
    )  #: [first start, last end] of each incomplete replay (a union)
    no_launch: int = 0  #: kernels (outside graph replays) without a launch record
    no_launch_ns: int = 0
    no_launch_before_first: int = 0  #: ... of which ran before the first recorded launch
    tail_launches: int = 0  #: launches after the last recorded activity's launch, never run
    tail_ns: int = 0  #: from the first such launch to the end of the last launch call


def completeness(an: Analysis, rank: int) -> RankCompleteness:
    """The checks of one rank, computed once."""
    cache = an.cache.setdefault("completeness", {})
    if rank not in cache:
        cache[rank] = _rank(an, rank)
    return cache[rank]


def _ranks(an: Analysis) -> dict[int, RankCompleteness]:
    """The checks of every rank of ``an``'s store (a rank partition's, in its worker)."""
    ranks = {int(r["rank"]) for r in an.store.ranks if r.get("rank") is not None}
    return {r: completeness(an, r) for r in sorted(ranks)}


# checked per rank partition next to its attribution (in the worker that reads it)
attribution_parts.product("completeness", __name__, _ranks, attribution_parts.merge_dicts)


def _rank(an: Analysis, rank: int) -> RankCompleteness:
    out = RankCompleteness()
    g = by_rank.rows(an.attribution.gpu, rank)
    if not len(g):
        return out
    lname = g["launch_name"].to_numpy()
    is_graph = np.array([isinstance(x, str) and GRAPH_LAUNCH in x for x in lname], dtype=bool)
    if is_graph.any():
        _replays(g[is_graph], out)
    kern = (g["kind"] == "kernel").to_numpy()
    lt = g["launch_start_ns"].to_numpy(np.int64)
    nol = kern & (lt < 0) & ~is_graph
    out.no_launch = int(nol.sum())
    out.no_launch_ns = int(g["dur_ns"].to_numpy(np.int64)[nol].sum())
    if out.no_launch:
        first_launch = int(lt[lt >= 0].min()) if (lt >= 0).any() else None
        starts = g["start_ns"].to_numpy(np.int64)[nol]
        out.no_launch_before_first = (
            out.no_launch if first_launch is None else int((starts < first_launch).sum())
        )
    _tail(an, rank, g, lt, out)
    return out


def _replays(rep: pd.DataFrame, out: RankCompleteness) -> None:
    rep = rep[rep["correlation"].notna()]
    if not len(rep):
        return
    df = pd.DataFrame(
        {
            "corr": rep["correlation"].astype(np.int64).to_numpy(),
            "key": rep["stream"].astype(str).to_numpy() + "|" + rep["op"].astype(str).to_numpy(),
            "kind": rep["kind"].astype(str).to_numpy(),
            "name": rep["name"].astype(str).to_numpy(),
            "s": rep["start_ns"].to_numpy(np.int64),
            "e": rep["end_ns"].to_numpy(np.int64),
        }
    ).sort_values(["corr", "s", "e"], kind="stable")
    kernels = df[df["kind"] == "kernel"].groupby("corr").size()
    # one graph: the same stream, launching op and first node (pieces of a piecewise-captured
    # model differ in their first node)
    first = df.groupby("corr")["name"].first()
    key = df.groupby("corr")["key"].first() + "|" + first
    n_k = kernels.reindex(key.index).fillna(0).astype(np.int64)
    most = n_k.groupby(key).transform("max")
    members = key.groupby(key).transform("size")
    short = (members >= 2) & (n_k < SHORT_RATIO * most)
    ss, se = [], []
    for corr, grp in df.groupby("corr", sort=False):
        s, e, kind = grp["s"].to_numpy(), grp["e"].to_numpy(), grp["kind"].to_numpy()
        us, ue = iv.union(s, e)
        holes = us[1:] - ue[:-1]
        big = holes >= HOLE_MIN_NS
        # a memset followed by a hole (or ending the replay): its kernel was not recorded
        nxt = np.searchsorted(us, e, side="left")  # the union piece starting at/after its end
        gap_after = np.where(nxt < len(us), us[np.clip(nxt, 0, len(us) - 1)] - e, -1)
        ends_union = np.isin(e, ue)
        alone = (kind == "memset") & ends_union & ((gap_after >= HOLE_MIN_NS) | (gap_after < 0))
        out.replays += 1
        flagged = bool(big.any() or alone.any() or short.get(corr, False))
        if not flagged:
            continue
        out.incomplete += 1
        out.short += int(bool(short.get(corr, False)))
        out.holed += int(bool(big.any()))
        out.memsets_alone += int(alone.sum())
        out.hole_ns += int(holes[big].sum())
        ss.append(int(us[0]))
        se.append(int(ue[-1]))
    if ss:
        out.spans = iv.union(np.array(ss, np.int64), np.array(se, np.int64))


def _tail(an: Analysis, rank: int, g: pd.DataFrame, lt: np.ndarray, out: RankCompleteness) -> None:
    """Launch calls after the launch of the last recorded activity whose activity is missing."""
    from traceinsight.analysis.idle import LAUNCH_CALL_RE

    rt = by_rank.rows(an.attribution.runtime, rank)
    if not len(rt) or not (lt >= 0).any():
        return
    names = rt["name"].astype(str).to_numpy()
    launch = name_matches(names, LAUNCH_CALL_RE) | np.array(
        [GRAPH_LAUNCH in x for x in names], dtype=bool
    )
    corr = rt["correlation"].to_numpy()
    has_corr = pd.notna(corr)
    seen = set(pd.Series(g["correlation"]).dropna().astype(np.int64).tolist())
    s = rt["start_ns"].to_numpy(np.int64)
    e = s + rt["dur_ns"].to_numpy(np.int64)
    last = int(lt.max())
    cand = launch & has_corr & (s > last) & ~_in_capture(names, s, e)
    if not cand.any():
        return
    idx = np.flatnonzero(cand)
    missing = np.array([int(corr[i]) not in seen for i in idx], dtype=bool)
    idx = idx[missing]
    if not len(idx):
        return
    out.tail_launches = len(idx)
    out.tail_ns = int(e[idx].max() - s[idx].min())


def _in_capture(names: np.ndarray, s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Calls made while a stream capture is open (Begin..EndCapture): a launch captured into a
    graph runs nothing, so it has no GPU record by nature."""
    from traceinsight.analysis.idle import BEGIN_CAPTURE_RE, END_CAPTURE_RE

    b = np.sort(s[name_matches(names, BEGIN_CAPTURE_RE)])
    if not len(b):
        return np.zeros(len(s), dtype=bool)
    ends = np.sort(e[name_matches(names, END_CAPTURE_RE)])
    j = np.searchsorted(ends, b, side="left")
    be = np.where(j < len(ends), ends[np.clip(j, 0, max(len(ends) - 1, 0))] if len(ends) else 0, 0)
    be = np.where(j < len(ends), be, np.iinfo(np.int64).max)
    k = np.searchsorted(b, s, side="right") - 1
    return (k >= 0) & (s < be[np.clip(k, 0, None)])


def unrecorded_overlap(an: Analysis, rank: int, cs: np.ndarray, ce: np.ndarray) -> np.ndarray:
    """Per idle gap [cs, ce): how much of it lies inside an incompletely recorded replay."""
    spans = completeness(an, rank).spans
    if not len(spans[0]) or not len(cs):
        return np.zeros(len(cs), np.int64)
    return iv.overlap_with_windows(spans, cs, ce)
