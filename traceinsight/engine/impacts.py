"""One story per cause: findings that explain the same time share it, and the impacts of a
diagnosis never add up to more than the step.

A finding's impact is an estimate (``method: "estimate"``): its rule's impact metric, a share of
step time, times the rule's factor. Two adjustments, after every rule was evaluated:

1. **Shared time.** A rule may declare ``impact: {..., less: [rule ids]}``: time those rules
   own when they fire. Its impact is then ``factor x (metric - the owners' impact metrics)``:
   gpu-idle keeps the idle time that host-stall, launch-bound, input-bound and host-sync do not
   explain; comm-bound keeps the exposed communication the straggler's waiting does not. The
   finding lists the owners and says so in its message.
2. **At most the step.** In the finding order (largest impact first), each impact is capped
   at what the ones before it leave of 100%; a capped finding records its uncapped estimate.

Each finding gets ``impact``: ``pct`` (= ``impact_pct``), ``ns`` (pct of the median step, when
measured), ``method``, ``basis`` (the formula), ``shared_with`` (owner rule, the step share it
owns) and ``uncapped_pct`` when the cap applied. A later what-if model can replace ``pct`` and
``ns`` with simulated figures and set ``method`` accordingly.
"""

from __future__ import annotations

from typing import Any

from traceinsight.result import Finding, finding_sort_key
from traceinsight.util import fmt

__all__ = ["share_impacts"]

#: the most all impacts of a diagnosis may add up to, % of step time
STEP_PCT = 100.0


def share_impacts(findings: list[Finding], rules: list[Any], values: dict[str, Any]) -> None:
    """Apply shared time and the step cap to ``findings`` in place (see the module doc)."""
    by_id = {r.id: r for r in rules}
    fired = {f.rule: f for f in findings}
    step_ns = values.get("step_time_p50_ns")
    for f in findings:
        rule = by_id.get(f.rule)
        if rule is None or not rule.impact or f.impact_pct is None:
            continue
        imp = rule.impact
        factor = float(imp.get("factor", 1.0))
        x = float(values.get(imp["metric"]) or 0.0)
        shared = []
        for owner in imp.get("less") or []:
            o = fired.get(owner)
            orule = by_id.get(owner)
            if o is None or o is f or orule is None or not orule.impact:
                continue
            owned = min(x, float(values.get(orule.impact["metric"]) or 0.0))
            if owned > 0:
                shared.append({"rule": owner, "pct": round(owned, 2)})
                x -= owned
        basis = f"{imp['metric']} x {factor:g}"
        if shared:
            basis = (
                f"({imp['metric']} - "
                + " - ".join(f"{by_id[s['rule']].impact['metric']}" for s in shared)
                + f") x {factor:g}"
            )
            pct = round(max(0.0, min(float(imp.get("max", STEP_PCT)), x * factor)), 2)
            f.message += (
                f" Part of this time, {fmt.fmt_pct(sum(s['pct'] for s in shared))} of step "
                f"time, is explained by {', '.join(s['rule'] for s in shared)} and counted "
                "there; the impact counts only the rest."
            )
            f.impact_pct = pct
        f.impact = {
            "pct": f.impact_pct,
            "method": "estimate",
            "basis": basis,
            "shared_with": shared,
        }
    left = STEP_PCT
    for f in sorted(findings, key=finding_sort_key):
        if f.impact_pct is None:
            continue
        if f.impact_pct > left:
            if f.impact is not None:
                f.impact["uncapped_pct"] = f.impact_pct
            f.impact_pct = round(max(0.0, left), 2)
        left -= f.impact_pct
        if f.impact is not None:
            f.impact["pct"] = f.impact_pct
            f.impact["ns"] = round(f.impact_pct / 100.0 * float(step_ns)) if step_ns else None
