"""Measuring one child process for the ingest benchmark: wall and CPU time, peak RSS of the
process (``wait4``) and of its process tree (sampled from ``/proc``)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  #: the children run in the checkout

# --- measuring one child process ------------------------------------------------------------------
# Linux carries the spawning process's peak RSS into the child's ru_maxrss across exec (the
# parent's mm high-water mark is folded in when exec replaces it). So the measured command is
# not spawned by this process, which holds the trace builder and more; a minimal launcher (a bare
# interpreter, ~10 MB) posix_spawns it and reports wait4's rusage for it. The launcher's own
# size is the floor of every peak RSS reported (see the "python -c pass" row).
LAUNCHER = """\
import os, sys, time
t0 = time.perf_counter()
pid = os.posix_spawn(sys.argv[2], sys.argv[2:], os.environ)
_, status, ru = os.wait4(pid, 0)
wall = time.perf_counter() - t0
with open(sys.argv[1], "w") as f:
    code = os.waitstatus_to_exitcode(status)
    f.write(f"{wall} {ru.ru_maxrss} {ru.ru_utime} {ru.ru_stime} {code}")
"""


class TreeSampler:
    """Samples the summed RSS (every 50 ms) and PSS (every ``pss_every``-th sample) of a tree.

    ``ru_maxrss`` covers one process only; traceinsight parses large files in two forked
    workers, so the fair figure is the whole tree. PSS splits pages shared by several
    processes (the forked workers share the parent's trace bytes) among them; summed RSS counts
    them once per process and is the strict upper bound. Both are reported.
    """

    def __init__(
        self,
        root_pid: int,
        interval: float = 0.05,
        pss_every: int = 4,
        kill_above_mb: float | None = None,
    ) -> None:
        import threading

        self.root = root_pid
        self.interval = interval
        self.pss_every = pss_every
        self.kill_above_kb = kill_above_mb * 1024 if kill_above_mb else None
        self.killed_at_kb = 0
        self.peak_rss_kb = 0
        self.peak_pss_kb = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    @staticmethod
    def _tree(root: int) -> list[int]:
        children: dict[int, list[int]] = {}
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open(f"/proc/{d}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue
            ppid = int(stat[stat.rfind(b")") + 2 :].split()[1])
            children.setdefault(ppid, []).append(int(d))
        out, todo = [], [root]
        while todo:
            pid = todo.pop()
            out.append(pid)
            todo.extend(children.get(pid, []))
        return out

    @staticmethod
    def _mem(pid: int) -> tuple[int, int]:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                rss = pss = 0
                for line in f:
                    if line.startswith("Rss:"):
                        rss = int(line.split()[1])
                    elif line.startswith("Pss:"):
                        pss = int(line.split()[1])
                return rss, pss
        except OSError:
            return 0, 0

    def _run(self) -> None:
        page_kb = os.sysconf("SC_PAGE_SIZE") // 1024
        n = 0
        pids: list[int] = []
        while not self._stop.is_set():
            if n % 2 == 0:  # helpers come and go: rescan /proc every 2nd sample
                pids = self._tree(self.root)
            rss = 0
            for pid in pids:  # statm is cheap: RSS every sample
                try:
                    with open(f"/proc/{pid}/statm") as f:
                        rss += int(f.read().split()[1]) * page_kb
                except OSError:
                    pass
            self.peak_rss_kb = max(self.peak_rss_kb, rss)
            if self.kill_above_kb and rss > self.kill_above_kb and not self.killed_at_kb:
                self.killed_at_kb = rss  # protect a shared machine: stop the whole group
                with contextlib.suppress(OSError):
                    os.killpg(self.root, 9)
            if n % self.pss_every == 0:  # smaps_rollup walks the page tables
                self.peak_pss_kb = max(self.peak_pss_kb, sum(self._mem(p)[1] for p in pids))
            n += 1
            self._stop.wait(self.interval)

    def stop(self) -> None:
        self._stop.set()
        self._t.join()


def measure(
    cmd: list[str],
    *,
    env: dict[str, str] | None = None,
    timeout: float = 3600,
    label: str = "",
    log_lines: tuple[str, ...] = (),
    sample: bool = True,
    pss_every: int = 4,
    kill_above_mb: float | None = None,
) -> dict:
    """Run ``cmd`` in a fresh process: wall time, its own peak RSS (wait4 rusage), and (with
    ``sample``) the peak summed RSS / PSS of its process tree."""
    import time

    exe = cmd[0] if os.path.isabs(cmd[0]) else (shutil.which(cmd[0]) or cmd[0])
    t0 = time.perf_counter()
    with (
        tempfile.TemporaryFile() as out,
        tempfile.TemporaryFile() as err,
        tempfile.NamedTemporaryFile("r", suffix=".rusage") as rep,
    ):
        p = subprocess.Popen(
            [sys.executable, "-S", "-c", LAUNCHER, rep.name, exe, *cmd[1:]],
            stdout=out,
            stderr=err,
            env=env,
            cwd=str(ROOT),
            start_new_session=True,
        )
        sampler = (
            TreeSampler(p.pid, pss_every=pss_every, kill_above_mb=kill_above_mb)
            if sample and os.path.exists("/proc/self/smaps_rollup")
            else None
        )
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, 9)
            p.wait()
        finally:
            if sampler:
                sampler.stop()
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode(errors="replace")
        stderr = err.read().decode(errors="replace")
        report = rep.read().split()
    if len(report) == 5:
        wall, maxrss_kb, ut, st, code = (
            float(report[0]),
            int(report[1]),
            float(report[2]),
            float(report[3]),
            int(report[4]),
        )
    else:  # the launcher itself failed or was killed (timeout, memory ceiling)
        wall, maxrss_kb, ut, st, code = (time.perf_counter() - t0, 0, 0.0, 0.0, p.returncode or -9)
    launcher_kb = 0
    if sampler:
        # the sampled tree includes the ~10 MB launcher; ru_maxrss does not
        res_tree = {
            "tree_peak_rss_mb": round(max(sampler.peak_rss_kb - launcher_kb, 0) / 1024, 1),
            "tree_peak_pss_mb": round(sampler.peak_pss_kb / 1024, 1),
        }
    else:
        res_tree = {}
    res = {
        "wall_s": round(wall, 3),
        "peak_rss_mb": round(maxrss_kb / 1024, 1),
        **res_tree,
        "cpu_s": round(ut + st, 3),
        "user_s": round(ut, 3),
        "sys_s": round(st, 3),
        "exit_code": code,
        "stdout_tail": stdout.strip()[-400:],
    }
    if log_lines:  # keep the child's own timing lines (HTA logs its parse stages)
        res["log"] = [ln.strip() for ln in stderr.splitlines() if any(k in ln for k in log_lines)][
            -10:
        ]
    if sampler and sampler.killed_at_kb:
        res["killed_above_mb"] = kill_above_mb
        res["killed_at_rss_mb"] = round(sampler.killed_at_kb / 1024, 1)
    if code != 0:
        res["stderr_tail"] = stderr.strip()[-2000:]
        print(
            f"  ! {label or cmd[0]} failed with exit code {code}:\n{stderr.strip()[-2000:]}",
            file=sys.stderr,
        )
    return res
