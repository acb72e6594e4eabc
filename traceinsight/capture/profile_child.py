"""The recording side of ``traceinsight profile``: runs inside each Python process of the
user's command (loaded by ``traceinsight/capture/_profile_site/sitecustomize.py``), so the script is
recorded without a line of it changed.

* Which processes: the program itself and, under ``torchrun``, every worker (each has its own
  ``RANK``); not the ``torchrun`` launcher, not multiprocessing helpers (spawned DataLoader
  workers, the resource tracker). One process per rank records: the first claims the rank
  with an exclusive lock file, any later one (a helper script of the program) stays quiet.
* What: :func:`traceinsight.capture.profile` with its diagnosis settings (shapes, memory,
  stacks, modules, FLOPs) and its schedule (``wait``, ``warmup``, ``active``), written to
  ``OUT/rank-<RANK>.pt.trace.json.gz``.
* Steps: the script never calls ``prof.step()``, so a global optimizer hook does, after each
  ``step()`` of the first optimizer that steps (one step per iteration even with several
  optimizers). The profiler itself starts at the end of the first step (that step is the
  first ``wait`` step), so the program's set-up (imports, ``init_process_group``, building
  the model) is neither traced nor slowed; it stops as soon as its window is written, while
  the program still runs. (torch 2.13 with gloo: a worker that ran a scheduled profiler
  aborts at exit now and then, "terminate called without an active exception", with the
  trace already written; it happens with ``capture.profile`` inside the script too, never
  with ``--step-on none``.) A script without an optimizer
  (inference) is recorded whole instead with ``--step-on none``: one window from start to
  exit, no step markers.
* At exit the trace is written and a small JSON note for the parent (steps seen, file
  written, why nothing was) goes to a state folder outside ``OUT``.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
from pathlib import Path
from typing import Any

from traceinsight import settings

#: the variable that carries the settings from ``traceinsight profile`` to the processes
ENV = "TRACEINSIGHT_PROFILE"
LAUNCHERS = ("torch.distributed.run", "torch.distributed.launch")


def is_target(argv: list[str]) -> bool:
    """Whether the process started by ``argv`` (``sys.orig_argv``) is the user's program or a
    torchrun worker, not a launcher or a multiprocessing helper."""
    if "--multiprocessing-fork" in argv:
        return False
    for i, a in enumerate(argv[1:], 1):
        if a == "-c":
            code = argv[i + 1] if i + 1 < len(argv) else ""
            return "multiprocessing" not in code
        if a == "-m":
            return (argv[i + 1] if i + 1 < len(argv) else "") not in LAUNCHERS
        if not a.startswith("-"):  # the script
            return os.path.basename(a) not in ("torchrun",)
    return True


def rank() -> int:
    """This process's rank: RANK (torchrun, most launchers), else LOCAL_RANK, else 0."""
    for var in ("RANK", "LOCAL_RANK", "SLURM_PROCID"):
        v = os.environ.get(var, "").strip()
        if v.isdigit():
            return int(v)
    return 0


def _claim(state: Path, r: int) -> bool:
    """Claim rank ``r`` for this process (False when another process holds it)."""
    try:
        fd = os.open(state / f"rank-{r}.lock", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    return True


def start() -> None:
    """Start recording this process when ``TRACEINSIGHT_PROFILE`` asks for it (never raises:
    a failure is a line on stderr and the program runs on unrecorded)."""
    raw = settings.text(ENV)
    if not raw or not is_target(list(getattr(sys, "orig_argv", sys.argv))):
        return
    try:
        cfg = json.loads(raw)
        state = Path(cfg["state"])
        r = rank()
        if not _claim(state, r):
            return
        _Recorder(cfg, r).begin()
    except Exception as e:  # the user's program must run regardless
        print(
            f"traceinsight profile: not recording this process: {type(e).__name__}: {e}",
            file=sys.stderr,
        )


class _Recorder:
    """One process's profiler, its optimizer hook and its exit handler."""

    def __init__(self, cfg: dict[str, Any], r: int) -> None:
        self.cfg = cfg
        self.rank = r
        self.pid = os.getpid()
        self.out = Path(cfg["out"]) / f"rank-{r}.pt.trace.json.gz"
        self.steps = 0
        self.first_opt: int | None = None
        self.session: Any = None
        self.prof: Any = None
        self.hook: Any = None
        self.finished = False
        self.note: dict[str, Any] = {
            "rank": r,
            "pid": self.pid,
            "file": None,
            "steps": 0,
            "step_on": cfg.get("step_on", "optimizer"),
        }

    def begin(self) -> None:
        flags: dict[str, Any] = {
            "record_shapes": bool(self.cfg.get("record_shapes", True)),
            "profile_memory": bool(self.cfg.get("profile_memory", True)),
            "with_stack": bool(self.cfg.get("with_stack", True)),
            "with_modules": True,
            "with_flops": True,
        }
        if self.cfg.get("step_on") == "none":
            self._begin_whole(flags)
        else:
            from traceinsight.capture import profile

            # the first optimizer step is the first waited step: the profiler starts after it
            self.session = profile(
                self.out,
                wait=max(0, int(self.cfg.get("wait", 2)) - 1),
                warmup=int(self.cfg.get("warmup", 2)),
                active=int(self.cfg.get("active", 6)),
                repeat=1,
                **flags,
            )
            import torch.optim.optimizer as optim

            self.hook = optim.register_optimizer_step_post_hook(self._on_step)
        atexit.register(self.finish)

    def _begin_whole(self, flags: dict[str, Any]) -> None:
        """No schedule: one window from here to exit (no step markers)."""
        import torch
        import torch.profiler

        from traceinsight.capture import _activities

        self.prof = torch.profiler.profile(activities=_activities(torch, None), **flags)
        self.prof.__enter__()

    def _on_step(self, opt: Any, args: Any, kwargs: Any) -> None:
        if self.first_opt is None:
            self.first_opt = id(opt)
        if id(opt) != self.first_opt or os.getpid() != self.pid or self.finished:
            return
        self.steps += 1
        if self.prof is None:  # the end of the first step: start recording the next ones
            self.prof = self.session.__enter__()
            return
        self.prof.step()
        if self.session.outputs:  # the schedule's window is written: stop profiling right away
            self.finish()

    def finish(self) -> None:
        """Stop the profiler, write the trace (if the schedule has not) and the note; at the
        end of the recorded window, or at exit. Stopping while the program still runs (not at
        interpreter shutdown) keeps torch's threads out of the exit path."""
        if os.getpid() != self.pid or self.finished:  # a forked child inherited the handler
            return
        self.finished = True
        if self.hook is not None:
            self.hook.remove()
        try:
            if self.session is not None:
                import warnings

                if self.prof is not None:
                    with warnings.catch_warnings(record=True):
                        warnings.simplefilter("always")
                        self.session.__exit__(None, None, None)
                written = list(self.session.outputs)
            else:
                self.prof.__exit__(None, None, None)
                self.prof.export_chrome_trace(str(self.out))
                written = [self.out]
            self.note["file"] = str(written[0]) if written else None
        except Exception as e:  # report to the parent, never crash at exit
            self.note["error"] = f"{type(e).__name__}: {e}"
        self.note["steps"] = self.steps
        state = Path(self.cfg["state"])
        (state / f"rank-{self.rank}.json").write_text(json.dumps(self.note), encoding="utf-8")
