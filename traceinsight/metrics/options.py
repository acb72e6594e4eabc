"""Options that change what metrics measure (device overrides, model size): the class lives
in :mod:`traceinsight.options`, importable without the analysis stack."""

from __future__ import annotations

from traceinsight.options import RooflineOptions

__all__ = ["RooflineOptions"]
