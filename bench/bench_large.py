"""A trace larger than memory: ingest a generated 10 GB trace, then diagnose its store.

The trace is the simulator's benchmark trace (:mod:`tracegen.bench`) streamed to
``--size-mb`` (default 10240: 10.2 GB of JSON, 43 M events); it is built once into
``bench/.cache/`` (about an hour on 2 shared cores). Each step runs in a fresh process with the
peak PSS of its process tree sampled (``measure.py``): ``traceinsight ingest TRACE -o STORE``
(chunks read and written as parquet row groups as they come), then ``traceinsight diagnose
STORE`` (the analysis reads the store's tables; the result is cached in the store). Target:
both at most 4 GB. The whole store's analysis would need more, so ``diagnose`` analyses the
trace in step chunks that fit its default ``--max-memory`` of 4096 MB, one at a time, the
last of them the trace's last steps that fit (:mod:`traceinsight.store.window`,
:mod:`traceinsight.diagnose.chunks`; the window is recorded with the figures). The figures
go to ``bench/results/10gb.json``.

Usage::

    nohup .venv/bin/python bench/bench_large.py > bench/.cache/large.log 2>&1 &
    .venv/bin/python bench/bench_large.py --size-mb 1024 --out /tmp/1gb.json
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

from bench_ingest import ensure_generated, machine, versions, warm
from measure import measure

TARGET_PSS_MB = 4096


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mb", type=float, default=10240)
    ap.add_argument("--seed", type=int, default=20260)
    ap.add_argument("--trace", help="use this trace file instead of the generated one")
    ap.add_argument("--store", help="keep the store here (default: a temporary folder)")
    ap.add_argument("--skip-ingest", action="store_true", help="diagnose the --store as it is")
    ap.add_argument(
        "--diagnose-limit-mb",
        type=float,
        default=12000,
        help="stop diagnose when its process tree's RSS passes this (a shared "
        "machine's safety margin; recorded in the result); 0: no limit",
    )
    ap.add_argument("--out", default=str(HERE / "results" / "10gb.json"))
    a = ap.parse_args(argv)

    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(ROOT / "traceinsight")],
        check=False,
        capture_output=True,
        env=dict(os.environ, PYTHONDONTWRITEBYTECODE=""),
    )
    if a.skip_ingest:
        trace, info = Path(a.store or "-"), {"skipped": "ingest (--skip-ingest)"}
    elif a.trace:
        trace = Path(a.trace).resolve()
        info = {"path": str(trace), "bytes": trace.stat().st_size}
        side = trace.with_name(trace.name + ".info.json")
        if side.exists():
            info.update(json.loads(side.read_text()))
    else:
        trace, info = ensure_generated(a.size_mb, a.seed)
    scratch = Path(tempfile.mkdtemp(prefix="ti-large-"))
    store = Path(a.store) if a.store else scratch / "large.tistore"
    env = dict(
        os.environ, PYTHONDONTWRITEBYTECODE="1", TRACEINSIGHT_CACHE_DIR=str(scratch / "cache")
    )
    env["PYTHONPATH"] = os.pathsep.join(x for x in (str(ROOT), env.get("PYTHONPATH")) if x)
    py = sys.executable
    res: dict = {
        "generated_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine(),
        "versions": versions(),
        "trace": info,
        "target_pss_mb": TARGET_PSS_MB,
        "load_avg_before": os.getloadavg(),
        "runs": {},
    }
    if a.skip_ingest and Path(a.out).exists():  # keep the ingest figures of the last run
        old = json.loads(Path(a.out).read_text())
        res["trace"] = old.get("trace", res["trace"])
        for k in ("ingest",):
            if k in old.get("runs", {}):
                res["runs"][k] = old["runs"][k]
        for k in ("store_bytes", "store_rows"):
            if k in old:
                res[k] = old[k]
    try:
        if not a.skip_ingest:
            print(f"reading {trace.name} once (page cache) ...", file=sys.stderr, flush=True)
            warm(trace)
            print("ingest ...", file=sys.stderr, flush=True)
            res["runs"]["ingest"] = measure(
                [
                    py,
                    "-m",
                    "traceinsight",
                    "--quiet",
                    "ingest",
                    str(trace),
                    "-o",
                    str(store),
                    "--force",
                ],
                env=env,
                timeout=4 * 3600,
                label="ingest",
                pss_every=2,
            )
            print(json.dumps(res["runs"]["ingest"]), file=sys.stderr, flush=True)
            res["store_bytes"] = sum(f.stat().st_size for f in store.rglob("*") if f.is_file())
            meta = json.loads((store / "meta.json").read_text())
            res["store_rows"] = meta.get("tables")
            counts = meta.get("event_counts", {})
            res["trace"].setdefault(
                "events", sum(v for c in counts.values() for k, v in c.items() if k != "metadata")
            )
        print("diagnose ...", file=sys.stderr, flush=True)
        res["runs"]["diagnose"] = measure(
            [
                py,
                "-m",
                "traceinsight",
                "--quiet",
                "diagnose",
                str(store),
                "--recompute",
                "--json",
                str(scratch / "result.json"),
            ],
            env=env,
            timeout=4 * 3600,
            label="diagnose",
            pss_every=2,
            kill_above_mb=a.diagnose_limit_mb or None,
        )
        print(json.dumps(res["runs"]["diagnose"]), file=sys.stderr, flush=True)
        if (scratch / "result.json").exists():
            r = json.loads((scratch / "result.json").read_text())
            res["diagnosis"] = {
                "headline": r.get("headline"),
                "findings": [f["rule"] for f in r.get("findings", [])],
                "window": (r.get("trace") or {}).get("window"),
            }
    finally:
        if not a.store:
            shutil.rmtree(scratch, ignore_errors=True)
    res["load_avg_after"] = os.getloadavg()
    res["met"] = {
        k: (r["exit_code"] == 0 and (r.get("tree_peak_pss_mb") or 0) <= TARGET_PSS_MB)
        for k, r in res["runs"].items()
    }
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2) + "\n")
    for k, r in res["runs"].items():
        stop = (
            f"; stopped at {r['killed_at_rss_mb']:.0f} MB RSS"
            if "killed_at_rss_mb" in r
            else ""
            if r["exit_code"] == 0
            else " FAILED"
        )
        print(
            f"{k:9} wall {r['wall_s']:8.1f} s  CPU {r['cpu_s']:8.1f} s  peak PSS "
            f"{r.get('tree_peak_pss_mb', 0):8.0f} MB  (target <= {TARGET_PSS_MB} MB: "
            f"{'met' if res['met'][k] else 'NOT met'}){stop}"
        )
    print(f"result: {out}")
    return 0 if all(res["met"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
