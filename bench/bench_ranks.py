"""Many-ranks benchmark: ingest and diagnose of a synthetic multi-rank job.

Two jobs from the trace simulator (``tracegen.workloads.build_ranks``, every rank simulated in
lockstep, a straggler rank whose GPU is 1.3x slower, DDP all-reduce on one process group):

* ``--ranks`` (default 64) ranks of a small transformer (2 layers, 4 steps), and
* ``--many`` (default 1,024) ranks of tiny traces (1 layer, 3 steps),

written once under ``bench/.cache/`` (the folder name carries the rank count and a hash of the
workload). Each measured command runs in a fresh process (``bench/measure.py``: wall time, peak
RSS of the process and of its whole process tree, workers included):

* ingest (``traceinsight ingest JOB -o STORE --force``) with ``--jobs 1``, ``--jobs 2`` and
  ``--scheduler local --jobs 2`` (a Dask LocalCluster of 2 worker processes),
* diagnose (``traceinsight diagnose STORE --no-cache --json R``) with the same runners (with a
  scheduler, the per-rank summaries are Dask tasks over the rank partitions),
* for the large job: ``--jobs 2`` only, and the HTML report's size;
* with ``--shape NAME`` a real-shaped job (``bench/rank_shapes.py``: the shape's trace of
  ``--shape-mb`` as each of ``--shape-ranks`` ranks): ingest with ``--jobs 2``, diagnose with
  ``--jobs 1`` and ``--jobs 2`` (each rank partition attributed, with its step table and
  summary, in its own worker), every step of every rank.

With ``--repeat N`` (N > 1) each diagnose runs once with the process tree's memory sampled and
N times timed without the sampler (whose /proc walks take CPU from a 2-core machine's busy
workers); its wall time is the fastest timed run's, its memory the sampled run's. Each job records
``diagnose_speedup``: the wall time with 1 worker over that with 2, from the same run. Results
go to ``bench/results/ranks.json`` (and a table on stdout).

Usage::

    .venv/bin/python bench/bench_ranks.py                   # 64 and 1,024 ranks
    .venv/bin/python bench/bench_ranks.py --ranks 8 --many 0 --out /tmp/quick.json
    .venv/bin/python bench/bench_ranks.py --many 0 --shape hta_a100 --shape-mb 88 \\
        --shape-ranks 16 --out bench/results/ranks_workers.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import time
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from measure import measure

from tracegen.workloads import MiB, Workload, build_ranks

CACHE = ROOT / "bench" / ".cache"
#: what each measured process runs: the library calls behind ``traceinsight ingest`` and
#: ``diagnose --no-cache`` (not the CLI module, so the figures do not depend on its options)
DRIVER = """\
import json, sys
from pathlib import Path
from traceinsight.util.distributed import Runner, using
from traceinsight.ingest import ingest
from traceinsight.store.core import TraceStore
op, src, out, jobs, sched = sys.argv[1:6]
if __name__ == "__main__":
    with using(Runner(jobs=int(jobs), scheduler=sched or None, fresh=True)):
        if op == "ingest":
            ingest([src], out, force=True, quiet=True)
        elif op == "diagnose":
            from traceinsight.diagnose import diagnose
            Path(out).write_text(diagnose(TraceStore.open(src)).to_json())
        else:
            from traceinsight.render.html import render_html
            from traceinsight.result import DiagnosisResult
            Path(out).write_text(render_html(DiagnosisResult.load(src)))
"""


def job(n: int, *, tiny: bool) -> Workload:
    """The simulated job of ``n`` ranks (a straggler at rank 37 mod n)."""
    if tiny:
        return Workload(
            hidden=256,
            seq=128,
            batch=1,
            layers=1,
            steps=3,
            world_size=n,
            comm_bytes=8 * MiB,
            comm_overlap=0.5,
            straggler_rank=37 % n,
            straggler_slowdown=1.3,
            memory=False,
            with_stack=False,
            record_shapes=False,
        )
    return Workload(
        hidden=1024,
        seq=512,
        batch=2,
        layers=2,
        steps=4,
        world_size=n,
        comm_bytes=64 * MiB,
        comm_overlap=0.5,
        straggler_rank=37 % n,
        straggler_slowdown=1.3,
        with_stack=False,
    )


def build(w: Workload) -> Path:
    """The job's folder of rank-N.json.gz files (built once, cached by the workload's hash)."""
    tag = hashlib.sha256(json.dumps(asdict(w), sort_keys=True).encode()).hexdigest()[:10]
    folder = CACHE / f"ranks-{w.world_size}-{tag}"
    if (folder / ".done").is_file():
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    t = time.perf_counter()
    for r, b in enumerate(build_ranks(w)):
        b.write(str(folder / f"rank-{r}.json.gz"))
    (folder / ".done").write_text("")
    print(
        f"built {w.world_size} ranks in {time.perf_counter() - t:.1f}s -> {folder}", file=sys.stderr
    )
    return folder


def run(label: str, args: list[str], env: dict[str, str], *, sample: bool = True) -> dict:
    res = measure([sys.executable, "-c", DRIVER, *args], env=env, label=label, sample=sample)
    res.pop("stdout_tail", None)
    mem = f"{res['tree_peak_rss_mb']:>8.1f} MB (tree)" if sample else f"{'(timed)':>16}"
    print(
        f"  {label:<44} {res['wall_s']:>8.2f} s  {mem}  {res['peak_rss_mb']:>8.1f} MB (main)",
        file=sys.stderr,
    )
    return {"label": label, **res}


#: (label, jobs, scheduler)
RUNNERS = (
    ("1 worker", "1", ""),
    ("2 workers", "2", ""),
    ("Dask LocalCluster, 2 workers", "2", "local"),
)


def bench_job(
    folder: Path,
    work: Path,
    env: dict[str, str],
    runners: tuple,
    *,
    repeat: int = 1,
    ingest_runners: tuple | None = None,
) -> dict:
    store = work / "store"
    files = sorted(folder.glob("rank-*.json*"))
    size = sum(p.stat().st_size for p in files)
    out: dict = {
        "folder": folder.name,
        "ranks": len(files),
        "input_mb": round(size / 2**20, 1),
        "ingest": [],
        "diagnose": [],
    }
    for name, jobs, sched in runners:
        if ingest_runners is None or name in ingest_runners or not store.is_dir():
            out["ingest"].append(
                run(f"ingest, {name}", ["ingest", str(folder), str(store), jobs, sched], env)
            )
        cmd = ["diagnose", str(store), str(work / "r.json"), jobs, sched]
        label = f"diagnose, {name}"
        # with repeats: one run samples the process tree's memory, the timed runs do not (the
        # sampler's /proc walks take CPU from a 2-core machine's busy workers); the fastest
        # timed run is the wall time
        memory_run = run(label, cmd, env)
        timed = [run(label, cmd, env, sample=False) for _ in range(repeat)] if repeat > 1 else []
        best = min(timed or [memory_run], key=lambda r: r["wall_s"])
        out["diagnose"].append(
            {
                **best,
                **{k: v for k, v in memory_run.items() if k.startswith("tree_")},
                "runs": len(timed) or 1,
                "memory_run_wall_s": memory_run["wall_s"],
                "peak_pss_mb_max": memory_run.get("tree_peak_pss_mb", 0),
            }
        )
    walls = {d["label"]: d["wall_s"] for d in out["diagnose"]}
    one, two = walls.get("diagnose, 1 worker"), walls.get("diagnose, 2 workers")
    out["diagnose_speedup"] = round(one / two, 2) if one and two else None
    html = work / "r.html"
    run(
        "report (HTML of the saved result)",
        ["report", str(work / "r.json"), str(html), "1", ""],
        env,
    )
    out["html_mb"] = round(html.stat().st_size / 2**20, 2) if html.is_file() else None
    r = json.loads((work / "r.json").read_text())
    cross = (r.get("extra") or {}).get("cross_rank") or {}
    out["matched_collectives"] = (cross.get("matching") or {}).get("matched")
    out["straggler"] = cross.get("straggler")
    out["findings"] = [f["rule"] for f in r.get("findings", [])]
    out["steps_analysed"] = sum(x.get("steps") or 0 for x in r["summary"].get("ranks", []))
    out["result_json_mb"] = round((work / "r.json").stat().st_size / 2**20, 2)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--many", type=int, default=1024, help="ranks of the tiny job (0: skip)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "ranks.json")
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="timed runs of each diagnose (the fastest; >1: plus one with memory sampled)",
    )
    ap.add_argument("--no-dask", action="store_true", help="local processes only")
    ap.add_argument("--shape", help="also a real-shaped job of this shape (bench/shapes.py)")
    ap.add_argument("--shape-mb", type=float, default=88)
    ap.add_argument("--shape-ranks", type=int, default=16)
    a = ap.parse_args()
    work = Path(os.environ.get("TMPDIR", "/tmp")) / f"ti-bench-ranks-{os.getpid()}"
    work.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "TRACEINSIGHT_CACHE_DIR": str(work / "cache"),
        "TRACEINSIGHT_NO_PROGRESS": "1",
    }
    res: dict = {
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
        "when": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    try:
        if a.ranks:
            folder = build(job(a.ranks, tiny=False))
            print(f"{a.ranks}-rank job:", file=sys.stderr)
            runners = RUNNERS[:2] if a.no_dask else RUNNERS
            res["job"] = bench_job(folder, work / "job", env, runners, repeat=a.repeat)
        if a.shape:
            from rank_shapes import ensure_job

            folder = ensure_job(a.shape, a.shape_mb, a.shape_ranks)
            print(f"{a.shape_ranks} ranks of {a.shape} ({a.shape_mb:g} MB each):", file=sys.stderr)
            res["shaped"] = bench_job(
                folder,
                work / "shaped",
                env,
                RUNNERS[1::-1],  # ingested once, with 2 workers
                repeat=1,
                ingest_runners=("2 workers",),
            )
            res["shaped"]["shape"] = a.shape
        if a.many:
            folder = build(job(a.many, tiny=True))
            print(f"{a.many}-rank job of small traces:", file=sys.stderr)
            res["many"] = bench_job(folder, work / "many", env, RUNNERS[1:2])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(res, indent=1) + "\n")
    print(
        json.dumps(
            {
                k: {kk: vv for kk, vv in v.items() if kk not in ("ingest", "diagnose")}
                for k, v in res.items()
                if isinstance(v, dict)
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
