"""Run mode: training (backward or optimizer work recorded) or inference (forward only).

Training-only advice (optimizers, GradScaler, gradient synchronisation and accumulation,
FSDP/ZeRO, activation checkpointing) is conditional on ``is_training == 1`` in the rules, so a
forward-only run never receives it.

Evidence of training, in any CPU op or annotation of any rank:

* autograd backward work: ops named ``*Backward*`` (``MmBackward0``, legacy ``AddmmBackward``),
  ``autograd::engine::evaluate_function: ...``, ``torch::autograd::AccumulateGrad``;
* optimizer work: ``Optimizer.step#...`` / ``Optimizer.zero_grad#...`` ranges (and the
  lower-case ``optimizer.step`` ranges some frameworks record);
* a range (NVTX or record_function) of a backward pass (``backward``, autograd's names), and,
  where no framework op is recorded at all (an Nsight capture without emit_nvtx), kernels only
  a backward pass runs (``*_bwd_*``, ``*backward*``, ``dgrad`` / ``wgrad``).

``aten::_foreach_*`` alone is not evidence: inference code uses it too; after a backward pass it
is already counted as training by the backward ops. A trace without CPU ops (a GPU-only
capture) has no mode: ``is_training`` is missing, so training-only advice is not given either.
``--mode train|infer`` overrides the detection.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from traceinsight.analysis import Analysis
from traceinsight.metrics.options import RooflineOptions
from traceinsight.metrics.registry import MetricSet, declare

BACKWARD_RE = re.compile(r"Backward|^autograd::engine::evaluate_function|AccumulateGrad")
#: ranges (NVTX, record_function) of a backward pass: autograd's own, or a range named so
BACKWARD_RANGE_RE = re.compile(
    r"Backward|^autograd::engine::evaluate_function|AccumulateGrad|\bbackward\b", re.IGNORECASE
)
#: kernels only a backward pass runs (weight/data gradients, *_bwd_* attention kernels), the
#: evidence where no framework op is recorded
BACKWARD_KERNEL_RE = re.compile(r"_bwd_|_bwd\b|backward|\bdgrad|\bwgrad|_dgrad_|_wgrad_", re.I)
OPTIMIZER_RE = re.compile(r"^(?:Optimizer|optimizer)\.(?:step|zero_grad)")
MODES = {1.0: "training", 0.0: "inference"}

declare(
    "is_training",
    "bool",
    "1 when backward (autograd) or optimizer work is recorded, 0 for a forward-only run",
    needs="CPU ops in the trace",
    hint="record with ProfilerActivity.CPU, or pass --mode",
)


def compute(an: Analysis, ms: MetricSet, opts: RooflineOptions | None = None) -> None:
    if opts is not None and opts.mode in ("train", "infer"):
        flag = 1.0 if opts.mode == "train" else 0.0
        ms.set("is_training", flag)
        ms.evidence["run_mode"] = {"mode": MODES[flag], "how": f"--mode {opts.mode}"}
        return
    ops = an.attribution.ops
    names = _names(ops["name"] if len(ops) else pd.Series([], dtype=object))
    rng = an.store.table("ranges", ["name"]).to_pandas()
    rnames = _names(rng["name"])
    if not len(names) and not len(rnames):
        ms.set("is_training", None, why_missing="no CPU ops recorded (a GPU-only capture)")
        ms.evidence["run_mode"] = {"mode": "unknown", "how": "no CPU ops recorded"}
        return
    bwd = _count(names, BACKWARD_RE) + _count(rnames, BACKWARD_RANGE_RE)
    opt = _count(names, OPTIMIZER_RE) + _count(rnames, OPTIMIZER_RE)
    if not bwd and not opt and not any(str(n).startswith("aten::") for n in names):
        # no framework ops recorded (an Nsight capture without emit_nvtx): backward kernels
        g = an.attribution.gpu
        bwd = _count(_names(g["name"]) if len(g) else np.array([]), BACKWARD_KERNEL_RE)
    flag = 1.0 if bwd or opt else 0.0
    ms.set("is_training", flag)
    ms.evidence["run_mode"] = {
        "mode": MODES[flag],
        "backward_op_names": bwd,
        "optimizer_range_names": opt,
        "how": "backward or optimizer ops recorded"
        if flag
        else "no backward or optimizer ops in the trace (forward only)",
    }


def _names(s: pd.Series) -> np.ndarray:
    return s.dropna().astype(str).unique()


def _count(names: np.ndarray, rx: re.Pattern[str]) -> int:
    return int(sum(1 for n in names if rx.search(n)))


def mode_of(values: dict[str, float | None]) -> str | None:
    """train | infer (the words of ``--mode``) or None, for the result's ``trace.mode``."""
    v = values.get("is_training")
    return None if v is None else ("train" if v else "infer")
