"""Run mode: whether the window runs forward+backward work, and the ``run`` facts.

``is_training`` is 1 when the trace shows a backward pass or an optimizer: backward ops
(``*Backward*``, ``autograd::engine::evaluate_function: ...``, ``AccumulateGrad``), optimizer
ranges (``Optimizer.step#...``), or the markers of sharded training whose forward half runs
no backward op yet (``FSDP::pre_forward``, ``RegisterPostBackwardFunction``, DeepSpeed and
Megatron training frames); in a GPU-only capture (no CPU ops), backward kernels
(``*_backward*``, ``wgrad``/``dgrad``, ``bn_bw``). It decides the MFU formula (6·N·tokens for
forward+backward, 2·N·tokens for forward only), so a forward+backward benchmark counts as 1.

The run's *mode* (training / inference / benchmark) is a run fact
(:mod:`traceinsight.analysis.run_facts`): a forward+backward measurement without an optimizer
step, or a benchmark harness, is ``benchmark``, not training; training-only advice is
conditional on ``mode: training`` in the rules. ``aten::_foreach_*`` alone is no evidence
(inference code uses it too). ``--mode train|infer`` overrides both.
"""

from __future__ import annotations

from traceinsight.analysis import Analysis, run_facts
from traceinsight.metrics.options import RooflineOptions
from traceinsight.metrics.registry import MetricSet, declare
from traceinsight.util import capture_hints

MODES = {1.0: "training", 0.0: "inference"}

declare(
    "is_training",
    "bool",
    "1 when backward (autograd), optimizer or sharded-training work is recorded (the MFU "
    "formula counts forward+backward), 0 for a forward-only run",
    needs="CPU ops in the trace, or backward kernels in a GPU-only capture",
    setting=capture_hints.CPU,
)
declare(
    "program_pytorch",
    "bool",
    "1 when the program is known to use PyTorch (a PyTorch profiler trace or memory file, or "
    "PyTorch ops or a PyTorch framework in an Nsight capture), 0 otherwise: advice naming "
    "PyTorch APIs is given only at 1",
)


def capture_of(an: Analysis) -> capture_hints.Capture:
    """The input's tool and whether the program uses PyTorch (the run facts' engine)."""
    fmts = [str(r.get("format") or "") for r in an.store.ranks] or [
        str(an.store.meta.get("format") or "")
    ]
    fmt = str(an.store.meta.get("format") or "")
    engine = run_facts.engine_fact(run_facts.read_names(an), fmt).value
    return capture_hints.Capture.of(fmts, str(engine))


def compute(an: Analysis, ms: MetricSet, opts: RooflineOptions | None = None) -> None:
    cap = capture_of(an)
    ms.evidence["capture"] = cap.to_dict()  # how hints and advice are phrased for this input
    ms.set("program_pytorch", 1.0 if cap.torch else 0.0)
    flags = [r.get("capture_flags") or {} for r in an.store.ranks]
    ms.evidence["capture_flags"] = {  # a setting every rank's capture says it recorded
        k: True
        for k in ("profile_memory", "record_shapes", "with_stack")
        if flags and all(f.get(k) is True for f in flags)
    }
    if opts is not None and opts.mode in ("train", "infer"):
        flag = 1.0 if opts.mode == "train" else 0.0
        ms.set("is_training", flag)
        ms.evidence["run_mode"] = {"mode": MODES[flag], "how": f"--mode {opts.mode}"}
        return
    names = run_facts.read_names(an)
    fact = run_facts.mode_fact(names)
    if fact.value == run_facts.UNKNOWN:
        ms.set("is_training", None, why_missing="no CPU ops recorded (a GPU-only capture)")
        ms.evidence["run_mode"] = {"mode": "unknown", "how": fact.evidence}
        return
    flag = 1.0 if run_facts.runs_backward(names) else 0.0
    ms.set("is_training", flag)
    ms.evidence["run_mode"] = {
        "mode": MODES[flag],
        "how": fact.evidence,
    }


def compute_facts(an: Analysis, ms: MetricSet, opts: RooflineOptions | None = None) -> None:
    """The run facts (after the precision group: they read its dtype split) into
    ``ms.evidence["run"]`` (each fact as a dict) and ``ms.evidence["run_values"]`` (the dotted
    names the rule conditions read)."""
    dev = ms.evidence.get("device") or {}
    facts = run_facts.compute(
        an, ms.evidence.get("matrix_dtypes"), dev.get("resolved") or dev.get("name")
    )
    if opts is not None and opts.mode in ("train", "infer"):
        word = "training" if opts.mode == "train" else "inference"
        facts["mode"] = run_facts.Fact(word, f"--mode {opts.mode}")
    ms.evidence["run"] = {k: f.to_dict() for k, f in facts.items()}
    ms.evidence["run_values"] = run_facts.flat_values(facts)


def mode_of(values: dict[str, float | None]) -> str | None:
    """train | infer (the words of ``--mode``) or None, for the result's ``trace.mode``."""
    v = values.get("is_training")
    return None if v is None else ("train" if v else "infer")
