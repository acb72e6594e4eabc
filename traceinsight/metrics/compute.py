"""Runs every metric group over an :class:`Analysis`; a group that fails is recorded, not fatal."""

from __future__ import annotations

import traceback

from ..analysis import Analysis
from . import MetricSet
from .options import RooflineOptions


def compute_metrics(an: Analysis, options: RooflineOptions | None = None) -> MetricSet:
    from . import comm, copies, memory, mode, precision, roofline, timing

    ms = MetricSet()

    def _roofline() -> None:
        roofline.compute(an, ms, options or RooflineOptions())

    groups = (
        ("mode", lambda: mode.compute(an, ms, options)),
        ("timing", lambda: timing.compute(an, ms)),
        ("memory", lambda: memory.compute(an, ms)),
        ("copies", lambda: copies.compute(an, ms)),
        ("communication", lambda: comm.compute(an, ms)),
        ("roofline", _roofline),
        ("precision", lambda: precision.compute(an, ms, options)),
    )
    errors = []
    for name, fn in groups:
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - one broken group must not hide the others
            errors.append({"group": name, "error": f"{type(e).__name__}: {e}",
                           "traceback": traceback.format_exc(limit=6)})
    ms.evidence["metric_errors"] = errors
    return ms
