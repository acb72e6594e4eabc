"""Options that change what metrics measure (device overrides, model size).

A module of its own, free of the analysis stack: the command line builds these options and
keys a cached diagnosis by them before anything heavy is imported (``metrics.options``
re-exports the class for the metric code)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class RooflineOptions:
    device: str | None = None  #: a key of the device table, overriding deviceProperties
    peak_tflops: float | None = None  #: dense bf16/fp16 peak, TFLOP/s
    peak_bw_gbs: float | None = None  #: memory bandwidth, GB/s
    params: float | None = None  #: model parameters, for the 6·N·tokens MFU estimate
    tokens_per_step: float | None = None  #: tokens per step over all ranks
    mode: str | None = None  #: train | infer (default: train when backward kernels exist)
