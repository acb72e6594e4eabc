"""``compare``: what changed between two runs (before / after), and why.

The change being explained is the mean step time (per rank and step window). Each side's mean
step decomposes exactly into contributors that are aligned structurally, not by kernel name, so
two runs on different libraries or vendors still line up:

    step = Σ compute kernel time by layer (module path) | top-level op | kernel class
           + concurrency (compute union - compute kernel sum: overlap across streams, <= 0)
           + exposed communication + exposed memcpy + exposed memset
           + idle by cause (launch, input, sync, copy, host, alloc, device wait, start-up, ...)

Values are integer nanoseconds per step (largest-remainder rounding keeps the sums exact), so
the contributors' ``delta_ns`` add up to ``total_delta_ns`` exactly. Contributors pair by
identical name (module path, op, class); one present on a single side is ``added`` or
``removed``. Whether the two runs can be compared at all, and on what basis, is the
``comparability`` block (:mod:`.comparability`, docs/COMPARE.md); the headline leads with it.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

from traceinsight import __version__
from traceinsight.compare import comparability
from traceinsight.compare.notes import contributor_notes
from traceinsight.result import SEVERITY_RANK, DiagnosisResult
from traceinsight.util import fmt
from traceinsight.util.pathlabel import distinct_labels
from traceinsight.util.vocab import NO_MODULE

COMPARE_SCHEMA = "traceinsight.compare"
COMPARE_VERSION = 1


def _per_step(
    parts: dict[tuple[str, str], int], windows: int, total: int
) -> dict[tuple[str, str], int]:
    """Divide integer sums by ``windows`` keeping their sum equal to round(total / windows)."""
    if windows <= 0:
        return {k: 0 for k in parts}
    exact = {k: Fraction(v, windows) for k, v in parts.items()}
    floors = {k: (v.numerator // v.denominator) for k, v in exact.items()}
    target = round(Fraction(total, windows))
    rest = target - sum(floors.values())
    order = sorted(exact, key=lambda k: exact[k] - floors[k], reverse=True)
    if rest >= 0:
        for k in order[:rest]:
            floors[k] += 1
    else:
        for k in order[::-1][:-rest]:
            floors[k] -= 1
    return floors


def _structure(r: DiagnosisResult, kind: str) -> dict[str, int]:
    b = r.rollups.get("step_basis") or {}
    key = {"layer": "by_layer_ns", "op": "by_op_ns", "class": "by_class_ns"}[kind]
    return dict(b.get(key) or {})


def _coverage(r: DiagnosisResult, kind: str) -> float:
    b = r.rollups.get("step_basis") or {}
    tot = b.get("compute_kernel_sum_ns") or 0
    if not tot:
        return 0.0
    parts = _structure(r, kind)
    bad = NO_MODULE if kind == "layer" else None
    good = sum(v for k, v in parts.items() if k != bad and not (kind == "op" and k.startswith("[")))
    return good / tot


def choose_structure(before: DiagnosisResult, after: DiagnosisResult, by: str = "auto") -> str:
    if by != "auto":
        return by
    for kind in ("layer", "op"):
        if _coverage(before, kind) >= 0.5 and _coverage(after, kind) >= 0.5:
            return kind
    return "class"


def decompose(
    r: DiagnosisResult, kind: str, per_second: bool = False
) -> tuple[dict[tuple[str, str], int], int]:
    """Per-step contributors of one side and its mean step time (integer ns); with
    ``per_second`` (a time slice), per second of the capture instead (they sum to 1 s)."""
    b = r.rollups.get("step_basis")
    if not b:
        return {}, 0
    parts: dict[tuple[str, str], int] = {}
    for name, v in _structure(r, kind).items():
        parts[(kind, name)] = int(v)
    overlap = int(b["compute_ns"]) - int(b["compute_kernel_sum_ns"])
    parts[("concurrency", "compute overlap across streams")] = overlap
    parts[("comm", "exposed communication")] = int(b["comm_exposed_ns"])
    parts[("memcpy", "exposed memcpy")] = int(b["memcpy_exposed_ns"])
    parts[("memset", "exposed memset")] = int(b["memset_exposed_ns"])
    for k, v in (b.get("idle_split_ns") or {}).items():
        parts[("idle", f"GPU idle: {k.replace('_', ' ')}")] = int(v)
    total = int(b["wall_ns"])
    assert sum(parts.values()) == total, "step basis does not add up"
    if per_second:
        if not total:
            return {k: 0 for k in parts}, 0
        per = _per_step({k: v * 10**9 for k, v in parts.items()}, total, total * 10**9)
        return per, sum(per.values())
    per = _per_step(parts, int(b["windows"]), total)
    return per, sum(per.values())


def _side(r: DiagnosisResult, label: str) -> dict[str, Any]:
    t = r.trace
    return {
        "label": label,
        "sources": [s["name"] for s in t.get("sources", [])],
        "devices": t.get("devices", []),
        "device": t.get("device"),
        "vendor": t.get("vendor"),
        "ranks": len(t.get("ranks", [])),
        "world_size": t.get("world_size"),
        "headline": r.headline,
    }


#: an instance number of a module path part (``Qwen2Attention_23``)
_INSTANCE = re.compile(r"_\d+$")


def module_type_path(path: str) -> str:
    """A module path without its instance numbers: ``Qwen2Model_0/Qwen2DecoderLayer_3/
    Qwen2Attention_3`` -> ``Qwen2Model/Qwen2DecoderLayer/Qwen2Attention``."""
    return "/".join(_INSTANCE.sub("", p) for p in path.split("/"))


def group_instances(contributors: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Layer contributors that are instances of one module at one place in the tree (the same
    path but for the instance numbers) as one contributor, ``Qwen2Attention ×24``: its times
    the sums of the instances' (so the contributors still add up exactly), ``instances`` how
    many, ``paths`` which (by name); a path with no sibling instance is kept as it is. The
    name is the module type, with as many parent types as tell two groups apart."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for c in contributors:
        if c["kind"] == "layer" and not c["name"].startswith("["):
            groups.setdefault(module_type_path(c["name"]), []).append(c)
    multi = sorted(k for k, v in groups.items() if len(v) > 1)
    if not multi:
        return contributors
    every = sorted(groups)  # a group is named apart from single paths of its type too
    names = dict(zip(every, distinct_labels(every)))
    out = [
        c
        for c in contributors
        if not (c["kind"] == "layer" and groups.get(module_type_path(c["name"]), [c]) != [c])
    ]
    for key in multi:
        members = groups[key]
        status = {m["status"] for m in members}
        out.append(
            {
                "kind": "layer",
                "name": f"{names[key]} ×{len(members)}",
                "before_ns": sum(m["before_ns"] for m in members),
                "after_ns": sum(m["after_ns"] for m in members),
                "delta_ns": sum(m["delta_ns"] for m in members),
                "status": status.pop() if len(status) == 1 else "paired",
                "instances": len(members),
                "module_type_path": key,
                "paths": sorted(m["name"] for m in members)[:MAX_GROUP_PATHS],
            }
        )
    return out


#: instance paths a grouped contributor lists
MAX_GROUP_PATHS = 64


def _step_stats(r: DiagnosisResult) -> dict[str, float | None]:
    """One side's step statistics, all over the same steps: the representative step windows
    (the diagnosis' p50 / p90 / p99 / max and the step basis' mean, which the contributors
    decompose), so the mean is never above the max."""
    v = r.metrics.get("values", {})
    b = r.rollups.get("step_basis") or {}
    mean = b["wall_ns"] / b["windows"] if b.get("windows") else None
    return {
        "steps_representative": v.get("steps_representative"),
        "p50": v.get("step_time_p50_ns"),
        "p90": v.get("step_time_p90_ns"),
        "p99": v.get("step_time_p99_ns"),
        "max": v.get("step_time_max_ns"),
        "mean": mean,
        "steps": v.get("steps"),
        "cv_pct": v.get("step_time_cv_pct"),
    }


#: one run's step statistics (the Python API shows them for a single diagnosis too)
step_stats = _step_stats


def _delta(a: float | None, b: float | None) -> dict[str, float | None]:
    if a is None or b is None:
        return {"delta": None, "delta_pct": None}
    return {"delta": b - a, "delta_pct": 100.0 * (b - a) / a if a else None}


def _table(before: dict[str, float], after: dict[str, float], key: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for name in set(before) | set(after):
        a, b = before.get(name), after.get(name)
        status = "new" if a is None else ("gone" if b is None else "same")
        a0, b0 = a or 0, b or 0
        rows.append(
            {
                key: name,
                "before_ns": a0,
                "after_ns": b0,
                "delta_ns": b0 - a0,
                "delta_pct": 100.0 * (b0 - a0) / a0 if a0 else None,
                "status": status,
            }
        )
    rows.sort(key=lambda x: (-abs(x["delta_ns"]), str(x[key])))
    return rows


def _per_step_map(r: DiagnosisResult, kind: str) -> dict[str, float]:
    b = r.rollups.get("step_basis") or {}
    w = b.get("windows") or 1
    return {k: v / w for k, v in _structure(r, kind).items()}


def _names(rows: list[dict[str, Any]], key: str) -> set[str]:
    return {str(x[key]) for x in rows if x.get(key) and not str(x[key]).startswith("[")}


def _findings(before: DiagnosisResult, after: DiagnosisResult) -> dict[str, Any]:
    a = {f.rule: f for f in before.findings}
    b = {f.rule: f for f in after.findings}

    def brief(f) -> dict[str, Any]:
        return {
            "rule": f.rule,
            "severity": f.severity,
            "title": f.title,
            "impact_pct": f.impact_pct,
            "message": f.message,
        }

    changed = []
    same = []
    for rule in sorted(set(a) & set(b)):
        impacts = {"impact_before_pct": a[rule].impact_pct, "impact_after_pct": b[rule].impact_pct}
        if a[rule].severity != b[rule].severity:
            worse = SEVERITY_RANK[b[rule].severity] < SEVERITY_RANK[a[rule].severity]
            direction = "worse" if worse else "better"
            changed.append(
                {
                    "rule": rule,
                    "before": a[rule].severity,
                    "after": b[rule].severity,
                    "direction": direction,
                    "title": b[rule].title,
                    **impacts,
                }
            )
        else:
            same.append({"rule": rule, "severity": b[rule].severity, **impacts})
    return {
        "appeared": [brief(b[r]) for r in sorted(set(b) - set(a))],
        "disappeared": [brief(a[r]) for r in sorted(set(a) - set(b))],
        "changed": changed,
        "unchanged": same,
    }


def compare(
    before: DiagnosisResult,
    after: DiagnosisResult,
    *,
    by: str = "auto",
    labels: tuple[str, str] = ("before", "after"),
    tokens: tuple[float | None, float | None] = (None, None),
) -> dict[str, Any]:
    """Explain the change of step time from ``before`` to ``after`` (the compare JSON, see
    docs/RESULT.md). ``tokens`` (tokens per step of each side) override what the results
    recorded; they allow a per-token comparison where the work per step differs."""
    kind = choose_structure(before, after, by)
    diags = []
    for side, r in (("before", before), ("after", after)):
        if not r.rollups.get("step_basis"):
            diags.append(
                {
                    "severity": "warning",
                    "message": f"{side}: no GPU step windows, nothing to decompose",
                }
            )
        if not r.trace.get("has_step_markers"):
            diags.append(
                {
                    "severity": "info",
                    "message": f"{side}: no ProfilerStep markers; "
                    "its 'step' is the whole GPU span of the trace",
                }
            )
    # a time slice on a side: every part per second of the capture, never per "step"
    slices = any(r.trace.get("has_step_markers") is False for r in (before, after))
    pa, ta = decompose(before, kind, per_second=slices)
    pb, tb = decompose(after, kind, per_second=slices)
    contributors: list[dict[str, Any]] = []
    for key in sorted(set(pa) | set(pb)):
        a, b = pa.get(key, 0), pb.get(key, 0)
        if a == 0 and b == 0:
            continue
        status = "paired" if key in pa and key in pb else ("removed" if key in pa else "added")
        contributors.append(
            {
                "kind": key[0],
                "name": key[1],
                "before_ns": a,
                "after_ns": b,
                "delta_ns": b - a,
                "status": status,
            }
        )
    contributors = group_instances(contributors)
    contributors.sort(key=lambda c: (-abs(c["delta_ns"]), c["kind"], c["name"]))
    total = tb - ta
    assert sum(c["delta_ns"] for c in contributors) == total
    for c in contributors:  # signed like the contributor, of the size of the whole change
        c["share_pct"] = 100.0 * c["delta_ns"] / abs(total) if total else None
    sa, sb = _step_stats(before), _step_stats(after)
    p50 = _delta(sa["p50"], sb["p50"])
    mean = _delta(sa["mean"], sb["mean"])
    thr = None
    ref_a = sa["mean"] or sa["p50"]
    ref_b = sb["mean"] or sb["p50"]
    if ref_a and ref_b:
        thr = {
            "before_steps_per_s": 1e9 / ref_a,
            "after_steps_per_s": 1e9 / ref_b,
            "ratio": ref_a / ref_b,
            "delta_pct": 100.0 * (ref_a / ref_b - 1.0),
        }
    # the statistic the headline leads with: the mean the contributors decompose
    ref = "mean" if sa["mean"] and sb["mean"] else "p50"
    comp = comparability.assess(before, after, ref_a=sa[ref], ref_b=sb[ref], ref=ref, tokens=tokens)
    if any(d["what"] == "module tree" for d in comp["differences"]):
        comp["pairing"] = comparability.pairing(
            _structure(before, "layer"), _structure(after, "layer"), NO_MODULE
        )
    bd = []
    for part in ("compute", "comm exposed", "memcpy exposed", "memset exposed", "idle"):
        col = part.replace(" ", "_") + "_ns"
        col = "comm_exposed_ns" if part == "comm exposed" else col
        va = _basis_per_step(before, col, slices)
        vb = _basis_per_step(after, col, slices)
        bd.append(
            {
                "part": part,
                "before_ns": va,
                "after_ns": vb,
                "delta_ns": None if va is None or vb is None else vb - va,
            }
        )
    kern_a = _names(before.rollups.get("kernels", []), "name")
    kern_b = _names(after.rollups.get("kernels", []), "name")
    ops_a = _names(before.rollups.get("ops", []), "name")
    ops_b = _names(after.rollups.get("ops", []), "name")
    out = {
        "schema": COMPARE_SCHEMA,
        "version": COMPARE_VERSION,
        "tool": {"name": "traceinsight", "version": __version__},
        "before": _side(before, labels[0]),
        "after": _side(after, labels[1]),
        "comparability": comp,
        "explained_by": kind,
        "per": "second" if slices else "step",
        "step_time": {
            "before": sa,
            "after": sb,
            "p50_delta_ns": p50["delta"],
            "p50_delta_pct": p50["delta_pct"],
            "mean_delta_ns": mean["delta"],
            "mean_delta_pct": mean["delta_pct"],
            "statistic": ref,
        },
        "throughput": thr,
        "total_delta_ns": total,
        "before_step_ns": ta,
        "after_step_ns": tb,
        "contributors": contributors,
        "breakdown": bd,
        "layers": _table(_per_step_map(before, "layer"), _per_step_map(after, "layer"), "name"),
        "ops": _table(_per_step_map(before, "op"), _per_step_map(after, "op"), "name"),
        "kernel_classes": _table(
            _per_step_map(before, "class"), _per_step_map(after, "class"), "name"
        ),
        "new_kernels": sorted(kern_b - kern_a)[:200],
        "gone_kernels": sorted(kern_a - kern_b)[:200],
        "new_ops": sorted(ops_b - ops_a)[:200],
        "gone_ops": sorted(ops_a - ops_b)[:200],
        "findings": _findings(before, after),
        "diagnostics": diags,
        "notes": contributor_notes(contributors),
    }
    from traceinsight.compare.serving import compare_serving

    per_token = compare_serving(before, after)
    if per_token is not None:  # only serving traces carry it
        out["serving"] = per_token
    out["headline"] = compare_headline(out)
    return out


def _basis_per_step(r: DiagnosisResult, key: str, per_second: bool = False) -> float | None:
    b = r.rollups.get("step_basis")
    if not b or not b.get("windows"):
        return None
    if per_second:
        return 1e9 * b[key] / b["wall_ns"] if b.get("wall_ns") else None
    return b[key] / b["windows"]


def _slice_lead(c: dict[str, Any]) -> str:
    """The headline of a compare with a time slice: the rate both sides support, never a
    change of step time, and how to mark steps."""
    norm = (c.get("comparability") or {}).get("normalised") or {}
    if norm.get("by") == "unit" and norm.get("delta_pct") is not None:
        pct = norm["delta_pct"]
        word = "unchanged" if abs(pct) < 1.0 else f"{abs(pct):.1f}% {'more' if pct > 0 else 'less'}"
        lead = (
            f"Compared per unit of work, not per step: {norm['unit']} is {word} "
            f"({fmt.fmt_ns(norm['before'])} → {fmt.fmt_ns(norm['after'])})"
        )
    elif norm.get("by") == "second":
        lead = (
            "Compared per second of capture, not per step: GPU kernel time "
            f"{fmt.fmt_ns(norm['before'])} → {fmt.fmt_ns(norm['after'])} per second (how busy "
            "the GPU was, not how fast the code is)"
        )
    else:
        lead = "No step time to compare on a time slice"
    hint = next(
        (
            s.get("hint")
            for s in ((c.get("comparability") or {}).get(k) or {} for k in ("before", "after"))
            if s.get("has_step_markers") is False and s.get("hint")
        ),
        None,
    )
    return lead + (f"; to compare step times, {hint}" if hint else "")


def headline_statistic(st: dict[str, Any]) -> str:
    """The step-time statistic a compare leads with: the mean of the representative steps
    (the one the contributors decompose), else the p50 (a result without a step basis)."""
    if st.get("statistic") in ("mean", "p50"):
        return str(st["statistic"])
    return "mean" if st.get("mean_delta_pct") is not None else "p50"


def compare_headline(c: dict[str, Any]) -> str:
    """One paragraph: whether the runs can be compared (``Not comparable: ...`` /
    ``Caution: ...``), the change of step time (normalised where the work differs) and, for a
    valid comparison, its largest contributors."""
    comp = c.get("comparability")
    prefix = comparability.headline_prefix(comp)
    valid = bool(comp is None or comp.get("comparable"))
    if c.get("per") == "second":
        return prefix + _slice_lead(c) + "."
    st = c["step_time"]
    ref = headline_statistic(st)
    pct = st["p50_delta_pct"] if ref == "p50" else st["mean_delta_pct"]
    a = st["before"][ref]
    b = st["after"][ref]
    if pct is None or a is None or b is None:
        return prefix + (
            "The runs cannot be compared by step time (no GPU step windows on one side)."
        )
    word = "slower" if pct > 0 else "faster"
    who = "After" if valid else "Measured anyway, after"
    if abs(pct) < 1.0:
        lead = (
            f"{'Step time' if valid else 'Measured anyway, step time'} is unchanged "
            f"({ref} {fmt.fmt_ns(a)} → {fmt.fmt_ns(b)}, {pct:+.1f}%)"
        )
    else:
        lead = f"{who} is {abs(pct):.1f}% {word} per step ({ref} {fmt.fmt_ns(a)} → {fmt.fmt_ns(b)})"
    norm = (comp or {}).get("normalised")
    if norm:
        npct = norm["delta_pct"]
        nword = (
            "unchanged"
            if abs(npct) < 1.0
            else (f"{abs(npct):.1f}% {'slower' if npct > 0 else 'faster'}")
        )
        lead += f"; per {'modelled FLOP' if norm['by'] == 'flop' else 'token'} it is {nword}"
        if norm["by"] == "token":
            lead += f" ({fmt.fmt_ns(norm['before'])} → {fmt.fmt_ns(norm['after'])} per token)"
        else:
            lead += (
                f" ({fmt.fmt_rate(norm['before_tflops'] * 1e12, 'FLOP/s')} → "
                f"{fmt.fmt_rate(norm['after_tflops'] * 1e12, 'FLOP/s')} modelled)"
            )
    tops = [x for x in c["contributors"] if x["delta_ns"] != 0][:3]
    if tops and valid:
        parts = [f"{x['name']} {fmt.signed_ns(x['delta_ns'])}" for x in tops]
        lead += "; largest changes per step: " + ", ".join(parts)
    return prefix + lead + "."
