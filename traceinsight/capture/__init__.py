"""Record a PyTorch profiler trace that traceinsight can diagnose well.

``torch.profiler`` can record a lot or very little; a trace recorded with the
defaults lacks most of what the diagnosis rules need. :func:`profile` turns on
the right options in one call and writes a Kineto/Chrome JSON trace::

    from traceinsight.capture import profile

    with profile("run.pt.trace.json.gz") as prof:
        for batch in loader:
            train_step(batch)
            prof.step()          # once per iteration: marks ProfilerStep#N

    # then: traceinsight run.pt.trace.json.gz

This module imports without torch. torch is imported only when :func:`profile`
is called; without it, :class:`CaptureUnavailable` is raised with the install
hint. :func:`sanitize_trace` / :func:`sanitize_file` need no torch either: they
strip host names and absolute paths from a trace before it is shared.
"""

from __future__ import annotations

import gzip as _gzip
import io
import json
import os
import re
import site
import sysconfig
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = [
    "CaptureSession",
    "CaptureUnavailable",
    "profile",
    "sanitize_file",
    "sanitize_trace",
    "steps_needed",
    "write_trace",
]

TORCH_MISSING_MESSAGE = (
    "torch is not installed; install the extra: pip install 'traceinsight-doctor[torch]'"
)

try:  # errors.py has no heavy imports; keep the fallback so capture.py stands alone.
    from traceinsight.errors import InstallError as _InstallError
except Exception:  # pragma: no cover - only when errors.py is missing/broken
    # capture.py copied without the package: no InstallError class to bind the name to
    _InstallError = None  # type: ignore[misc,assignment]

if _InstallError is not None:

    class CaptureUnavailable(_InstallError, RuntimeError):
        """torch (the ``[torch]`` extra) is not installed, so nothing can be recorded.

        A :class:`RuntimeError` and a :class:`traceinsight.errors.InstallError`, so
        the CLI reports it as a one-line user error (exit code 2).
        """

else:  # pragma: no cover

    class CaptureUnavailable(RuntimeError):  # type: ignore[no-redef]
        """torch (the ``[torch]`` extra) is not installed, so nothing can be recorded."""


#: the default schedule: two iterations waited (lazy initialisation, allocator growth, library
#: first-call heuristics), two warmed up on, six recorded (at least 5, so a step statistic and
#: a cold first step are both visible). Measured on the CPU sample model with
#: bench/profile_defaults.py (README, "Recording"): the first recorded step within 10% of the
#: median in CPU time; the old 1 / 1 / 3 recorded 3 steps, too few to tell noise from a trend.
DEFAULT_WAIT, DEFAULT_WARMUP, DEFAULT_ACTIVE = 2, 2, 6


def _import_torch():
    """Import torch and torch.profiler, or raise :class:`CaptureUnavailable`."""
    try:
        import torch
        import torch.profiler  # loads the profiler submodule
    except ImportError as exc:  # includes sys.modules['torch'] = None
        raise CaptureUnavailable(TORCH_MISSING_MESSAGE) from exc
    return torch


def steps_needed(
    wait: int = DEFAULT_WAIT,
    warmup: int = DEFAULT_WARMUP,
    active: int = DEFAULT_ACTIVE,
    repeat: int = 1,
) -> int:
    """How many ``prof.step()`` calls a schedule needs before every trace is written.

    ``repeat=0`` (repeat until the loop ends) has no fixed number; one cycle is returned.
    """
    cycle = wait + warmup + active
    return cycle * max(repeat, 1)


def _gz_path(output: Path, gzip: bool) -> Path:
    if gzip and not output.name.endswith(".gz"):
        return output.with_name(output.name + ".gz")
    return output


_TRACE_SUFFIXES = (".pt.trace.json.gz", ".pt.trace.json", ".json.gz", ".json", ".gz")


def _cycle_path(base: Path, cycle: int) -> Path:
    """``run.pt.trace.json.gz`` -> ``run.cycle1.pt.trace.json.gz`` for cycle 1 (0 is ``base``)."""
    if cycle == 0:
        return base
    name = base.name
    for suffix in _TRACE_SUFFIXES:
        if name.endswith(suffix):
            return base.with_name(f"{name[: -len(suffix)]}.cycle{cycle}{suffix}")
    return base.with_name(f"{name}.cycle{cycle}")


def _activities(torch, activities: Iterable[Any] | None) -> list:
    """CPU always (cpu_op events are what kernels and modules are tied to), CUDA when present."""
    pa = torch.profiler.ProfilerActivity
    by_name = {"cpu": pa.CPU, "cuda": pa.CUDA}
    if hasattr(pa, "XPU"):
        by_name["xpu"] = pa.XPU
    if activities is None:
        chosen = [pa.CPU]
        if torch.cuda.is_available():
            chosen.append(pa.CUDA)
        return chosen
    chosen = []
    for act in activities:
        if isinstance(act, str):
            try:
                act = by_name[act.lower()]
            except KeyError:
                raise ValueError(
                    f"unknown profiler activity {act!r}; use one of {sorted(by_name)}"
                ) from None
        if act not in chosen:
            chosen.append(act)
    if pa.CPU not in chosen:
        chosen.insert(0, pa.CPU)
    return chosen


class CaptureSession:
    """What :func:`profile` returns: a context manager around a ``torch.profiler.profile``.

    ``with`` yields the torch profiler itself (call ``.step()`` on it once per
    iteration). After the block, :attr:`outputs` lists the trace files written
    (one per completed schedule cycle). If the loop ended before the first
    active step, no trace exists and a :class:`UserWarning` says so.
    """

    def __init__(self, profiler: Any, output: Path, needed: int, sanitize: bool):
        self.profiler = profiler
        self.path = output
        self.outputs: list[Path] = []
        self._needed = needed
        self._sanitize = sanitize
        self._cycle = 0

    # on_trace_ready handler: torch calls it when an active window ends (in
    # step()) and when the profiler stops mid-window (on exit).
    def _write(self, prof: Any) -> None:
        target = _cycle_path(self.path, self._cycle)
        self._cycle += 1
        target.parent.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(target))  # torch gzips by itself when the name ends in .gz
        if self._sanitize:
            sanitize_file(target)
        self.outputs.append(target)

    def __enter__(self):
        return self.profiler.__enter__()

    def __exit__(self, exc_type, exc, tb):
        result = self.profiler.__exit__(exc_type, exc, tb)
        if exc_type is None and not self.outputs:
            warnings.warn(
                f"traceinsight.capture: no trace written to {self.path}: the loop ended "
                f"before the profiler's active window. Call prof.step() once per iteration "
                f"and run at least {self._needed} iterations.",
                UserWarning,
                stacklevel=2,
            )
        return result


def profile(
    output: str | os.PathLike[str],
    *,
    wait: int = DEFAULT_WAIT,
    warmup: int = DEFAULT_WARMUP,
    active: int = DEFAULT_ACTIVE,
    repeat: int = 1,
    record_shapes: bool = True,
    profile_memory: bool = True,
    with_stack: bool = True,
    with_flops: bool = True,
    with_modules: bool = True,
    activities: Iterable[Any] | None = None,
    gzip: bool = True,
    sanitize: bool = False,
) -> CaptureSession:
    """A ``torch.profiler.profile`` set up for diagnosis, writing its trace to ``output``.

    Use it as ``with profile(path) as prof: ...; prof.step()`` — ``prof`` is the
    torch profiler. Each flag and why the diagnosis needs it:

    * **schedule** (``wait``, ``warmup``, ``active``, ``repeat``): ``prof.step()``
      wraps every iteration in a ``ProfilerStep#N`` user annotation. Those markers
      give step time, step-to-step jitter and the split of each step into data
      loading / forward / backward / optimizer. ``wait`` skips the first
      iteration(s) (lazy init, allocator growth), ``warmup`` runs the profiler
      without keeping events (its own start-up cost), ``active`` steps are kept.
      ``repeat`` cycles are written; cycle 0 goes to ``output``, cycle *k* to
      ``<stem>.cycle<k><suffix>`` (``repeat=0`` repeats until the loop ends).
    * **record_shapes**: adds ``Input Dims``/``Input type``/``Input Strides`` to
      every ``cpu_op``. Needed for FLOPs and bytes-moved estimates (hence
      arithmetic intensity and MFU), for spotting small/unaligned matmuls, odd
      dtypes, and shape churn that defeats caching.
    * **profile_memory**: emits ``[memory]`` instant events (bytes, total
      allocated, total reserved) on every allocation/free. Needed for peak
      memory, allocated-vs-reserved fragmentation and allocator churn findings.
    * **with_stack**: records Python frames as ``python_function`` events,
      including ``nn.Module: <Class>_<i>`` frames. Those are what per-layer
      attribution ("which module is slow") is built from. Costs some overhead.
    * **with_flops**: asks torch for its own FLOP estimate of known ops (matmul,
      conv) where it has one; traceinsight cross-checks its shape-based estimate.
    * **with_modules**: module hierarchy on ops (TorchScript models only; cheap).
    * **activities**: ``None`` means CPU, plus CUDA when ``torch.cuda.is_available()``.
      CPU is always added: GPU kernels are tied to the ``cpu_op`` that launched them.
      Accepts ``ProfilerActivity`` values or the strings ``"cpu"``/``"cuda"``/``"xpu"``.
    * **gzip**: the trace is gzipped when ``output`` ends in ``.gz`` or ``gzip`` is
      true; with ``gzip=True`` and no ``.gz`` suffix, ``.gz`` is appended to the
      name (see ``session.path``). Traces compress about 10x.
    * **sanitize**: after writing, replace the host name and absolute paths
      (trace name, Python frame file names) with placeholders, so the file can be
      shared. See :func:`sanitize_trace`.

    The trace is written by ``export_chrome_trace`` from the profiler's
    ``on_trace_ready`` handler, i.e. when the active window ends (inside
    ``prof.step()``) or when the ``with`` block exits mid-window. Raises
    :class:`CaptureUnavailable` right away if torch is not installed.
    """
    torch = _import_torch()
    for name, value in (("wait", wait), ("warmup", warmup), ("active", active), ("repeat", repeat)):
        if not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be a non-negative int, got {value!r}")
    if active < 1:
        raise ValueError("active must be at least 1: no step would be recorded")

    out = _gz_path(Path(output), gzip)
    session_holder: dict[str, CaptureSession] = {}

    def _on_trace_ready(prof: Any) -> None:
        session_holder["s"]._write(prof)

    prof = torch.profiler.profile(
        activities=_activities(torch, activities),
        schedule=torch.profiler.schedule(wait=wait, warmup=warmup, active=active, repeat=repeat),
        on_trace_ready=_on_trace_ready,
        record_shapes=record_shapes,
        profile_memory=profile_memory,
        with_stack=with_stack,
        with_flops=with_flops,
        with_modules=with_modules,
    )
    session = CaptureSession(prof, out, steps_needed(wait, warmup, active, repeat), sanitize)
    session_holder["s"] = session
    return session


# --------------------------------------------------------------------------
# Sanitizing: no torch needed.
# --------------------------------------------------------------------------

# An absolute directory prefix, POSIX or Windows, not preceded by a path-ish
# character (so relative paths like "torch/nn/x.py" and "<site-packages>/x" stay).
_ABS_POSIX = re.compile(r"(?<![\w<>.~\-/\\])/(?:[^/\s'\"():<>]+/)+")
_ABS_WIN = re.compile(r"(?<![\w])[A-Za-z]:[\\/](?:[^\\/\s'\"():<>]+[\\/])+")
_SITE_DIR = re.compile(r"(?:[A-Za-z]:)?[^\s'\"()<>]*?[/\\](?:site|dist)-packages(?=[/\\])")
_STDLIB_DIR = re.compile(r"(?:[A-Za-z]:)?[^\s'\"()<>]*?[/\\]lib[/\\]python\d+(?:\.\d+)?(?=[/\\])")


def _known_prefixes(script: str | os.PathLike[str] | None) -> list[tuple[str, str]]:
    pairs: list[tuple[str, str]] = []

    def add(path: str | None, label: str) -> None:
        if not path:
            return
        p = os.path.abspath(str(path)).rstrip("/\\")
        if len(p) > 1:
            pairs.append((p, label))

    try:
        sites = [*site.getsitepackages(), site.getusersitepackages()]
    except Exception:  # pragma: no cover - virtualenv oddities
        sites = []
    paths = sysconfig.get_paths()
    for s in [*sites, paths.get("purelib"), paths.get("platlib")]:
        add(s, "<site-packages>")
    add(paths.get("stdlib"), "<stdlib>")
    add(paths.get("platstdlib"), "<stdlib>")
    if script is not None:
        add(os.path.dirname(os.path.abspath(str(script))), "<script>")
    add(os.getcwd(), "<cwd>")
    add(os.path.expanduser("~"), "~")
    # Longest first, so /home/u/venv/lib/.../site-packages wins over /home/u.
    pairs.sort(key=lambda kv: len(kv[0]), reverse=True)
    return pairs


def _make_rewriter(script: str | os.PathLike[str] | None):
    prefixes = _known_prefixes(script)

    def rewrite(text: str) -> str:
        if "/" not in text and "\\" not in text:
            return text
        for prefix, label in prefixes:
            if prefix in text:
                text = re.sub(re.escape(prefix) + r"(?=[/\\]|$)", label.replace("\\", r"\\"), text)
        text = _SITE_DIR.sub("<site-packages>", text)
        text = _STDLIB_DIR.sub("<stdlib>", text)
        text = _ABS_POSIX.sub("<abs>/", text)
        text = _ABS_WIN.sub("<abs>/", text)
        return text

    return rewrite


def _walk(value: Any, rewrite) -> Any:
    if isinstance(value, str):
        return rewrite(value)
    if isinstance(value, list):
        return [_walk(v, rewrite) for v in value]
    if isinstance(value, dict):
        return {k: _walk(v, rewrite) for k, v in value.items()}
    return value


def sanitize_trace(
    trace: dict[str, Any],
    *,
    script: str | os.PathLike[str] | None = None,
    host_name: str | None = "localhost",
    trace_name: str | None = None,
) -> dict[str, Any]:
    """Return a copy of a Chrome-trace dict with no user, host or home names in it.

    * ``traceName`` (torch writes the absolute output path, or for .gz output
      the path of the temp file it exported to first) becomes ``trace_name``
      when given, else its own base name.
    * ``host_name`` becomes ``host_name`` (``None`` keeps it).
    * In every string of every event (names, args) and of the top-level
      metadata, absolute path prefixes are rewritten: site-packages ->
      ``<site-packages>``, the stdlib (``.../lib/pythonX.Y``) -> ``<stdlib>``, the directory of
      ``script`` -> ``<script>``, the working directory -> ``<cwd>``, the home
      directory -> ``~``, any other absolute directory -> ``<abs>/``. torch
      already writes frames under ``sys.path`` relative (``torch/nn/...``); this
      catches the rest (code run from outside ``sys.path``, other machines'
      site-packages).

    Timestamps, ids and numbers are untouched, so analysis results do not change.
    """
    rewrite = _make_rewriter(script)
    out: dict[str, Any] = {}
    for key, value in trace.items():
        if key == "traceEvents":
            out[key] = [_walk(ev, rewrite) for ev in value]
        elif key == "traceName" and isinstance(value, str):
            out[key] = trace_name if trace_name is not None else re.split(r"[/\\]", value)[-1]
        elif key == "host_name" and host_name is not None:
            out[key] = host_name
        else:
            out[key] = _walk(value, rewrite)
    return out


def write_trace(trace: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """Write a trace dict as JSON, gzipped when the name ends in ``.gz``.

    The gzip header carries no file name and a zero mtime, so the same trace
    gives the same bytes.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps(trace, separators=(",", ":")).encode("utf-8")
    if path.name.endswith(".gz"):
        buf = io.BytesIO()
        with _gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as gz:
            gz.write(data)
        data = buf.getvalue()
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return path


def _read_trace(path: Path) -> dict[str, Any]:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = _gzip.decompress(raw)
    return json.loads(raw)


def sanitize_file(
    path: str | os.PathLike[str],
    *,
    script: str | os.PathLike[str] | None = None,
    host_name: str | None = "localhost",
) -> Path:
    """:func:`sanitize_trace` a trace file in place (plain or gzipped JSON).

    ``traceName`` becomes the file's own name.
    """
    path = Path(path)
    trace = _read_trace(path)
    clean = sanitize_trace(trace, script=script, host_name=host_name, trace_name=path.name)
    return write_trace(clean, path)
