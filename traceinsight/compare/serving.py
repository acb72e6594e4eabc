"""Serving traces compared per token: GPU-side time per output token (decode) and prefill time
per prompt token before/after, with comparability on batch, context length and TP degree
(a different batch, context or TP changes time per token by itself)."""

from __future__ import annotations

from typing import Any

from traceinsight.result import DiagnosisResult

#: relative change of the decode batch or the context per request that makes per-token times
#: not comparable
BATCH_TOLERANCE = 0.10
CONTEXT_TOLERANCE = 0.25


def _context_per_request(sv: dict[str, Any]) -> float | None:
    ctx = [
        s["decode_context_tokens"] / s["decode_requests"]
        for s in sv.get("steps") or []
        if s.get("phase") in ("decode", "mixed")
        and s.get("decode_context_tokens")
        and s.get("decode_requests")
    ]
    return sum(ctx) / len(ctx) if ctx else None


def _facts(sv: dict[str, Any]) -> dict[str, Any]:
    ph = sv.get("phases") or {}
    dec = ph.get("decode") or ph.get("mixed") or {}
    pre = ph.get("prefill") or {}
    return {
        "tpot_ms": dec.get("tpot_ms"),
        "prefill_ms_per_token": pre.get("ms_per_token"),
        "tokens_per_s_per_gpu": dec.get("tokens_per_s_per_gpu"),
        "batch": dec.get("batch"),
        "context_per_request": _context_per_request(sv),
        "tp": sv.get("tp"),
        "engine": sv.get("engine"),
    }


def _rel(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or not a:
        return None
    return (b - a) / a


def compare_serving(before: DiagnosisResult, after: DiagnosisResult) -> dict[str, Any] | None:
    """The per-token comparison, or None unless both results are serving traces."""
    if not before.serving or not after.serving:
        return None
    a, b = _facts(before.serving), _facts(after.serving)
    why: list[str] = []
    if a["tp"] != b["tp"]:
        why.append(f"TP degree {a['tp']} vs {b['tp']}")
    rb = _rel(a["batch"], b["batch"])
    if rb is not None and abs(rb) > BATCH_TOLERANCE:
        why.append(f"decode batch {a['batch']:g} vs {b['batch']:g}")
    rc = _rel(a["context_per_request"], b["context_per_request"])
    if rc is not None and abs(rc) > CONTEXT_TOLERANCE:
        why.append(
            f"context per request {a['context_per_request']:.0f} vs {b['context_per_request']:.0f}"
            " tokens"
        )
    rows = []
    for key, label in (
        ("tpot_ms", "time per output token (decode, GPU-side)"),
        ("prefill_ms_per_token", "prefill time per prompt token"),
        ("tokens_per_s_per_gpu", "decode tokens/s per GPU"),
    ):
        rows.append(
            {
                "metric": key,
                "label": label,
                "before": a[key],
                "after": b[key],
                "delta_pct": None if _rel(a[key], b[key]) is None else 100 * _rel(a[key], b[key]),  # type: ignore[operator]
            }
        )
    return {
        "before": a,
        "after": b,
        "per_token": rows,
        "comparable": not why,
        "not_comparable_because": why,
    }
