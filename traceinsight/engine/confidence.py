"""What a finding rests on, and the confidence that follows: for every finding.

``confidence`` of a finding (docs/RESULT.md) always holds ``level`` (high | medium | low),
``rests_on`` (the representative steps and the ranks its metrics come from, and, for a metric
resting on modelled work, the share of kernel time modelled) and ``reasons`` (what lowers the
level); rules with a stated confidence metric keep ``metric`` / ``value`` / ``min_for_*`` and
``capped`` as before. The level never changes the severity (the engine's caps do that, and say
so in ``capped``); it tells the reader how far to trust the numbers:

- ``low``: fewer than ``MIN_STEPS_MEDIUM`` representative steps, or the work it rests on is
  under ``MIN_MODELLED_MEDIUM`` % modelled, or the severity was capped;
- ``medium``: fewer than ``MIN_STEPS_HIGH`` steps, or under ``MIN_MODELLED_HIGH`` % modelled;
- ``high``: otherwise.
"""

from __future__ import annotations

from typing import Any

from traceinsight.metrics import REGISTRY
from traceinsight.util import fmt

MIN_STEPS_HIGH = 5
MIN_STEPS_MEDIUM = 3
MIN_MODELLED_HIGH = 80.0
MIN_MODELLED_MEDIUM = 50.0
LEVELS = ("high", "medium", "low")
#: how a coverage metric's share reads in a sentence
COVERAGE_WHAT = {
    "flops_modelled_pct": "of kernel time modelled",
    "matrix_dtype_known_pct": "of matrix-kernel time with a known dtype",
}


def rests_on(metrics: list[str], values: dict[str, float | None]) -> dict[str, Any]:
    """The steps, ranks and modelled coverage the finding's metrics rest on."""
    out: dict[str, Any] = {}
    steps = values.get("steps_representative")
    if values.get("steps"):
        out["steps"] = int(steps or 0)
    ranks = values.get("ranks_analysed")
    if ranks:
        out["ranks"] = int(ranks)
    covs = sorted(
        {str(REGISTRY[m].coverage) for m in metrics if m in REGISTRY and REGISTRY[m].coverage}
    )
    for c in covs:
        v = values.get(c)
        if v is not None and float(v) <= out.get("modelled_pct", 100.0):
            out["modelled_pct"] = float(v)
            out["modelled_metric"] = c
            out["modelled_what"] = COVERAGE_WHAT.get(c, "of the work it rests on modelled")
    return out


def assess(
    metrics: list[str], values: dict[str, float | None], capped: str | None
) -> dict[str, Any]:
    """``level``, ``rests_on`` and ``reasons`` of one finding."""
    on = rests_on(metrics, values)
    lv, reasons = 0, []

    def lower(to: int, why: str) -> None:
        nonlocal lv
        lv = max(lv, to)
        reasons.append(why)

    steps = on.get("steps")
    if steps is not None and steps < MIN_STEPS_HIGH:
        lim = MIN_STEPS_MEDIUM if steps < MIN_STEPS_MEDIUM else MIN_STEPS_HIGH
        lower(2 if steps < MIN_STEPS_MEDIUM else 1, f"fewer than {lim} representative steps")
    cov = on.get("modelled_pct")
    if cov is not None and cov < MIN_MODELLED_HIGH:
        need = MIN_MODELLED_MEDIUM if cov < MIN_MODELLED_MEDIUM else MIN_MODELLED_HIGH
        lower(
            2 if cov < MIN_MODELLED_MEDIUM else 1,
            f"under {fmt.fmt_pct(need, 0)} {on.get('modelled_what', 'modelled')}",
        )
    if capped:
        lower(2, "severity capped")
    return {"level": LEVELS[lv], "rests_on": on, "reasons": reasons}
