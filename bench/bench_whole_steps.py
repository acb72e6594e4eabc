"""Every step of a trace larger than the analysis budget: before and after, against the whole.

Ingests the generated benchmark rank (:mod:`tracegen.bench`, ``--size-mb``, default 900: a
0.9 GB rank of 233 steps; built once into ``bench/.cache/``), then diagnoses its store three
times, each in a fresh process with the peak PSS of its process tree sampled (``measure.py``):

- ``before``: the code of ``--before`` (a checkout, e.g. main) under
  ``TRACEINSIGHT_MAX_MEMORY_MB=--limit-mb`` (default 1000);
- ``after``: this checkout's code under the same limit;
- ``whole``: this checkout's code without a limit (``--max-memory 100000``): the reference.

It records which steps each result's figures cover and whether the ``after`` result's time
breakdown, rollups and step basis equal the ``whole`` one's exactly. The figures go to
``bench/results/whole_steps.json``. Run it once, on an otherwise idle machine::

    .venv/bin/python bench/bench_whole_steps.py --before /work/main
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from bench_ingest import ensure_generated, machine, versions
from measure import measure

TARGET_PSS_MB = 1200
#: the result sections the step chunks merge (exact sums)
MERGED = ("kernels", "ops", "layers", "module_types", "annotations", "classes", "step_basis")


def _facts(path: Path) -> dict:
    r = json.loads(path.read_text())
    bd = r.get("breakdown") or {}
    ranks = bd.get("ranks") or []
    v = (r.get("metrics") or {}).get("values") or {}
    return {
        "window": (r.get("trace") or {}).get("window"),
        "breakdown_steps": bd.get("steps_total"),
        "step_metrics_steps": v.get("steps"),
        "kernel_calls": sum(
            k.get("calls") or 0
            for k in (r.get("rollups") or {}).get("kernels", [])
            if isinstance(k.get("calls"), int)
        ),
        "busy_ns": [x.get("busy_ns") for x in ranks],
        "idle_ns": [x.get("idle_ns") for x in ranks],
        "wall_ns": [x.get("wall_ns") for x in ranks],
        "headline": r.get("headline"),
    }


def _commit(code: Path) -> str | None:
    r = subprocess.run(
        ["git", "-C", str(code), "rev-parse", "HEAD"], capture_output=True, text=True, check=False
    )
    return r.stdout.strip() or None


def _same(a: Path, b: Path) -> dict[str, bool]:
    x, y = json.loads(a.read_text()), json.loads(b.read_text())
    out = {"breakdown": x.get("breakdown") == y.get("breakdown")}
    for k in MERGED:
        out[k] = (x.get("rollups") or {}).get(k) == (y.get("rollups") or {}).get(k)
    # the metrics of GPU time and kernels the findings test (every step's when merged)
    mx, my = (x.get("metrics") or {}).get("values", {}), (y.get("metrics") or {}).get("values", {})
    out["metrics"] = all(_close(mx.get(k), my.get(k)) for k in METRICS)
    out["metrics_differing"] = [k for k in METRICS if not _close(mx.get(k), my.get(k))]
    return out


#: the metrics compared (as tests/test_whole_steps.py's WHOLE_METRICS)
METRICS = (
    "gpu_busy_pct",
    "gpu_idle_pct",
    "compute_pct",
    "comm_pct",
    "exposed_comm_pct",
    "memcpy_exposed_pct",
    "idle_launch_pct",
    "idle_host_pct",
    "idle_sync_pct",
    "gpu_idle_steady_pct",
    "kernels_per_step",
    "small_kernel_pct",
    "median_kernel_ns",
    "gemm_time_pct",
    "elementwise_time_pct",
)


def _close(a: object, b: object) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))
    return a == b


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mb", type=float, default=900)
    ap.add_argument("--seed", type=int, default=20260)
    ap.add_argument("--limit-mb", type=float, default=1000)
    ap.add_argument("--before", help="a checkout whose code is the 'before' run")
    ap.add_argument("--out", default=str(HERE / "results" / "whole_steps.json"))
    a = ap.parse_args(argv)

    trace, info = ensure_generated(a.size_mb, a.seed)
    scratch = Path(tempfile.mkdtemp(prefix="ti-whole-"))
    store = scratch / "rank.tistore"
    py = sys.executable

    def env_for(code: Path, limit: float | None) -> dict[str, str]:
        env = dict(
            os.environ,
            PYTHONDONTWRITEBYTECODE="1",
            TRACEINSIGHT_CACHE_DIR=str(scratch / "cache"),
            PYTHONPATH=str(code),
        )
        env.pop("TRACEINSIGHT_MAX_MEMORY_MB", None)
        if limit is not None:
            env["TRACEINSIGHT_MAX_MEMORY_MB"] = f"{limit:g}"
        return env

    for code in {ROOT, *([Path(a.before)] if a.before else [])}:
        subprocess.run(
            [py, "-m", "compileall", "-q", str(code / "traceinsight")],
            check=False,
            capture_output=True,
        )
    res: dict = {
        "generated_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine(),
        "versions": versions(),
        "trace": info,
        "limit_mb": a.limit_mb,
        "target_pss_mb": TARGET_PSS_MB,
        "load_avg_before": os.getloadavg(),
        "runs": {},
        "diagnosis": {},
    }
    try:
        print("ingest ...", file=sys.stderr, flush=True)
        res["runs"]["ingest"] = measure(
            [py, "-m", "traceinsight", "--quiet", "ingest", str(trace), "-o", str(store)],
            env=env_for(ROOT, None),
            timeout=3600,
            label="ingest",
            pss_every=2,
        )
        runs = [("whole", ROOT, None, ["--max-memory", "100000"]), ("after", ROOT, a.limit_mb, [])]
        if a.before:
            runs.insert(0, ("before", Path(a.before), a.limit_mb, []))
        for name, code, limit, extra in runs:
            print(f"diagnose ({name}) ...", file=sys.stderr, flush=True)
            out = scratch / f"{name}.json"
            res["runs"][name] = measure(
                [
                    py,
                    "-P",  # the code of PYTHONPATH, not of the working directory
                    "-m",
                    "traceinsight",
                    "--quiet",
                    "diagnose",
                    str(store),
                    "--recompute",
                    "--json",
                    str(out),
                    *extra,
                ],
                env=env_for(code, limit),
                timeout=3600,
                label=name,
                pss_every=2,
            )
            res["runs"][name]["load_avg_after"] = os.getloadavg()
            res["runs"][name]["code"] = {"path": str(code), "commit": _commit(code)}
            print(json.dumps(res["runs"][name]), file=sys.stderr, flush=True)
            if out.exists():
                res["diagnosis"][name] = _facts(out)
        if (scratch / "after.json").exists() and (scratch / "whole.json").exists():
            res["after_equals_whole"] = _same(scratch / "after.json", scratch / "whole.json")
        if (scratch / "before.json").exists() and (scratch / "whole.json").exists():
            res["before_equals_whole"] = _same(scratch / "before.json", scratch / "whole.json")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    res["load_avg_after"] = os.getloadavg()
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2) + "\n")
    for k, r in res["runs"].items():
        print(
            f"{k:7} wall {r['wall_s']:7.1f} s  CPU {r['cpu_s']:7.1f} s  peak PSS "
            f"{r.get('tree_peak_pss_mb', 0):7.0f} MB  exit {r['exit_code']}"
        )
    print(json.dumps({k: res.get(k) for k in ("after_equals_whole", "before_equals_whole")}))
    print(f"result: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
