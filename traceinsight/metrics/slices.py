"""A capture without step markers is a time slice: its rates per unit of time and of work.

A slice (``nsys profile --duration N``, a Kineto trace without ``ProfilerStep``) has no step:
its length is set by the capture, not by the run, so a "step time" of the slice says nothing
about the code. What it does support is a rate: GPU kernel time per second of the slice, and,
where the capture names repeated units of work, the GPU time per unit (per NVTX range or
annotation instance, per layer call). The ``slice`` rollup holds them, each with its unit named;
``compare`` normalises two slices by a unit both sides have (:mod:`traceinsight.compare`), and
the advice says how to mark steps in the input's own vocabulary (:func:`mark_steps_hint`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from traceinsight.analysis import Analysis
from traceinsight.analysis import intervals as iv
from traceinsight.metrics.mode import capture_of
from traceinsight.util.safetext import for_terminal
from traceinsight.util.vocab import mark_steps_hint

MIN_INSTANCES = 2  #: a unit of work repeats at least this often on every rank
MAX_UNITS = 5  #: units listed, by the time their instances span
MAX_NAME = 80
#: range kinds that are units of work, and how they are called
UNIT_KINDS = {"nvtx": "NVTX range", "annotation": "annotation", "layer": "layer call"}


def _name(x: Any) -> str:
    s = for_terminal(str(x)).replace("\n", " ")
    return s if len(s) <= MAX_NAME else s[: MAX_NAME - 1] + "…"


def slice_rates(an: Analysis, fmt_name: str | None = None) -> dict[str, Any] | None:
    """The ``slice`` rollup of a trace without step markers on any rank (None otherwise, or
    without GPU activity): its span, kernel time per second, and per repeated unit of work
    (instances on every rank, GPU kernel time and span per instance)."""
    attr = an.attribution
    if any(attr.has_step_markers.get(r, False) for r in attr.has_step_markers):
        return None
    g = attr.gpu
    wins = [w for w in attr.steps if w.step is None]
    if not len(g) or not wins:
        return None
    span = int(sum(w.dur_ns for w in wins))
    kern = g[g["kind"] == "kernel"]
    kernel_ns = int(kern["dur_ns"].sum())
    ranks = sorted({w.rank for w in wins})
    units: list[dict[str, Any]] = []
    try:
        rng = an.store.table("ranges", ["rank", "kind", "name", "start_ns", "dur_ns"]).to_pandas()
    except Exception:  # a store without ranges
        rng = pd.DataFrame(columns=["rank", "kind", "name", "start_ns", "dur_ns"])
    rng = rng[rng["kind"].astype(str).isin(list(UNIT_KINDS))]
    if len(rng):
        lt = g["launch_start_ns"].to_numpy(np.int64)
        gs = np.where(lt >= 0, lt, g["start_ns"].to_numpy(np.int64))
        gr = g["rank"].to_numpy(np.int64)
        is_k = (g["kind"] == "kernel").to_numpy()
        gd = g["dur_ns"].to_numpy(np.int64)
        for (kind, name), d in rng.groupby(
            [rng["kind"].astype(str), rng["name"].astype(str)], sort=False
        ):
            counts = d.groupby("rank").size()
            if set(counts.index) != set(ranks) or int(counts.min()) < MIN_INSTANCES:
                continue
            # kernel time launched inside an instance (its start where there is no launch
            # record): the GPU work of the unit, wherever on the GPU it ran
            k_ns = 0
            for r, dr in d.groupby("rank"):
                s = dr["start_ns"].to_numpy(np.int64)
                e = s + dr["dur_ns"].to_numpy(np.int64)
                m = (gr == int(r)) & is_k
                inside = _inside(gs[m], iv.union(s, e))
                k_ns += int(gd[m][inside].sum())
            n = int(counts.sum())
            units.append(
                {
                    "unit": f"{UNIT_KINDS[kind]} {_name(name)}",
                    "kind": kind,
                    "name": _name(name),
                    "instances": n,
                    "per_rank": int(counts.min()),
                    "span_ns_per_instance": int(d["dur_ns"].sum()) // n,
                    "kernel_ns_per_instance": k_ns // n,
                }
            )
    units.sort(key=lambda u: (-u["span_ns_per_instance"] * u["instances"], u["unit"]))
    return {
        "ranks": len(ranks),
        "span_ns": span,
        "kernel_ns": kernel_ns,
        "kernel_ns_per_s": 1e9 * kernel_ns / span if span else None,
        "unit": "kernel time per second of the slice",
        "units": units[:MAX_UNITS],
        "hint": mark_steps_hint(fmt_name, torch=capture_of(an).torch),
    }


def _inside(t: np.ndarray, u: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """Which times fall inside the sorted disjoint intervals ``u``."""
    s, e = u
    if not len(s) or not len(t):
        return np.zeros(len(t), dtype=bool)
    k = np.searchsorted(s, t, side="right") - 1
    return (k >= 0) & (t < e[np.clip(k, 0, None)])
