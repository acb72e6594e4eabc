"""Evidence tables of the memory-snapshot findings (``metrics/snapshot.py`` measures them):
the allocator's state, where the stranded bytes are, size churn, the failed allocations, what
was live at the peak and what survived the iterations. Registered with ``evidence.provider``;
call sites are shown as ``dir/file.py:line function``."""

from __future__ import annotations

from typing import Any

from traceinsight.engine.evidence.core import provider, table
from traceinsight.metrics import MetricSet
from traceinsight.util.fmt import fmt_bytes, short_site


def _view(ms: MetricSet) -> dict[str, Any] | None:
    return ms.evidence.get("memory_snapshot")


@provider("snapshot_totals")
def _totals(ms: MetricSet, an: Any, p: dict) -> list[dict]:
    v = _view(ms)
    if not v:
        return []
    t = v["totals"]
    rows = []
    for label, key in (
        ("reserved", "reserved"),
        ("allocated", "allocated"),
        ("requested", "requested"),
        ("pending free", "pending"),
        ("free (cached)", "free"),
        ("stranded free", "stranded"),
        ("largest free block", "largest_free"),
    ):
        rows.append([label, t[key], t["small"][key], t["large"][key]])
    note = (
        f"rank {v['rank']}, device {v['device']}; releasable (wholly free segments) "
        f"{fmt_bytes(t['releasable'])}; rounding (allocated − requested) "
        f"{fmt_bytes(t['rounding'])}; small pool: requests up to 1 MiB in 2 MiB segments"
    )
    return [
        table(
            "Allocator state at the snapshot",
            [("", "text"), ("all", "bytes"), ("small pool", "bytes"), ("large pool", "bytes")],
            rows,
            note,
        )
    ]


@provider("snapshot_holes")
def _holes(ms: MetricSet, an: Any, p: dict) -> list[dict]:
    v = _view(ms)
    if not v:
        return []
    rows = [
        [
            short_site(h["call_site"]),
            h["holes"],
            h["bytes"],
            h["largest"],
            ", ".join(fmt_bytes(s) for s in h["sizes"]),
        ]
        for h in v["holes"]
    ]
    return [
        table(
            "Stranded free blocks, by the allocation that last held them",
            [
                ("call site", "text"),
                ("holes", "count"),
                ("stranded", "bytes"),
                ("largest", "bytes"),
                ("sizes", "text"),
            ],
            rows,
        )
    ]


@provider("snapshot_churn")
def _churn(ms: MetricSet, an: Any, p: dict) -> list[dict]:
    v = _view(ms)
    if not v:
        return []
    rows = [
        [short_site(c["call_site"]), c["allocations"], c["sizes"], c["bytes"], c["largest"]]
        for c in v["churn"]
        if c["sizes"] > 1
    ]
    return [
        table(
            "Call sites allocating many different sizes (in the snapshot's trace)",
            [
                ("call site", "text"),
                ("allocations", "count"),
                ("distinct sizes", "count"),
                ("bytes", "bytes"),
                ("largest", "bytes"),
            ],
            rows,
        )
    ]


@provider("snapshot_oom")
def _oom(ms: MetricSet, an: Any, p: dict) -> list[dict]:
    v = _view(ms)
    if not v or not v["ooms"]:
        return []
    rows = [
        [
            short_site(o["call_site"]),
            o["request"],
            o["device_free"],
            o["free_cached"],
            o["largest_free"],
            o["reserved"],
            "yes" if o["cached_enough"] else "no",
        ]
        for o in v["ooms"]
    ]
    return [
        table(
            "Failed allocations",
            [
                ("call site", "text"),
                ("request", "bytes"),
                ("free on device", "bytes"),
                ("free cached", "bytes"),
                ("largest free block", "bytes"),
                ("reserved", "bytes"),
                ("enough in total", "text"),
            ],
            rows,
            note="enough in total: free device memory plus free cached bytes cover the request, "
            "but no single free block does",
        )
    ]


@provider("snapshot_peak_live")
def _peak(ms: MetricSet, an: Any, p: dict) -> list[dict]:
    v = _view(ms)
    if not v:
        return []
    pk = v["peak"]
    rows = [[short_site(x["call_site"]), x["bytes"], x["allocations"]] for x in pk["live"]]
    where = "at the snapshot" if pk["at_snapshot"] else "at the peak of the snapshot's trace"
    return [
        table(
            f"Live allocations {where}, by call site",
            [("call site", "text"), ("bytes", "bytes"), ("allocations", "count")],
            rows,
            note=f"allocated {fmt_bytes(pk['allocated'])}, reserved {fmt_bytes(pk['reserved'])}",
        )
    ]


@provider("snapshot_survivors")
def _survivors(ms: MetricSet, an: Any, p: dict) -> list[dict]:
    v = _view(ms)
    it = (v or {}).get("iterations") or {}
    if not it:
        return []
    rows = [[short_site(x["call_site"]), x["bytes"], x["allocations"]] for x in it["survivors"]]
    out = [
        table(
            "Allocated during the iterations and never freed",
            [("call site", "text"), ("bytes", "bytes"), ("allocations", "count")],
            rows,
        )
    ]
    trough = [[i + 1, b] for i, b in enumerate(it["trough_bytes"])]
    out.append(
        table(
            "Allocated at the end of each iteration (the curve's troughs)",
            [("iteration", "text"), ("allocated", "bytes")],
            trough,
        )
    )
    return out
