"""Which ``traceinsight profile`` schedule records a warm steady state: the CPU sample model
(``sample_traces/record_cpu_transformer.py --plain``) recorded under ``traceinsight profile``
with each ``--wait`` / ``--warmup`` pair, in fresh processes; for each recording, the first
recorded step against the median of the recorded steps, in CPU time (the script's own
per-iteration ``time.process_time``, the figure to trust on a shared machine) and in wall time
(the trace's ``ProfilerStep`` durations).

    python bench/profile_defaults.py [--active 5] [--repeat 3] [--schedules 1:1 2:1 3:2]
"""

from __future__ import annotations

import argparse
import gzip
import json
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "sample_traces" / "record_cpu_transformer.py"
TI = [sys.executable, "-m", "traceinsight"]


def recorded_steps(folder: Path) -> list[float]:
    """The ProfilerStep wall durations (ms, in step order) of the recording in ``folder``."""
    path = sorted(folder.glob("rank-*.pt.trace.json.gz"))[0]
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        events = json.load(fh)["traceEvents"]
    steps = sorted(
        (int(e["name"].split("#")[1]), float(e["dur"]) / 1e3)
        for e in events
        if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")
    )
    return [d for _, d in steps]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--active", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--schedules", nargs="+", default=["1:1", "2:1", "2:2", "3:2"])
    ap.add_argument(
        "--out", type=Path, default=REPO / "bench" / "results" / "profile_defaults.json"
    )
    args = ap.parse_args()
    runs: dict[str, list[dict]] = {s: [] for s in args.schedules}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeat):
            for sched in args.schedules:
                wait, warmup = (int(x) for x in sched.split(":"))
                total = wait + warmup + args.active
                out = Path(tmp) / f"{sched.replace(':', '-')}-{i}"
                # the script trains 2 + --steps iterations; keep a few past the schedule
                plain = [sys.executable, str(SCRIPT), "--plain", "--steps", str(total)]
                cmd = [
                    *TI,
                    "-q",
                    "profile",
                    "-o",
                    str(out),
                    "--force",
                    "--wait",
                    str(wait),
                    "--warmup",
                    str(warmup),
                    "--active",
                    str(args.active),
                    "--",
                    *plain,
                ]
                p = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=REPO)
                line = [ln for ln in p.stdout.splitlines() if ln.startswith('{"step_s"')][-1]
                # CPU time of each iteration as the script measured it (the model runs on one
                # thread: other processes on a shared machine stretch wall time, not this)
                cpu = [1e3 * x for x in json.loads(line)["step_cpu_s"]]
                # the profiler starts after the first optimizer step and a step ends at each
                # optimizer step, so the recorded ProfilerSteps are iterations wait + warmup ..
                # wait + warmup + active - 1 of the script; the last of them also holds the
                # trace export (after its ProfilerStep ends): left out of the CPU figures
                first = wait + warmup
                rec_cpu = cpu[first : first + args.active - 1]
                steps = recorded_steps(out)
                med, cmed = statistics.median(steps), statistics.median(rec_cpu)
                rec = {
                    "steps_wall_ms": steps,
                    "steps_cpu_ms": rec_cpu,
                    "first_over_median_pct": 100.0 * (rec_cpu[0] / cmed - 1.0),
                    "first_over_median_wall_pct": 100.0 * (steps[0] / med - 1.0),
                }
                runs[sched].append(rec)
                print(
                    f"wait {wait} warmup {warmup} run {i}: first recorded step "
                    f"{rec_cpu[0]:6.2f} ms CPU vs median {cmed:6.2f} ms "
                    f"({rec['first_over_median_pct']:+.1f}%); wall "
                    f"({rec['first_over_median_wall_pct']:+.1f}%); CPU per step: "
                    + " ".join(f"{x:.1f}" for x in rec_cpu),
                    flush=True,
                )
    summary = {
        s: {
            "first_over_median_pct_runs": [r["first_over_median_pct"] for r in rs],
            # the figure: over the runs, the median of (first recorded step / median step - 1)
            "first_over_median_pct": statistics.median(r["first_over_median_pct"] for r in rs),
            "worst_pct": max(abs(r["first_over_median_pct"]) for r in rs),
        }
        for s, rs in runs.items()
    }
    for s, x in summary.items():
        print(
            f"wait:warmup {s}: first recorded step vs median {x['first_over_median_pct']:+.1f}% "
            f"(median over {args.repeat} runs; worst run {x['worst_pct']:.1f}%)"
        )
    record = {
        "active": args.active,
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
