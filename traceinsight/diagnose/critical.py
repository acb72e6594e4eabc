"""The result's ``critical_path`` section, and the findings' impacts from its what-ifs."""

from __future__ import annotations

from typing import Any

from traceinsight.result import finding_sort_key


def critical_path(
    an, ms, findings: list, diags: list[dict[str, Any]], timeline: dict[str, Any] | None = None
) -> dict[str, Any] | None:
    """Critical path, replay and what-ifs of every step (:mod:`traceinsight.analysis.
    critical_path`); sets each finding's ``impact`` (and ``impact_pct`` to its ``pct``) and
    orders ``findings`` by it, in place. Replay diagnostics are added to ``diags``."""
    from traceinsight.analysis.critical_path import analyse, impacts

    peaks = (ms.evidence.get("device") or {}).get("peaks") or {}
    fp32 = peaks.get("fp32")
    half = peaks.get("bf16") or peaks.get("fp16")
    speedup = float(half) / float(fp32) if fp32 and half else None
    try:
        focus = (int(timeline["rank"]), timeline.get("step")) if timeline else None
        sec = analyse(an, [f.rule for f in findings], tensor_speedup=speedup, focus=focus)
    except (ValueError, IndexError, KeyError, TypeError) as e:  # damaged input: say so, go on
        diags.append(
            {
                "code": "critical-path-error",
                "severity": "warning",
                "message": f"critical path not computed ({type(e).__name__}: {str(e)[:120]})",
            }
        )
        return None
    if not sec:
        return None
    diags.extend(sec.pop("diagnostics", []))
    impacts(findings, sec)
    for f in findings:
        if f.impact is not None:
            f.impact_pct = round(float(f.impact["pct"]), 1)
    findings.sort(key=finding_sort_key)
    return sec
