"""Analysis: attribution of GPU time and the time breakdown, computed once per store.

``Analysis(store)`` is the entry point; its parts are computed on first use and cached.
"""

from __future__ import annotations

import contextlib
from functools import cached_property, wraps

import pandas as pd

from traceinsight.analysis import rollups
from traceinsight.analysis.attribution import Attribution, StepWindow
from traceinsight.analysis.breakdown import Breakdown, WindowBreakdown, breakdown
from traceinsight.store.core import TraceStore
from traceinsight.util.vocab import UNATTRIBUTED

__all__ = [
    "UNATTRIBUTED",
    "WHOLE_STEPS",
    "Analysis",
    "Attribution",
    "Breakdown",
    "StepWindow",
    "WindowBreakdown",
]

#: ``Analysis.cache`` key of a store analysed in step chunks: every step's merged breakdown and
#: figures (``diagnose.chunks.Merged``), which the metrics of GPU time and kernels read
WHOLE_STEPS = "whole_steps"

ROLLUPS = (
    "kernel",
    "op",
    "shape",
    "layer",
    "module-type",
    "annotation",
    "step",
    "api",
    "memcpy",
)


@contextlib.contextmanager
def plain_strings():
    """Analysis runs with NumPy object strings: pandas 3's Arrow-backed string columns make
    the many row selections of the analysis ~25% slower (measured on the 320 MB benchmark).
    The option is deprecated in pandas 3 and gone in 4, where this does nothing."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            ctx = pd.option_context("future.infer_string", False)
            ctx.__enter__()
        except (KeyError, pd.errors.OptionError):  # pragma: no cover - pandas < 2.1 or >= 4
            ctx = None
    try:
        yield
    finally:
        if ctx is not None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ctx.__exit__(None, None, None)


def with_plain_strings(fn):
    @wraps(fn)
    def inner(*a, **kw):
        with plain_strings():
            return fn(*a, **kw)

    return inner


class Analysis:
    def __init__(self, store: TraceStore) -> None:
        self.store = store
        self.cache: dict = {}  #: results shared between metric groups

    @cached_property
    def attribution(self) -> Attribution:
        from traceinsight.analysis.attribution import attribute_with_products

        with plain_strings():
            attr, products = attribute_with_products(self.store)
        for k, v in products.items():  # per-rank results the partitions' workers computed
            self.cache.setdefault(k, v)
        return attr

    @cached_property
    def breakdown(self) -> Breakdown:
        attr = self.attribution  # (fills the cache with the partitions' products)
        joined = self.cache.pop("breakdown", None)  # the rank partitions' own, joined
        if joined is not None:
            return joined
        with plain_strings():
            return breakdown(attr)

    @with_plain_strings
    def has_gpu_activities(self, rank: int | None = None) -> bool:
        """Whether the trace (or ``rank``) holds any GPU kernel, copy or memset."""
        from traceinsight.analysis import by_rank

        g = self.attribution.gpu
        return bool(len(g if rank is None else by_rank.rows(g, rank)))

    def activity(self, rank: int | None = None) -> dict[str, tuple[int, int]]:
        """The count and total time (ns) of the GPU kernels (``kernel``) and of the copies and
        memsets (``other``) of the trace or of ``rank``."""
        from traceinsight.analysis import by_rank

        g = self.attribution.gpu
        g = g if rank is None else by_rank.rows(g, rank)
        is_k = (g["kind"] == "kernel").to_numpy()
        dur = g["dur_ns"].to_numpy()
        return {
            "kernel": (int(is_k.sum()), int(dur[is_k].sum())),
            "other": (int((~is_k).sum()), int(dur[~is_k].sum())),
        }

    def rollup(self, by: str, rank: int | None = None) -> pd.DataFrame:
        if by == "kernel":
            return rollups.by_kernel(self.attribution, rank)
        if by == "op":
            return rollups.by_op(self.attribution, rank)
        if by == "shape":
            from traceinsight.analysis.op_shapes import ops_by_shape

            res = ops_by_shape(self, top=1 << 62, rank=rank)
            return pd.DataFrame((res or {}).get("rows") or [])
        if by == "layer":
            return rollups.by_layer(self.attribution, rank)
        if by == "module-type":
            return rollups.by_module_type(self.attribution, rank)
        if by == "annotation":
            return rollups.by_annotation(self.attribution, rank)
        if by == "step":
            return rollups.by_step(self.breakdown, rank)
        if by == "api":
            return rollups.by_api(
                self.store.df("runtime_calls", ["rank", "kind", "name", "dur_ns"]), rank
            )
        if by == "memcpy":
            cols = ["rank", "kind", "dur_ns", "bytes", "copy_kind"]
            return rollups.by_memcpy(self.store.df("gpu_activities", cols), rank)
        raise ValueError(f"unknown rollup {by!r}; one of {', '.join(ROLLUPS)}")
