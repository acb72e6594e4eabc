"""The headline and the primary verdict: what bounds this run, in one sentence.

``primary`` is the rule id the headline leads with: ``not-representative`` whenever that rule
fired (no steady-state verdict can be drawn from the window), else the first finding of medium
or high severity in the finding order (the largest share of step time it could recover, then
severity), else ``healthy``.

With a finding of medium weight the headline is that finding's own headline. Without one it
still says what bounds the run, from the window split (compute + exposed communication +
exposed copies + GPU idle = the step windows): GPU-bound runs name the kernel-class mix and,
where the FLOP/byte model covers enough kernel time, whether the math is compute- or
memory-bound at what share of peak and the MFU; with too little modelled the headline says so
instead of quoting a number that is only a lower bound. Idle-, communication- or copy-dominated
windows name their largest part (and, for idle, its leading cause).
"""

from __future__ import annotations

from typing import Any

from traceinsight.analysis import Analysis
from traceinsight.analysis.truncation import headline as truncated_headline
from traceinsight.analysis.truncation import prefix, truncation
from traceinsight.metrics.mode import capture_of
from traceinsight.result import Finding, primary_of
from traceinsight.util import fmt

#: modelled kernel time (flops_modelled_pct) at or above which the roofline split is stated
MODELLED_MIN_PCT = 50.0
#: share of modelled time in one regime at or above which the run is called that-bound
REGIME_MIN_PCT = 60.0
#: a GPU-bound run also states its idle when this share of the window or more
IDLE_NOTE_PCT = 5.0
#: kernels running at least this share of the window (and more than any other part): GPU-bound
GPU_BOUND_MIN_PCT = 70.0

#: idle metric -> what the GPU waited for
IDLE_CAUSES = (
    ("idle_launch_pct", "launch overhead"),
    ("idle_host_pct", "host stalls"),
    ("idle_input_pct", "input loading"),
    ("idle_sync_pct", "blocking syncs and copies"),
    ("idle_device_wait_pct", "work waiting on a dependency"),
    ("idle_startup_pct", "start-up calls"),
    ("idle_capture_pct", "graph capture"),
    ("idle_compile_pct", "compilation"),
    ("idle_unknown_pct", "unrecorded host time"),
    ("idle_unrecorded_pct", "unrecorded work inside partly recorded graph replays"),
)
CLASS_LABEL = {"gemm": "GEMM", "other": "unclassified"}

__all__ = ["headline", "primary_of"]


def headline(findings: list[Finding], m: dict[str, Any], an: Analysis | None) -> str:
    """What bounds this run, in one sentence; a salvaged (truncated) trace says so first, and
    one whose GPU events were all past the cut says that no GPU verdict is possible instead
    of calling it a CPU-only run."""
    cut = truncation(an.store) if an is not None else None
    if cut is not None and cut.gpu_lost and not m.get("has_gpu"):
        return truncated_headline(cut)
    text = _headline(findings, m, an)
    return prefix(cut) + text if cut is not None else text


def _headline(findings: list[Finding], m: dict[str, Any], an: Analysis | None) -> str:
    lead = primary_of(findings)
    if not m.get("has_gpu"):
        nsys = an is not None and capture_of(an).tool == "nsys"
        no_gpu = (
            "No GPU activity in this trace: only CPU events were recorded (a CPU run, or "
            + (
                "the capture ran without `-t cuda`"
                if nsys
                else "the profiler ran without ProfilerActivity.CUDA"
            )
            + "); GPU rules were not evaluated."
        )
        return no_gpu if lead == "healthy" else f"{_lead(findings, lead, '')} {no_gpu}"
    busy = m.get("gpu_busy_pct")
    ctx = f"GPU busy {fmt.fmt_pct(busy, 0)} of step time" if busy is not None else ""
    if lead != "healthy":
        return _lead(findings, lead, ctx)
    minor = [f.rule for f in findings if f.severity == "low"]
    extra = f" Minor: {', '.join(minor)}." if minor else ""
    return f"{bound_sentence(m, _class_mix(an))} No finding of medium weight.{extra}"


def _lead(findings: list[Finding], lead: str, ctx: str) -> str:
    """The leading finding's own headline, then the next two of medium weight or more."""
    top = next(f for f in findings if f.rule == lead)
    text = top.headline or f"{top.rule}: {top.title.lower()}"
    text = text[:1].upper() + text[1:]
    more = [f.rule for f in findings if f is not top and f.severity in ("high", "medium")][:2]
    tail = f"; also {', '.join(more)}" if more else ""
    return f"{text}{f' ({ctx})' if ctx else ''}{tail}."


def bound_sentence(m: dict[str, Any], mix: list[tuple[str, float]]) -> str:
    """What dominates the step windows, with the confidence of the modelled figures."""
    parts = {
        "compute": m.get("compute_pct") or 0.0,
        "comm": m.get("exposed_comm_pct") or 0.0,
        "copies": (m.get("memcpy_exposed_pct") or 0.0) + (m.get("memset_exposed_pct") or 0.0),
        "idle": m.get("gpu_idle_pct") or 0.0,
    }
    lead = max(parts, key=lambda k: parts[k])
    idle = parts["idle"]
    cause, cause_pct = _idle_cause(m)
    idle_note = (
        (
            f"GPU idle {fmt.fmt_pct(idle)}"
            + (f", mostly {cause} ({fmt.fmt_pct(cause_pct)})" if cause else "")
        )
        if idle
        else ""
    )
    if lead == "idle":
        return (
            f"GPU idle most of the window: {fmt.fmt_pct(idle)} of step time, the largest "
            f"part {cause or 'not explained by the host'}"
            + (f" ({fmt.fmt_pct(cause_pct)})" if cause else "")
            + f"; kernels run {fmt.fmt_pct(parts['compute'])}{_mix_text(mix)}."
        )
    if lead == "comm":
        return (
            f"Communication-bound: exposed communication is {fmt.fmt_pct(parts['comm'])} of "
            f"step time ({fmt.fmt_pct(m.get('comm_overlap_pct'), 0)} of it hidden under "
            f"compute); kernels run {fmt.fmt_pct(parts['compute'])}."
        )
    if lead == "copies":
        return (
            f"Copy-bound: copies with no kernel running take {fmt.fmt_pct(parts['copies'])} "
            f"of step time; kernels run {fmt.fmt_pct(parts['compute'])}."
        )
    busy = f"kernels run {fmt.fmt_pct(parts['compute'])} of step time{_mix_text(mix)}"
    tail = f"; {idle_note}" if idle >= IDLE_NOTE_PCT else ""
    if parts["compute"] < GPU_BOUND_MIN_PCT:
        return f"No single bound: {busy}{tail}."
    return _gpu_bound(m, busy) + tail + "."


def _gpu_bound(m: dict[str, Any], busy: str) -> str:
    cov = m.get("flops_modelled_pct")
    cb, mb = m.get("compute_bound_time_pct"), m.get("memory_bound_time_pct")
    mfu = m.get("mfu_pct")
    if cov is None or cb is None or mb is None:
        why = (
            "no op's FLOPs or bytes could be modelled"
            if not cov
            else "the compute/memory split was not measured"
        )
        return f"GPU-bound: {busy}; {why}, so MFU and the roofline split are not stated"
    if cov < MODELLED_MIN_PCT:
        low = f"MFU ≥ {_pct(mfu)} is only a lower bound and " if mfu is not None else ""
        return (
            f"GPU-bound: {busy}; the FLOP/byte model covers only {_pct(cov)} of "
            f"kernel time, so {low}the compute/memory split is not established"
        )
    mfu_text = f", MFU {fmt.fmt_pct(mfu)}" if mfu is not None else ""
    cov_text = f" ({fmt.fmt_pct(cov, 0)} of kernel time modelled)"
    if cb >= REGIME_MIN_PCT:
        eff = m.get("compute_bound_efficiency_pct")
        at = f" at {fmt.fmt_pct(eff, 0)} of peak" if eff is not None else ""
        return (
            f"Compute-bound: {fmt.fmt_pct(cb, 0)} of modelled time in math{at}{mfu_text}"
            f"{cov_text}; gains now come from lower precision or fewer FLOPs; {busy}"
        )
    if mb >= REGIME_MIN_PCT:
        eff = m.get("memory_bound_efficiency_pct")
        at = f" at {fmt.fmt_pct(eff, 0)} of peak bandwidth" if eff is not None else ""
        return (
            f"Memory-bound: {fmt.fmt_pct(mb, 0)} of modelled time moves data{at}{mfu_text}"
            f"{cov_text}; gains now come from fusing kernels or moving fewer bytes; {busy}"
        )
    return (
        f"GPU-bound, between compute and memory: {fmt.fmt_pct(cb, 0)} of modelled time "
        f"compute-bound, {fmt.fmt_pct(mb, 0)} memory-bound{mfu_text}{cov_text}; {busy}"
    )


def _pct(p: float | None) -> str:
    """A share with the digits a small value needs (0.27%, 3.4%, 61%)."""
    if p is None:
        return "–"
    return fmt.fmt_pct(p, 0 if p >= 10 else 1 if p >= 1 else 2)


def _idle_cause(m: dict[str, Any]) -> tuple[str | None, float]:
    best = max(((m.get(k) or 0.0, label) for k, label in IDLE_CAUSES), default=(0.0, None))
    return (best[1], best[0]) if best[0] > 0 else (None, 0.0)


def _class_mix(an: Analysis | None) -> list[tuple[str, float]]:
    """Kernel classes by share of kernel time, largest first."""
    if an is None:
        return []
    g = an.attribution.gpu
    k = g[g["kind"] == "kernel"]
    tot = float(k["dur_ns"].sum())
    if not tot:
        return []
    by = k.groupby(k["cls"].astype(str))["dur_ns"].sum().sort_values(ascending=False)
    return [(str(c), 100.0 * float(v) / tot) for c, v in by.items() if v > 0]


def _mix_text(mix: list[tuple[str, float]], n: int = 3) -> str:
    shown = [(c, p) for c, p in mix[:n] if p >= 1.0]
    if not shown:
        return ""
    return (
        " ("
        + ", ".join(f"{CLASS_LABEL.get(c, c)} {fmt.fmt_pct(p, 0)}" for c, p in shown)
        + " of kernel time)"
    )
