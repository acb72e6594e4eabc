"""What a compare contributor means when its name alone does not say: the idle causes the
trace cannot assign (``GPU idle: unknown``, ``GPU idle: unrecorded``) and what would split
them. A note is given for such a contributor only when it changed and is among the largest."""

from __future__ import annotations

from typing import Any

from traceinsight.util import fmt

#: the largest contributors (by the size of their change) a note is given for
NOTE_TOP = 12

#: contributor name -> what it is and what would split it
EXPLAIN = {
    "GPU idle: unknown": (
        "is GPU idle time the trace cannot assign to a cause: the GPU work after the gap has "
        "no recorded launch (no runtime call correlated with it: it was launched from a thread "
        "or process the profiler did not record, or before the capture began), the gap runs to "
        "the end of the trace, or a blocking call before the first recorded GPU work waited on "
        "work launched before the capture. To split it into launch, host, sync and device-wait "
        "time, record the host side of whole steps on every thread that launches GPU work "
        "(torch.profiler with activities=[CPU, CUDA] started before the step), or capture with "
        "Nsight Systems with the CUDA API trace (nsys profile -t cuda,nvtx)"
    ),
    "GPU idle: unrecorded": (
        "is idle time inside a CUDA-graph replay of which only some nodes were recorded: the "
        "unrecorded nodes ran then, for all the trace says. To see them, record the graph's "
        "kernels one by one (nsys profile --cuda-graph-trace=node)"
    ),
}


def contributor_notes(contributors: list[dict[str, Any]], top: int = NOTE_TOP) -> list[dict]:
    """One note per explained contributor among the ``top`` largest changes: ``name``,
    ``delta_ns``, ``rank`` (1 = the largest change) and ``text``, one sentence."""
    ranked = sorted(
        (c for c in contributors if c.get("delta_ns")), key=lambda c: -abs(c["delta_ns"])
    )
    out = []
    for i, c in enumerate(ranked[:top], start=1):
        what = EXPLAIN.get(str(c.get("name")))
        if what:
            out.append(
                {
                    "name": c["name"],
                    "delta_ns": c["delta_ns"],
                    "rank": i,
                    "text": f"{c['name']} ({fmt.signed_ns(c['delta_ns'])}, the "
                    f"{_ordinal(i)} largest change) {what}.",
                }
            )
    return out


def _ordinal(i: int) -> str:
    if i == 1:
        return "1st"
    suffix = {2: "nd", 3: "rd"}.get(i % 10 if i % 100 not in (11, 12, 13) else 0, "th")
    return f"{i}{suffix}"
