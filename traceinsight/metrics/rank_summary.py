"""Per-rank summaries: what the cross-rank analysis needs of one rank, small and JSON-ready.

A summary holds a rank's totals (the per-rank row of the result's summary, computed by the
same code), its step windows with their time split (compute, GPU idle, communication and its
exposed part) and one record per communication kernel (collective kind, process group, sequence
number where recorded, stream, step, start, duration, message size). It is computed from an
:class:`~traceinsight.analysis.Analysis` of any store that holds the rank: the rank's own
partition (``rank=N/``, read alone by a worker: :func:`summarize_partition`), or a whole store
already analysed in this process. Both give the same summary (``tests/test_ranks.py``).

A partition's summary is cached in its ``derived/`` folder, keyed by the code and the rank's
source, so a second diagnosis of the job reads it back.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pandas as pd

from traceinsight.analysis import Analysis, attribution_parts, by_rank
from traceinsight.metrics.registry import MetricSet
from traceinsight.store import partitions, schema
from traceinsight.util.resources import code_digest

if TYPE_CHECKING:
    from traceinsight.store.core import TraceStore

__all__ = [
    "STEP_KEYS",
    "RankTask",
    "rank_rows",
    "rank_summary",
    "summaries",
    "summarize_partition",
]

#: the time split of a step window kept per rank
STEP_KEYS = (
    "wall_ns",
    "busy_ns",
    "idle_ns",
    "compute_ns",
    "comm_ns",
    "comm_exposed_ns",
    "memcpy_exposed_ns",
    "memset_exposed_ns",
    "kernels",
)
#: the columns of a rank's collective records
COLL_KEYS = ("kind", "pg", "seq", "stream", "step", "start_ns", "dur_ns", "bytes", "group_size")
SUMMARY_VERSION = 2


def summaries(an: Analysis, ms: MetricSet | None = None) -> list[dict[str, Any]]:
    """The summary of every rank of the store ``an`` analyses, in rank order (``ms``: its
    metrics when already computed, for the per-rank memory peaks)."""
    if ms is None:
        from traceinsight.metrics import memory

        ms = MetricSet()
        memory.rank_peaks(an, ms)  # all a rank's summary reads of the memory group
    ranks = sorted({int(r["rank"]) for r in an.store.ranks})
    g = an.attribution.gpu
    by_rank = {int(k): v for k, v in g.groupby("rank", sort=False)} if len(ranks) > 1 else {}
    return [
        rank_summary(an, rank, ms, by_rank.get(rank, g.iloc[:0]) if by_rank else None)
        for rank in ranks
    ]


def _partition_summaries(an: Analysis) -> list[dict[str, Any]]:
    """The summaries of a partition's ranks from its own analysis, saved in the partition as
    :func:`summarize_partition` saves them (read back by a later ``--scheduler`` run)."""
    out = summaries(an)
    store = an.store
    group = partitions.names(store.meta)  # a task's group of partitions: each saves its own
    for part in [partitions.open_meta(store.path, n) for n in group] if group else [store]:
        ranks = {int(r["rank"]) for r in part.ranks}
        mine = [s for s in out if s["rank"] in ranks] if group else out
        part.write_derived(_cache_name(part), json.dumps(mine))
    return out


# every rank's summary, computed per rank partition next to its attribution (in the worker that
# reads it), as the partition's own analysis gives it (``summarize_partition``)
attribution_parts.product(
    "rank_summaries", __name__, _partition_summaries, attribution_parts.concat_lists
)


def _q(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    a = np.array(values, dtype=np.float64)
    return {
        "p50": float(np.percentile(a, 50)),
        "p90": float(np.percentile(a, 90)),
        "p99": float(np.percentile(a, 99)),
        "max": float(a.max()),
        "mean": float(a.mean()),
    }


def rank_rows(an: Analysis, ms: MetricSet) -> list[dict[str, Any]]:
    """One row of totals per rank of the store ``an`` analyses: the per-rank rows of the
    result's summary, and the totals of a rank's summary (the same code for both)."""
    from traceinsight.metrics.steps import (  # imported here: the groups declare
        representative,
        step_stats,
    )
    # their metrics in the order metrics/__init__ imports them

    g = an.attribution.gpu
    out = []
    steps_of: dict[int, list] = {}
    for s in an.breakdown.steps:
        if s.step is not None:
            steps_of.setdefault(s.rank, []).append(s)
    stats_of: dict[int, list] = {}
    for st in step_stats(an):
        stats_of.setdefault(st.rank, []).append(st)
    for r in an.store.ranks:
        rank = r["rank"]
        gr = by_rank.rows(g, rank)
        kern = gr[gr["kind"] == "kernel"]
        w = an.breakdown.ranks.get(rank)
        steps = steps_of.get(rank, [])
        stats = stats_of.get(rank, [])
        # a windowed trace's step table holds more steps than its window (step chunks)
        every = stats if len(stats) > len(steps) else steps
        pr = ms.per_rank.get(rank, {})
        cov = an.attribution.coverage(rank)
        out.append(
            {
                "rank": rank,
                "device": next(
                    (d.get("name") for d in r.get("devices", []) if d.get("name")), None
                ),
                "kernel_time_ns": int(kern["dur_ns"].sum()),
                "comm_kernel_time_ns": int(
                    kern.loc[kern["cls"] == "communication", "dur_ns"].sum()
                ),
                "memcpy_time_ns": int(gr.loc[gr["kind"] == "memcpy", "dur_ns"].sum()),
                "memset_time_ns": int(gr.loc[gr["kind"] == "memset", "dur_ns"].sum()),
                "kernels": len(kern),
                "window_ns": int(w.wall_ns) if w else None,
                "gpu_busy_ns": int(w.busy_ns) if w else None,
                "gpu_idle_ns": int(w.idle_ns) if w else None,
                "compute_ns": int(w.compute_ns) if w else None,
                "comm_exposed_ns": int(w.comm_exposed_ns) if w else None,
                "steps": len(every),
                # every step window (the raw fact), and the statistics of the representative
                # steps, as the step metrics, the reports and compare count them
                "step_time_ns": _q([s.wall_ns for s in every]),
                "step_time_representative_ns": _q(
                    [s.wall_ns for s in representative(stats)]
                    if stats
                    else [s.wall_ns for s in steps]
                ),
                "steps_representative": sum(1 for s in stats if s.excluded is None),
                "steps_excluded": [
                    {"step": s.step, "reason": s.excluded, "detail": s.why}
                    for s in stats
                    if s.excluded
                ],
                "steps_kept": [{"step": s.step, "detail": s.kept} for s in stats if s.kept],
                "peak_allocated_bytes": _int(pr.get("peak_allocated_bytes")),
                "peak_reserved_bytes": _int(pr.get("peak_reserved_bytes")),
                "attributed_pct": cov["coverage_pct"],
                "op_attributed_pct": _op_cov(g, rank),
            }
        )
    return out


def _int(v: Any) -> int | None:
    return None if v is None else int(v)


def _op_cov(g: pd.DataFrame, rank: int) -> float | None:
    k = by_rank.rows(g, rank)
    k = k[k["kind"] == "kernel"]
    tot = float(k["dur_ns"].sum())
    if not tot:
        return None
    real = k["op"].astype(str).map(lambda s: not s.startswith("["))
    return 100.0 * float(k.loc[real, "dur_ns"].sum()) / tot


def rank_summary(
    an: Analysis, rank: int, ms: MetricSet, gpu: pd.DataFrame | None = None
) -> dict[str, Any]:
    """The summary of rank ``rank`` of the store ``an`` analyses (``gpu``: that rank's rows of
    the attributed GPU activities, when already split out: each rank is then summarised from
    its own rows, in time linear in the job)."""
    one = _OneRank(an, rank, gpu)
    rows = rank_rows(cast(Analysis, one), ms)  # a duck-typed one-rank view
    totals = next((r for r in rows if r["rank"] == rank), {"rank": rank})
    steps = [
        {
            "step": int(w.step),
            "start_ns": int(w.start_ns),
            "end_ns": int(w.end_ns),
            "host_ns": None if w.host_ns is None else int(w.host_ns),
            **{k: int(getattr(w, k)) for k in STEP_KEYS},
        }
        for w in an.breakdown.steps
        if w.rank == rank and w.step is not None
    ]
    meta = next((r for r in an.store.ranks if r.get("rank") == rank), {})
    dist = meta.get("distributed") or {}
    return {
        "version": SUMMARY_VERSION,
        "rank": rank,
        "totals": totals,
        "steps": steps,
        "collectives": collective_records(one, rank),
        "pg_config": dist.get("pg_config") or [],
        "world_size": dist.get("world_size"),
    }


class _OneRank:
    """An analysis seen through one rank (what :func:`rank_rows` iterates over)."""

    def __init__(self, an: Analysis, rank: int, gpu: pd.DataFrame | None = None) -> None:
        self.attribution = (
            an.attribution if gpu is None else dataclasses.replace(an.attribution, gpu=gpu)
        )
        self.breakdown = an.breakdown
        if gpu is not None:  # step statistics are cached for the whole analysis: never from
            from traceinsight.metrics.steps import step_stats  # one rank's rows

            step_stats(an)
        self.cache = an.cache  #: shared with the whole analysis (step statistics, comm args)
        self.store = _RankMetaOnly([r for r in an.store.ranks if r.get("rank") == rank], an.store)


@dataclass(frozen=True)
class _RankMetaOnly:
    ranks: list[dict[str, Any]]
    whole: Any  #: the store itself (its tables)

    def table(self, name: str, columns: list[str] | None = None) -> Any:
        return self.whole.table(name, columns)


def collective_records(an: Any, rank: int) -> dict[str, list[Any]]:
    """One record per communication kernel of ``rank``, columnar: its collective kind, process
    group and sequence number (from the ``record_param_comms`` op that launched it, or the
    kernel's own args), stream, step, start, duration and message size."""
    from traceinsight.analysis.comm_kinds import DTYPE_BYTES, launch_kinds

    g = an.attribution.gpu
    comm = g[(g["rank"] == rank) & (g["kind"] == "kernel") & (g["cls"] == "communication")]
    comm = comm.sort_values(["start_ns", "stream"], kind="stable")
    n = len(comm)
    if not n:
        return {k: [] for k in COLL_KEYS}
    full = an.cache.get("collective_args")
    if full is None:  # the collective args of every op, converted once per analysis
        names = schema.TABLES["cpu_ops"].column_names
        cols = [
            c
            for c in (
                "in_msg_nelems",
                "out_msg_nelems",
                "group_size",
                "dtype",
                "collective_name",
                "pg_name",
                "seq",
            )
            if c in names
        ]
        full = an.cache["collective_args"] = an.store.table("cpu_ops", cols).to_pandas()
    parent = an.attribution.ops["parent"].to_numpy()
    has_args = an.cache.get("collective_has_args")
    if has_args is None:
        has_args = an.cache["collective_has_args"] = ~pd.isna(full["in_msg_nelems"].to_numpy())
    m = len(has_args)
    found = np.full(n, -1, dtype=np.int64)  # the record_param_comms op of each kernel
    cur = comm["op_idx"].to_numpy(np.int64).copy()
    for _ in range(8):  # up the op tree to the op that carries the collective's args
        live = (cur >= 0) & (cur < m) & (found < 0)
        if not live.any():
            break
        hit = np.zeros(n, dtype=bool)
        hit[live] = has_args[cur[live]]
        found[hit] = cur[hit]
        up = live & ~hit
        nxt = np.full(n, -1, dtype=np.int64)
        nxt[up] = parent[cur[up]]
        cur = nxt
    kinds, _how = launch_kinds(an, comm)
    pgs: list[str | None] = []
    seqs: list[int | None] = []
    sizes: list[int | None] = []
    groups: list[int | None] = []
    # the kernel's own args (newer PyTorch copies Process Group Name and Seq onto it)
    k_pg = comm["pg_name"].to_numpy() if "pg_name" in comm else np.full(n, None)
    k_seq = comm["seq"].to_numpy() if "seq" in comm else np.full(n, None)
    for i in range(n):
        j = found[i]
        if j < 0:
            has_seq = not (pd.isna(k_seq[i]) or pd.isna(k_pg[i]))
            pgs.append(str(k_pg[i]) if has_seq else None)
            seqs.append(int(k_seq[i]) if has_seq else None)
            sizes.append(None)
            groups.append(None)
            continue
        row = full.iloc[j]
        cname = str(row["collective_name"]) if not pd.isna(row["collective_name"]) else ""
        cname = cname or str(kinds[i])
        pg = row.get("pg_name")
        seq = row.get("seq") if "seq" in row else None
        if (seq is None or pd.isna(seq)) and not pd.isna(k_seq[i]):  # the kernel's own
            seq, pg = k_seq[i], k_pg[i]
        pgs.append(None if pg is None or pd.isna(pg) else str(pg))
        seqs.append(None if seq is None or pd.isna(seq) else int(seq))
        nel = (
            row["out_msg_nelems"]
            if ("gather" in cname.lower() and not pd.isna(row["out_msg_nelems"]))
            else row["in_msg_nelems"]
        )
        bpe = DTYPE_BYTES.get(str(row["dtype"]).lower().replace("c10::", ""))
        sizes.append(int(nel) * bpe if bpe is not None and not pd.isna(nel) else None)
        groups.append(None if pd.isna(row["group_size"]) else int(row["group_size"]))
    steps = [None if s is None or pd.isna(s) else int(s) for s in comm["step"].to_numpy()]
    return {
        "kind": [str(k) for k in kinds],
        "pg": pgs,
        "seq": seqs,
        "stream": [int(s) for s in comm["stream"].to_numpy()],
        "step": steps,
        "start_ns": [int(x) for x in comm["start_ns"].to_numpy()],
        "dur_ns": [int(x) for x in comm["dur_ns"].to_numpy()],
        "bytes": sizes,
        "group_size": groups,
    }


# --- one partition, in a worker --------------------------------------------------------------


@dataclass(frozen=True)
class RankTask:
    """Summarise the ranks stored in partition folder ``path`` (``fresh``: ignore the cache)."""

    path: str
    fresh: bool = False


def summarize_partition(task: RankTask) -> list[dict[str, Any]]:
    """The summaries of the ranks of one partition (runs in a worker: reads that partition's
    tables alone; a file of several ranks makes one partition of them all)."""
    from traceinsight.store.core import TraceStore

    store = TraceStore.open(task.path)
    name = _cache_name(store)
    if not task.fresh:
        text = store.read_derived(name)
        if text:
            try:
                cached = json.loads(text)
                if (
                    isinstance(cached, list)
                    and cached
                    and all(c.get("version") == SUMMARY_VERSION for c in cached)
                ):
                    return cached
            except (ValueError, AttributeError):
                pass
    out = summarize_store(store)
    store.write_derived(name, json.dumps(out))
    return out


def summarize_store(store: TraceStore) -> list[dict[str, Any]]:
    """The summary of every rank of ``store`` (analysed here)."""
    from traceinsight.analysis import plain_strings

    with plain_strings():
        return summaries(Analysis(store))


def _cache_name(store: TraceStore) -> str:
    import hashlib

    parts = {
        "code": code_digest(),
        "sources": [s.get("sha256") for s in store.meta.get("sources", [])],
        "tables": store.meta.get("tables"),
        "v": SUMMARY_VERSION,
    }
    key = hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:24]
    return f"rank-summary-{key}.json"
