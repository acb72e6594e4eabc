"""Can two runs be compared, and on what basis? The ``comparability`` block of ``compare``.

Each diagnosis records in ``trace`` what this needs (docs/RESULT.md): the device, world size,
run mode, step count, module-tree and op-shape signatures, parameter count, dominant compute
dtypes, compiled vs eager, tokens and modelled FLOPs per step. Two sides that differ in one of
them are listed as a difference with what it invalidates and a severity (docs/COMPARE.md):

* **blocking** — the two runs do different work (model shape, world size, run mode, tokens) or
  one side has no step time: a change of step time says nothing about the code, and
  ``--fail-if-slower`` refuses to judge (exit 2) unless ``--allow-incomparable``;
* **caution** — the same work on a different system (GPU, dtype, eager vs compiled) or too few
  steps to bound the noise: the numbers hold, but they compare the systems, not the code.

Where the work differs, step time is also normalised per token (tokens per step known on both
sides) or per modelled FLOP, and the basis is named. Nothing here needs pandas.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from traceinsight.result import DiagnosisResult
from traceinsight.util import capture_hints, fmt

#: fewer representative steps than this on a side: the step time is not a stable measurement
MIN_STEPS = 3
#: per-modelled-FLOP statements need this share of kernel time modelled on both sides
MIN_MODELLED_PCT = 50.0
#: names listed as added / removed when module trees differ
MAX_PAIRING_NAMES = 50


@dataclass(frozen=True)
class Check:
    """One comparability check: what differs, how bad it is, what it invalidates and why."""

    what: str
    severity: str  #: blocking | caution
    label: str  #: the headline phrase: "different GPUs"
    invalidated: tuple[str, ...]  #: what the difference makes unreliable, each a noun phrase
    why: str  #: a clause: why it does

    @property
    def invalidates(self) -> str:
        """The one sentence the reports print after "invalidates": the parts, then why."""
        return f"{fmt.join_words(self.invalidated)}, because {self.why}"


#: every check, blocking first (the order of the headline and of docs/COMPARE.md)
CHECKS: tuple[Check, ...] = (
    Check(
        "step time",
        "blocking",
        "no step time on a side",
        ("everything",),
        "a side has no GPU work in step windows, so there is nothing to compare",
    ),
    Check(
        "step markers",
        "blocking",
        "a time slice without step markers",
        ("step time", "every per-step part"),
        "a slice's length is set by the capture, not by the run (the sides are compared per "
        "unit of work both name, else per second)",
    ),
    Check(
        "world size",
        "blocking",
        "different world sizes",
        ("absolute step time", "the communication parts", "per-layer contributors"),
        "each rank does a different share of the work",
    ),
    Check(
        "run mode",
        "blocking",
        "different run modes",
        ("everything",),
        "a training step and an inference step do different work",
    ),
    Check(
        "module tree",
        "blocking",
        "different module trees",
        ("absolute step time", "per-layer contributors"),
        "the models differ (layers pair by identical module path only)",
    ),
    Check(
        "op shapes",
        "blocking",
        "different op input shapes",
        ("absolute step time", "per-op contributors"),
        "the ops run on different input shapes",
    ),
    Check(
        "parameters",
        "blocking",
        "different parameter counts",
        ("absolute step time",),
        "the models differ in size",
    ),
    Check(
        "tokens per step",
        "blocking",
        "different tokens per step",
        ("absolute step time",),
        "each step processes a different number of tokens",
    ),
    Check(
        "device",
        "caution",
        "different GPUs",
        ("absolute step time", "per-kernel names"),
        "the step time then measures the systems, not the code, and each vendor's libraries name "
        "their kernels differently",
    ),
    Check(
        "dtype",
        "caution",
        "different compute dtypes",
        ("absolute step time", "per-kernel time"),
        "the sides then compare numerics set-ups, not the code",
    ),
    Check(
        "compile",
        "caution",
        "eager vs torch.compile",
        ("per-op contributors", "per-kernel contributors", "launch time", "idle time"),
        "torch.compile fuses kernels and changes how they are launched",
    ),
    Check(
        "steps",
        "caution",
        "too few steps",
        ("step-time statistics",),
        f"fewer than {MIN_STEPS} steps do not bound the noise",
    ),
)
CHECK = {c.what: c for c in CHECKS}
#: differences that change the work per step: step time is normalised where they occur
WORK_CHECKS = ("world size", "module tree", "op shapes", "parameters", "tokens per step")


def signature(r: DiagnosisResult, tokens_per_step: float | None = None) -> dict[str, Any]:
    """What one side's result says about comparability (``None``: not known; a result written
    before these fields existed reads as unknown, except what older results already held)."""
    t = r.trace or {}
    v = (r.metrics or {}).get("values") or {}
    b = (r.rollups or {}).get("step_basis") or {}
    steps = t.get("steps", v.get("steps"))
    windows = int(b.get("windows") or 0)
    ranks = int(b.get("ranks") or 0) or 1
    devices = [str(d) for d in t.get("devices") or []]
    ws = t.get("world_size") or len(t.get("ranks") or []) or None
    given = (r.extra or {}).get("capture")
    cap = (
        capture_hints.Capture.from_dict(given)
        if isinstance(given, dict)
        else capture_hints.Capture(capture_hints.tool_of(t.get("format")))
    )
    return {
        "device": t.get("device") or (devices[0] if devices else None),
        "vendor": t.get("vendor"),
        "world_size": int(ws) if ws else None,
        "mode": t.get("mode"),
        "steps": int(steps) if steps is not None else None,
        "windows_per_rank": windows // ranks if windows else 0,
        "has_gpu": None if v.get("has_gpu") is None else bool(v["has_gpu"]),
        "module_signature": t.get("module_signature"),
        "module_count": t.get("module_count"),
        "op_shape_signature": t.get("op_shape_signature"),
        "op_shape_count": t.get("op_shape_count"),
        "params": t.get("params"),
        "tokens_per_step": tokens_per_step or t.get("tokens_per_step"),
        "flops_per_step": t.get("flops_per_step"),
        "flops_modelled_pct": v.get("flops_modelled_pct"),
        "dtypes": t.get("dtypes") or None,
        "compiled": t.get("compiled"),
        "recorded": "module_signature" in t,
        "has_step_markers": t.get("has_step_markers"),
        "format": t.get("format"),
        "slice": (r.rollups or {}).get("slice"),
        "hint": capture_hints.steps_hint(cap) if t.get("has_step_markers") is False else None,
        "capture": cap,
    }


def representative_steps(s: dict[str, Any]) -> int:
    """ProfilerSteps per rank, else the step windows per rank (the whole GPU span: 1)."""
    return int(s.get("steps") or 0) or int(s.get("windows_per_rank") or 0)


def _diff(what: str, before: Any, after: Any, detail: str = "") -> dict[str, Any]:
    c = CHECK[what]
    return {
        "what": what,
        "before": before,
        "after": after,
        "invalidates": c.invalidates,
        "invalidated": list(c.invalidated),
        "why": c.why,
        "severity": c.severity,
        "label": c.label,
        "detail": detail,
    }


def _tree(count: Any, sig: Any, unit: str) -> str:
    return f"{fmt.fmt_num(count, 0)} {unit} #{str(sig)[:8]}"


def _num(x: float) -> str:
    for suffix, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{suffix}"
    return f"{x:g}"


def differences(a: dict[str, Any], b: dict[str, Any]) -> tuple[list[dict], list[dict]]:
    """The differences between two signatures, and what could not be checked (and why)."""
    out: list[dict[str, Any]] = []
    unchecked: list[dict[str, str]] = []

    def unknown(what: str, why_a: str | None, why_b: str | None) -> None:
        if why_a and why_a == why_b:
            unchecked.append({"what": what, "why": f"both: {why_a}"})
            return
        sides = [f"{side}: {why}" for side, why in (("before", why_a), ("after", why_b)) if why]
        unchecked.append({"what": what, "why": "; ".join(sides)})

    old = "not in this result (written by an older traceinsight)"
    na, nb = representative_steps(a), representative_steps(b)
    why_empty = {
        side: ("no GPU step windows" if not n else "no GPU activity")
        for side, n, s in (("before", na, a), ("after", nb, b))
        if not n or s["has_gpu"] is False
    }
    if why_empty:
        shown = {
            side: why_empty.get(side, f"{n} steps") for side, n in (("before", na), ("after", nb))
        }
        out.append(
            _diff(
                "step time",
                shown["before"],
                shown["after"],
                "; ".join(f"{why} on {side}" for side, why in why_empty.items()),
            )
        )
    slices = [
        side
        for side, s in (("before", a), ("after", b))
        if s["has_step_markers"] is False and side not in why_empty
    ]
    if slices:
        shown = {
            side: (
                f"a {fmt.fmt_ns((s['slice'] or {}).get('span_ns'))} slice"
                if side in slices
                else f"{representative_steps(s)} steps"
            )
            for side, s in (("before", a), ("after", b))
        }
        out.append(
            _diff(
                "step markers",
                shown["before"],
                shown["after"],
                f"{shown['before']} → {shown['after']}",
            )
        )
    if a["world_size"] and b["world_size"] and a["world_size"] != b["world_size"]:
        out.append(
            _diff(
                "world size",
                a["world_size"],
                b["world_size"],
                f"{a['world_size']} → {b['world_size']} ranks",
            )
        )
    if a["mode"] and b["mode"]:
        if a["mode"] != b["mode"]:
            out.append(_diff("run mode", a["mode"], b["mode"], f"{a['mode']} → {b['mode']}"))
    elif not (a["recorded"] and b["recorded"]):
        unknown("run mode", None if a["recorded"] else old, None if b["recorded"] else old)
    for what, key, count, unit, setting in (
        ("module tree", "module_signature", "module_count", "module paths", capture_hints.MODULES),
        ("op shapes", "op_shape_signature", "op_shape_count", "(op, input shape) pairs", "shapes"),
    ):
        sa, sb = a[key], b[key]
        if sa and sb:
            if sa != sb:
                ta, tb = _tree(a[count], sa, unit), _tree(b[count], sb, unit)
                same_n = a[count] == b[count]
                out.append(
                    _diff(
                        what,
                        ta,
                        tb,
                        f"{fmt.fmt_num(a[count], 0)} {unit} each, not the same"
                        if same_n
                        else f"{fmt.fmt_num(a[count], 0)} → {fmt.fmt_num(b[count], 0)} {unit}",
                    )
                )
        else:
            unknown(
                what,
                None if sa else (_missing(setting, a) if a["recorded"] else old),
                None if sb else (_missing(setting, b) if b["recorded"] else old),
            )
    for what, key, show in (
        ("parameters", "params", _num),
        ("tokens per step", "tokens_per_step", _num),
    ):
        if a[key] and b[key] and float(a[key]) != float(b[key]):
            out.append(_diff(what, a[key], b[key], f"{show(a[key])} → {show(b[key])}"))
    da, db = a["device"], b["device"]
    if da and db and str(da).lower() != str(db).lower():
        out.append(_diff("device", da, db, f"{da} → {db}"))
    elif not (da and db):
        unknown("device", None if da else "GPU not recorded", None if db else "GPU not recorded")
    ta_, tb_ = a["dtypes"], b["dtypes"]
    if ta_ and tb_:
        if set(ta_) != set(tb_):
            out.append(
                _diff("dtype", "+".join(ta_), "+".join(tb_), f"{'+'.join(ta_)} → {'+'.join(tb_)}")
            )
    else:
        why = "no GEMM / attention kernel with a known dtype"
        unknown(
            "dtype",
            None if ta_ else (why if a["recorded"] else old),
            None if tb_ else (why if b["recorded"] else old),
        )
    ca, cb = a["compiled"], b["compiled"]
    if ca is not None and cb is not None:
        if ca != cb:
            word = {True: "torch.compile", False: "eager"}
            out.append(_diff("compile", word[ca], word[cb], f"{word[ca]} → {word[cb]}"))
    else:
        unknown(
            "compile",
            None if ca is not None else ("no GPU kernels or ops" if a["recorded"] else old),
            None if cb is not None else ("no GPU kernels or ops" if b["recorded"] else old),
        )
    if not why_empty and not slices and min(na, nb) < MIN_STEPS:
        out.append(_diff("steps", na, nb, f"{na} and {nb} per rank, fewer than {MIN_STEPS}"))
    order = {c.what: i for i, c in enumerate(CHECKS)}
    out.sort(key=lambda d: order[d["what"]])
    return out, unchecked


def normalise(
    a: dict[str, Any],
    b: dict[str, Any],
    ref_a: float | None,
    ref_b: float | None,
    diffs: list[dict[str, Any]],
    ref: str,
) -> dict[str, Any] | None:
    """Step time per token (tokens known on both sides) or per modelled FLOP, where the work per
    step differs; None where it does not or neither basis is known on both sides."""
    if any(d["what"] == "step markers" for d in diffs):
        return per_unit(a, b)
    if not ref_a or not ref_b or not any(d["what"] in WORK_CHECKS for d in diffs):
        return None
    ka, kb = a["tokens_per_step"], b["tokens_per_step"]
    if ka and kb:
        pa, pb = ref_a / float(ka), ref_b / float(kb)
        return {
            "by": "token",
            "before": pa,
            "after": pb,
            "delta_pct": 100.0 * (pb / pa - 1.0),
            "unit": "ns per token",
            "basis": f"{ref} step time / tokens per step ({_num(ka)} → {_num(kb)})",
        }
    fa, fb = a["flops_per_step"], b["flops_per_step"]
    ma, mb = a["flops_modelled_pct"], b["flops_modelled_pct"]
    # per modelled FLOP only where the FLOPs stand for most of the work on both sides
    if fa and fb and min(ma or 0.0, mb or 0.0) >= MIN_MODELLED_PCT:
        pa, pb = ref_a / float(fa), ref_b / float(fb)
        note = (
            f"; kernel time modelled {fmt.fmt_pct(ma, 0)} → {fmt.fmt_pct(mb, 0)}"
            if ma is not None and mb is not None
            else ""
        )
        return {
            "by": "flop",
            "before": pa,
            "after": pb,
            "delta_pct": 100.0 * (pb / pa - 1.0),
            "unit": "ns per modelled FLOP",
            "before_tflops": float(fa) / ref_a / 1e3,
            "after_tflops": float(fb) / ref_b / 1e3,
            "basis": f"{ref} step time / modelled FLOPs per step ({_num(fa)} → {_num(fb)}){note}",
        }
    return None


def per_unit(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any] | None:
    """Two sides of which one at least is a time slice: GPU kernel time per instance of a unit
    of work both name (an NVTX range, an annotation, a layer call), else kernel time per second
    of the capture (a rate, which says how busy the GPU was, not how fast the code is: nothing
    to gate on). None where a side has no slice rates."""
    sa, sb = a.get("slice"), b.get("slice")
    if not sa or not sb:
        return None
    ub = {u["unit"]: u for u in sb.get("units") or []}
    for u in sa.get("units") or []:
        v = ub.get(u["unit"])
        if v and u["kernel_ns_per_instance"] and v["kernel_ns_per_instance"]:
            pa, pb = float(u["kernel_ns_per_instance"]), float(v["kernel_ns_per_instance"])
            return {
                "by": "unit",
                "unit": f"GPU kernel time per {u['unit']}",
                "before": pa,
                "after": pb,
                "delta_pct": 100.0 * (pb / pa - 1.0),
                "basis": (
                    f"kernel time launched inside each {u['unit']} "
                    f"({u['instances']:,} → {v['instances']:,} instances)"
                ),
            }
    ka, kb = sa.get("kernel_ns_per_s"), sb.get("kernel_ns_per_s")
    if not ka or not kb:
        return None
    return {
        "by": "second",
        "unit": "GPU kernel time per second of the capture",
        "before": float(ka),
        "after": float(kb),
        "delta_pct": None,  # a rate of busy time: neither slower nor faster
        "rate_delta_pct": 100.0 * (float(kb) / float(ka) - 1.0),
        "basis": "kernel time / capture length (no unit of work named on both sides)",
    }


def pairing(before: dict[str, int], after: dict[str, int], skip: str) -> dict[str, Any]:
    """Layers paired by identical module path; the rest listed as added / removed."""
    a = {k for k in before if k != skip}
    b = {k for k in after if k != skip}
    added, removed = sorted(b - a), sorted(a - b)
    return {
        "by": "identical module path",
        "paired": len(a & b),
        "added_count": len(added),
        "removed_count": len(removed),
        "added": added[:MAX_PAIRING_NAMES],
        "removed": removed[:MAX_PAIRING_NAMES],
    }


def assess(
    before: DiagnosisResult,
    after: DiagnosisResult,
    *,
    ref_a: float | None,
    ref_b: float | None,
    ref: str = "p50",
    tokens: tuple[float | None, float | None] = (None, None),
) -> dict[str, Any]:
    """The ``comparability`` block of a compare."""
    a, b = signature(before, tokens[0]), signature(after, tokens[1])
    diffs, unchecked = differences(a, b)
    norm = normalise(a, b, ref_a, ref_b, diffs, ref)
    return {
        "comparable": not any(d["severity"] == "blocking" for d in diffs),
        "differences": diffs,
        "normalised_by": norm["by"] if norm else None,
        "normalised": norm,
        "unchecked": unchecked,
        "min_steps": MIN_STEPS,
        "before": _public(a),
        "after": _public(b),
    }


def _missing(setting: str, side: dict[str, Any]) -> str:
    """Why a side has no module tree / op shapes, and how to record them, in the vocabulary of
    the tool that wrote it (:mod:`traceinsight.util.capture_hints`)."""
    cap = side.get("capture") or capture_hints.Capture()
    nsys = cap.tool == capture_hints.NSYS
    what = {
        capture_hints.MODULES: "no NVTX layer ranges" if nsys else "no nn.Module hierarchy",
        capture_hints.SHAPES: "no input shapes",
    }[setting]
    how = capture_hints.hint(setting, cap)
    return f"{what} ({how})" if how else what


def _public(s: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in s.items() if k not in ("recorded", "capture")}
    out["capture"] = s["capture"].to_dict()  # the tool that wrote the side (its vocabulary)
    return out


def phrase(d: dict[str, Any]) -> str:
    """``different GPUs (H100 → MI300X)``: a difference in a headline."""
    label = d.get("label") or CHECK.get(str(d.get("what")), CHECKS[0]).label
    return f"{label} ({d['detail']})" if d.get("detail") else str(label)


def headline_prefix(comp: dict[str, Any] | None) -> str:
    """``Not comparable: ...`` or ``Caution: ...`` (ends with ". "), or "" when nothing differs."""
    if not comp:
        return ""
    diffs = comp.get("differences") or []
    blocking = [phrase(d) for d in diffs if d.get("severity") == "blocking"]
    caution = [phrase(d) for d in diffs if d.get("severity") != "blocking"]
    if blocking:
        text = "Not comparable: " + "; ".join(blocking)
        if caution:
            text += "; also " + "; ".join(caution)
        return text + ". "
    if caution:
        return "Caution: " + "; ".join(caution) + ". "
    return ""


def gate_change(c: dict[str, Any]) -> tuple[float | None, str]:
    """The change a ``--fail-if-slower`` gate judges (%) and what it is: the normalised step
    time where the work differs, else the p50 step time, else the mean."""
    norm = (c.get("comparability") or {}).get("normalised")
    if norm and norm.get("delta_pct") is not None:
        return norm["delta_pct"], f"step time per {norm['by']}"
    st = c.get("step_time") or {}
    if st.get("p50_delta_pct") is not None:
        return st["p50_delta_pct"], "step time"
    return st.get("mean_delta_pct"), "mean step time"


def gate(
    c: dict[str, Any],
    threshold: float,
    *,
    allow_incomparable: bool = False,
    names: tuple[str, str] = ("before", "after"),
) -> tuple[int, str | None]:
    """``--fail-if-slower``: exit code and one line for stderr. 2 when there is no change to
    judge (a side without GPU work in step windows: a gate never passes vacuously) or the
    comparison is not valid (blocking differences, unless ``allow_incomparable``); 1 when
    slower by more than ``threshold`` %; else 0."""
    comp = c.get("comparability") or {}
    pair = f"{names[0]} vs {names[1]}"
    diffs = comp.get("differences") or []
    pct, what = gate_change(c)
    none = [d for d in diffs if d.get("what") == "step time"]
    sliced = [d for d in diffs if d.get("what") == "step markers"]
    if sliced and not none:
        hints = [
            str(s["hint"])
            for s in (comp.get("before") or {}, comp.get("after") or {})
            if s.get("hint")
        ]
        hint = f" (hint: {hints[0]})" if hints else ""
        norm = comp.get("normalised") or {}
        if not allow_incomparable:
            return 2, (
                f"traceinsight: error: {pair}: {phrase(sliced[0])}: a time slice has no step "
                "time, so --fail-if-slower has no change of step time to judge; "
                "--allow-incomparable gates on the kernel time per unit of work both sides "
                f"name, where there is one{hint}"
            )
        if norm.get("by") != "unit" or norm.get("delta_pct") is None:
            return 2, (
                f"traceinsight: error: {pair}: {phrase(sliced[0])}: no unit of work (NVTX "
                "range, annotation, layer call) on both sides to normalise by, and a rate per "
                f"second says how busy the GPU was, not how fast the code is{hint}"
            )
        pct, what = float(norm["delta_pct"]), str(norm["unit"])
        if pct > threshold:
            return 1, f"traceinsight: {what} regressed by {pct:.1f}% (> {threshold:g}%)"
        return 0, None
    if none or pct is None:
        why = phrase(none[0]) if none else "no step time on a side"
        return 2, (
            f"traceinsight: error: {pair}: {why}: there is no change of step time to "
            "judge, and a gate never passes without one (hint: profile both runs with "
            "ProfilerStep markers and GPU activity)"
        )
    blocking = [d for d in diffs if d.get("severity") == "blocking"]
    if blocking and not allow_incomparable:
        return 2, (
            f"traceinsight: error: {pair}: not comparable: "
            f"{'; '.join(phrase(d) for d in blocking)}; --fail-if-slower cannot judge a "
            "regression (hint: pass --allow-incomparable to gate on the measured change "
            "anyway)"
        )
    if pct > threshold:
        return 1, f"traceinsight: {what} regressed by {pct:.1f}% (> {threshold:g}%)"
    return 0, None
