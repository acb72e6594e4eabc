"""A trace too large to analyse in memory at once: its steps in chunks that fit, said so.

Attribution holds every GPU activity, runtime call and CPU op of a rank at once (the op tree,
the launch links and the module paths need them together). Its peak memory grows with the
rows of the store: :func:`estimate_mb` prices each table's rows at what the analysis was
measured to use for them. When the estimate is above the limit (``--max-memory``, default
4 GB), :func:`plan` picks the longest run of the trace's *last* steps that fits (the window),
and :class:`WindowedStore` serves every table filtered to that time window, reading only the
parquet row groups whose time statistics reach it. The steps before it are cut into step
chunks of about the window's size (:func:`chunks`), each served by a :class:`WindowedStore`
with ``bounds`` (its GPU work chosen by launch correlation, with a step of context before and
two after). :mod:`traceinsight.diagnose.chunks` analyses the chunks one at a time, then the
window, and merges the exact sums of the rows each owns: the step table, the time breakdown,
the rollups, the idle split and the step basis cover every step and equal the unbounded
diagnosis. The figures that need one analysis of the steps together (the metrics'
percentages, findings, timeline, critical path, per-rank summary) come from the window.

``--steps`` (:func:`parse_steps`: ``last:N``, ``A:B``, ``A:``, ``:B``) chooses the steps
instead (:func:`select`): a :class:`WindowedStore` of those steps and the one before them
(so that the first one's window starts where its predecessor's GPU work ended, as in the
whole trace), of which the diagnosis keeps the chosen steps
(:func:`traceinsight.diagnose.chunks.restrict`); every figure then describes them only.

What the window is, what the whole trace would have needed, and how the window's step times
compare with all steps' (from the ``ProfilerStep`` host ranges, read for the whole trace:
they are few) go into the result (``trace.window``) and an ``analysis-window`` diagnostic,
which names the figures that cover every step and those that rest on the window's steps.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from traceinsight import settings
from traceinsight.store import partitions
from traceinsight.store.core import TraceStore, _restore_schema

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "DEFAULT_MAX_MB",
    "ENV_VAR",
    "STEPS_HELP",
    "Chunk",
    "StepRange",
    "Window",
    "WindowedStore",
    "bounded",
    "chunks",
    "estimate_mb",
    "host_steps",
    "max_memory_mb",
    "parse_steps",
    "plan",
    "select",
]

#: the limit when neither ``--max-memory`` nor the environment says otherwise
DEFAULT_MAX_MB = float(settings.VARS["TRACEINSIGHT_MAX_MEMORY_MB"].default)
ENV_VAR = "TRACEINSIGHT_MAX_MEMORY_MB"
#: interpreter, libraries and the fixed part of a diagnosis
BASE_MB = 300.0
#: peak analysis bytes per stored row, by table (measured on the generated benchmark trace:
#: the attribution's frames, the op tree and the metrics' selections together)
BYTES_PER_ROW = {
    "gpu_activities": 900,
    "runtime_calls": 400,
    "cpu_ops": 500,
    "ranges": 300,
    "python_frames": 150,
    "memory_events": 150,
    "flows": 60,
    "other_events": 50,
}
#: the time column of each table a window filters (the memory-snapshot tables are not)
TIME_COLUMN = {
    "gpu_activities": "start_ns",
    "runtime_calls": "start_ns",
    "cpu_ops": "start_ns",
    "ranges": "start_ns",
    "python_frames": "start_ns",
    "memory_events": "ts_ns",
    "flows": "ts_ns",
    "other_events": "start_ns",
}


def max_memory_mb(value: float | None = None) -> float:
    """The limit: ``value`` when given, else ``$TRACEINSIGHT_MAX_MEMORY_MB``, else 4096."""
    if value is not None:
        return float(value)
    return float(settings.get(ENV_VAR))


def estimate_mb(store: TraceStore) -> float:
    """Estimated peak memory of diagnosing the whole store, in MB."""
    return BASE_MB + rows_mb(store.row_counts)


def rows_mb(rows: dict[str, int]) -> float:
    """The estimated analysis memory of tables of these row counts, in MB (no fixed base)."""
    return sum(int(rows.get(t, 0) or 0) * b for t, b in BYTES_PER_ROW.items()) / 1e6


@dataclass(frozen=True)
class Window:
    """The steps a bounded diagnosis analyses, and why."""

    start_ns: int  #: rows from here on (the host start of the first analysed step)
    first_step: int | None  #: N of the first analysed ProfilerStep#N (None: no step markers)
    last_step: int | None
    steps: int  #: steps analysed
    steps_total: int  #: steps in the whole trace
    fraction: float  #: share of the trace's span analysed
    estimate_mb: float  #: estimated memory for the whole trace
    max_mb: float  #: the limit it exceeded
    step_ms: dict[str, Any] = field(default_factory=dict)  #: host step time, whole vs window
    #: steps before the window whose step-table rows were analysed in step chunks
    #: (:func:`chunks`): the step statistics cover ``steps_total`` steps, the rest the window
    chunked_steps: int = 0
    chunks: int = 0  #: step chunks analysed before the window
    #: the ``--steps`` choice (:func:`parse_steps`) that made this window; None: the limit did
    selected: str | None = None
    end_ns: int | None = None  #: rows before this (a chosen range that ends before the trace)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def message(self) -> str:
        span = f"#{self.first_step}-#{self.last_step}"
        if self.selected is not None:
            text = (
                f"diagnosed steps {span} ({self.steps:,} of {self.steps_total:,}), as chosen "
                f"with --steps {self.selected}: every figure describes those steps only"
            )
        else:
            text = (
                f"trace too large to analyse whole within {self.max_mb:,.0f} MB (needs about "
                f"{self.estimate_mb:,.0f} MB): "
            )
            if self.first_step is None:
                return text + (
                    f"diagnosed its last {100 * self.fraction:.0f}% of the span (too few step "
                    "markers to choose steps by)"
                )
            if self.chunked_steps:
                return (
                    text
                    + (
                        f"every step analysed, in {self.chunks + 1:,} runs of steps one at a time; "
                        "the step table and statistics, the time breakdown, the kernel, op, "
                        "layer, module-type and annotation rollups, the idle split and the step "
                        f"basis cover all {self.steps_total:,} steps (exact sums), and so do "
                        "the metrics of GPU time (busy, idle and its causes, compute, "
                        "communication, copies) and of kernels (per step, small, median, GEMM "
                        "and elementwise shares) that the findings test; the findings' other "
                        "evidence (calls, gaps, launch latency), the timeline, critical path, "
                        f"per-rank summary and roofline rest on its last {self.steps:,} steps "
                        f"({span})"
                    )
                    + self._compare()
                )
            text += f"diagnosed its last {self.steps:,} of {self.steps_total:,} steps ({span})"
        return text + self._compare()

    def _compare(self) -> str:
        w, a = self.step_ms.get("window") or {}, self.step_ms.get("all") or {}
        if not (w and a):
            return ""
        return (
            f"; host step time p50 {w['p50']:.1f} ms in those steps vs "
            f"{a['p50']:.1f} ms over all steps (p90 {w['p90']:.1f} vs {a['p90']:.1f}, "
            f"max {w['max']:.1f} vs {a['max']:.1f})"
        )

    def diagnostic(self) -> dict[str, Any]:
        if self.selected is not None:
            hint = "drop --steps to analyse every step"
        elif self.chunked_steps:
            hint = (
                "raise the limit with --max-memory MB (or TRACEINSIGHT_MAX_MEMORY_MB) to base "
                "every figure on every step; --steps A:B chooses the steps to diagnose"
            )
        else:
            hint = (
                "raise the limit with --max-memory MB (or TRACEINSIGHT_MAX_MEMORY_MB) "
                "to analyse more steps, or record fewer steps per trace"
            )
        return {
            "code": "analysis-window",
            "severity": "warning",
            "message": self.message(),
            "count": self.steps_total - self.steps,
            "hint": hint,
        }


def plan(store: TraceStore, max_mb: float) -> Window | None:
    """The window of last steps that fits ``max_mb``; None when the whole store fits or it is
    not on disk. For a store of several ranks the steps are the lowest rank's and the window
    is the same time range on every rank (an edge step cut by clock offsets between hosts is
    excluded as pre-trace work by the step analysis)."""
    est = estimate_mb(store)
    if est <= max_mb or not (store.path / "meta.json").is_file():
        return None
    frac = max(0.0, (max_mb - BASE_MB)) / max(1.0, est - BASE_MB)
    steps = _steps(store)
    if steps is None or len(steps[0]) < 2:
        span = [r["span_ns"] for r in store.ranks if r.get("span_ns")]
        if not span:
            return None
        lo, hi = min(s[0] for s in span), max(s[1] for s in span)
        start = int(hi - frac * (hi - lo))
        return Window(start, None, None, 0, 0, frac, est, max_mb)
    nums, starts, durs = steps
    n = max(1, int(len(nums) * frac))
    first = len(nums) - n
    return Window(
        int(starts[first]),
        int(nums[first]),
        int(nums[-1]),
        n,
        len(nums),
        n / len(nums),
        est,
        max_mb,
        step_ms={"all": _quantiles(durs), "window": _quantiles(durs[first:])},
        chunked_steps=first + 1 if first > 0 else 0,  # the rows of :func:`chunks`
        chunks=_n_chunks(first, n),
    )


def _n_chunks(first: int, n: int) -> int:
    """How many step chunks :func:`chunks` cuts steps 0..``first`` into (windows of ``n``)."""
    if first <= 0:
        return 0
    size = max(1, n - OVERLAP_BEFORE - OVERLAP_AFTER)
    return len(range(0, first + 1, size))


def bounded(store: TraceStore, max_mb: float | None = None, steps: str | None = None) -> TraceStore:
    """``store`` itself when the whole fits the limit; else a :class:`WindowedStore` of its
    last steps that fit, with the step chunks before them (:func:`chunks`, analysed one at a
    time by :mod:`traceinsight.diagnose.chunks`). With ``steps`` (:func:`parse_steps`) the
    store of exactly those steps, whatever the limit."""
    if isinstance(store, WindowedStore):
        return store
    if steps is not None:
        return select(store, parse_steps(steps), max_memory_mb(max_mb))
    w = plan(store, max_memory_mb(max_mb))
    if w is None:
        return store
    parts = tuple(chunks(store, w))
    return WindowedStore(
        store.path, {**store.meta, "window": w.to_dict()}, window=w, step_chunks=parts
    )


@dataclass(frozen=True)
class StepRange:
    """A ``--steps`` choice: ``last`` steps, or step numbers ``first`` through ``stop``
    (None: open)."""

    text: str
    last: int | None = None
    first: int | None = None
    stop: int | None = None


STEPS_HELP = (
    "last:N (the last N steps), A:B (ProfilerStep#A through #B), A: (from #A on) or :B (up to #B)"
)


def parse_steps(text: str) -> StepRange:
    """``--steps`` as given: ``last:N``, ``A:B``, ``A:`` or ``:B`` (step numbers, inclusive);
    a :class:`~traceinsight.errors.ConfigError` naming the forms otherwise."""
    from traceinsight.errors import ConfigError

    t = str(text).strip()
    bad = ConfigError(f"--steps {text!r}: expected {STEPS_HELP}, e.g. --steps last:100")
    head, sep, tail = t.partition(":")
    if not sep:
        raise bad
    try:
        if head.strip().lower() == "last":
            n = int(tail)
            if n < 1:
                raise bad
            return StepRange(t, last=n)
        a = int(head) if head.strip() else None
        b = int(tail) if tail.strip() else None
    except ValueError:
        raise bad from None
    if (a is None and b is None) or (a is not None and a < 0) or (b is not None and b < 0):
        raise bad
    if a is not None and b is not None and a > b:
        raise ConfigError(f"--steps {text!r}: the first step ({a}) is after the last ({b})")
    return StepRange(t, first=a, stop=b)


def select(store: TraceStore, rng: StepRange, max_mb: float) -> WindowedStore:
    """The store of the steps ``rng`` chooses (the lowest rank's step numbers; the same time
    range on every rank): the GPU work launched in them and in the step before them, the host
    rows from that step's start until that work ends; the diagnosis keeps only the chosen
    steps' rows (:func:`traceinsight.diagnose.chunks.restrict`), each as the whole trace's
    analysis measures it."""
    from traceinsight.errors import ConfigError

    steps = _steps(store)
    if steps is None or not len(steps[0]):
        raise ConfigError(f"--steps {rng.text}: the trace has no step markers to choose from")
    nums, starts, durs = steps
    total = len(nums)
    if rng.last is not None:
        i, j = max(0, total - rng.last), total - 1
    else:
        idx = [
            k
            for k, x in enumerate(nums)
            if (rng.first is None or x >= rng.first) and (rng.stop is None or x <= rng.stop)
        ]
        if not idx:
            raise ConfigError(
                f"--steps {rng.text}: no such step (the trace has steps "
                f"#{int(nums.min())}-#{int(nums.max())})"
            )
        i, j = idx[0], idx[-1]
    hi = int(starts[j + 1]) if j + 1 < total else None
    n = j - i + 1
    w = Window(
        int(starts[i]),
        int(nums[i]),
        int(nums[j]),
        n,
        total,
        n / total,
        estimate_mb(store),
        max_mb,
        step_ms={"all": _quantiles(durs), "window": _quantiles(durs[i : j + 1])},
        selected=rng.text,
        end_ns=hi,
    )
    lead = int(starts[i - OVERLAP_BEFORE]) if i >= OVERLAP_BEFORE else None
    return WindowedStore(
        store.path,
        {**store.meta, "window": w.to_dict()},
        window=w,
        bounds=(lead, hi),
        keep_steps=frozenset(int(x) for x in nums[i : j + 1]),
        own_from_ns=int(starts[i]) if i > 0 else None,
    )


@dataclass
class WindowedStore(TraceStore):
    """A store on disk whose time-stamped tables are served from ``window.start_ns`` on (to
    before ``window.end_ns`` for a chosen range that ends before the trace: :func:`select`),
    or, with ``bounds`` (a step chunk), from ``bounds[0]`` (None: the start) to before
    ``bounds[1]`` (None: the end)."""

    window: Window | None = None
    bounds: tuple[int | None, int | None] | None = None
    #: the step chunks before the window (:func:`chunks`), analysed for the step table
    step_chunks: tuple[Chunk, ...] = ()
    #: a chosen range (:func:`select`): its steps (the store holds the step before them too,
    #: so that the first one's window starts where its predecessor's GPU work ended) ...
    keep_steps: frozenset[int] | None = None
    #: ... and where its step-less GPU rows and CPU ops begin (None: the trace's start)
    own_from_ns: int | None = None
    _gpu_end: int | None = field(default=None, repr=False, compare=False)

    def table(self, name: str, columns: list[str] | None = None) -> pa.Table:
        col = TIME_COLUMN.get(name)
        if col is None or self.window is None:
            return super().table(name, columns)
        if self.bounds is None:
            return self._read(name, columns, self.window.start_ns, None)
        if name == "gpu_activities":
            return self._launched(columns)
        t = self._read(name, columns, self.bounds[0], self._host_end())
        hi = self.bounds[1]
        if (
            name == "ranges"
            and hi is not None
            and t.num_rows
            and {"kind", "start_ns"} <= set(t.column_names)
        ):
            # the chunk's steps only: its host rows are read on while its GPU work runs, but a
            # later step's ProfilerStep range there would be an empty step of its own (and
            # sway which steps look representative: a warm-up step among empty ones is kept)
            later = pc.and_(pc.equal(t["kind"], "step"), pc.greater_equal(t["start_ns"], hi))
            t = t.filter(pc.invert(pc.fill_null(later, False)))
        return t

    def _read(
        self, name: str, columns: list[str] | None, lo: int | None, hi: int | None
    ) -> pa.Table:
        col = TIME_COLUMN[name]
        filters: list[tuple[str, str, Any]] = []
        if lo is not None:
            filters.append((col, ">=", int(lo)))
        if hi is not None:
            filters.append((col, "<", int(hi)))
        return partitions.read_table(
            self.path, self.meta, name, _restore_schema, columns, filters=filters or None
        )

    def _host_end(self) -> int | None:
        """Where a step chunk's host rows end: past its launch range, as long as the GPU work
        launched in it runs (the host events while that work waits explain its idle gaps)."""
        hi = self.bounds[1] if self.bounds is not None else None
        if hi is None:
            return None
        if self._gpu_end is None:
            g = self._launched(["start_ns", "dur_ns"])
            end = pc.max(pc.add(g["start_ns"], g["dur_ns"])).as_py() if g.num_rows else None
            self._gpu_end = max(int(hi), int(end) + 1 if end is not None else int(hi))
        return self._gpu_end

    def _launched(self, columns: list[str] | None) -> pa.Table:
        """A step chunk's GPU activities: those launched in it, wherever they run (the GPU
        may run steps behind the host), chosen by launch correlation (ids rise with launch
        time on each rank: an activity whose id falls within the chunk's runtime calls' ids
        on its rank was launched in the chunk, or has no recorded launch and runs there);
        without a correlation id, those starting in the chunk."""
        import pyarrow.dataset as ds

        lo, hi = self.bounds or (None, None)
        rt = self._read("runtime_calls", ["rank", "correlation"], lo, hi).drop_null()
        span = rt.group_by("rank").aggregate([("correlation", "min"), ("correlation", "max")])
        start = ds.field("start_ns")
        timed = ds.field("correlation").is_null()
        if lo is not None:
            timed = timed & (start >= int(lo))
        if hi is not None:
            timed = timed & (start < int(hi))
        expr = timed
        if span.num_rows:
            cmin = pc.min(span["correlation_min"]).as_py()
            cmax = pc.max(span["correlation_max"]).as_py()
            expr = timed | ((ds.field("correlation") >= cmin) & (ds.field("correlation") <= cmax))
        want = None if columns is None else list(dict.fromkeys([*columns, "rank", "correlation"]))
        t = partitions.read_table(
            self.path, self.meta, "gpu_activities", _restore_schema, want, filters=expr
        )
        if span.num_rows and t.num_rows:  # each rank's own id range
            rank_mins = dict(zip(span["rank"].to_pylist(), span["correlation_min"].to_pylist()))
            rank_maxs = dict(zip(span["rank"].to_pylist(), span["correlation_max"].to_pylist()))
            ranks = t["rank"]
            lo_c = pc.fill_null(pc.index_in(ranks, pa.array(list(rank_mins))), -1)
            keys = list(rank_mins)
            mins = pa.array([rank_mins[k] for k in keys] + [None])
            maxs = pa.array([rank_maxs[k] for k in keys] + [None])
            idx = pc.if_else(pc.equal(lo_c, -1), len(keys), lo_c)
            cm, cx = pc.take(mins, idx), pc.take(maxs, idx)
            c = t["correlation"]
            launched = pc.and_(pc.greater_equal(c, cm), pc.less_equal(c, cx))
            keep = pc.or_kleene(pc.fill_null(launched, False), pc.is_null(c))
            t = t.filter(keep)
        return t.select(columns) if columns is not None else t


@dataclass(frozen=True)
class Chunk:
    """A run of steps analysed by itself for the step table: rows from ``lo_ns`` (None: the
    trace's start) to before ``hi_ns`` (None: its end), of which the rows of the steps
    ``keep`` (step numbers) are used. The range holds ``OVERLAP_BEFORE`` step before the kept
    ones (the first kept window starts where the step before it ended on the GPU) and
    ``OVERLAP_AFTER`` steps after them (GPU work queued behind the host ends there)."""

    lo_ns: int | None
    hi_ns: int | None
    keep: frozenset[int]
    #: the chunk owns the step-less GPU rows and the CPU ops starting from its first kept
    #: step's host start (None: the trace's start) to before the next chunk's (None: the end)
    own_lo_ns: int | None = None
    own_hi_ns: int | None = None


OVERLAP_BEFORE = 1
OVERLAP_AFTER = 2


def chunks(store: TraceStore, window: Window) -> list[Chunk]:
    """The step chunks covering the steps from the trace's first through the window's first
    (the window's own first step starts at its host start, not where its predecessor ended, so
    its row comes from a chunk too); each holds about as many steps as the window. Empty when
    the window was not chosen by steps or starts at the first step."""
    if window.first_step is None:
        return []
    steps = _steps(store)
    if steps is None:
        return []
    nums, starts = steps[0], steps[1]
    total = len(nums)
    first = total - window.steps
    if first <= 0:
        return []
    size = max(1, window.steps - OVERLAP_BEFORE - OVERLAP_AFTER)
    out = []
    for a in range(0, first + 1, size):
        b = min(a + size, first + 1)  # the kept steps: indices a .. b-1
        lo = int(starts[a - OVERLAP_BEFORE]) if a >= OVERLAP_BEFORE else None
        hi = int(starts[b + OVERLAP_AFTER]) if b + OVERLAP_AFTER < total else None
        out.append(
            Chunk(
                lo,
                hi,
                frozenset(int(x) for x in nums[a:b]),
                int(starts[a]) if a > 0 else None,
                int(starts[b]) if b < total else None,
            )
        )
    return out


def host_steps(rng: pd.DataFrame) -> pd.DataFrame:
    """One rank's ``ProfilerStep#N`` host ranges (rows of ``ranges``) in time order, the first
    of each step number: the one definition of a rank's steps (the analysis' step windows and
    the window's choice of steps)."""
    st = rng[rng["kind"] == "step"].sort_values("start_ns")
    return st.drop_duplicates("step", keep="first")


def _steps(store: TraceStore) -> tuple[Any, Any, Any] | None:
    """(step numbers, host starts, host durations) of the lowest rank's ProfilerStep ranges,
    in time order, one per step number (only a store too large to analyse whole gets here:
    pandas is imported then)."""
    t = store.table("ranges", ["rank", "kind", "step", "start_ns", "dur_ns"])
    if not t.num_rows:
        return None
    t = t.filter(pc.equal(t["kind"], "step"))
    if not t.num_rows:
        return None
    t = t.filter(pc.equal(t["rank"], pc.min(t["rank"])))
    df = host_steps(t.to_pandas()).dropna(subset=["step"])
    return (df["step"].to_numpy(), df["start_ns"].to_numpy(), df["dur_ns"].to_numpy())


def _quantiles(durs_ns: Any) -> dict[str, float]:
    import numpy as np

    a = np.asarray(durs_ns, dtype=np.float64) / 1e6
    return {
        "p50": float(np.percentile(a, 50)),
        "p90": float(np.percentile(a, 90)),
        "max": float(a.max()),
        "steps": len(a),
    }
