"""What-ifs: the step replayed with one cause removed or shrunk to a stated target.

Each what-if changes the replay inputs of a step graph (a duration, a gap, a dependency) and
replays it; its gain is the replayed step minus the changed replay, so the model's own error
cancels out. ``ALL`` applies every what-if of the findings at once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from traceinsight.analysis.critical_path.graph import CAT, H_COPY_SYNC, H_SYNC, NEG, StepGraph
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
    """Collectives overlapped with the backward pass: they start with it (their gradients
    become ready bucket by bucket) and wait for no compute; what waits for them (the
    optimizer, the next step) still does. The step is at least the compute and at least the
    communication: hidden up to the compute available."""
    comm = G.g_cat == CAT["communication"]
    if not comm.any():
        return
    x.g_wait[comm] = -1
    bwd = G.g_phase == "backward"
    start = int(G.g_start[bwd].min()) if bwd.any() else int(G.ws)
    x.g_lat[comm] = NEG
    x.g_pin[comm] = start


def _input(G: StepGraph, x: ReplayInputs, ctx: dict) -> None:
    inp = G.h_gap_xcat == CAT["input"]
    x.h_gap[inp] -= np.minimum(G.h_gap_x[inp], x.h_gap[inp])


def _launch(G: StepGraph, x: ReplayInputs, ctx: dict) -> None:
    """Launch gaps at the launch floor: where the GPU sat idle waiting for a launch, the CPU
    time before that launch and the call itself together take no more than the floor."""
    call = G.h_starves & (G.h_kind != H_SYNC)
    host_gap = call & (G.h_gap_cat == CAT["host"])
    x.h_t[call] = np.minimum(x.h_t[call], LAUNCH_FLOOR_NS)
    x.h_gap[host_gap] = np.minimum(
        x.h_gap[host_gap], np.maximum(LAUNCH_FLOOR_NS - x.h_t[host_gap], 0)
    )


def _issue(G: StepGraph, x: ReplayInputs, ctx: dict) -> None:
    """Kernels issued back to back at the launch floor: the CPU time before each launch call
    and the call itself together take no more than the floor (as a CUDA graph replays them)."""
    call = (G.h_cat == CAT["launch"]) & (G.h_kind != H_SYNC)
    host_gap = call & (G.h_gap_cat == CAT["host"])
    x.h_t[call] = np.minimum(x.h_t[call], LAUNCH_FLOOR_NS)
    alloc = G.h_cat == CAT["host"]  # allocator calls: served from the cache in steady state
    x.h_t[alloc] = np.minimum(x.h_t[alloc], LAUNCH_FLOOR_NS)
    x.h_gap[host_gap] = np.minimum(
        x.h_gap[host_gap], np.maximum(LAUNCH_FLOOR_NS - x.h_t[host_gap], 0)
    )


def _syncs(G: StepGraph, x: ReplayInputs, ctx: dict) -> None:
    """The host no longer waits: device/stream/event syncs and the blocking read-backs of
    scalars (device-to-host copies of a ``.item()``) release at once."""
    sync = G.h_kind == H_SYNC
    nxt_sync = np.r_[sync[1:], False] & np.r_[G.h_thread[1:] == G.h_thread[:-1], False]
    s = sync | (G.h_dtoh & ((G.h_kind == H_COPY_SYNC) | nxt_sync))
    x.h_dep[s] = -1
    # the calls go, and with them the host time of the op that made them (just before each)
    x.h_t[s] = 0
    host = s & (G.h_gap_cat == CAT["host"])
    x.h_gap[host] = 0


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
        "exposed communication overlapped with compute: collectives start with the backward "
        "pass and wait for no compute, hidden up to the compute available",
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
        ("launch-bound",),
        f"launch gaps at the launch floor: where the GPU waited for a launch, at most "
        f"{LAUNCH_FLOOR_NS / 1000:g} µs of host time before it",
        _launch,
    ),
    WhatIf(
        "issue-floor",
        ("host-stall",),
        f"kernels issued back to back at the launch floor ({LAUNCH_FLOOR_NS / 1000:g} µs of "
        "host time per launch and per allocator call, as a CUDA graph replays them)",
        _issue,
    ),
    WhatIf(
        "syncs-removed",
        ("host-sync",),
        "the host-device synchronisations removed: the syncs and scalar read-backs "
        "(.item()) with their host time; the host no longer waits for the GPU",
        _syncs,
    ),
    WhatIf(
        "copies-async",
        ("exposed-memcpy",),
        "blocking (pageable) copies made asynchronous (pinned host memory, asynchronous copies)",
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

#: findings that restate the sum of more specific causes: their estimate counts only the part
#: the specific findings' what-ifs do not already explain (one story per cause)
UMBRELLA = {
    "gpu-idle": ("launch-bound", "input-bound", "host-sync", "host-stall", "exposed-memcpy"),
}
