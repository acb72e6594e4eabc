"""The HTML report's Serving section: its place in the section bar and its view (the phase
table and the decode roofline lines of :mod:`traceinsight.render.serving`)."""

from __future__ import annotations

from typing import Any

from traceinsight.render.serving import (
    PHASE_HEADERS,
    basis_note,
    phase_rows,
    roofline_lines,
    summary_line,
)
from traceinsight.result import DiagnosisResult


def with_nav(nav: list[tuple[str, str]], r: DiagnosisResult) -> list[tuple[str, str]]:
    """The HTML section list, with Serving after the findings on a serving trace."""
    if not r.serving:
        return nav
    i = next((k + 1 for k, (sid, _) in enumerate(nav) if sid == "findings"), 0)
    return [*nav[:i], ("serving", "Serving"), *nav[i:]]


def html_view(r: DiagnosisResult) -> dict[str, Any] | None:
    """The HTML Serving section: phase table and the decode roofline lines."""
    from traceinsight.render.html.cells import table

    sv = r.serving
    if not sv:
        return None
    return {
        "summary": summary_line(sv),
        "phases": table(
            "serving-phases",
            [(h, "text") for h in PHASE_HEADERS],
            phase_rows(sv),
            sortable=False,
        ),
        "roofline": roofline_lines(sv),
        "basis": basis_note(sv),
    }
