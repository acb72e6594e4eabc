"""The run's capture flags, its memory events and its data-quality notes, said the same way by
the terminal, Markdown and HTML renderers.

* The profiler writes the capture flags that were on into the header (docs/FORMATS.md): a
  header with some of them means the absent ones were off. A header with none (PyTorch before
  1.9 writes none) records none: each is "not recorded", never "off", and where the events show
  the option was on (op shapes, [memory] events, module frames) that is said with it.
* The memory section and the rules say the same about [memory] events: events recorded without
  the totals (PyTorch < 1.10) are counted, not reported as absent.
* A data-quality count says what it counts and whether it affects the figures.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from traceinsight.result import DiagnosisResult
from traceinsight.util import capture_hints

#: the capture flags shown, in this order
FLAGS = capture_hints.KINETO_FLAGS
ON, OFF, NOT_RECORDED = "on", "off", "not recorded"


def _evidence(r: DiagnosisResult) -> dict[str, str]:
    """What the events show about a flag the header does not record."""
    out = {}
    mv = (r.metrics or {}).get("values") or {}
    if (mv.get("flops_modelled_pct") or 0) > 0 or ((r.roofline or {}).get("points")):
        out["record_shapes"] = "the trace has op shapes"
    mem = r.memory or {}
    if mem.get("timeline") or (mem.get("recorded") or {}).get("events"):
        out["profile_memory"] = "the trace has [memory] events"
    if (r.rollups or {}).get("has_modules"):
        out["with_modules"] = "the trace has module frames"
    return out


def capture_of(r: DiagnosisResult) -> capture_hints.Capture:
    """The tool that wrote the input (``extra.capture``, else the trace's format)."""
    cap = (r.extra or {}).get("capture")
    if isinstance(cap, dict):
        return capture_hints.Capture.from_dict(cap)
    return capture_hints.Capture(capture_hints.tool_of((r.trace or {}).get("format")))


def capture_flags(r: DiagnosisResult) -> list[tuple[str, str, str]]:
    """(flag, state, note) per flag: state "on", "off" (recorded off, or absent from a header
    that records the others) or "not recorded" (a header without any); the note says what the
    events show for a flag not recorded. An Nsight capture lists the ``nsys profile`` options
    that record the same (:func:`capture_hints.recorded_settings`), never Kineto's flags."""
    flags = (r.trace or {}).get("capture_flags") or {}
    cap = capture_of(r)
    if cap.tool == capture_hints.NSYS:
        ro = r.rollups or {}
        ann = ro.get("annotations") or []
        has_gpu = (r.metrics or {}).get("values", {}).get("has_gpu")
        seen: dict[str, bool | None] = {
            "gpu": None if has_gpu is None else bool(has_gpu),
            "steps": bool((r.trace or {}).get("has_step_markers")) or None,
            "nvtx": bool(
                ro.get("has_modules")
                or flags.get("record_shapes") is not None
                # a bracketed annotation is the bucket of the kernels outside any range
                or any(not str(a.get("annotation", "[")).startswith("[") for a in ann)
            )
            or None,
        }
        return [
            (k, NOT_RECORDED if v is None else ON if v else OFF, "")
            for k, v in capture_hints.recorded_settings(cap, flags, seen)
        ]
    recorded = any(flags.get(k) is not None for k in FLAGS)
    ev = _evidence(r)
    out = []
    for k in FLAGS:
        v = flags.get(k)
        if v is None and not recorded:
            out.append((k, NOT_RECORDED, ev.get(k, "")))
        elif v is None:
            out.append((k, OFF, ""))
        else:
            out.append((k, ON if v else OFF, ""))
    return out


def capture_text(r: DiagnosisResult) -> str:
    """One line, flags grouped by state: 'record_shapes on; with_stack off; with_modules,
    with_flops not recorded' ('' for an input that is not a Kineto trace)."""
    if "kineto" not in str((r.trace or {}).get("format") or ""):
        return ""
    groups: dict[str, list[str]] = {}
    for k, state, note in capture_flags(r):
        groups.setdefault(state, []).append(f"{k} ({note})" if note else k)
    return "; ".join(
        f"{', '.join(groups[st])} {st}" for st in (ON, OFF, NOT_RECORDED) if st in groups
    )


def memory_empty_text(
    mem: Mapping[str, Any] | None, capture: capture_hints.Capture | None = None
) -> str | None:
    """Why the memory section has no curve although [memory] events were recorded, or None
    when none were (an Nsight capture: in nsys terms)."""
    rec = (mem or {}).get("recorded") or {}
    n = int(rec.get("events") or 0)
    if not n:
        return None
    if capture is not None and capture.tool == capture_hints.NSYS:
        return (
            f"{n:,} memory usage events (--cuda-memory-usage=true), without the allocator's "
            "allocated total (an Nsight export does not hold it): no allocated or reserved "
            "curve is drawn from them and the memory rules are not evaluated. Add an allocator "
            "snapshot of the same run (--memory-snapshot)."
        )
    gpu = int(rec.get("gpu_events") or 0)
    if not gpu:
        what = f"{n:,} [memory] events, none on a GPU"
    else:
        what = (
            f"{n:,} [memory] events ({gpu:,} on a GPU), without Total Allocated/Reserved "
            "(PyTorch < 1.10)"
        )
    return (
        f"{what}: no allocated or reserved curve can be drawn from them and the memory rules "
        "are not evaluated. Record with PyTorch 1.10 or later and profile_memory=True, or add "
        "an allocator snapshot (--memory-snapshot)."
    )


def count_text(d: Mapping[str, Any]) -> str:
    """'436 events' for a diagnostic's count: the unit it counts (``count_of``, filled in by
    :func:`traceinsight.diagnose.quality.explain`), '436 affected' when not known."""
    c = d.get("count")
    if not isinstance(c, int) or isinstance(c, bool) or c <= 0:
        return ""
    unit = d.get("count_of")
    return f"{c:,} {unit}" if unit else f"{c:,} affected"


def diagnostic_text(d: Mapping[str, Any]) -> str:
    """A data-quality line: its message, what its count counts and whether it affects the
    figures (the diagnostic's ``impact``), e.g. '…; 436 events; does not affect the figures'."""
    parts = [str(d.get("message") or "")]
    cnt = count_text(d)
    if cnt and not parts[0].startswith(f"{d.get('count'):,} ") and cnt not in parts[0]:
        parts.append(cnt)
    imp = d.get("impact")
    if imp:
        parts.append(str(imp))
    return " — ".join(p for p in parts if p)
