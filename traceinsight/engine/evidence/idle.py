"""Evidence providers for the idle causes (:mod:`.metrics.idle`): the largest gaps with their
cause, the runtime calls the GPU idled in, and what makes a window not steady state.

They register into :data:`.evidence.PROVIDERS` on import (the engine imports this module
with the evidence providers).
"""

from __future__ import annotations

from typing import Any

from traceinsight.engine.evidence.core import _records, _with_offsets, provider
from traceinsight.metrics import MetricSet


def _of_causes(ms: MetricSet, key: str, p: dict) -> list[dict]:
    """Evidence records ``key`` of the causes in ``p["cause"]`` (a name or a list; all when
    absent)."""
    recs = ms.evidence.get(key) or []
    want = p.get("cause")
    if not want:
        return recs
    causes = {want} if isinstance(want, str) else set(want)
    return [r for r in recs if r["cause"] in causes]


@provider("idle_gap_causes")
def _gaps(ms: MetricSet, an: Any, p: dict) -> list[dict]:
    """The largest idle gaps (of the causes in ``cause``, a name or a list)."""
    recs = _of_causes(ms, "idle_gaps", p)
    # where each gap starts in its step tells gaps of equal length apart (and finds them in a
    # trace viewer)
    recs = _with_offsets(recs[: int(p.get("n", 8))], an)
    return _records(
        "Largest GPU idle gaps",
        recs,
        [
            ("rank", "rank", "text"),
            ("step", "step", "text"),
            ("dur_ns", "idle", "ns"),
            ("cause", "cause", "text"),
            ("at_ns", "into step", "ns"),
            ("launch_to_start_ns", "launch → start", "ns"),
            ("next_op", "work after the gap launched by", "op"),
        ],
    )


@provider("idle_calls")
def _idle_calls(ms: MetricSet, an: Any, p: dict) -> list[dict]:
    """Runtime calls behind the idle causes (of the causes in ``cause``)."""
    recs = _of_causes(ms, "idle_calls", p)
    return _records(
        "Runtime calls the GPU idled in",
        recs[: int(p.get("n", 8))],
        [
            ("call", "call", "text"),
            ("cause", "cause", "text"),
            ("count", "calls", "count"),
            ("total_ns", "host time", "ns"),
            ("max_ns", "longest", "ns"),
            ("window_pct", "of the window", "pct"),
            ("idle_ns", "GPU idle inside", "ns"),
        ],
    )


@provider("nonsteady")
def _nonsteady(ms: MetricSet, an: Any, p: dict) -> list[dict]:
    return _records(
        "What is not steady state",
        ms.evidence.get("nonsteady"),
        [
            ("kind", "part", "text"),
            ("idle_ns", "GPU idle", "ns"),
            ("window_pct", "of the window", "pct"),
        ],
    )
