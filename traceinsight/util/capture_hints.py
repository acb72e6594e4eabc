"""How to capture what a trace lacks, and how to open it, in the vocabulary of the input's tool.

Every text that tells the user to record something differently (a rule that could not be
evaluated, a data-quality note, a recommendation or headline that names a capture setting) or
where to open the trace is phrased here, once per setting and input tool:

- ``kineto``: the PyTorch profiler (``torch.profiler``), viewed in Perfetto;
- ``nsys``: Nsight Systems (``nsys profile`` options, NVTX ranges), viewed in Nsight Systems;
  for a program without PyTorch (a C/CUDA program, JAX) nothing names a PyTorch API;
- ``cuda-memory-snapshot`` / ``memory-timeline``: memory files, whose missing parts come from
  the profiler trace of the same run they can be diagnosed with.

A :class:`Capture` says which tool wrote the input and whether the program is known to use
PyTorch (the run facts: a Kineto trace always is; an Nsight capture only with PyTorch ops, NVTX
ranges or frames of a PyTorch framework). :func:`hint` gives the text for a setting, or None
where the setting does not apply to that input (no tensor shapes in an Nsight capture of a C
program).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

KINETO = "kineto"
NSYS = "nsys"
SNAPSHOT = "cuda-memory-snapshot"
TIMELINE = "memory-timeline"
MEMORY_TOOLS = (SNAPSHOT, TIMELINE)

#: the capture settings a hint can be about (a rule that could not be evaluated names one)
GPU = "gpu"  #: GPU activity: kernels, copies, memsets
CPU = "cpu"  #: host-side ops / API calls
STEPS = "steps"  #: one marker per iteration
MEMORY = "memory"  #: allocator events
SHAPES = "shapes"  #: tensor shapes and dtypes (FLOPs, matrix dtypes)
DEVICE = "device"  #: the GPU's peaks (a command-line option, not a capture setting)
RANKS = "ranks"  #: every rank of the job
WARM = "warm"  #: a window of steady-state iterations
TRACE = "trace"  #: a memory file alone: the profiler trace of the same run
MODULES = "modules"  #: the layer hierarchy (nn.Module paths, NVTX layer ranges)
STACK = "stack"  #: the call stack of each op
SETTINGS = (GPU, CPU, STEPS, MEMORY, SHAPES, DEVICE, RANKS, WARM, TRACE, MODULES, STACK)
#: settings whose rules are about GPU work: a run without GPU activity needs GPU activity first
GPU_SETTINGS = frozenset({GPU, SHAPES, DEVICE, MEMORY})

#: engines (run facts ``engine``) that are not PyTorch programs, and the unknown one
NOT_PYTORCH_ENGINES = frozenset({"cuda_program", "unknown", "", "none"})

#: words that only make sense to a PyTorch user: an Nsight capture of a program without
#: PyTorch gets no text naming them
PYTORCH_WORDS = re.compile(
    r"\btorch\b|torch\.|\bprof\.step\b|profile_memory|record_shapes|with_stack|with_modules|"
    r"ProfilerStep|ProfilerActivity|\bactivities=|DataLoader|num_workers|pin_memory|"
    r"non_blocking|\.clone\(\)|\.contiguous\(\)|\.to\(\)|\.copy_\(\)|\.item\(\)|\.cpu\(\)|"
    r"\.tolist\(\)|autocast|\bDDP\b|DistributedDataParallel|\bFSDP\b|fully_shard|"
    r"set_float32_matmul_precision|allow_tf32|channels_last|cudnn\.benchmark|"
    r"bucket_cap_mb|gradient_as_bucket_view|zero_grad|set_to_none|foreach=|fused=|"
    r"distributedInfo|deviceProperties|mode=\"reduce-overhead\"|TORCH_\w+|\bnn\.Module\b",
)


def names_pytorch(text: str | None) -> bool:
    """Whether a text names a PyTorch API, option or trace field."""
    return bool(text) and PYTORCH_WORDS.search(str(text)) is not None


def tool_of(formats: Iterable[str] | str | None) -> str:
    """The tool of an input from its reader formats (``trace.format``, comma-separated or a
    list): ``nsys`` when every trace is an Nsight export, a memory format when only memory
    files were read, else ``kineto``."""
    if isinstance(formats, str) or formats is None:
        formats = [f.strip() for f in str(formats or "").split(",")]
    fs = {f for f in formats if f}
    traces = fs - set(MEMORY_TOOLS)
    if traces:
        return NSYS if traces == {NSYS} else KINETO
    if SNAPSHOT in fs:
        return SNAPSHOT
    return TIMELINE if TIMELINE in fs else KINETO


@dataclass(frozen=True)
class Capture:
    """Which tool wrote the input, and whether the program is known to use PyTorch."""

    tool: str = KINETO
    torch: bool = True

    @classmethod
    def of(cls, formats: Iterable[str] | str | None, engine: str | None = None) -> Capture:
        """From the input's formats and the run facts' ``engine``: an Nsight capture is a
        PyTorch program only when the facts name PyTorch (its ops, a PyTorch framework)."""
        tool = tool_of(formats)
        torch = tool != NSYS or str(engine or "unknown") not in NOT_PYTORCH_ENGINES
        return cls(tool, torch)

    @classmethod
    def from_dict(cls, d: object) -> Capture:
        """From ``to_dict``'s form (a result's ``extra.capture``); a Kineto capture when absent."""
        if not isinstance(d, dict):
            return cls()
        return cls(str(d.get("tool") or KINETO), bool(d.get("torch", True)))

    def to_dict(self) -> dict[str, Any]:
        return {"tool": self.tool, "torch": self.torch}

    @property
    def memory_only(self) -> bool:
        return self.tool in MEMORY_TOOLS


NSYS_TRACE = "-t cuda,nvtx,osrt,cudnn,cublas"
_NVTX_TORCH = "torch.cuda.nvtx.range_push('step') / range_pop()"
_NVTX_C = 'nvtxRangePushA("step") / nvtxRangePop() (nvToolsExt / NVTX3)'
_PROFILER_TORCH = "torch.cuda.profiler.start() / stop()"
_PROFILER_C = "cudaProfilerStart() / cudaProfilerStop()"

_KINETO = {
    GPU: "record with activities=[CPU, CUDA] (ProfilerActivity.CUDA) on a GPU machine",
    CPU: "record with activities=[CPU, CUDA] (ProfilerActivity.CPU), or pass --mode",
    STEPS: "record with a torch.profiler.schedule(wait=..., warmup=..., active=...) and call "
    "prof.step() once per iteration, so every iteration is a ProfilerStep#N",
    MEMORY: "record with profile_memory=True",
    SHAPES: "record with record_shapes=True",
    RANKS: "pass the folder with every rank's trace",
    WARM: "profile steady-state steps (e.g. `schedule(wait=1, warmup=1, active=3)`)",
    MODULES: "record with with_stack=True and with_modules=True",
    STACK: "record with with_stack=True",
}


def _nsys(setting: str, torch: bool) -> str | None:
    nvtx = _NVTX_TORCH if torch else _NVTX_C
    start = _PROFILER_TORCH if torch else _PROFILER_C
    if setting == GPU:
        return f"record with `nsys profile {NSYS_TRACE}` on a GPU machine"
    if setting == CPU:
        return f"record with `nsys profile {NSYS_TRACE}` (the CUDA API calls), or pass --mode"
    if setting == STEPS:
        return (
            f"push an NVTX range around each iteration ({nvtx}) and record with "
            f"`nsys profile {NSYS_TRACE}`; or record a fixed window of iterations with "
            f"`--capture-range=cudaProfilerApi` ({start} around them) or "
            "`--capture-range=nvtx --nvtx-capture=RANGE`"
        )
    if setting == MEMORY:
        return "record with `nsys profile --cuda-memory-usage=true`"
    if setting == SHAPES:  # Nsight records no tensor shapes of its own
        return (
            "Nsight Systems records no tensor shapes of its own: wrap the profiled steps in "
            "torch.autograd.profiler.emit_nvtx(record_shapes=True)"
            if torch
            else None
        )
    if setting == RANKS:
        return "pass every rank's export (one `nsys profile` report per rank, or one for the node)"
    if setting == MODULES:  # user NVTX ranges name the layers of an Nsight capture
        layer = (
            "torch.cuda.nvtx.range_push(name) / range_pop() around each module's forward"
            if torch
            else 'nvtxRangePushA("layer") / nvtxRangePop()'
        )
        return f"push an NVTX range per layer ({layer}) and record with `nsys profile {NSYS_TRACE}`"
    if setting == STACK:  # Nsight's backtraces are not read from the export
        return None
    if setting == WARM:
        return (
            f"record warm iterations only (`nsys profile --capture-range=cudaProfilerApi` with "
            f"{start} around them, or `--delay=SECONDS --duration=SECONDS`)"
        )
    return None


def hint(setting: str | None, capture: Capture | None = None) -> str | None:
    """How to get ``setting`` into the next capture, in the input tool's vocabulary; None when
    the setting does not apply to the input (or is unknown)."""
    cap = capture or Capture()
    if setting == DEVICE:
        return "pass --device NAME (see `traceinsight devices`) or --peak-tflops and --peak-bw"
    if setting == TRACE or (cap.memory_only and setting is not None):
        return (
            "diagnose the profiler trace of the same run with it: `traceinsight diagnose "
            "TRACE --memory-snapshot FILE` (a trace recorded with profile_memory=True adds the "
            "allocator events)"
        )
    if cap.tool == NSYS:
        return _nsys(str(setting), cap.torch)
    return _KINETO.get(str(setting))


# --- what the capture recorded (the report's Run section) -----------------------------------------

#: Kineto's capture flags, as the profiler's header names them (``trace.capture_flags``)
KINETO_FLAGS = ("record_shapes", "profile_memory", "with_stack", "with_modules", "with_flops")
#: what an Nsight Systems capture records, by the ``nsys profile`` option (or the PyTorch call)
#: that records it: (label, the ``trace.capture_flags`` keys that say it did, PyTorch only)
_NSYS_OPTIONS: tuple[tuple[str, tuple[str, ...], bool], ...] = (
    ("-t cuda (kernels, copies)", ("gpu",), False),
    ("-t nvtx (ranges)", ("nvtx", "with_modules", "steps"), False),
    ("emit_nvtx(record_shapes=True) (op shapes)", ("record_shapes",), True),
    ("--cuda-memory-usage=true", ("profile_memory",), False),
    ("--python-backtrace / --sample (call stacks)", ("with_stack",), False),
)
#: what the Nsight reader does not read from an export: never said to be off
_NSYS_NOT_READ = frozenset({"with_stack"})


def recorded_settings(
    capture: Capture, flags: dict[str, Any], evidence: dict[str, bool | None] | None = None
) -> list[tuple[str, bool | None]]:
    """What the capture recorded, in the input tool's vocabulary: (setting, True / False /
    None for not recorded). ``flags`` are the reader's ``trace.capture_flags`` (Kineto:
    ``record_shapes``, ``profile_memory`` ...); ``evidence`` what the events show (``gpu``:
    GPU work, ``steps``: step markers, ``nvtx``: NVTX ranges). An Nsight option whose events
    the export lacks was off; one whose events are not read (call stacks) is None. A Kineto
    trace lists its profiler flags; an Nsight capture the ``nsys profile`` options that record
    the same (a program without PyTorch: none of PyTorch's)."""
    ev = {k: bool(v) for k, v in (evidence or {}).items() if v is not None}
    if capture.tool != NSYS:
        return [(k, flags.get(k)) for k in KINETO_FLAGS]
    out: list[tuple[str, bool | None]] = []
    for label, keys, torch_only in _NSYS_OPTIONS:
        if torch_only and not capture.torch:
            continue
        seen = [v for k in keys for v in (flags.get(k), ev.get(k)) if v is not None]
        if any(seen):
            out.append((label, True))
        else:  # the export holds what the option records, or it was off
            out.append((label, None if set(keys) <= _NSYS_NOT_READ else False))
    return out


#: data-quality notes about PyTorch's own NVTX ranges: nothing to say to a program without it
PYTORCH_ONLY_NOTES = frozenset({"nsys-no-emit-nvtx", "nsys-no-shapes"})


def fit_diagnostics(diags: list[dict[str, Any]], capture: Capture) -> list[dict[str, Any]]:
    """Data-quality notes as they apply to the program: for one without PyTorch, the notes
    about PyTorch's NVTX ranges are left out and no hint names a PyTorch API; a missing-steps
    note gets the input tool's way of marking steps."""
    out = []
    for d in diags:
        if not capture.torch and d.get("code") in PYTORCH_ONLY_NOTES:
            continue
        if d.get("code") == "no-step-markers":
            d["hint"] = steps_hint(capture)
        elif not capture.torch and names_pytorch(d.get("hint")):
            d.pop("hint", None)
        out.append(d)
    return out


def reason_only(reason: str | None) -> str | None:
    """A reason without the hint it carries after ``; pass ...`` (the hint is given once)."""
    return None if reason is None else re.split(r";\s+pass --", str(reason))[0]


def steps_hint(capture: Capture | None = None) -> str:
    """How to mark steps (a capture without step markers)."""
    return "mark the steps: " + str(hint(STEPS, capture))


def world_size_text(world_size: int, capture: Capture | None = None) -> str:
    """Where the job's world size comes from: ``distributedInfo says world size 2`` (Kineto),
    ``the capture holds 2 GPU processes (ranks)`` (Nsight)."""
    if (capture or Capture()).tool == NSYS:
        return f"the capture holds {world_size} GPU processes (ranks)"
    return f"distributedInfo says world size {world_size}"


# --- opening the trace in a viewer --------------------------------------------------------------


def _report_of(source: str) -> str:
    """The Nsight Systems report an export was made from (same stem), as far as its name says."""
    if re.search(r"\.(?:nsys-rep|qdrep)\b", source):
        return source.split(" (")[0]
    m = re.match(r"(\S+?)(?:\.exported-\S*)?\.sqlite\b", source)
    return f"{m.group(1)}.nsys-rep" if m else "the .nsys-rep report"


def viewer_title(tool: str | None) -> str:
    return "Open in Nsight Systems" if tool == NSYS else "Open in Perfetto"


def viewer_text(
    tool: str | None,
    source: str,
    rank: Any,
    ts_us: list[float],
    marker: str | None = None,
    report: str | None = None,
) -> str:
    """Where to look at the window a report shows, in the viewer of the input's tool."""
    if tool == NSYS:
        rep = report or _report_of(source)
        sec = [t / 1e6 for t in ts_us]
        what = f"the range {marker}" if marker else "the window shown (the whole GPU span)"
        return (
            f"open {rep} in Nsight Systems (File > Open; {source} is its export) and zoom the "
            f"timeline to {what}: rank {rank}, {sec[0]:.6f} – {sec[1]:.6f} s"
        )
    where = (
        f"search for {marker}, select it and press F to zoom to it"
        if marker
        else "the window shown is the whole GPU span"
    )
    return (
        f"load {source} at ui.perfetto.dev (Open trace file) or in chrome://tracing "
        f"(Load); {where}: rank {rank}, ts {ts_us[0]:.3f} – {ts_us[1]:.3f} µs in the file."
    )
