"""The Serving section as plain text rows, shared by the terminal, Markdown and HTML views:
the phase table (steps, tokens, step time p50/p90/p99, TPOT, batch, tokens/s per GPU), the
decode roofline with its floor and the step split, and what the numbers rest on. Reads the
result's ``serving`` block only."""

from __future__ import annotations

from typing import Any

from traceinsight.util import fmt
from traceinsight.util.safetext import for_terminal as safe

PHASE_HEADERS = ["phase", "steps", "tokens", "step p50", "p90", "p99", "TPOT", "batch", "tok/s/GPU"]


def _ms(v: Any) -> str:
    return "–" if v is None else fmt.fmt_ns(float(v) * 1e6)


def _n(v: Any, digits: int = 0) -> str:
    if v is None:
        return "–"
    return f"{float(v):,.{digits}f}"


def phase_rows(sv: dict[str, Any]) -> list[list[str]]:
    rows = []
    for p in ("prefill", "decode", "mixed"):
        b = (sv.get("phases") or {}).get(p)
        if not b:
            continue
        st = b.get("step_ms") or {}
        rows.append(
            [
                p,
                _n(b.get("steps")),
                _n(b.get("tokens")),
                _ms(st.get("p50")),
                _ms(st.get("p90")),
                _ms(st.get("p99")),
                _ms(b.get("tpot_ms")),
                _n(b.get("batch")),
                _n(b.get("tokens_per_s_per_gpu")),
            ]
        )
    return rows


def summary_line(sv: dict[str, Any]) -> str:
    eng = safe(str(sv.get("engine") or "unknown engine"))
    tp = sv.get("tp")
    how = ", ".join(safe(str(h)) for h in sv.get("recognised_by") or [])
    parts = [f"engine {eng}", f"TP {tp}" if tp else "TP not stated", f"steps by {how}"]
    g = sv.get("gaps_between_steps_ms") or {}
    if g.get("count"):
        parts.append(f"GPU gaps between steps {_ms(g.get('total'))} over {g['count']}")
    if sv.get("ttft_lower_bound_ms") is not None:
        parts.append(f"TTFT ≥ {_ms(sv['ttft_lower_bound_ms'])}")
    pre = (sv.get("phases") or {}).get("prefill") or {}
    if pre.get("ms_per_token") is not None:
        parts.append(f"prefill {_ms(pre['ms_per_token'])} per prompt token")
    mfu = (sv.get("prefill_mfu") or {}).get("mfu_pct")
    if mfu is not None:
        parts.append(f"prefill MFU {fmt.fmt_pct(mfu)}")
    return " · ".join(parts)


def roofline_lines(sv: dict[str, Any]) -> list[str]:
    r = sv.get("decode_roofline") or {}
    if not r:
        return []
    if r.get("bytes_per_step") is None or r.get("fraction_of_peak") is None:
        why = r.get("why") or "not modelled"
        lb = r.get("bytes_eager_lower_bound")
        extra = f" (eager ops: ≥ {fmt.fmt_bytes(lb)} per step)" if lb else ""
        return [f"Decode roofline: not stated: {safe(str(why))}{extra}"]
    out = [
        "Decode roofline: "
        f"{fmt.fmt_bytes(r['bytes_per_step'])} per step, achieved "
        f"{_n(r.get('achieved_gbps'), 1)} GB/s of {_n(r.get('peak_gbps'), 1)} GB/s HBM peak "
        f"({fmt.fmt_pct(100 * r['fraction_of_peak'])}); floor {_ms(r.get('floor_ms'))} per step"
    ]
    sp = r.get("split_ms") or {}
    if sp:
        out.append(
            "  median step "
            + _ms(sp.get("step"))
            + ": at the roof "
            + _ms(sp.get("at_roof"))
            + ", kernels below it "
            + _ms(sp.get("kernels_below_roof"))
            + ", sampling/logits "
            + _ms(sp.get("sampling_logits"))
            + ", launch gaps "
            + _ms(sp.get("launch_gaps_in_step"))
            + (
                ", host between steps " + _ms(sp.get("host_between_steps"))
                if sp.get("host_between_steps") is not None
                else ""
            )
        )
    if r.get("assumptions"):
        out.append("  assumes: " + "; ".join(safe(str(a)) for a in r["assumptions"]))
    return out


def basis_note(sv: dict[str, Any]) -> str:
    return safe(str(sv.get("time_basis") or ""))


def compare_lines(c: dict[str, Any]) -> list[str]:
    """Terminal / Markdown lines of the per-token comparison."""
    sv = c.get("serving")
    if not sv:
        return []
    out = ["Serving, per token:"]
    for r in sv["per_token"]:
        if r["before"] is None and r["after"] is None:
            continue
        unit = "" if r["metric"] == "tokens_per_s_per_gpu" else " ms"
        bf = "–" if r["before"] is None else f"{r['before']:.4g}{unit}"
        af = "–" if r["after"] is None else f"{r['after']:.4g}{unit}"
        d = "" if r["delta_pct"] is None else f" ({r['delta_pct']:+.1f}%)"
        out.append(f"  {r['label']}: {bf} → {af}{d}")
    if not sv["comparable"]:
        out.append("  not comparable per token: " + "; ".join(sv["not_comparable_because"]))
    return out
