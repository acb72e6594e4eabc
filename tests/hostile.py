"""Helpers of the hostile-input tests: the CLI in a subprocess under an address-space limit,
hashes of files before and after, small hand-written traces, and the checks every case makes
(exit code, one line naming the file with a hint, no control character, no planted secret)."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
#: address-space limit of every CLI run (virtual memory: Python, Arrow and the forked helper
#: reserve far more than they touch, so the resident peak is reported separately)
LIMIT_BYTES = int(1.5 * 2**30)
#: a resident peak this high fails the bounded-memory checks
PEAK_MB = 600
#: control characters no output may hold (tab and newline excepted), and the bidi overrides
CONTROL_RE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
#: what the secrets planted in hostile traces look like (none may reach an output)
SECRETS = (
    "hunter2",
    "s3cr3t-pa55",
    "alice.admin",
    "db-prod-7.corp.example.com",
    "ghp_0123456789abcdefghij0123",
    "hf_PlantedTokenValue123456",
)


@dataclass
class Run:
    rc: int
    stdout: str
    stderr: str
    peak_mb: float

    def __str__(self) -> str:
        return (
            f"rc={self.rc} peak={self.peak_mb:.0f} MB\nstdout: {self.stdout[-2000:]}\n"
            f"stderr: {self.stderr[-2000:]}"
        )


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT_BYTES, LIMIT_BYTES))
    os.setsid()  # its own process group: a timeout kills the whole tree


#: a bare interpreter that posix_spawns the CLI and reports wait4's exit status and peak RSS:
#: a child forked from pytest itself would carry pytest's size into its peak across exec
_LAUNCHER = """\
import os, sys
pid = os.posix_spawn(sys.argv[2], sys.argv[2:], os.environ)
_, status, ru = os.wait4(pid, 0)
with open(sys.argv[1], "w") as f:
    f.write(f"{os.waitstatus_to_exitcode(status)} {ru.ru_maxrss}")
"""


def cli(
    args: list[Any],
    cwd: Path,
    *,
    stdin: bytes | None = None,
    timeout: float = 120,
    env: dict[str, str] | None = None,
    shell: bool = False,
) -> Run:
    """Run ``traceinsight ARGS`` in a subprocess limited to :data:`LIMIT_BYTES` of address
    space (``RLIMIT_AS`` set in ``preexec_fn``); returns the exit code, the outputs and the
    resident peak of the run's process tree (wait4)."""
    # Arrow's default allocator (mimalloc) reserves ~1 GB of address space up front: the
    # system allocator makes the limit measure what the run really allocates
    base = {
        **os.environ,
        "TRACEINSIGHT_NO_PROGRESS": "1",
        "PYTHONPATH": str(REPO),
        "ARROW_DEFAULT_MEMORY_POOL": "system",
        "TRACEINSIGHT_CACHE_DIR": str(cwd / ".ti-cache"),
        **(env or {}),
    }
    prog = [sys.executable, "-m", "traceinsight.cli"]
    if shell:  # process substitution needs bash: ``ti`` in the command line is the CLI
        line = " ".join(str(a) for a in args).replace("ti ", " ".join(prog) + " ", 1)
        cmd = ["/bin/bash", "-c", line]
    else:
        cmd = [*prog, *[str(a) for a in args]]
    fd, name = tempfile.mkstemp(prefix="ti-run-")
    os.close(fd)
    res = Path(name)
    p = subprocess.Popen(
        [sys.executable, "-c", _LAUNCHER, str(res), *cmd],
        cwd=cwd,
        env=base,
        preexec_fn=_limit,
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        out, err = p.communicate(stdin, timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, 9)
        out, err = p.communicate()
        raise AssertionError(
            f"timed out after {timeout} s: {args}\n{err.decode()[-500:]}"
        ) from None
    try:
        rc, kb = res.read_text().split()
    finally:
        res.unlink(missing_ok=True)
    return Run(
        int(rc), out.decode("utf-8", "replace"), err.decode("utf-8", "replace"), int(kb) / 1024
    )


# --- files -------------------------------------------------------------------------------------


def digest(path: Path) -> dict[str, str]:
    """sha256 of a file, or of every file under a folder (relative names), or {} when absent."""
    path = Path(path)
    if path.is_symlink() and not path.exists():
        return {".": "link"}
    if path.is_file():
        return {".": hashlib.sha256(path.read_bytes()).hexdigest()}
    if path.is_dir():
        return {
            str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*"))
            if p.is_file()
        }
    return {}


def snapshot(*paths: Path) -> dict[str, dict[str, str]]:
    return {str(p): digest(p) for p in paths}


# --- traces ------------------------------------------------------------------------------------


def events(n_steps: int = 2, *, kernel_dur: Any = 30.0, step_us: float = 1000.0) -> list[dict]:
    """ProfilerStep#N windows, each with an op launching one kernel (times in µs)."""
    out: list[dict] = [
        {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python3"}},
        {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "python3"}},
    ]
    for i in range(n_steps):
        t0 = i * step_us
        c = 100 + i
        out += [
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{i + 1}",
                "pid": 1,
                "tid": 1,
                "ts": t0,
                "dur": step_us - 10,
                "args": {"External id": 10 * i + 1},
            },
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "aten::mm",
                "pid": 1,
                "tid": 1,
                "ts": t0 + 10,
                "dur": 50,
                "args": {"External id": 10 * i + 2},
            },
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 1,
                "tid": 1,
                "ts": t0 + 20,
                "dur": 5,
                "args": {"correlation": c, "External id": 10 * i + 2},
            },
            {
                "ph": "X",
                "cat": "kernel",
                "name": "gemm_kernel",
                "pid": 0,
                "tid": 7,
                "ts": t0 + 100,
                "dur": kernel_dur,
                "args": {"device": 0, "stream": 7, "correlation": c, "External id": 10 * i + 2},
            },
        ]
    return out


def trace(evs: list[dict] | None = None, **header: Any) -> dict[str, Any]:
    h: dict[str, Any] = {
        "schemaVersion": 1,
        "deviceProperties": [
            {
                "id": 0,
                "name": "NVIDIA H100 80GB HBM3",
                "totalGlobalMem": 85029158912,
                "computeMajor": 9,
                "computeMinor": 0,
                "numSms": 132,
            }
        ],
        "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1},
    }
    h.update(header)
    h["traceEvents"] = events() if evs is None else evs
    return h


def write(path: Path, obj: Any, *, gz: bool = False) -> Path:
    data = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


# --- checks ------------------------------------------------------------------------------------


def clean_output(*texts: str) -> None:
    """No control or bidi character and no planted secret in any of ``texts``."""
    for t in texts:
        bad = CONTROL_RE.findall(t)
        assert not bad, f"control characters {bad[:5]!r} in output: {t[:300]!r}"
        for s in SECRETS:
            assert s not in t, f"secret {s!r} in output"


def error(run: Run, *fragments: str, code: int = 2) -> str:
    """The run failed with ``code`` and one line on stderr naming the problem and a hint."""
    err = run.stderr.strip()
    assert run.rc == code, str(run)
    assert err.startswith("traceinsight: error: "), str(run)
    assert "\n" not in err, f"not one line: {err!r}"
    assert "hint:" in err and "internal error" not in err and "Traceback" not in err, err
    for f in fragments:
        assert f in err, f"{f!r} not in {err!r}"
    clean_output(run.stdout, run.stderr)
    return err


def ok(run: Run) -> Run:
    assert run.rc == 0, str(run)
    clean_output(run.stdout, run.stderr)
    return run


def ok_or_error(run: Run, *fragments: str) -> None:
    """Either outcome is right for input that is odd but may be read: a clean success, or the
    one-line error of :func:`error` naming ``fragments``."""
    if run.rc == 0:
        ok(run)
    else:
        error(run, *fragments)


def bounded(run: Run, mb: float = PEAK_MB) -> None:
    assert run.peak_mb < mb, f"peak {run.peak_mb:.0f} MB >= {mb} MB"
