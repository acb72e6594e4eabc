"""Step windows of one rank: ``ProfilerStep#N`` host ranges widened to GPU-aware windows (a step
ends when the last activity launched in it ends, as TensorBoard measures it), and the step of
every GPU activity. Without step markers the whole trace is one window. Used by
:func:`traceinsight.analysis.attribution.attribute`."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from traceinsight.analysis.intervals import take
from traceinsight.diagnostics import DiagnosticLog
from traceinsight.store.window import host_steps
from traceinsight.util import capture_hints


@dataclass
class StepWindow:
    rank: int
    step: int | None  #: N of ProfilerStep#N; None for a whole-trace window
    host_start_ns: int
    host_end_ns: int
    start_ns: int  #: GPU-aware window (TensorBoard definition)
    end_ns: int

    @property
    def dur_ns(self) -> int:
        return self.end_ns - self.start_ns


def step_windows(
    rank: int,
    g: pd.DataFrame,
    rng: pd.DataFrame,
    launch_t: np.ndarray,
    has_launch: np.ndarray,
    ops: pd.DataFrame,
    rt: pd.DataFrame,
    diags: DiagnosticLog,
) -> tuple[list[StepWindow], np.ndarray, bool]:
    """The rank's step windows, the step number of every activity in ``g`` (None outside any
    step) and whether the trace had step markers. ``launch_t`` is each activity's launch time
    (valid where ``has_launch``); ``ops`` / ``rt`` give the CPU span of a trace without GPU
    work."""
    st = host_steps(rng)
    n = len(g)
    if not len(st):
        # one window: the GPU span (first to last GPU activity), as HTA and TraceLens measure
        # it; a trace without GPU work falls back to its CPU span
        if n:
            starts, ends = [int(g["start_ns"].min())], [int(g["end_ns"].max())]
        else:
            starts = [
                int(x)
                for x in (
                    ops["start_ns"].min() if len(ops) else None,
                    rt["start_ns"].min() if len(rt) else None,
                )
                if x is not None and not pd.isna(x)
            ]
            ends = [
                int(x)
                for x in (
                    (ops["start_ns"] + ops["dur_ns"]).max() if len(ops) else None,
                    (rt["start_ns"] + rt["dur_ns"]).max() if len(rt) else None,
                )
                if x is not None and not pd.isna(x)
            ]
        if not starts:
            return [], np.full(n, None, dtype=object), False
        lo, hi = int(min(starts)), int(max(ends))
        w = StepWindow(rank, None, lo, hi, lo, hi)
        diags.add(
            "no-step-markers",
            "no step markers (no ProfilerStep, no NVTX step ranges): the trace is a time "
            "slice, analysed as one window and as rates per second and per unit of work "
            "(step-time metrics need marked steps)",
            severity="info",
            source=f"rank {rank}",
            hint=capture_hints.steps_hint(),  # the diagnosis phrases it for the input's tool
        )
        return [w], np.full(n, None, dtype=object), False
    hs = st["start_ns"].to_numpy(np.int64)
    he = hs + st["dur_ns"].to_numpy(np.int64)
    nums = st["step"].to_numpy()
    # host step of each launch: the step whose host window holds the launch
    k = np.searchsorted(hs, launch_t, side="right") - 1
    in_host = has_launch & (k >= 0) & (launch_t < he[np.clip(k, 0, None)])
    step_i = np.where(in_host, k, -1)
    # GPU-aware windows: end = max(host end, last activity launched in the step)
    ends = g["end_ns"].to_numpy(np.int64)
    gpu_end = np.full(len(st), np.iinfo(np.int64).min)
    if in_host.any():
        np.maximum.at(gpu_end, step_i[in_host], ends[in_host])
    windows = []
    prev_end = None
    for i in range(len(st)):
        start = int(hs[i]) if prev_end is None else max(int(hs[i]), prev_end)
        # never before its start: an activity longer than its step (hostile or damaged input)
        # is measured in its own window only, so every share stays within 0-100%
        end = max(int(he[i]), int(gpu_end[i]), start)
        windows.append(StepWindow(rank, int(nums[i]), int(hs[i]), int(he[i]), start, end))
        prev_end = end
    # activities without a launch: the GPU-aware window holding their start
    ws = np.array([w.start_ns for w in windows])
    we = np.array([w.end_ns for w in windows])
    no = ~in_host
    if no.any():
        starts = g["start_ns"].to_numpy(np.int64)
        k2 = np.searchsorted(ws, starts, side="right") - 1
        ok = no & (k2 >= 0) & (starts < we[np.clip(k2, 0, None)])
        step_i = np.where(ok, k2, step_i)
    step_of = take(nums, step_i, None).astype(object)
    return windows, step_of, True
