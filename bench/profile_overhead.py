"""What ``traceinsight profile`` costs a training run: the CPU sample model
(``sample_traces/record_cpu_transformer.py --plain``, a 2-layer transformer LM on one intra-op
thread) trained plain and under ``traceinsight profile``, in fresh processes, alternating.

Per-step times come from the script itself (wall and CPU time around each step, so the
profiler's own work inside the step counts); the overhead is the median of the recorded
(active) steps against the same steps of the plain run. CPU time is the figure to trust on a
shared machine (the model runs on one thread, so uncontended wall = CPU; other processes on
the machine stretch wall time, not CPU time). The command's total is the CPU time of its
process tree: interpreter and torch start-up, training, and the trace export.

    python bench/profile_overhead.py [--steps 20] [--repeat 3] [--out bench/results/...json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "sample_traces" / "record_cpu_transformer.py"
TI = [sys.executable, "-m", "traceinsight"]
WAIT, WARMUP = 1, 1


def run(cmd: list[str]) -> tuple[float, float, dict[str, list[float]]]:
    """Wall and CPU seconds of ``cmd`` (its process tree) and the step times it printed."""
    t0 = time.perf_counter()
    c0 = os.times()
    p = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=REPO)
    wall = time.perf_counter() - t0
    c1 = os.times()
    cpu = (c1.children_user - c0.children_user) + (c1.children_system - c0.children_system)
    line = [ln for ln in p.stdout.splitlines() if ln.startswith('{"step_s"')][-1]
    return wall, cpu, json.loads(line)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20, help="recorded steps (after wait, warmup)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--out", type=Path, default=REPO / "bench" / "results" / "profile_overhead.json"
    )
    args = ap.parse_args()
    plain = [sys.executable, str(SCRIPT), "--plain", "--steps", str(args.steps)]
    modes = {
        "plain": None,
        "profile": [],
        "profile --no-stack --no-memory": ["--no-stack", "--no-memory"],
    }
    runs: dict[str, list[dict]] = {m: [] for m in modes}
    first = WAIT + WARMUP  # the recorded steps are first .. first + steps - 1
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeat):
            for mode, extra in modes.items():
                if extra is None:
                    cmd = plain
                else:
                    cmd = [
                        *TI,
                        "-q",
                        "profile",
                        "-o",
                        f"{tmp}/{i}-{len(extra)}",
                        "--force",
                        "--wait",
                        str(WAIT),
                        "--warmup",
                        str(WARMUP),
                        "--active",
                        str(args.steps),
                        *extra,
                        "--",
                        *plain,
                    ]
                wall, cpu, steps = run(cmd)
                sl = slice(first, first + args.steps)
                rec = {
                    "wall_s": wall,
                    "cpu_s": cpu,
                    "step_median_s": statistics.median(steps["step_s"][sl]),
                    "step_cpu_median_s": statistics.median(steps["step_cpu_s"][sl]),
                }
                runs[mode].append(rec)
                print(
                    f"{mode:32} run {i}: step {1e3 * rec['step_cpu_median_s']:6.2f} ms CPU "
                    f"({1e3 * rec['step_median_s']:6.2f} ms wall); command {cpu:6.2f} s CPU "
                    f"({wall:6.2f} s wall)",
                    flush=True,
                )

    def med(mode: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[mode])

    summary = {}
    for mode in runs:
        step, cpu = med(mode, "step_cpu_median_s"), med(mode, "cpu_s")
        summary[mode] = {
            "step_cpu_ms": 1e3 * step,
            "step_wall_ms": 1e3 * med(mode, "step_median_s"),
            "command_cpu_s": cpu,
            "command_wall_s": med(mode, "wall_s"),
            "step_overhead_pct": 100 * (step / med("plain", "step_cpu_median_s") - 1),
            "command_overhead_cpu_s": cpu - med("plain", "cpu_s"),
        }
        x = summary[mode]
        print(
            f"{mode:32} step {x['step_cpu_ms']:6.2f} ms CPU ({x['step_overhead_pct']:+.0f}%), "
            f"command {cpu:6.2f} s CPU ({x['command_overhead_cpu_s']:+.2f} s)"
        )
    record = {
        "steps": args.steps,
        "repeat": args.repeat,
        "machine": platform.platform(),
        "python": platform.python_version(),
        "summary": summary,
        "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
