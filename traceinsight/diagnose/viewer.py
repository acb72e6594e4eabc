"""Where the step a report shows lies in the original trace file, for a trace viewer
(Perfetto for a PyTorch profiler trace, Nsight Systems for an Nsight export: the text is
phrased by ``util.capture_hints.viewer_text``).

Reviewers want the raw timeline next to the verdict. A report cannot open a local file in
Perfetto or chrome://tracing by itself (it makes no network requests), so it says which file
to load, which ``ProfilerStep#N`` slice to search for, and the step's time range in the file's
own ``ts`` units (µs, relative to the file's ``baseTimeNanoseconds`` when it has one: the store
keeps ``ts × 1000 + baseTimeNanoseconds``).
"""

from __future__ import annotations

from typing import Any

from traceinsight.store.core import TraceStore


def open_in_viewer(store: TraceStore, timeline: dict[str, Any] | None) -> dict[str, Any] | None:
    """``{source, rank, marker, ts_us: [start, end]}`` of the timeline's window, or None."""
    if not timeline or timeline.get("start_ns") is None:
        return None
    rank = timeline.get("rank")
    meta = next((r for r in store.ranks if r.get("rank") == rank), None)
    src = next((s for s in store.meta.get("sources", []) if s.get("rank") == rank), None)
    if meta is None or src is None:
        return None
    base = int(meta.get("base_time_ns") or 0)
    start = int(timeline["start_ns"]) - base
    end = start + int(timeline.get("span_ns") or 0)
    step = timeline.get("step")
    return {
        "tool": str(meta.get("format") or ""),  #: the viewer is the input tool's
        "source": str(src.get("name") or ""),
        "rank": rank,
        "marker": f"ProfilerStep#{step}" if step is not None else None,
        "ts_us": [start / 1000.0, end / 1000.0],
    }
