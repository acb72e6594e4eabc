"""What the FLOP/byte model assumed, said next to the figures it affects (MFU, the roofline), the
same way by the terminal, Markdown and HTML renderers: the op shapes excluded for a modelled
rate above the device's peak, what was inferred from an op's context (a convolution's stride
from its output shape) and what was assumed without it."""

from __future__ import annotations

from typing import Any

from traceinsight.result import DiagnosisResult
from traceinsight.util import fmt


def _rows(r: DiagnosisResult, key: str) -> list[dict[str, Any]]:
    rows: Any = (r.roofline or {}).get(key) or []
    return [x for x in rows if isinstance(x, dict)]


def _shapes(n: int) -> str:
    return f"{n:,} op shape{'s' if n != 1 else ''}"


def excluded_text(r: DiagnosisResult) -> str | None:
    """'excludes N op shapes above the device's peak (T of kernel time)', or None."""
    ex = _rows(r, "excluded")
    if not ex:
        return None
    ns = sum(int(e.get("device_ns") or 0) for e in ex)
    return (
        f"excludes {_shapes(len(ex))} above the device's peak ({fmt.fmt_ns(ns)} of kernel "
        "time): their model's assumption is wrong for them"
    )


def model_notes(r: DiagnosisResult, n: int = 3) -> list[str]:
    """One sentence per statement about the model: the exclusion, then the inferences and the
    assumptions of the counted op shapes (the ``n`` largest by device time each)."""
    out = []
    ex = excluded_text(r)
    if ex:
        by: dict[str, int] = {}
        for e in _rows(r, "excluded"):
            a = str(e.get("assumption") or "?")
            by[a] = by.get(a, 0) + 1
        why = "; ".join(f"{a} ({_shapes(k)})" for a, k in by.items())
        out.append(f"The FLOP model {ex} ({why}).")
    for key, lead in (("inferences", "Inferred"), ("assumptions", "Assumed")):
        for x in _rows(r, key)[:n]:
            out.append(
                f"{lead}: {x.get('text')}, for {_shapes(int(x.get('ops') or 0))} "
                f"({fmt.fmt_pct(x.get('pct_of_counted'))} of the counted kernel time)."
            )
    return out


def mfu_suffix(r: DiagnosisResult) -> str:
    """What to say right after the MFU figure: the exclusion and the number of inferences and
    assumptions, or ''."""
    parts = []
    ex = _rows(r, "excluded")
    if ex:
        parts.append(f"{_shapes(len(ex))} above the peak excluded")
    for key, word in (("assumptions", "assumed"), ("inferences", "inferred")):
        rows = _rows(r, key)
        if rows:
            parts.append(f"{word}: " + ", ".join(str(x.get("text")) for x in rows[:3]))
    return "; ".join(parts)
