"""Cross-rank analysis: collectives matched across ranks, clock alignment, stragglers.

Works on the small per-rank summaries of ``rank_summary.py`` (step windows and one record
per communication kernel), never on events, so it scales with ranks.

**Matching.** A collective of one rank is matched with the same collective of the others by
its process group and sequence number where the trace records them (``Seq`` with ``Process
Group Name``); else by the n-th collective of the same kind in the same process group (or, with
no group recorded, the same stream) within the same ProfilerStep. A match needs 2 ranks.

**Per matched collective.** Arrival skew (last start - first start, after clock alignment);
transfer time = the shortest duration across its ranks (the rank that arrived last waits for
no one), each rank's wait = its duration - the transfer; algorithm bandwidth = message bytes /
transfer and bus bandwidth = algbw x the nccl-tests factor of its kind with n ranks
(all_reduce 2(n-1)/n; all_gather, reduce_scatter, all_to_all (n-1)/n; broadcast, reduce,
send/recv 1). Summed per process group.

**Clock alignment.** A collective ends on all its ranks at the same moment, so each rank's
clock offset is the median difference of its collective ends from the others' (refined a few
times over all matched collectives), relative to the lowest rank. Offsets are reported; starts
are aligned with them before skews are measured.

**Straggler.** The rank the others wait for: each matched collective's waiting is charged to
the rank that arrived last, and the straggler is the rank charged with the most (ties: the
lower rank). Without any waiting measured, per step, a rank's own time is its step time less
its exposed communication (compute, GPU idle and copies: what the others wait for); a step's
slowest rank is the one whose own time is largest and 2% over the step's median rank, and the
straggler is the rank most often the slowest (else the largest mean own time). Either way the
profile says how often it is the slowest; it is slow "every step" when it is the
slowest in at least 90% of the steps, else "sometimes". What it was doing, averaged over the
steps it was slowest in: its excess over the other ranks' median in compute, in GPU idle time
(host stalls: the GPU waits for the CPU), and in collective transfer time (slower collectives
on its links), the largest named.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from traceinsight.analysis.comm_kinds import bus_factor

__all__ = ["cross_rank", "straggler_profile"]

#: share of steps a rank must be the slowest in to be slow "every step"
EVERY_STEP_SHARE = 0.9
#: a rank is the slowest of a step when its own time exceeds the step's median rank by this
SLOW_MARGIN = 1.02
#: heatmap and distribution measures (per rank and step)
HEAT_KEYS = ("wall_ns", "idle_ns", "comm_exposed_ns")
TOP_RANKS = 10
MAX_OUTLIERS = 10
MAX_COLLECTIVE_ROWS = 200


def cross_rank(summaries: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The cross-rank section of a job from its ranks' summaries (None: fewer than 2 ranks)."""
    if len(summaries) < 2:
        return None
    summaries = sorted(summaries, key=lambda s: s["rank"])
    ranks = [int(s["rank"]) for s in summaries]
    recs = _records(summaries)
    matched = _match(recs)
    offsets = _clock_offsets(matched, ranks)
    colls = _per_collective(matched, offsets, _group_sizes(summaries))
    steps, heat = _heatmaps(summaries)
    own = _own_frame(summaries)
    caused = _caused_waits(colls)
    # the straggler is the rank the others waited for most (the last arrival), else the one
    # with the most own work
    slow = int(max(caused, key=lambda r: (caused[r], -r))) if caused else _slowest(own)
    last = (
        colls.loc[colls["last_rank"] >= 0, "last_rank"].value_counts().to_dict()
        if len(colls)
        else {}
    )
    table = _rank_table(summaries, own, offsets, last, matched)
    out: dict[str, Any] = {
        "ranks": ranks,
        "matching": _matching_note(recs, matched),
        "collectives": _collective_rows(colls),
        "groups": _per_group(colls, summaries),
        "clock_offsets_ns": {str(r): int(offsets.get(r, 0)) for r in ranks},
        "max_clock_offset_ns": int(max((abs(v) for v in offsets.values()), default=0)),
        "steps": steps,
        "heatmaps": heat,
        "distributions": _distributions(table),
        **rank_tables(table),
        "last_arrivals": {str(int(k)): int(v) for k, v in sorted(last.items())},
        "wait_caused_ns": {str(k): int(v) for k, v in sorted(caused.items())},
        "waiting": _waiting(colls),
    }
    out["straggler"] = (
        straggler_profile(out, summaries, slow, own, colls) if slow is not None else None
    )
    return out


# --- collective records and their matching ---------------------------------------------------


def _records(summaries: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per collective of every rank (in rank-summary order), its summary's fields."""
    found = [(s, c) for s in summaries if (c := s.get("collectives") or {}).get("start_ns")]
    keys = list(found[0][1]) if found else []
    if found and all(list(c) == keys for _s, c in found):
        # the ranks' columns joined as lists, one frame built (not a frame a rank)
        cols: dict[str, list] = {k: [] for k in keys}
        ranks: list[int] = []
        for s, c in found:
            for k in keys:
                cols[k].extend(c[k])
            ranks.extend([int(s["rank"])] * len(c[keys[0]]))
        df = pd.DataFrame({k: pd.Series(v, dtype=object) for k, v in cols.items()})
        df["rank"] = np.array(ranks, dtype=np.int64)
        return _typed(df)
    frames = []
    for s, c in found:
        f = pd.DataFrame({k: pd.Series(v, dtype=object) for k, v in c.items()})
        f["rank"] = int(s["rank"])
        frames.append(f)
    if not frames:
        return pd.DataFrame(
            columns=[
                "rank",
                "kind",
                "pg",
                "seq",
                "stream",
                "step",
                "start_ns",
                "dur_ns",
                "bytes",
                "group_size",
            ]
        )
    return _typed(pd.concat(frames, ignore_index=True))


def _typed(df: pd.DataFrame) -> pd.DataFrame:
    df["start_ns"] = df["start_ns"].astype(np.int64)
    df["dur_ns"] = df["dur_ns"].astype(np.int64)
    df["end_ns"] = df["start_ns"] + df["dur_ns"]
    return df


def _match(recs: pd.DataFrame) -> pd.DataFrame:
    """``recs`` with a ``key`` per matched collective (rows of unmatched ones dropped)."""
    if not len(recs):
        return recs.assign(key=pd.Series(dtype=object), how=pd.Series(dtype=object))
    df = recs.sort_values(["rank", "start_ns"], kind="stable").copy()
    lane = np.where(
        df["pg"].isna(), "stream " + df["stream"].astype(str), "pg " + df["pg"].astype(str)
    )
    df["lane"] = lane
    step = df["step"].where(df["step"].notna(), -1).astype(np.int64)
    df["ord"] = df.groupby(["rank", "lane", "kind", step], sort=False).cumcount()
    by_seq = df["seq"].notna() & df["pg"].notna()
    key = np.where(
        by_seq,
        "seq|" + df["pg"].astype(str) + "|" + df["seq"].astype(str),
        "ord|"
        + df["lane"]
        + "|"
        + df["kind"].astype(str)
        + "|"
        + step.astype(str)
        + "|"
        + df["ord"].astype(str),
    )
    df["key"] = key
    df["how"] = np.where(
        by_seq,
        "process group and sequence number",
        np.where(
            df["pg"].notna(),
            "n-th of its kind in its process group",
            "n-th of its kind on its stream",
        ),
    )
    counts = df.groupby("key")["rank"].transform("nunique")
    df = df[counts >= 2]
    return df.drop_duplicates(["key", "rank"], keep="first")


def _caused_waits(colls: pd.DataFrame) -> dict[int, int]:
    """Per rank: the waiting (summed over the other ranks) at the collectives it reached last;
    only ranks that caused some."""
    if not len(colls):
        return {}
    late = colls[(colls["last_rank"] >= 0) & (colls["wait_ns"] > 0)]
    got = late.groupby("last_rank")["wait_ns"].sum()
    return {int(k): int(v) for k, v in got.items() if v > 0}


def _waiting(colls: pd.DataFrame) -> dict[str, Any]:
    """The matched collectives' rank-time split into waiting for the last rank and transfer."""
    wait = int(colls["wait_ns"].sum()) if len(colls) else 0
    transfer = int((colls["transfer_ns"] * colls["ranks"]).sum()) if len(colls) else 0
    return {
        "wait_ns": wait,
        "transfer_ns": transfer,
        "wait_share_pct": 100.0 * wait / (wait + transfer) if wait + transfer else None,
    }


def _matching_note(recs: pd.DataFrame, matched: pd.DataFrame) -> dict[str, Any]:
    hows = matched["how"].value_counts().to_dict() if len(matched) else {}
    return {
        "records": len(recs),
        "matched_records": len(matched),
        "matched": int(matched["key"].nunique()) if len(matched) else 0,
        "by": {str(k): int(v) for k, v in hows.items()},
    }


def _clock_offsets(m: pd.DataFrame, ranks: list[int], rounds: int = 4) -> dict[int, int]:
    """Each rank's clock offset (ns, to subtract) from its matched collective ends."""
    offsets = dict.fromkeys(ranks, 0.0)
    if not len(m):
        return {r: 0 for r in ranks}
    ends = m[["key", "rank", "end_ns"]].copy()
    base = int(ends["end_ns"].min())
    ends["e"] = (ends["end_ns"] - base).astype(np.float64)
    for _ in range(rounds):
        o = ends["rank"].map(offsets).astype(np.float64)
        ref = (ends["e"] - o).groupby(ends["key"]).transform("median")
        new = (ends["e"] - ref).groupby(ends["rank"]).median().to_dict()
        offsets.update({int(k): float(v) for k, v in new.items()})
    anchor = offsets[min(ranks)]
    return {r: round(offsets[r] - anchor) for r in ranks}


def _group_sizes(summaries: list[dict[str, Any]]) -> dict[str, int]:
    """Process group name -> its size, from the ranks' recorded group configuration."""
    out: dict[str, int] = {}
    for s in summaries:
        for pg in s.get("pg_config") or []:
            if isinstance(pg, dict) and pg.get("pg_name") is not None:
                size = pg.get("pg_size") or len(pg.get("ranks") or [])
                if size:
                    out[str(pg["pg_name"])] = int(size)
    return out


def _per_collective(
    m: pd.DataFrame, offsets: dict[int, int], sizes: dict[str, int]
) -> pd.DataFrame:
    if not len(m):
        return pd.DataFrame(
            columns=[
                "key",
                "lane",
                "kind",
                "step",
                "ranks",
                "first_start_ns",
                "skew_ns",
                "last_rank",
                "transfer_ns",
                "wait_ns",
                "bytes",
                "n",
                "algbw",
                "busbw",
            ]
        )
    d = m.copy()
    d["astart"] = d["start_ns"] - d["rank"].map(offsets).astype(np.int64)
    g = d.groupby("key", sort=False)
    first = g["astart"].min()
    last_i = g["astart"].idxmax()
    out = pd.DataFrame(
        {
            "lane": g["lane"].first(),
            "kind": g["kind"].first(),
            "step": g["step"].first(),
            "ranks": g["rank"].nunique(),
            "first_start_ns": first,
            "skew_ns": g["astart"].max() - first,
            "last_rank": d.loc[last_i.values, "rank"].to_numpy(),
            "transfer_ns": g["dur_ns"].min(),
            "dur_sum_ns": g["dur_ns"].sum(),
            "bytes": g["bytes"].apply(
                lambda x: float(np.median(x.dropna())) if x.notna().any() else np.nan
            ),
            "group_size": g["group_size"].apply(
                lambda x: float(np.median(x.dropna())) if x.notna().any() else np.nan
            ),
        }
    )
    out["wait_ns"] = out["dur_sum_ns"] - out["transfer_ns"] * out["ranks"]
    out.loc[out["skew_ns"] <= 0, "last_rank"] = -1  # all arrived together: no one was last
    pg = out["lane"].str.removeprefix("pg ")
    n = out["group_size"].where(out["group_size"].notna(), pg.map(lambda p: sizes.get(p, np.nan)))
    out["n"] = n.where(n.notna(), out["ranks"]).astype(np.int64)
    secs = out["transfer_ns"].clip(lower=1) / 1e9
    out["algbw"] = out["bytes"] / secs
    out["busbw"] = out["algbw"] * [
        bus_factor(str(k), int(x)) for k, x in zip(out["kind"], out["n"])
    ]
    return out.reset_index().rename(columns={"index": "key"}).sort_values("first_start_ns")


def _collective_rows(c: pd.DataFrame) -> list[dict[str, Any]]:
    """The matched collectives with the most waiting, as table rows."""
    if not len(c):
        return []
    top = c.sort_values("wait_ns", ascending=False).head(MAX_COLLECTIVE_ROWS)
    return [
        {
            "group": str(r.lane),
            "collective": str(r.kind),
            "step": None if pd.isna(r.step) else int(r.step),
            "ranks": int(r.ranks),
            "skew_ns": int(r.skew_ns),
            "last_rank": int(r.last_rank) if r.last_rank >= 0 else None,
            "transfer_ns": int(r.transfer_ns),
            "wait_ns": int(r.wait_ns),
            "bytes": None if pd.isna(r.bytes) else int(r.bytes),
            "algbw_bytes_per_s": None if pd.isna(r.algbw) else float(r.algbw),
            "busbw_bytes_per_s": None if pd.isna(r.busbw) else float(r.busbw),
        }
        for r in top.itertuples()
    ]


def _per_group(c: pd.DataFrame, summaries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Matched collectives summed per process group (or stream, with no group recorded)."""
    if not len(c):
        return []
    desc: dict[str, str] = {}
    members: dict[str, list[int]] = {}
    for s in summaries:
        for pg in s.get("pg_config") or []:
            if isinstance(pg, dict) and pg.get("pg_name") is not None:
                desc[str(pg["pg_name"])] = str(pg.get("pg_desc") or "")
                members[str(pg["pg_name"])] = list(pg.get("ranks") or [])[:16]
    out = []
    for lane, d in c.groupby("lane", sort=True):
        name = str(lane).removeprefix("pg ")
        sized = d[d["busbw"].notna()]
        out.append(
            {
                "group": str(lane),
                "description": desc.get(name) if lane.startswith("pg ") else None,
                "ranks": int(d["ranks"].max()),
                "members": members.get(name),
                "kinds": sorted({str(k) for k in d["kind"]}),
                "collectives": len(d),
                "bytes": None if d["bytes"].isna().all() else int(d["bytes"].sum()),
                "transfer_ns": int(d["transfer_ns"].sum()),
                "wait_ns": int(d["wait_ns"].sum()),
                "skew_p50_ns": int(d["skew_ns"].median()),
                "skew_max_ns": int(d["skew_ns"].max()),
                "busbw_p50_bytes_per_s": float(sized["busbw"].median()) if len(sized) else None,
            }
        )
    return sorted(out, key=lambda g: -(g["wait_ns"] + g["transfer_ns"]))


# --- steps: heatmaps, own time, distributions --------------------------------------------------


def _heatmaps(summaries: list[dict[str, Any]]) -> tuple[list[int], dict[str, Any]]:
    """Rank x step matrices of step time, GPU idle and exposed communication (None: the rank
    has no such step)."""
    steps = sorted({int(w["step"]) for s in summaries for w in s.get("steps") or []})
    col = {st: i for i, st in enumerate(steps)}
    heat: dict[str, Any] = {}
    for key in HEAT_KEYS:
        rows = []
        for s in summaries:
            row: list[int | None] = [None] * len(steps)
            for w in s.get("steps") or []:
                row[col[int(w["step"])]] = int(w[key])
            rows.append(row)
        heat[key] = rows
    return steps, heat


def _own_frame(summaries: list[dict[str, Any]]) -> pd.DataFrame:
    rows = [
        {
            "rank": int(s["rank"]),
            "step": int(w["step"]),
            "wall_ns": w["wall_ns"],
            "own_ns": w["wall_ns"] - w["comm_exposed_ns"],
            "compute_ns": w["compute_ns"],
            "idle_ns": w["idle_ns"],
            "comm_exposed_ns": w["comm_exposed_ns"],
            "comm_ns": w["comm_ns"],
        }
        for s in summaries
        for w in s.get("steps") or []
    ]
    return pd.DataFrame(
        rows,
        columns=[
            "rank",
            "step",
            "wall_ns",
            "own_ns",
            "compute_ns",
            "idle_ns",
            "comm_exposed_ns",
            "comm_ns",
        ],
    )


def rank_tables(table: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The slowest (``top_ranks``) and fastest (``bottom_ranks``) :data:`TOP_RANKS` ranks."""
    return {
        "top_ranks": sorted(table, key=lambda r: (tuple(-x for x in _slowness(r)), r["rank"]))[
            :TOP_RANKS
        ],
        "bottom_ranks": sorted(table, key=lambda r: (_slowness(r), r["rank"]))[:TOP_RANKS],
    }


def _slowness(row: dict[str, Any]) -> tuple[int, int, int]:
    """How slow a rank is, for the slowest/fastest ranks tables: its own work per step, then
    (ties, as in jobs of identical ranks) how often the others waited for it, then its
    compute. Among equals the lower rank comes first in both tables."""
    return (int(row["own_ns"] or 0), int(row["last_arrivals"] or 0), int(row["compute_ns"] or 0))


def _slowest(own: pd.DataFrame) -> int | None:
    """The rank that is most often clearly the slowest of a step (ties: the largest mean own
    time); with no clear slowest in any step, the largest mean own time."""
    if not len(own) or own["rank"].nunique() < 2:
        return None
    mean = own.groupby("rank")["own_ns"].mean()
    counts = pd.Series(_clear_slowest(own)).value_counts()
    if len(counts):
        top = counts[counts == counts.max()].index
        return int(mean.loc[list(top)].idxmax())
    return int(mean.idxmax())


def _clear_slowest(own: pd.DataFrame) -> dict[int, int]:
    """Step -> the rank whose own time exceeds the step's median rank by ``SLOW_MARGIN`` and
    is the largest (steps without one are left out)."""
    by_step = own.pivot_table(index="step", columns="rank", values="own_ns")
    clear = by_step.max(axis=1) > SLOW_MARGIN * by_step.median(axis=1)
    return {int(s): int(r) for s, r in by_step.idxmax(axis=1).items() if clear[s]}


def _rank_table(
    summaries: list[dict[str, Any]],
    own: pd.DataFrame,
    offsets: dict[int, int],
    last: dict[Any, int],
    matched: pd.DataFrame,
) -> list[dict[str, Any]]:
    med = own.groupby("rank").median(numeric_only=True) if len(own) else pd.DataFrame()
    waits = _waits(matched)
    out = []
    for s in summaries:
        r = int(s["rank"])
        row = med.loc[r] if r in med.index else None

        def v(k: str, _row: Any = row) -> int | None:
            return None if _row is None or pd.isna(_row[k]) else int(_row[k])

        out.append(
            {
                "rank": r,
                "step_ns": v("wall_ns"),
                "own_ns": v("own_ns"),
                "compute_ns": v("compute_ns"),
                "idle_ns": v("idle_ns"),
                "comm_exposed_ns": v("comm_exposed_ns"),
                "wait_ns": int(waits.get(r, 0)),
                "last_arrivals": int(last.get(r, 0)),
                "clock_offset_ns": int(offsets.get(r, 0)),
            }
        )
    return out


def _waits(m: pd.DataFrame) -> dict[int, int]:
    """Per rank: the time its collectives spent waiting for the last rank to arrive."""
    if not len(m):
        return {}
    transfer = m.groupby("key")["dur_ns"].transform("min")
    return (m["dur_ns"] - transfer).groupby(m["rank"]).sum().astype(np.int64).to_dict()


def _distributions(table: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per measure: quartiles over ranks and the outlier ranks named (above the median by more
    than 3 scaled median absolute deviations and 5%)."""
    out = []
    for key, label in (
        ("step_ns", "step time"),
        ("own_ns", "own time (not waiting)"),
        ("compute_ns", "compute"),
        ("idle_ns", "GPU idle"),
        ("comm_exposed_ns", "exposed communication"),
        ("wait_ns", "waiting in collectives"),
    ):
        vals = [(r["rank"], r[key]) for r in table if r.get(key) is not None]
        if len(vals) < 2:
            continue
        a = np.array([v for _, v in vals], dtype=np.float64)
        q = np.percentile(a, [0, 25, 50, 75, 100])
        mad = 1.4826 * float(np.median(np.abs(a - q[2])))
        cut = max(q[2] + 3 * mad, q[2] * 1.05)
        outl = sorted(((r, v) for r, v in vals if v > cut and v > 0), key=lambda x: -x[1])
        out.append(
            {
                "measure": key,
                "label": label,
                "min": q[0],
                "p25": q[1],
                "p50": q[2],
                "p75": q[3],
                "max": q[4],
                "outliers": [{"rank": int(r), "value": int(v)} for r, v in outl[:MAX_OUTLIERS]],
                "outlier_count": len(outl),
            }
        )
    return out


# --- the straggler -------------------------------------------------------------------------


def straggler_profile(
    cross: dict[str, Any],
    summaries: list[dict[str, Any]],
    rank: int,
    own: pd.DataFrame | None = None,
    colls: pd.DataFrame | None = None,
) -> dict[str, Any] | None:
    """How slow rank ``rank`` is, how often, and what it was doing more than the median rank."""
    own = _own_frame(summaries) if own is None else own
    if not len(own) or rank not in set(own["rank"]):
        return None
    slowest = _clear_slowest(own)
    n_steps = int(own["step"].nunique())
    slow_in = sorted(s for s, r in slowest.items() if r == rank)
    # per step: this rank's value over the median of the other ranks, averaged over the steps
    # it was the slowest in (all steps when none)
    steps = set(slow_in) if slow_in else set(own["step"])
    mine = own[(own["rank"] == rank) & own["step"].isin(steps)].set_index("step")
    others = (
        own[(own["rank"] != rank) & own["step"].isin(steps)]
        .groupby("step")
        .median(numeric_only=True)
    )
    diff = (
        mine[["own_ns", "compute_ns", "idle_ns"]] - others[["own_ns", "compute_ns", "idle_ns"]]
    ).mean()
    excess = {
        "compute": float(diff["compute_ns"]),
        "host stalls (GPU idle)": float(diff["idle_ns"]),
        "slower collectives": _collective_excess(cross, rank, colls),
    }
    cause = max(excess, key=lambda k: excess[k])
    share = len(slow_in) / n_steps if n_steps else 0.0
    return {
        "rank": int(rank),
        "steps": n_steps,
        "slowest_steps": len(slow_in),
        "slow_step_numbers": slow_in[:32],
        "pattern": "every step"
        if share >= EVERY_STEP_SHARE
        else ("sometimes" if slow_in else "never the slowest"),
        "own_ns": int(mine["own_ns"].mean()),
        "typical_own_ns": int(others["own_ns"].mean()),
        "excess_ns": {k: int(v) for k, v in excess.items()},
        "cause": cause if excess[cause] > 0 else None,
        "last_arrivals": int(cross.get("last_arrivals", {}).get(str(rank), 0)),
        "matched_collectives": int(cross.get("matching", {}).get("matched", 0)),
    }


def _collective_excess(cross: dict[str, Any], rank: int, colls: pd.DataFrame | None) -> float:
    """Per step: how much longer the collectives take when ``rank`` arrives last than the
    others' transfers (a slow link of that rank), in ns."""
    if colls is None or not len(colls):
        return 0.0
    mine = colls[colls["last_rank"] == rank]
    rest = colls[colls["last_rank"] != rank]
    if not len(mine) or not len(rest):
        return 0.0
    per = mine.groupby("kind")["transfer_ns"].median()
    base = rest.groupby("kind")["transfer_ns"].median()
    common = per.index.intersection(base.index)
    if not len(common):
        return 0.0
    steps = max(1, len(cross.get("steps") or []))
    extra = sum(float(per[k] - base[k]) * int((mine["kind"] == k).sum()) for k in common)
    return extra / steps
