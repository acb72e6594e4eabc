"""Analysis: attribution of GPU time and the time breakdown, computed once per store.

``Analysis(store)`` is the entry point; its parts are computed on first use and cached.
"""

from __future__ import annotations

from functools import cached_property

import pandas as pd

from ..store import TraceStore
from .attribution import UNATTRIBUTED, Attribution, StepWindow, attribute
from .breakdown import Breakdown, WindowBreakdown, breakdown
from . import rollups

__all__ = ["Analysis", "Attribution", "Breakdown", "StepWindow", "WindowBreakdown",
           "UNATTRIBUTED"]

ROLLUPS = ("kernel", "op", "layer", "annotation", "step")


class Analysis:
    def __init__(self, store: TraceStore) -> None:
        self.store = store
        self.cache: dict = {}  #: results shared between metric groups

    @cached_property
    def attribution(self) -> Attribution:
        return attribute(self.store)

    @cached_property
    def breakdown(self) -> Breakdown:
        return breakdown(self.attribution)

    def rollup(self, by: str, rank: int | None = None) -> pd.DataFrame:
        if by == "kernel":
            return rollups.by_kernel(self.attribution, rank)
        if by == "op":
            return rollups.by_op(self.attribution, rank)
        if by == "layer":
            return rollups.by_layer(self.attribution, rank)
        if by == "annotation":
            return rollups.by_annotation(self.attribution, rank)
        if by == "step":
            return rollups.by_step(self.breakdown, rank)
        raise ValueError(f"unknown rollup {by!r}; one of {', '.join(ROLLUPS)}")
