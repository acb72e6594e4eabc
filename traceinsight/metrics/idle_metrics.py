"""The idle metrics: the GPU idle time of all step windows split by cause (:mod:`.idle`), the
share of the window that is not steady state (start-up, graph capture, compilation, a one-off
wait), and the evidence and text facts the rules quote (the calls behind each cause).

Every idle nanosecond has one cause, so ``idle_input + idle_sync + idle_host + idle_launch +
idle_device_wait + idle_startup + idle_capture + idle_compile + idle_unknown + idle_unrecorded =
gpu_idle``
(``idle_copy`` is part of ``idle_sync``, ``idle_alloc`` and ``idle_host_busy`` of
``idle_host``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pandas as pd

from traceinsight.analysis import WHOLE_STEPS, Analysis, attribution_parts, by_rank
from traceinsight.analysis.idle import (
    BLOCKING_MIN_NS,
    CAUSES,
    COMPILE_RANGE_RE,
    NONSTEADY,
    NONSTEADY_MIN_PCT,
    STALL_MIN_NS,
    STARTUP_RANGE_RE,
    IdleSplit,
    idle_split,
    rank_ranges,
)
from traceinsight.metrics.registry import MetricSet, declare, declare_fact
from traceinsight.util import capture_hints, fmt

NEEDS = "GPU kernels"
#: idle_recorded_pct when the profiler dropped records: no high finding rests on such idle
DROPPED_RECORDED_PCT = 85.0

for _n, _d in (
    ("idle_input_pct", "GPU idle while the host loads input (DataLoader ranges), % of window"),
    (
        "idle_sync_pct",
        "GPU idle because the host blocks on the device: inside sync calls and "
        "blocking copies of 50 µs or more, and after one that drained the queue "
        "until the host launched again (includes idle_copy_pct), % of window",
    ),
    (
        "idle_copy_pct",
        "GPU idle inside or right after blocking copies (cudaMemcpy, "
        "hipMemcpyWithStream, pageable cudaMemcpyAsync: .item(), .cpu()), "
        "% of window",
    ),
    (
        "idle_host_pct",
        "GPU idle while the launching host thread is stalled: inside allocator "
        "calls, or issuing no GPU runtime call for 0.5 ms or more; the sum of "
        "idle_alloc_pct and idle_host_busy_pct, % of window",
    ),
    (
        "idle_alloc_pct",
        "GPU idle while the launching thread is inside allocator calls of 50 µs "
        "or more (cudaMalloc/cudaFree, hipMalloc/hipFree), % of window",
    ),
    (
        "idle_host_busy_pct",
        "GPU idle while the host issues no GPU runtime call for 0.5 ms or "
        "more (one long CPU op, GC, I/O, unrecorded host time), % of window",
    ),
    (
        "idle_launch_pct",
        "GPU idle while the host is busy issuing work: gaps ended by work "
        "launched after the GPU went idle, with the host in no blocking call, "
        "% of window",
    ),
    (
        "idle_device_wait_pct",
        "GPU idle with the next work already launched but queued behind a "
        "dependency (stream wait event, another stream, a peer), % of window",
    ),
    (
        "idle_startup_pct",
        "GPU idle while the launching thread is in one-off start-up calls "
        "(context, module, stream or event creation; a kernel launch of 1 ms or "
        "more = lazy module loading; an allocator call of 100 ms or more), "
        "% of window",
    ),
    (
        "idle_capture_pct",
        "GPU idle while the host records a CUDA/HIP graph (Begin..EndCapture, "
        "graph instantiation, capture ranges), % of window",
    ),
    ("idle_compile_pct", "GPU idle during torch.compile / Triton compilation ranges, % of window"),
    (
        "idle_unknown_pct",
        "GPU idle that nothing on the host explains (after the last GPU work, "
        "or before work without a launch record), % of window",
    ),
    (
        "idle_unrecorded_pct",
        "GPU idle inside CUDA/HIP graph replays whose nodes are only partly recorded "
        "(holes between recorded nodes, memsets without their kernels, fewer kernels "
        "than other replays of the graph): unrecorded work, not idle, % of window",
    ),
    (
        "idle_recorded_pct",
        "share of the GPU idle time that is not unrecorded (100 when every graph "
        "replay is completely recorded; at most 85 when the profiler "
        "reports dropped activity records: its idle may hold unrecorded work), % of GPU idle",
    ),
    (
        "longest_wait_pct",
        "the longest single dependency wait (work queued, GPU idle), % of its rank's windows",
    ),
    (
        "nonsteady_pct",
        "share of the window that is not steady state: GPU idle in start-up "
        "calls, graph capture and compilation, plus the longest single dependency "
        "wait",
    ),
    (
        "alloc_host_pct",
        "host time in allocator calls (cudaMalloc/cudaFree, hipMalloc/hipFree), % of window",
    ),
):
    declare(_n, "%", _d, needs=NEEDS, setting=capture_hints.GPU)
declare(
    "steady_state",
    "bool",
    f"1 unless nonsteady_pct >= {NONSTEADY_MIN_PCT:g}: the window "
    "shows steady-state work (the steady-state rules apply only then); 1 without GPU work",
    needs=NEEDS,
    setting=capture_hints.GPU,
)
declare(
    "gpu_idle_steady_pct",
    "%",
    "GPU idle outside one-off start-up, compilation and graph capture (gpu_idle_pct minus "
    "idle_startup_pct, idle_compile_pct and idle_capture_pct), % of window",
    needs=NEEDS,
    setting=capture_hints.GPU,
)
declare(
    "idle_oneoff_pct",
    "%",
    "GPU idle in one-off start-up, compilation and graph capture (idle_startup_pct + "
    "idle_compile_pct + idle_capture_pct), % of window",
    needs=NEEDS,
    setting=capture_hints.GPU,
)
declare(
    "input_nsys",
    "bool",
    "1 when every input is an Nsight Systems report: advice on what to record names nsys "
    "options instead of torch.profiler's",
    needs=NEEDS,
    setting=capture_hints.GPU,
)
declare(
    "alloc_calls",
    "count",
    "allocator calls (cudaMalloc/cudaFree, hipMalloc/hipFree, host allocations) in the windows",
    needs=NEEDS,
    setting=capture_hints.GPU,
)
for _n, _d in (
    (
        "nonsteady_kind",
        "what the window is instead of a steady state (start-up, graph capture, "
        "compilation, a one-off wait)",
    ),
    ("nonsteady_detail", "the calls or the wait that make the window not steady state"),
    ("steady_capture_advice", "how to record steady state, in the input's vocabulary"),
    ("host_stall_detail", "the allocator calls and host events behind idle_host_pct"),
    ("sync_detail", "the blocking calls behind idle_sync_pct"),
):
    declare_fact(_n, _d)

#: idle metric -> the causes it sums
METRIC_CAUSES = {
    "idle_input_pct": ("input",),
    "idle_sync_pct": ("sync", "copy"),
    "idle_copy_pct": ("copy",),
    "idle_host_pct": ("host", "alloc"),
    "idle_alloc_pct": ("alloc",),
    "idle_host_busy_pct": ("host",),
    "idle_launch_pct": ("launch",),
    "idle_device_wait_pct": ("dependency",),
    "idle_startup_pct": ("startup",),
    "idle_capture_pct": ("capture",),
    "idle_compile_pct": ("compile",),
    "idle_unknown_pct": ("unknown",),
    "idle_unrecorded_pct": ("unrecorded",),
}
METRICS = (
    *METRIC_CAUSES,
    "idle_recorded_pct",
    "idle_oneoff_pct",
    "gpu_idle_steady_pct",
    "input_nsys",
    "longest_wait_pct",
    "nonsteady_pct",
    "steady_state",
    "alloc_host_pct",
    "alloc_calls",
)
_FAMILY = {
    "startup": "start-up",
    "capture": "graph capture",
    "copy": "copy",
    "sync": "sync",
    "alloc": "allocator",
}


def set_missing(ms: MetricSet, why: str) -> None:
    for n in METRICS:
        ms.set(n, None, why_missing=why)
    # nothing marks a trace without GPU work as warm-up: its step statistics (jitter) stand
    ms.set("steady_state", 1.0)


def _pct(x: float, total: float) -> float | None:
    return 100.0 * x / total if total else None


#: the largest gaps of a rank a partition's worker sends back (the evidence keeps the job's
#: :data:`EVIDENCE_GAPS` largest, which are among them)
EVIDENCE_GAPS = 10


def _window_key(w: Any) -> tuple[int, int | None, int]:
    return (w.rank, w.step, w.start_ns)


def rank_splits(an: Analysis) -> dict[int, dict[str, Any]]:
    """Per rank of ``an`` (a rank partition's analysis, in its worker): the idle split of all
    its step windows as :func:`compute` asks for it (its gaps cut to the
    :data:`EVIDENCE_GAPS` largest), and the idle ns by cause over its representative windows
    (those the step statistics use, for ``step_basis``), keyed by those windows. The client's
    analysis of the whole job reads them instead of classifying every rank's gaps again
    (:func:`split_of`, :func:`representative_split`)."""
    from traceinsight.metrics.steps import step_stats

    attr = an.attribution
    out: dict[int, dict[str, Any]] = {}
    if not len(attr.gpu):
        return out
    wins: dict[int, list] = {}
    for w in attr.steps:
        wins.setdefault(w.rank, []).append(w)
    own_rep: dict[int, set] = {}
    for st in step_stats(an):
        if st.excluded is None:
            own_rep.setdefault(st.rank, set()).add((st.rank, st.step, st.start_ns))
    for r in sorted(an.breakdown.ranks):
        g = by_rank.rows(attr.gpu, r)
        mine = wins.get(r, [])
        s, _ = idle_split(an, r, g, mine, top=None)  # the step table's split, when it has one
        entry: dict[str, Any] = {
            "windows": [_window_key(w) for w in mine],
            "split": dataclasses.replace(s, gaps=s.gaps[:EVIDENCE_GAPS]),
            "rep": None,
        }
        keys = own_rep.get(r)
        if keys:
            ws = [w for w in mine if _window_key(w) in keys]
            ns = s.ns if len(ws) == len(mine) else idle_split(an, r, g, ws, top=None)[0].ns
            entry["rep"] = (frozenset(keys), dict(ns))
        out[r] = entry
    return out


# computed per rank partition next to its attribution (in the worker that reads it)
attribution_parts.product("idle_rank_splits", __name__, rank_splits, attribution_parts.merge_dicts)


def split_of(an: Analysis, rank: int, g: pd.DataFrame, windows: list) -> IdleSplit:
    """The idle split of ``rank``'s step ``windows`` (all of its windows, in step order) as
    its partition's worker computed it (its gaps: the largest only), else computed here."""
    pre = (an.cache.get("idle_rank_splits") or {}).get(rank)
    if pre is not None and pre["windows"] == [_window_key(w) for w in windows]:
        return pre["split"]
    return idle_split(an, rank, g, windows, top=None)[0]


def representative_split(an: Analysis, rank: int, windows: list) -> dict[str, int] | None:
    """The idle ns by cause over ``rank``'s representative ``windows`` when its partition's
    worker computed them for the same windows; None otherwise."""
    pre = (an.cache.get("idle_rank_splits") or {}).get(rank)
    if pre is None or pre["rep"] is None:
        return None
    keys, ns = pre["rep"]
    return dict(ns) if keys == frozenset(_window_key(w) for w in windows) else None


def compute(an: Analysis, ms: MetricSet, ranks: list[int]) -> None:
    """Idle split over all ranks' step windows: the idle_* metrics, the not-steady-state share,
    the evidence (largest gaps, host stalls, the calls behind each cause) and text facts."""
    attr, bd = an.attribution, an.breakdown
    g_all = attr.gpu
    total = IdleSplit()
    gaps: list[dict] = []
    stalls, calls = [], []
    nonsteady_ns = 0
    waits: list[tuple[float, dict]] = []
    wins: dict[int, list] = {}
    for w in attr.steps:
        wins.setdefault(w.rank, []).append(w)
    for r in ranks:
        s = split_of(an, r, by_rank.rows(g_all, r), wins.get(r, []))
        total.add(s)
        wall_r = bd.ranks[r].wall_ns
        ms.rank_set(r, "idle_launch_pct", _pct(s.launch_ns, wall_r))
        gaps.extend(s.gaps)
        if len(s.stall_events):
            stalls.append(s.stall_events.assign(rank=r))
        if len(s.calls):
            calls.append(s.calls.assign(rank=r))
        nonsteady_ns += sum(s.ns[c] for c in NONSTEADY) + s.longest_wait_ns
        if s.longest_wait:
            waits.append((s.longest_wait_ns / wall_r if wall_r else 0.0, s.longest_wait))
    wall = sum(bd.ranks[r].wall_ns for r in ranks)
    # the idle split by cause: of every step when the store was analysed in step chunks (their
    # exact sums); the calls, gaps and waits quoted below are the window's
    by_cause, wall_all = _whole_split(an, ranks) or (dict(total.ns), wall)
    for m, causes in METRIC_CAUSES.items():
        ms.set(m, _pct(sum(by_cause.get(c, 0) for c in causes), wall_all))
    idle_ns = sum(by_cause.values())
    oneoff = sum(by_cause.get(c, 0) for c in NONSTEADY)
    ms.set("idle_oneoff_pct", _pct(oneoff, wall_all))
    ms.set("gpu_idle_steady_pct", _pct(idle_ns - oneoff, wall_all))
    fmts = {str(r.get("format")) for r in an.store.ranks}
    ms.set("input_nsys", float(fmts == {"nsys"}))
    cap = capture_hints.Capture.from_dict(ms.evidence.get("capture"))
    ms.set_fact("steady_capture_advice", str(capture_hints.hint(capture_hints.WARM, cap)))
    recorded = 100.0 - (_pct(by_cause.get("unrecorded", 0), idle_ns) or 0.0)
    if any(d.get("code") == "records-dropped" for d in an.store.meta.get("diagnostics", [])):
        recorded = min(recorded, DROPPED_RECORDED_PCT)
    ms.set("idle_recorded_pct", recorded)
    wait_share, wait = max(waits, key=lambda x: x[0]) if waits else (0.0, None)
    ms.set("longest_wait_pct", 100.0 * wait_share)
    nonsteady = _pct(nonsteady_ns, wall)
    ms.set("nonsteady_pct", nonsteady)
    ms.set("steady_state", None if nonsteady is None else float(nonsteady < NONSTEADY_MIN_PCT))
    call_df = (
        pd.concat(calls, ignore_index=True)
        if calls
        else pd.DataFrame(columns=["cause", "name", "start_ns", "dur_ns", "idle_ns", "rank"])
    )
    alloc = call_df[call_df["cause"] == "alloc"]
    ms.set("alloc_calls", float(len(alloc)))
    ms.set("alloc_host_pct", _pct(int(alloc["dur_ns"].sum()), wall))
    gaps.sort(key=lambda x: -x["dur_ns"])
    call_rows = _call_rows(call_df, wall)
    stall_rows = _stall_rows(stalls, alloc)
    ms.evidence["idle_gaps"] = gaps[:10]
    ms.evidence["idle_split_ns"] = dict(by_cause)
    ms.evidence["idle_calls"] = call_rows
    ms.evidence["host_stalls"] = stall_rows
    ms.evidence["nonsteady"] = _nonsteady_rows(total, wait, wall)
    names = {
        c: _range_names(an, ranks, rx) if total.ns[c] else ""
        for c, rx in (("compile", COMPILE_RANGE_RE), ("startup", STARTUP_RANGE_RE))
    }
    kind, detail = _nonsteady_text(
        total, wait, wall, call_rows, call_df[call_df["cause"] == "capture"], names
    )
    ms.set_fact("nonsteady_kind", kind)
    ms.set_fact("nonsteady_detail", detail)
    ms.set_fact("host_stall_detail", _stall_text(stall_rows, wall))
    ms.set_fact(
        "sync_detail",
        _calls_text([r for r in call_rows if r["cause"] in ("copy", "sync")], wall)
        or "no blocking call of 50 µs or more",
    )


def _whole_split(an: Analysis, ranks: list[int]) -> tuple[dict[str, int], int] | None:
    """The idle ns by cause of every step window and their wall time, when ``an``'s store was
    analysed in step chunks (the merged sums the diagnosis put in ``an.cache``); else None."""
    whole = an.cache.get(WHOLE_STEPS)
    if whole is None:
        return None
    by_cause = {c: int(whole.figures.idle_ns.get(c, 0)) for c in CAUSES}
    return by_cause, sum(whole.breakdown.ranks[r].wall_ns for r in ranks)


def _call_rows(df: pd.DataFrame, wall: int) -> list[dict]:
    """Calls behind the idle causes, by cause and name, largest GPU idle inside first."""
    if not len(df):
        return []
    agg = df.groupby(["cause", "name"])[["dur_ns", "idle_ns"]].agg(["size", "sum", "max"])
    rows: list[dict[str, Any]] = []
    for (cause, name), r in agg.iterrows():
        rows.append(
            {
                "cause": _FAMILY[cause],
                "call": name,
                "count": int(r[("dur_ns", "size")]),
                "total_ns": int(r[("dur_ns", "sum")]),
                "max_ns": int(r[("dur_ns", "max")]),
                "window_pct": _pct(int(r[("dur_ns", "sum")]), wall),
                "idle_ns": int(r[("idle_ns", "sum")]),
            }
        )
    rows.sort(key=lambda x: (-x["idle_ns"], -x["total_ns"]))
    return [r for r in rows if r["idle_ns"] >= BLOCKING_MIN_NS][:12]


def _stall_rows(stalls: list[pd.DataFrame], alloc: pd.DataFrame) -> list[dict]:
    """Allocator calls, then the long host events (0.5 ms or more) inside stretches in which
    the host issued no GPU work."""
    rows: list[dict[str, Any]] = []
    if len(alloc):
        agg = alloc.groupby("name")[["dur_ns", "idle_ns"]].agg(["size", "sum", "max"])
        rows = [
            {
                "event": f"{name} (runtime call)",
                "count": int(r[("dur_ns", "size")]),
                "total_ns": int(r[("dur_ns", "sum")]),
                "max_ns": int(r[("dur_ns", "max")]),
                "idle_ns": int(r[("idle_ns", "sum")]),
            }
            for name, r in agg.iterrows()
        ]
        rows = [r for r in rows if r["idle_ns"] >= STALL_MIN_NS]
    if stalls:
        st = pd.concat(stalls)
        agg = st.groupby(st["name"].astype(str))["dur_ns"].agg(["size", "sum", "max"]).reset_index()
        rows += [
            {
                "event": r.name,
                "count": int(r.size),
                "total_ns": int(r.sum),
                "max_ns": int(r.max),
                "idle_ns": None,
            }
            for r in agg.sort_values("sum", ascending=False).head(8).itertuples()
        ]
    rows.sort(key=lambda x: -x["total_ns"])
    return rows[:8]


def _nonsteady_rows(total: IdleSplit, wait: dict | None, wall: int) -> list[dict]:
    rows = [
        {"kind": k, "idle_ns": total.ns[c], "window_pct": _pct(total.ns[c], wall)}
        for c, k in (
            ("startup", "start-up (one-off runtime calls)"),
            ("capture", "CUDA/HIP graph capture"),
            ("compile", "compilation"),
        )
        if total.ns[c]
    ]
    if wait:
        rows.append(
            {
                "kind": "longest wait on a dependency (work queued, GPU idle)",
                "idle_ns": wait["wait_ns"],
                "window_pct": _pct(wait["wait_ns"], wall),
            }
        )
    return sorted(rows, key=lambda x: -x["idle_ns"])


def _n_calls(r: dict) -> str:
    n = r["count"]
    return f"{n:,} `{r['call']}` call{'s' if n != 1 else ''}"


def _calls_text(rows: list[dict], wall: int, n: int = 3) -> str:
    """``1,360 hipFree calls (3.35 s, 98.7% of the window)``, the calls with most idle first."""
    return ", ".join(
        f"{_n_calls(r)} ({fmt.fmt_ns(r['total_ns'])}, "
        f"{fmt.fmt_pct(_pct(r['total_ns'], wall) or 0)} of the window)"
        for r in rows[:n]
    )


def _stall_text(rows: list[dict], wall: int) -> str:
    parts = []
    for r in rows[:3]:
        if r["event"].endswith(" (runtime call)"):
            share = fmt.fmt_pct(_pct(r["total_ns"], wall) or 0)
            parts.append(
                f"{r['count']:,} `{r['event'].removesuffix(' (runtime call)')}` calls "
                f"({fmt.fmt_ns(r['total_ns'])}, {share} of the window)"
            )
        else:
            parts.append(f"`{r['event']}` ({r['count']:,}x, {fmt.fmt_ns(r['total_ns'])})")
    return "; ".join(parts) or "no host event was recorded in those stretches"


def _range_names(an: Analysis, ranks: list[int], rx: Any, n: int = 3) -> str:
    """The host ranges, ops and frames matching ``rx`` with the most time (one-off work
    named by what ran: nvFuser's compileFusion, NVRTC, autotuning, cuBLAS heuristics)."""
    tot: dict[str, int] = {}
    for r in ranks:
        sel = rank_ranges(an, r, rx, frames=True)[2].drop_duplicates(["name", "start_ns"])
        for name, d in zip(sel["name"].astype(str), sel["dur_ns"].to_numpy()):
            path, sep, rest = name.partition(".py(")
            key = ("/".join(path.replace("\\", "/").split("/")[-2:]) + sep + rest)[:80]
            tot[key] = tot.get(key, 0) + int(d)
    top = sorted(tot.items(), key=lambda kv: -kv[1])[:n]
    return ", ".join(f"`{k}` {fmt.fmt_ns(v)}" for k, v in top)


def _nonsteady_text(
    total: IdleSplit,
    wait: dict | None,
    wall: int,
    call_rows: list[dict],
    calls: pd.DataFrame,
    names: dict[str, str] | None = None,
) -> tuple[str, str]:
    """What the window is (short) and what shows it (the calls, or the wait)."""
    parts = {c: total.ns[c] for c in NONSTEADY}
    parts["wait"] = wait["wait_ns"] if wait else 0
    kind = max(parts, key=lambda k: parts[k])
    if not parts[kind]:
        return "steady state", "no start-up, capture, compilation or one-off wait"
    share = fmt.fmt_pct(_pct(parts[kind], wall) or 0)
    if kind == "wait" and wait:
        op = wait.get("next_op")
        by = f" launched by `{op}`" if op and not str(op).startswith("[") else ""
        on = f" ({wait['waited_on']})" if wait.get("waited_on") else ""
        return (
            "dominated by a one-off wait",
            f"work{by} sat queued behind a dependency (a stream wait event, another stream "
            f"or a peer{on}) for {fmt.fmt_ns(wait['wait_ns'])}, {share} of the window, before "
            "it started; nothing else ran",
        )
    if kind == "startup":
        rows = _calls_text([r for r in call_rows if r["cause"] == "start-up"], wall)
        more = (names or {}).get("startup")
        return (
            "start-up / a cold first iteration",
            f"the GPU idles for {share} of the window while the host is inside one-off "
            f"runtime calls (context, module, stream and event creation, first kernel "
            f"launches) or first calls: " + "; ".join(x for x in (rows, more) if x),
        )
    if kind == "capture":
        cnames = calls["name"].astype(str) if len(calls) else pd.Series([], dtype=str)
        n_cap = int(cnames.str.contains("BeginCapture").sum())
        n_inst = int(cnames.str.contains("GraphInstantiate").sum())
        what = (
            f" ({n_cap:,} stream capture{'s' if n_cap != 1 else ''}, {n_inst:,} graph"
            f"{'s' if n_inst != 1 else ''} instantiated)"
            if n_cap or n_inst
            else ""
        )
        return (
            "CUDA/HIP graph capture",
            f"the host records kernels into CUDA/HIP graphs{what} instead of running them; "
            f"the GPU idles for {share} of the window",
        )
    more = (names or {}).get("compile")
    return (
        "compilation / warm-up",
        f"the host compiles (torch.compile, nvFuser, NVRTC, Triton, flashinfer JIT) while the "
        f"GPU idles, {share} of the window" + (f": {more}" if more else ""),
    )


__all__ = ["CAUSES", "METRICS", "compute", "set_missing"]
