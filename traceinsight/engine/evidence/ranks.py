"""Evidence tables of the cross-rank findings (``metrics/ranks.py`` measures them): what the
straggler rank does more than the median rank, and how often it is the slowest. Registered
with ``evidence.provider``."""

from __future__ import annotations

from typing import Any

from traceinsight.engine.evidence.core import provider, table
from traceinsight.metrics import MetricSet
from traceinsight.util.fmt import fmt_ns

_CAUSES = {
    "compute": "more compute (GPU kernels)",
    "host stalls (GPU idle)": "host stalls (its GPU idles, waiting for the CPU)",
    "slower collectives": "slower collectives (longer transfers when it is last)",
}


_BEFORE = {
    "compute": "compute (GPU kernels)",
    "host": "GPU idle, waiting for the CPU (host work, launches, syncs)",
    "input": "GPU idle, loading input",
    "device wait": "GPU work queued behind other streams",
    "other GPU work": "other GPU work (copies, other communication)",
    "unknown": "GPU idle, no recorded reason",
}


@provider("straggler")
def _straggler(ms: MetricSet, an: Any, p: dict) -> list[dict]:
    prof = ms.evidence.get("straggler")
    if not prof:
        return []
    rows = [[_CAUSES.get(k, k), v] for k, v in prof["excess_ns"].items()]
    rows.sort(key=lambda r: -r[1])
    steps = prof["steps"]
    when = (
        f"the slowest rank in {prof['slowest_steps']} of {steps} steps ({prof['pattern']})"
        if steps
        else "no steps to compare"
    )
    cause = _CAUSES.get(prof["cause"]) if prof.get("cause") else "no single part stands out"
    note = (
        f"rank {prof['rank']}: {when}; {fmt_ns(prof['own_ns'])} of its own work per step "
        f"against {fmt_ns(prof['typical_own_ns'])} for the other ranks (median), mostly "
        f"{cause}; "
        f"last to arrive at {prof['last_arrivals']} of {prof['matched_collectives']} "
        "matched collectives"
    )
    out = []
    before = prof.get("before_arrival")
    if before:
        parts = [[_BEFORE.get(k, k), v] for k, v in before["parts_ns"].items() if v > 0]
        parts.sort(key=lambda r: -r[1])
        out.append(
            table(
                f"What rank {prof['rank']} was doing while the others waited for it",
                [("part", "text"), ("time", "ns")],
                parts,
                note=(
                    f"over the {before['collectives']} collectives it reached last: "
                    f"{fmt_ns(before['skew_ns'])} between the first rank's arrival and its "
                    f"own, {fmt_ns(before['caused_wait_ns'])} of waiting on the other ranks"
                ),
            )
        )
    out.append(
        table(
            f"What rank {prof['rank']} does more than the median rank, per step",
            [("part", "text"), ("excess per step", "ns")],
            rows,
            note=note,
        )
    )
    return out
