"""What-ifs: the step replayed with one cause removed or shrunk to a stated target.

Each what-if changes the replay inputs of a step graph (a duration, a gap, a dependency) and
replays it; its gain is the replayed step minus the changed replay, so the model's own error
cancels out. ``ALL`` applies every what-if of the findings at once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from traceinsight.analysis.critical_path.graph import CAT, H_COPY_SYNC, H_SYNC, StepGraph
from traceinsight.analysis.critical_path.replay import ReplayInputs

#: the host cost of one kernel launch at the launch floor (CUDA graphs, a tight C++ loop)
LAUNCH_FLOOR_NS = 2_500
#: fp32 GEMMs moved to 16-bit run at this fraction of the 16-bit tensor rate
LOW_PRECISION_EFFICIENCY = 0.5
#: when the device's own peaks are unknown: 16-bit tensor rate over the fp32 rate
DEFAULT_TENSOR_SPEEDUP = 8.0


@dataclass(frozen=True)
class WhatIf:
    key: str
    rules: tuple[str, ...]  #: the findings whose cause it removes
    target: str  #: the target, in words
    apply: Callable[[StepGraph, ReplayInputs, dict], None]


def _comm_hidden(G: StepGraph, x: ReplayInputs, ctx: dict) -> None:
    comm = G.g_cat == CAT["communication"]
    if not comm.any():
        return
    w = x.g_wait >= 0
    x.g_wait[w & comm[np.clip(x.g_wait, 0, None)]] = -1
    d = x.h_dep >= 0
    x.h_dep[d & comm[np.clip(x.h_dep, 0, None)]] = -1


def _input(G: StepGraph, x: ReplayInputs, ctx: dict) -> None:
    x.h_gap[G.h_gap_cat == CAT["input"]] = 0


def _launch(G: StepGraph, x: ReplayInputs, ctx: dict) -> None:
    call = (G.h_cat == CAT["launch"]) & (G.h_kind != H_SYNC)
    x.h_t[call] = np.minimum(x.h_t[call], LAUNCH_FLOOR_NS)


def _syncs(G: StepGraph, x: ReplayInputs, ctx: dict) -> None:
    s = G.h_kind == H_SYNC
    x.h_dep[s] = -1


def _copies(G: StepGraph, x: ReplayInputs, ctx: dict) -> None:
    s = G.h_kind == H_COPY_SYNC
    x.h_dep[s] = -1


def _fp32(G: StepGraph, x: ReplayInputs, ctx: dict) -> None:
    speedup = float(ctx.get("tensor_speedup") or DEFAULT_TENSOR_SPEEDUP)
    f = G.g_fp32_gemm
    if f.any():
        x.g_dur[f] = np.round(x.g_dur[f] / (speedup * LOW_PRECISION_EFFICIENCY)).astype(np.int64)


def _straggler(G: StepGraph, x: ReplayInputs, ctx: dict) -> None:
    """On the straggler rank: its compute at the median rank's; on the others: their
    collectives shortened by the wait the straggler caused (both given in ``ctx``)."""
    scale = ctx.get("straggler_scale", {}).get(G.rank)
    if scale is not None:
        c = G.g_cat == CAT["compute"]
        x.g_dur[c] = np.round(x.g_dur[c] * scale).astype(np.int64)
    cut = ctx.get("straggler_wait_ns", {}).get((G.rank, G.step))
    if cut:
        comm = np.flatnonzero(G.g_cat == CAT["communication"])
        if len(comm):
            # spread over the step's collectives in proportion to their time
            d = x.g_dur[comm].astype(np.float64)
            share = np.minimum(np.round(d / max(d.sum(), 1.0) * cut), d).astype(np.int64)
            x.g_dur[comm] -= share


WHATIFS = (
    WhatIf(
        "comm-hidden",
        ("comm-bound",),
        "exposed communication overlapped with compute, up to the compute available "
        "(no kernel and no host call waits for a collective)",
        _comm_hidden,
    ),
    WhatIf(
        "input-removed",
        ("input-bound",),
        "input waits removed (data loading overlapped with the step)",
        _input,
    ),
    WhatIf(
        "launch-floor",
        ("launch-bound", "host-stall"),
        f"each launch call at the launch floor ({LAUNCH_FLOOR_NS / 1000:g} µs)",
        _launch,
    ),
    WhatIf(
        "syncs-removed",
        ("host-sync",),
        "the host-device synchronisations removed (the host no longer waits for the GPU)",
        _syncs,
    ),
    WhatIf(
        "copies-async",
        ("exposed-memcpy",),
        "blocking (pageable) copies made asynchronous (pinned memory, non_blocking=True)",
        _copies,
    ),
    WhatIf(
        "fp32-to-16bit",
        ("low-precision-unused",),
        f"fp32 GEMMs in 16-bit at {LOW_PRECISION_EFFICIENCY:.0%} of the 16-bit tensor rate",
        _fp32,
    ),
    WhatIf(
        "straggler-median",
        ("straggler",),
        "the straggler rank computing at the median rank's speed",
        _straggler,
    ),
)
BY_KEY = {w.key: w for w in WHATIFS}
BY_RULE = {r: w for w in WHATIFS for r in w.rules}
