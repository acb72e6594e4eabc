"""Steps: each step's own figures, which steps stand for the steady state, why slow steps are slow.

The step windows (GPU-aware ``ProfilerStep`` windows, :mod:`..analysis.attribution`) stay as
they are for every whole-window figure: GPU busy, the breakdown and the step count cover all of
them. The step *statistics* (median, p90, p99, max, the coefficient of variation, slow steps
and the time they lose) use the representative steps only. A step is left out, with its
reason, when it is

- ``warm-up``: one of the leading steps in which one-off start-up calls, graph capture or
  compilation keep the GPU idle for ``WARMUP_MIN_PCT`` or more of the step;
- ``pre-trace work``: the first step of a rank that runs work queued before the profiler
  started: GPU activity without a launch record ahead of the step's own work, or the host
  blocked (a blocking copy or sync, or launched work waiting) while no recorded GPU work runs
  before the step's own work starts — together ``PRE_TRACE_MIN_PCT`` or more of the step;
- ``truncated``: the last step of a rank (of two or more) that the profiler stopped inside: it
  launched under ``TRUNCATED_KERNEL_RATIO`` of the median kernels of the other steps (when they
  launch ``TRUNCATED_MIN_KERNELS`` or more), or it ends
  with a stretch (``TAIL_MIN_PCT`` of a median step and ``TAIL_MIN_NS`` or more) in which
  neither the GPU nor any recorded host event runs.

A step is left out only when the steps that remain hold the run's work: when the median
kernel time of its own work over the remaining steps is under ``WORK_KEPT_MIN_PCT`` of the
left-out step's own kernel time (a tiny capture whose only working step runs pre-trace work,
followed by an empty step), the step stays in the statistics and ``kept`` says why.
When every step of the trace would be left out the statistics use all steps and
``steps_representative`` is 0. Each step also carries the GPU time of its own work: the span
from the first start to the last end of the GPU activity launched inside its CPU window,
beside the wall window that may hold other steps' work.

A slow step is a representative step longer than ``SLOW_FACTOR`` x the median representative
step. Its window decomposes exactly into compute + exposed communication + exposed copies + GPU
idle by cause (:mod:`.idle`); the part that grew the most over the median step is its cause.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from traceinsight.analysis import Analysis, StepWindow, WindowBreakdown, attribution_parts, by_rank
from traceinsight.analysis import intervals as iv
from traceinsight.analysis.attribution import name_matches
from traceinsight.analysis.breakdown import joined as breakdown_joined
from traceinsight.analysis.idle import (
    BLOCKING_MIN_NS,
    COPY_CALL_RE,
    LAUNCH_CALL_RE,
    SYNC_CALL_RE,
    idle_split,
)
from traceinsight.metrics.registry import MetricSet, declare, declare_fact
from traceinsight.metrics.step_lag import edge_lag, gpu_lag, without_lag
from traceinsight.util import capture_hints, fmt

NEEDS_STEPS = "step markers"

WARMUP_MIN_PCT = 10.0  #: one-off start-up / compile / capture idle at or above: a warm-up step
PRE_TRACE_MIN_PCT = 5.0  #: work queued before the trace at or above this share of the step
TRUNCATED_KERNEL_RATIO = 0.75  #: a last step launching under this share of the median kernels
TRUNCATED_MIN_KERNELS = 4  #: ... of the other steps, when they launch at least this many
TAIL_MIN_PCT = 10.0  #: a last step's empty tail, % of the median step, at or above: truncated
TAIL_MIN_NS = 1_000_000
BASELINE_STEPS = 8  #: the edge step is compared with up to this many neighbouring steps
SLOW_FACTOR = 1.25  #: a step slower than this times the median is slow
MAX_SLOW_ROWS = 10
MAX_DETAIL = 5  #: steps named in a text fact
WORK_KEPT_MIN_PCT = 50.0  #: the remaining steps' median own kernel time, % of a left-out step's

REASONS = ("warm-up", "pre-trace work", "truncated")

for _n, _u, _d in (
    ("steps", "count", "number of ProfilerStep windows (fewest over ranks), representative or not"),
    (
        "steps_representative",
        "count",
        "ProfilerStep windows the step statistics use (fewest over "
        "ranks): all but warm-up, pre-trace and truncated steps",
    ),
    (
        "steps_excluded",
        "count",
        "ProfilerStep windows left out of the step statistics (all ranks): "
        "warm-up, pre-trace work, truncated",
    ),
    (
        "step_time_p50_ns",
        "ns",
        "median step time (GPU-aware windows of the representative steps, all ranks)",
    ),
    ("step_time_p90_ns", "ns", "90th percentile step time (representative steps)"),
    ("step_time_p99_ns", "ns", "99th percentile step time (representative steps)"),
    ("step_time_max_ns", "ns", "slowest representative step"),
    ("step_time_mean_ns", "ns", "mean step time (representative steps)"),
    (
        "step_time_cv_pct",
        "%",
        "coefficient of variation of step time (std / mean) over the "
        "representative steps, worst rank",
    ),
    ("step_time_max_over_p50_ratio", "ratio", "slowest representative step over the median step"),
    (
        "gpu_lag_ns",
        "ns",
        "how far the GPU runs behind the host, when constant (a queue of launched work, "
        "healthy): the median of step window end minus host step end over the steps after the "
        "first; 0 when there is no steady lag (largest over ranks)",
    ),
    ("slow_steps", "count", f"representative steps slower than {SLOW_FACTOR}x the median step"),
    (
        "jitter_loss_pct",
        "%",
        "time lost to representative steps slower than the median, % of their total step time",
    ),
):
    declare(_n, _u, _d, needs=NEEDS_STEPS, setting=capture_hints.STEPS)
for _n, _d in (
    ("steps_excluded_detail", "the steps left out of the step statistics and why"),
    ("slow_steps_detail", "the slow steps, how much slower than the median, and what grew"),
    ("slowest_step_detail", "the slowest slow step and what grew the most in it"),
):
    declare_fact(_n, _d)

STAT_METRICS = (
    "step_time_p50_ns",
    "step_time_p90_ns",
    "step_time_p99_ns",
    "step_time_max_ns",
    "step_time_mean_ns",
    "step_time_cv_pct",
    "step_time_max_over_p50_ratio",
    "slow_steps",
    "jitter_loss_pct",
)

#: idle gap cause (as :mod:`.idle` labels gaps) -> the step part it counts in
IDLE_PART = {
    "device wait": "idle_dependency",
    "graph capture": "idle_oneoff",
    "start-up": "idle_oneoff",
    "compile": "idle_oneoff",
    "input": "idle_input",
    "blocking copy": "idle_sync",
    "sync": "idle_sync",
    "allocator": "idle_host",
    "host stall": "idle_host",
    "launch": "idle_launch",
    "unknown": "idle_unknown",
}
#: step part -> what a slow step shows when that part grew the most
PART_LABEL = {
    "compute": "more kernel time",
    "comm_exposed": "comm wait (exposed communication)",
    "copies": "longer exposed copies",
    "idle_input": "GPU idle: input loading",
    "idle_host": "GPU idle: host stall",
    "idle_sync": "GPU idle: blocking sync or copy",
    "idle_launch": "GPU idle: launch overhead",
    "idle_dependency": "GPU idle: work waiting on a dependency",
    "idle_oneoff": "GPU idle: start-up, compilation or graph capture",
    "idle_unknown": "GPU idle: unrecorded host time",
    "host": "more host time",
}


@dataclass
class StepStat:
    """One step window of one rank, with its own work and whether it is representative."""

    rank: int
    step: int
    start_ns: int
    wall_ns: int  #: the GPU-aware window
    host_ns: int  #: the CPU ProfilerStep range
    gpu_ns: int | None  #: first start to last end of the GPU work launched in its CPU window
    kernel_ns: int  #: kernel time launched in its CPU window
    kernels: int  #: kernels launched in its CPU window
    parts: dict[str, int] = field(default_factory=dict)  #: the window split (sums to wall_ns)
    excluded: str | None = None  #: one of REASONS, None for a representative step
    why: str | None = None  #: the evidence for the exclusion
    kept: str | None = None  #: why a step that looked unrepresentative stays in the statistics

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# --- the step table ---------------------------------------------------------------------------


def step_stats(an: Analysis) -> list[StepStat]:
    """Every step window of every rank (ordered by rank and start), computed once."""
    if "step_stats" not in an.cache:
        an.cache["step_stats"] = _step_stats(an)
    return an.cache["step_stats"]


# computed per rank partition next to its attribution (in the worker that reads it)
attribution_parts.product("step_stats", __name__, step_stats, attribution_parts.concat_lists)


def _breakdown(an: Analysis) -> Any:
    return an.breakdown  # what the step table above measured (computed once)


# the rank's window breakdowns, which the step table reads, sent along (the whole store's
# ``Analysis.breakdown``; no rank's windows measured twice)
attribution_parts.product("breakdown", __name__, _breakdown, breakdown_joined)


def representative(stats: list[StepStat]) -> list[StepStat]:
    """The steps the statistics use: the representative ones, or all when none is."""
    rep = [s for s in stats if s.excluded is None]
    return rep or list(stats)


def _step_stats(an: Analysis) -> list[StepStat]:
    attr = an.attribution
    bds: dict[tuple[int, int | None, int], WindowBreakdown] = {
        (b.rank, b.step, b.start_ns): b for b in an.breakdown.steps if b.step is not None
    }
    out: list[StepStat] = []
    for rank in sorted({w.rank for w in attr.steps if w.step is not None}):
        if not attr.has_step_markers.get(rank, False):
            continue
        wins = sorted(
            (w for w in attr.steps if w.rank == rank and w.step is not None),
            key=lambda w: w.start_ns,
        )
        g = by_rank.rows(attr.gpu, rank)
        idle: dict[Any, dict[str, int]] = {}
        for x in idle_split(an, rank, g, wins, top=None)[1] if len(g) else []:
            part = IDLE_PART.get(x["cause"], "idle_unknown")
            d = idle.setdefault(x["step"], {})
            d[part] = d.get(part, 0) + int(x["dur_ns"])
        own = _own_work(g)
        stats = [
            _stat(w, bds[(w.rank, w.step, w.start_ns)], own, idle.get(w.step, {}), len(g) > 0)
            for w in wins
            if (w.rank, w.step, w.start_ns) in bds
        ]
        _mark(an, rank, g, wins, stats)
        out.extend(stats)
    return out


def _own_work(g: pd.DataFrame) -> pd.DataFrame:
    """Per step: the span and kernel time of the GPU work launched in its CPU window."""
    lw = g[(g["launch_start_ns"].to_numpy(np.int64) >= 0) & g["step"].notna().to_numpy()]
    if not len(lw):
        return pd.DataFrame(columns=["first", "last", "kernel_ns", "kernels"])
    is_k = (lw["kind"] == "kernel").to_numpy()
    df = pd.DataFrame(
        {
            "step": lw["step"].astype(np.int64).to_numpy(),
            "start": lw["start_ns"].to_numpy(np.int64),
            "end": lw["end_ns"].to_numpy(np.int64),
            "kns": np.where(is_k, lw["dur_ns"].to_numpy(np.int64), 0),
            "k": is_k.astype(np.int64),
        }
    )
    return df.groupby("step").agg(
        first=("start", "min"), last=("end", "max"), kernel_ns=("kns", "sum"), kernels=("k", "sum")
    )


def _stat(
    w: StepWindow, b: WindowBreakdown, own: pd.DataFrame, idle: dict[str, int], gpu: bool
) -> StepStat:
    parts = {
        "compute": b.compute_ns,
        "comm_exposed": b.comm_exposed_ns,
        "copies": b.memcpy_exposed_ns + b.memset_exposed_ns,
    }
    parts.update({p: idle.get(p, 0) for p in sorted(set(IDLE_PART.values()))})
    if gpu:
        # gap records and the breakdown's idle agree; any difference goes to unknown
        parts["idle_unknown"] += b.idle_ns - sum(
            v for k, v in parts.items() if k.startswith("idle_")
        )
        parts["host"] = 0
    else:  # no GPU activity recorded on the rank: the step is host time only
        parts = {k: 0 for k in parts} | {"host": b.wall_ns}
    has = w.step in own.index
    assert w.step is not None  # step windows only
    return StepStat(
        rank=w.rank,
        step=int(w.step),
        start_ns=int(w.start_ns),
        wall_ns=int(b.wall_ns),
        host_ns=int(w.host_end_ns - w.host_start_ns),
        gpu_ns=int(own.at[w.step, "last"] - own.at[w.step, "first"]) if has else None,
        kernel_ns=int(own.at[w.step, "kernel_ns"]) if has else 0,
        kernels=int(own.at[w.step, "kernels"]) if has else 0,
        parts=parts,
    )


# --- which steps are representative --------------------------------------------------------


def _mark(
    an: Analysis, rank: int, g: pd.DataFrame, wins: list[StepWindow], stats: list[StepStat]
) -> None:
    n = len(stats)
    if n < 2:
        return
    for s in stats[:-1]:  # leading warm-up steps
        oneoff = s.parts.get("idle_oneoff", 0)
        if not s.wall_ns or 100.0 * oneoff / s.wall_ns < WARMUP_MIN_PCT:
            break
        s.excluded = "warm-up"
        s.why = (
            f"{fmt.fmt_ns(oneoff)} ({fmt.fmt_pct(100.0 * oneoff / s.wall_ns, 0)} of the "
            "step) of GPU idle in one-off start-up, compilation or graph capture"
        )
    rk = _RankEvents(an, rank, g)
    first = stats[0]
    if first.excluded is None:
        pre, why = _pre_trace(rk, wins)
        if first.wall_ns and 100.0 * pre / first.wall_ns >= PRE_TRACE_MIN_PCT:
            first.excluded, first.why = "pre-trace work", why
    last = stats[-1]
    if last.excluded is None:
        _truncated(rk, wins, stats)
    _keep_the_work(stats)


def _keep_the_work(stats: list[StepStat]) -> None:
    """Put back every left-out step whose own work the remaining steps do not hold: the
    statistics of a capture must never be those of its empty steps."""
    for s in [x for x in stats if x.excluded]:
        rest = [x.kernel_ns for x in stats if x.excluded is None]
        have = float(np.median(rest)) if rest else 0.0
        if s.kernel_ns and have < WORK_KEPT_MIN_PCT / 100.0 * s.kernel_ns:
            s.kept = (
                f"kept although it looks {s.excluded} ({s.why}): it runs "
                f"{fmt.fmt_ns(s.kernel_ns)} of its own kernel time and the other steps a median "
                f"of {fmt.fmt_ns(have)}, so without it the statistics would miss the run's work"
            )
            s.excluded = s.why = None


def _truncated(rk: _RankEvents, wins: list[StepWindow], stats: list[StepStat]) -> None:
    last = stats[-1]
    others = stats[:-1]
    med_k = float(np.median([s.kernels for s in others]))
    if med_k >= TRUNCATED_MIN_KERNELS and last.kernels < TRUNCATED_KERNEL_RATIO * med_k:
        last.excluded = "truncated"
        last.why = (
            f"launched {last.kernels:,} kernels against a median of {med_k:,.0f} in the "
            "other steps: the profiler stopped inside it"
        )
        return
    kept = [s for s in others if s.excluded is None] or others
    med_w = float(np.median([s.wall_ns for s in kept]))
    tail = rk.empty_tail(wins[-1])
    usual = float(np.median([rk.empty_tail(w) for w in wins[-1 - BASELINE_STEPS : -1]]))
    excess = tail - usual
    if excess >= TAIL_MIN_NS and excess >= TAIL_MIN_PCT / 100.0 * med_w:
        last.excluded = "truncated"
        last.why = (
            f"its last {fmt.fmt_ns(tail)} hold no GPU work and no recorded host event "
            + (f"({fmt.fmt_ns(usual)} in the other steps) " if usual >= 1_000 else "")
            + "(the profiler stopping)"
        )


class _RankEvents:
    """One rank's GPU activity and host events as arrays, for the edge-step tests."""

    def __init__(self, an: Analysis, rank: int, g: pd.DataFrame) -> None:
        self.an, self.rank = an, rank
        self.s = g["start_ns"].to_numpy(np.int64)
        self.e = g["end_ns"].to_numpy(np.int64)
        self.lt = g["launch_start_ns"].to_numpy(np.int64)
        self.step = g["step"].to_numpy()
        self.busy = iv.union(self.s, self.e)
        rt = by_rank.rows(an.attribution.runtime, rank)
        self.names = rt["name"].astype(str).to_numpy()
        self.cs = rt["start_ns"].to_numpy(np.int64)
        self.ce = self.cs + rt["dur_ns"].to_numpy(np.int64)
        self.blocking = (
            name_matches(self.names, SYNC_CALL_RE) | name_matches(self.names, COPY_CALL_RE)
        ) & (self.ce - self.cs >= BLOCKING_MIN_NS)
        self.launch = name_matches(self.names, LAUNCH_CALL_RE)
        self._host: list[tuple[np.ndarray, np.ndarray]] | None = None

    def head(self, w: StepWindow) -> tuple[int, int, int, list[str]]:
        """Before the step's own first GPU work: the GPU time of activity without a launch
        record, the GPU idle time in which the host sits in a blocking copy or sync or the
        first launched work waits in the queue, how many such activities, and the calls."""
        own = np.flatnonzero((self.step == w.step) & (self.lt >= 0))
        if not len(own):
            return 0, 0, 0, []
        j = own[np.argmin(self.s[own])]
        first = int(self.s[j])
        if first <= w.start_ns:
            return 0, 0, 0, []
        head = (np.array([w.start_ns]), np.array([first]))
        q = (self.lt < 0) & (self.s < first) & (self.e > w.start_ns)
        queued = iv.length(iv.intersect(iv.union(self.s[q], self.e[q]), head)) if q.any() else 0
        idle = iv.subtract(head, self.busy)
        blk = self.blocking & (self.cs < first) & (self.ce > w.start_ns)
        # the first launched work waiting in the queue: from the end of its launch call
        lc = (self.cs == self.lt[j]) & self.launch
        waits_from = int(self.ce[lc].max()) if lc.any() else int(self.lt[j])
        ws = np.concatenate((self.cs[blk], [waits_from]))
        we = np.concatenate((self.ce[blk], [first]))
        blocked = iv.length(iv.intersect(idle, iv.union(ws, np.maximum(we, ws))))
        return queued, blocked, int(q.sum()), sorted(set(self.names[blk]))

    def empty_tail(self, w: StepWindow) -> int:
        """How long the window runs on after the last GPU activity and the last host event
        that began inside it (cpu ops, runtime calls, annotations, Python frames)."""
        ends = [w.start_ns]
        on = (self.s < w.end_ns) & (self.e > w.start_ns)
        if on.any():
            ends.append(int(min(self.e[on].max(), w.end_ns)))
        for hs, he in self._host_events():
            inside = (hs >= w.host_start_ns) & (hs < w.end_ns)
            if inside.any():
                ends.append(int(min(he[inside].max(), w.end_ns)))
        return max(0, w.end_ns - max(ends))

    def _host_events(self) -> list[tuple[np.ndarray, np.ndarray]]:
        if self._host is None:
            attr, rank = self.an.attribution, self.rank
            frames = [by_rank.rows(attr.ops, rank), by_rank.rows(attr.runtime, rank)]
            for table, kinds in (
                ("ranges", ("annotation", "gpu_annotation", "nvtx")),
                ("python_frames", None),
            ):
                df = by_rank.table_rows(
                    self.an,
                    table,
                    ("rank", "start_ns", "dur_ns") + (("kind",) if kinds else ()),
                    rank,
                )
                if not len(df):
                    continue
                if kinds:
                    df = df[df["kind"].astype(str).isin(kinds)]
                frames.append(df)
            self._host = []
            for df in frames:
                hs = df["start_ns"].to_numpy(np.int64)
                self._host.append((hs, hs + df["dur_ns"].to_numpy(np.int64)))
        return self._host


def _pre_trace(rk: _RankEvents, wins: list[StepWindow]) -> tuple[int, str]:
    """How much of the first step is taken by work queued before the trace began, beyond what
    the next steps show before their own work (an input copy at every step start is no
    pre-trace work), and the evidence. GPU activity without a launch record, or GPU idle while
    the host waits in a blocking call, can only be waiting on work the trace does not show."""
    queued, blocked, n, calls = rk.head(wins[0])
    if not queued and not blocked:
        return 0, ""
    later = [rk.head(w) for w in wins[1 : 1 + BASELINE_STEPS]]
    queued = max(0, queued - int(np.median([x[0] for x in later])))
    blocked = max(0, blocked - int(np.median([x[1] for x in later])))
    why = []
    if queued:
        why.append(
            f"{fmt.fmt_ns(queued)} of GPU work without a launch record ({n:,} "
            "activities queued before the profiler started)"
        )
    if blocked:
        what = f"in {', '.join(calls[:3])}" if calls else "with its first work queued"
        why.append(
            f"{fmt.fmt_ns(blocked)} with the host waiting {what} while no recorded GPU "
            "work ran (the GPU was still busy with work launched before the trace)"
        )
    return queued + blocked, "before its own GPU work started, " + " and ".join(why)


# --- the metrics ------------------------------------------------------------------------------


def compute(an: Analysis, ms: MetricSet, ranks: list[int]) -> bool:
    """The step metrics; returns whether the trace has step markers on every rank."""
    attr = an.attribution
    has_steps = bool(ranks) and all(attr.has_step_markers.get(r, False) for r in ranks)
    stats = step_stats(an) if has_steps else []
    if not stats:
        for n in ("steps", "steps_representative", "steps_excluded", *STAT_METRICS):
            ms.set(n, None, why_missing="the trace has no step markers")
        if not any(w.step is not None for w in attr.steps):
            for n in ("steps", "steps_representative", "steps_excluded"):
                ms.values[n] = 0.0
                ms.missing.pop(n, None)
        _texts(ms, [], [], [])
        return False
    by_rank = {r: [s for s in stats if s.rank == r] for r in ranks}
    ms.set("steps", float(min(len(v) for v in by_rank.values())))
    ms.set(
        "steps_representative",
        float(min(sum(s.excluded is None for s in v) for v in by_rank.values())),
    )
    excluded = [s for s in stats if s.excluded]
    ms.set("steps_excluded", float(len(excluded)))
    basis = representative(stats)
    times = np.array([s.wall_ns for s in basis], dtype=np.float64)
    p50 = float(np.percentile(times, 50))
    ms.set("step_time_p50_ns", p50)
    ms.set("step_time_p90_ns", float(np.percentile(times, 90)))
    ms.set("step_time_p99_ns", float(np.percentile(times, 99)))
    ms.set("step_time_max_ns", float(times.max()))
    ms.set("step_time_mean_ns", float(times.mean()))
    ms.set("step_time_max_over_p50_ratio", float(times.max() / p50) if p50 else None)
    host_end: dict[tuple[int, int | None], int] = {
        (w.rank, w.step): w.host_end_ns for w in attr.steps if w.step is not None
    }
    host_end.update(an.cache.get("step_host_end") or {})  # steps analysed in step chunks
    lags = {r: gpu_lag(by_rank[r], host_end) for r in ranks}
    ms.set("gpu_lag_ns", float(max(lags.values(), default=0)))
    for r, lag in lags.items():
        if lag:
            med = float(np.median([s.wall_ns for s in by_rank[r][1:]]))
            attr.diagnostics.add(
                "gpu-lag",
                f"the GPU runs a steady {fmt.fmt_ns(lag)} behind the host ({lag / med:.1f} "
                "steps of launched work queued): a queue depth, which is healthy, not jitter"
                + (
                    "; the first step window carries it, and the step-to-step variation is "
                    "measured without it"
                    if edge_lag(by_rank[r], lag)
                    else ""
                ),
                severity="info",
                source=f"rank {r}",
            )
    # jitter: the step times without the lag the first window carries (its window starts at
    # its host start, the others at the previous step's GPU end)
    edge = {r: edge_lag(by_rank[r], lags[r]) for r in ranks}
    jit = [without_lag(s, by_rank[s.rank], edge[s.rank]) for s in basis]
    jtimes = np.array([s.wall_ns for s in jit], dtype=np.float64)
    cvs = []
    for r in ranks:
        t = np.array([s.wall_ns for s in jit if s.rank == r], dtype=np.float64)
        if len(t) >= 3 and t.mean() > 0:
            cvs.append(100.0 * t.std() / t.mean())
            ms.rank_set(r, "step_time_cv_pct", cvs[-1])
    ms.set(
        "step_time_cv_pct",
        max(cvs) if cvs else None,
        why_missing=None if cvs else "needs at least 3 representative steps per rank",
    )
    slow = slow_steps(jit, p50)
    ms.set("slow_steps", float(sum(1 for s in jit if s.wall_ns > SLOW_FACTOR * p50)))
    loss = float(np.clip(jtimes - p50, 0, None).sum())
    ms.set("jitter_loss_pct", 100.0 * loss / jtimes.sum() if jtimes.sum() else None)
    ms.evidence["slow_steps"] = slow
    ms.evidence["steps"] = [s.to_dict() for s in stats]
    _texts(
        ms, excluded, slow, slow[:1] or slow_steps(jit, p50, factor=1.0)[:1], multi=len(ranks) > 1
    )
    return True


def slow_steps(basis: list[StepStat], p50: float, *, factor: float = SLOW_FACTOR) -> list[dict]:
    """The steps over ``factor`` x the median (slowest first), each with the part of the step
    that grew the most over the median step, and the runner-up when it explains a third or
    more of the excess."""
    if not basis or not p50:
        return []
    keys = list(basis[0].parts)
    med = {k: float(np.median([s.parts.get(k, 0) for s in basis])) for k in keys}
    out = []
    for s in basis:
        if s.wall_ns <= factor * p50:
            continue
        deltas = sorted(((s.parts.get(k, 0) - med[k], k) for k in keys), reverse=True)
        (d1, k1), (d2, k2) = deltas[0], deltas[1]
        over = s.wall_ns - p50
        row: dict[str, Any] = {
            "rank": s.rank,
            "step": s.step,
            "wall_ns": s.wall_ns,
            "gpu_ns": s.gpu_ns,
            "over_median_ns": int(over),
            "cause": PART_LABEL[k1],
            "cause_key": k1,
            "cause_delta_ns": int(d1),
            "also": None,
            "also_delta_ns": None,
        }
        if d2 > 0 and d2 >= over / 3:
            row.update(also=PART_LABEL[k2], also_delta_ns=int(d2))
        out.append(row)
    out.sort(key=lambda x: -x["over_median_ns"])
    return out[:MAX_SLOW_ROWS]


def _texts(
    ms: MetricSet,
    excluded: list[StepStat],
    slow: list[dict],
    slowest: list[dict],
    multi: bool = False,
) -> None:

    def name(rank: int, step: int) -> str:
        return f"rank {rank} step {step}" if multi else f"step {step}"

    ex = [
        f"{name(s.rank, s.step)} ({fmt.fmt_ns(s.wall_ns)}, {s.excluded}: {s.why})"
        for s in excluded[:MAX_DETAIL]
    ]
    if len(excluded) > MAX_DETAIL:
        ex.append(f"{len(excluded) - MAX_DETAIL} more")
    sl = []
    for x in slow[:MAX_DETAIL]:
        grew = f"{x['cause']} +{fmt.fmt_ns(x['cause_delta_ns'])}"
        if x.get("also"):
            grew += f", {x['also']} +{fmt.fmt_ns(x['also_delta_ns'])}"
        sl.append(
            f"{name(x['rank'], x['step'])} {fmt.fmt_ns(x['wall_ns'])} "
            f"(+{fmt.fmt_ns(x['over_median_ns'])} over the median: {grew})"
        )
    if len(slow) > MAX_DETAIL:
        sl.append(f"{len(slow) - MAX_DETAIL} more")
    ms.set_fact("steps_excluded_detail", "; ".join(ex) if ex else "none")
    ms.set_fact(
        "slow_steps_detail", "; ".join(sl) if sl else f"no step over {SLOW_FACTOR}x the median"
    )
    ms.set_fact(
        "slowest_step_detail",
        f"{name(slowest[0]['rank'], slowest[0]['step'])}, {slowest[0]['cause']}"
        if slowest
        else "none",
    )
