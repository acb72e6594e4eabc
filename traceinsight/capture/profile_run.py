"""``traceinsight profile -- COMMAND``: record a run without editing its script.

The command runs as given (``python train.py ARGS``, ``torchrun ... train.py``, or a bare
``train.py``, run with this Python) with ``traceinsight/capture/_profile_site`` first on its
PYTHONPATH: that folder's ``sitecustomize`` starts :mod:`traceinsight.capture.profile_child` in
every
Python process the command starts, which records each rank into ``OUT/rank-<RANK>.pt.trace.
json.gz`` with the capture settings of :mod:`traceinsight.capture` (see there for why each
flag). The user's script runs unchanged; this module only prepares the environment, waits, and
reports what was written and the command to run next.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections import deque
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

from traceinsight.capture import DEFAULT_ACTIVE, DEFAULT_WAIT, DEFAULT_WARMUP
from traceinsight.capture.profile_child import ENV
from traceinsight.errors import InputError
from traceinsight.util.redact import clean_text

SITE_DIR = Path(__file__).resolve().parent / "_profile_site"
TRACE_GLOB = "rank-*.pt.trace.json.gz"


@dataclass
class Settings:
    """What the recording processes need (sent to them as JSON in ``TRACEINSIGHT_PROFILE``)."""

    out: str
    wait: int = DEFAULT_WAIT
    warmup: int = DEFAULT_WARMUP
    active: int = DEFAULT_ACTIVE
    step_on: str = "optimizer"  #: optimizer | none
    with_stack: bool = True
    profile_memory: bool = True
    record_shapes: bool = True
    state: str = ""


@dataclass
class Recording:
    """What a profiled run left: its exit code, the trace files, one note per rank."""

    returncode: int
    out: Path
    files: list[Path]
    notes: list[dict[str, Any]] = field(default_factory=list)
    #: the command's last stderr lines (it printed them as it ran)
    stderr_tail: list[str] = field(default_factory=list)

    def summary_lines(self, settings: Settings) -> list[str]:
        """What to tell the user: what was recorded (or why not) and the next command."""
        lines = []
        if self.files:
            names = ", ".join(p.name for p in self.files[:4])
            more = f" (+{len(self.files) - 4})" if len(self.files) > 4 else ""
            steps = ""
            if settings.step_on == "optimizer":
                first = settings.wait - 1 + settings.warmup  # it starts after the first step
                steps = (
                    f"; ProfilerStep#{first}..#{first + settings.active - 1}, one per "
                    "optimizer step"
                )
            lines.append(
                f"traceinsight profile: recorded {len(self.files)} rank(s) in "
                f"{self.out}/: {names}{more}{steps}"
            )
            lines.append(f"next: traceinsight diagnose {self.out} --html report.html")
            return lines
        need = settings.wait + settings.warmup + settings.active
        seen = max((int(n.get("steps") or 0) for n in self.notes), default=0)
        errors = [str(n["error"]) for n in self.notes if n.get("error")]
        if self.returncode:  # it failed: why matters, not the schedule it never reached
            lines.append(f"traceinsight profile: no trace written: {self.exit_text()}")
            if self.stderr_tail:
                lines.append("its last lines on stderr:")
                lines += [f"  {line}" for line in self.stderr_tail]
        elif errors:
            lines.append(f"traceinsight profile: no trace written: {errors[0]}")
        elif not self.notes:
            lines.append(
                "traceinsight profile: no trace written: no Python process of the "
                "command was recorded (is it a Python program, run with the Python "
                "traceinsight is installed in?)"
            )
        elif settings.step_on == "optimizer" and seen == 0:
            lines.append(
                "traceinsight profile: no trace written: the program never called "
                "optimizer.step() (inference?); rerun with --step-on none to record "
                "the whole run"
            )
        else:
            lines.append(
                f"traceinsight profile: no trace written: the program made {seen} "
                f"optimizer steps; the schedule needs {need} (--wait {settings.wait} "
                f"--warmup {settings.warmup} --active {settings.active}); lower them or "
                "run more steps"
            )
        return lines

    def exit_text(self) -> str:
        """``the command exited with status 3`` / ``was killed by signal 9 (SIGKILL)``."""
        rc = self.returncode
        if rc == 130:
            return "the command was interrupted (status 130)"
        if rc < 0:
            try:
                name = f" ({signal.Signals(-rc).name})"
            except ValueError:
                name = ""
            return f"the command was killed by signal {-rc}{name}"
        return f"the command exited with status {rc}"


#: stderr lines of a failed command repeated in the summary
STDERR_LINES = 8


def _tail_line(raw: bytes) -> str:
    """One stderr line as the summary shows it: no control characters, secrets redacted,
    at most 200 characters."""
    text = clean_text(raw.decode("utf-8", errors="replace").rstrip("\r\n"), limit=200)
    return text.rstrip()


def _relay(stream: IO[bytes], tail: deque[str]) -> None:
    """Copy the command's stderr to ours as it comes, keeping its last lines."""
    for raw in iter(stream.readline, b""):
        try:
            sys.stderr.write(raw.decode("utf-8", errors="replace"))
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        line = _tail_line(raw)
        if line.strip():
            tail.append(line)


def command_line(argv: list[str]) -> list[str]:
    """The command to run: a bare ``script.py`` runs with this Python."""
    if not argv:
        raise InputError(
            "no command to profile", hint="traceinsight profile -- python train.py ARGS"
        )
    if argv[0].endswith(".py"):
        return [sys.executable, *argv]
    return list(argv)


def prepare_out(out: Path, force: bool) -> None:
    """Create ``out``; refuse one that holds traces of an earlier recording unless ``force``
    (then only those rank files are removed)."""
    if out.exists() and not out.is_dir():
        raise InputError("exists and is not a folder", path=out, hint="choose another -o folder")
    old = sorted(out.glob(TRACE_GLOB)) if out.is_dir() else []
    if old and not force:
        raise InputError(
            f"already holds {len(old)} recorded trace(s) ({old[0].name} ...)",
            path=out,
            hint="choose another -o folder, or pass --force to replace them",
        )
    for p in old:
        p.unlink()
    out.mkdir(parents=True, exist_ok=True)


def environment(settings: Settings, base: dict[str, str] | None = None) -> dict[str, str]:
    """The command's environment: the profiling sitecustomize first on PYTHONPATH, the
    settings in ``TRACEINSIGHT_PROFILE``."""
    env = dict(os.environ if base is None else base)
    old = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = str(SITE_DIR) + (os.pathsep + old if old else "")
    env[ENV] = json.dumps(asdict(settings))
    return env


def record(argv: list[str], settings: Settings, *, force: bool = False) -> Recording:
    """Run ``argv`` recorded; returns once it has exited (its exit code is kept)."""
    out = Path(settings.out)
    prepare_out(out, force)
    with tempfile.TemporaryDirectory(prefix="traceinsight-profile-") as state:
        settings.state = state
        tail: deque[str] = deque(maxlen=STDERR_LINES)
        try:
            proc = subprocess.Popen(
                command_line(argv), env=environment(settings), stderr=subprocess.PIPE
            )
        except FileNotFoundError as e:
            raise InputError(
                f"cannot run {argv[0]!r}: {e.strerror}", hint="check the command after --"
            ) from None
        assert proc.stderr is not None
        relay = threading.Thread(target=_relay, args=(proc.stderr, tail), daemon=True)
        relay.start()
        try:
            rc = proc.wait()
        except KeyboardInterrupt:  # the command got the same SIGINT
            try:
                proc.wait(timeout=30)
            except (subprocess.TimeoutExpired, KeyboardInterrupt):
                proc.kill()
            rc = 130
        relay.join(timeout=5)
        proc.stderr.close()
        notes = []
        for p in sorted(Path(state).glob("rank-*.json")):
            try:
                notes.append(json.loads(p.read_text(encoding="utf-8")))
            except (OSError, ValueError):
                continue
    files = sorted(out.glob(TRACE_GLOB), key=lambda p: _rank_of(p.name))
    return Recording(rc, out, files, notes, list(tail))


def _rank_of(name: str) -> int:
    digits = name.removeprefix("rank-").split(".", 1)[0]
    return int(digits) if digits.isdigit() else 0
