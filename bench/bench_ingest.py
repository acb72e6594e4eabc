"""Ingest benchmark: ``traceinsight ingest`` against HTA's ``TraceAnalysis`` load, same trace.

One run:

1. builds the benchmark trace if it is not cached (:mod:`tracegen.bench`, cached under
   ``bench/.cache/``; the cache name carries the size, the seed and a hash of the generator, so
   a changed generator never reuses a stale trace),
2. reads the file once so that every measured process starts with a warm page cache,
3. runs, each in a fresh process, and measures its wall time (process start to exit, interpreter
   start-up and imports included) and peak RSS (``ru_maxrss`` of that child, from ``os.wait4``):

   * ``open(path, 'rb').read()`` and ``json.loads`` of it (context: the I/O and stdlib floor),
   * ``msgspec.json.decode`` (context: the decoder traceinsight uses), when msgspec is installed,
   * ``traceinsight --quiet ingest TRACE -o <fresh store> --force`` (best of ``--repeat``),
   * HTA: ``TraceAnalysis(trace_dir=<dir>, trace_files={0: TRACE})`` (``trace_files`` skips
     HTA's rank scan, which would take every .json/.gz in the folder for a rank file; best of
     ``--hta-repeat``),
   * attribution + breakdown from the store, and ``diagnose`` first / again / with a changed
     threshold,

   The peak memory of a process tree (summed RSS and PSS) is sampled from ``/proc`` every
   50 ms. For the two compared rows (ingest and HTA) that sampling runs once, in a separate
   memory run, and the timed runs go unsampled: on a 2-core machine the sampler's reads take
   CPU from a two-process ingest but not from HTA's one-process load.

4. prints a table and the ratios (time HTA / ingest, peak RSS ingest / HTA) against the target
   (ingest at least 10x faster than HTA, with at most half its peak RSS), and writes the result
   to ``bench/results/latest.json``.

HTA is looked up in this interpreter (``import hta``); ``--hta-python`` runs it with another
one (a separate venv); ``--skip-hta`` measures traceinsight only.

Usage::

    .venv/bin/python bench/bench_ingest.py                 # 320 MB, HTA from this venv
    .venv/bin/python bench/bench_ingest.py --repeat 3 --hta-python /tmp/htavenv/bin/python
    .venv/bin/python bench/bench_ingest.py --size-mb 40 --skip-hta --out /tmp/quick.json
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CACHE = HERE / ".cache"
RESULTS = HERE / "results" / "latest.json"
DEFAULT_SEED = 20260
sys.path.insert(0, str(ROOT))  # report the checkout's traceinsight version
sys.path.insert(0, str(HERE))  # bench/ is not a package: its helper modules
TARGET_TIME_RATIO = 10.0  # HTA wall / ingest wall, at least
TARGET_RSS_RATIO = 0.5  # ingest peak RSS / HTA peak RSS, at most

from measure import measure

READ_SNIPPET = "import sys\nwith open(sys.argv[1], 'rb') as f: data = f.read()\nprint(len(data))"
JSON_SNIPPET = ("import json, sys\nwith open(sys.argv[1], 'rb') as f: d = json.loads(f.read())\n"
                "print(len(d['traceEvents']))")
MSGSPEC_SNIPPET = ("import msgspec, sys\nwith open(sys.argv[1], 'rb') as f: "
                   "d = msgspec.json.decode(f.read())\nprint(len(d['traceEvents']))")
JSON_NOGC_SNIPPET = "import gc\ngc.disable()\n" + JSON_SNIPPET
MSGSPEC_TYPED_SNIPPET = """\
import gc, sys
from typing import Any
import msgspec
gc.disable()
class Ev(msgspec.Struct, gc=False):
    ph: Any = None
    cat: Any = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    id: Any = None
    args: msgspec.Raw = msgspec.Raw(b"null")
class Top(msgspec.Struct):
    traceEvents: list[Ev]
with open(sys.argv[1], "rb") as f:
    t = msgspec.json.decode(f.read(), type=Top)
print(len(t.traceEvents))
"""
HTA_SNIPPET = """\
import sys, json
from hta.trace_analysis import TraceAnalysis
ta = TraceAnalysis(trace_dir=sys.argv[1], trace_files={0: sys.argv[2]})
df = ta.t.get_trace(0)
print(json.dumps({"rows": int(len(df)), "columns": int(df.shape[1])}))
"""
ANALYSIS_SNIPPET = """\
import sys, time, json
t0 = time.perf_counter()
from traceinsight.store import TraceStore
from traceinsight.analysis import Analysis
an = Analysis(TraceStore.open(sys.argv[1]))
t1 = time.perf_counter()
a = an.attribution
t2 = time.perf_counter()
b = an.breakdown
t3 = time.perf_counter()
cov = a.coverage()
print(json.dumps({"open_s": t1 - t0, "attribution_s": t2 - t1, "breakdown_s": t3 - t2,
                  "coverage_pct": cov["coverage_pct"], "kernels": cov["kernels"]}))
"""
HTA_PROBE = """\
import json, importlib.metadata as m, pandas, numpy
import hta.trace_analysis
try:
    v = m.version("HolisticTraceAnalysis")
except m.PackageNotFoundError:
    v = "unknown"
print(json.dumps({"hta": v, "pandas": pandas.__version__, "numpy": numpy.__version__}))
"""


# --- the trace ------------------------------------------------------------------------------------
def generator_hash() -> str:
    h = hashlib.sha256()
    for p in sorted((ROOT / "tracegen").glob("*.py")):  # the simulator and its bench writer
        h.update(p.read_bytes())
    return h.hexdigest()[:10]


def ensure_trace(size_mb: float, seed: int, trace: str | None) -> tuple[Path, dict]:
    if trace:
        p = Path(trace).resolve()
        return p, {"path": str(p), "bytes": p.stat().st_size, "built": False, "source": "--trace"}
    CACHE.mkdir(parents=True, exist_ok=True)
    name = f"bench_{size_mb:g}mb_s{seed}_{generator_hash()}.pt.trace.json"
    p = CACHE / name
    info_path = p.with_name(p.name + ".info.json")
    if p.exists() and info_path.exists():
        info = json.loads(info_path.read_text())
        info["built"] = False
        print(f"trace: cached {p.relative_to(ROOT)}", file=sys.stderr)
        return p, info
    print(f"trace: building {p.relative_to(ROOT)} ({size_mb:g} MB) ...", file=sys.stderr)
    from tracegen.bench import write_trace

    info = write_trace(p, size_mb, seed)
    info["generator"] = generator_hash()
    info_path.write_text(json.dumps(info, indent=2))
    info["built"] = True
    return p, info


def warm(path: Path) -> float:
    t0 = time.perf_counter()
    with open(path, "rb") as f:
        while f.read(64 << 20):
            pass
    return time.perf_counter() - t0


# --- environment ----------------------------------------------------------------------------------
def find_hta(hta_python: str | None) -> tuple[str | None, dict | str]:
    """(interpreter, versions) or (None, why not)."""
    py = hta_python or sys.executable
    if hta_python is None and importlib.util.find_spec("hta") is None:
        return None, ("HTA is not installed in this interpreter (pip install "
                      "holistictraceanalysis==0.5.0, or pass --hta-python PATH)")
    r = subprocess.run([py, "-c", HTA_PROBE], capture_output=True, text=True)
    if r.returncode != 0:
        return None, f"HTA does not import with {py}: {r.stderr.strip().splitlines()[-1:]}"
    return py, json.loads(r.stdout)


def versions() -> dict:
    out = {"python": platform.python_version()}
    for mod in ("traceinsight", "msgspec", "pyarrow", "pandas", "numpy"):
        try:
            m = __import__(mod)
            out[mod] = getattr(m, "__version__", "?")
        except ImportError:
            out[mod] = None
    return out


def machine() -> dict:
    mem = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    cpu = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpus": os.cpu_count(), "affinity": len(os.sched_getaffinity(0)),
            "mem_gib": mem, "cpu": cpu, "platform": platform.platform()}


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


# --- main -----------------------------------------------------------------------------------------
def run(a: argparse.Namespace) -> dict:
    trace, tinfo = ensure_trace(a.size_mb, a.seed, a.trace)
    size = trace.stat().st_size
    tinfo["bytes"] = size
    tinfo["path"] = str(trace.relative_to(ROOT)) if trace.is_relative_to(ROOT) else str(trace)

    hta_py, hta_info = (None, "skipped (--skip-hta)") if a.skip_hta else find_hta(a.hta_python)
    if hta_py is None:
        print(f"HTA: {hta_info}; measuring traceinsight only", file=sys.stderr)

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    scratch = Path(tempfile.mkdtemp(prefix="ti-bench-"))
    env["TRACEINSIGHT_CACHE_DIR"] = str(scratch / "cache")  # never touch the user's cache
    py = sys.executable

    res: dict = {
        "generated_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine(), "versions": versions(), "trace": tinfo,
        "load_avg_before": loadavg(), "runs": {},
    }
    if isinstance(hta_info, dict):
        res["versions"]["hta"] = hta_info.get("hta")
        res["versions"]["hta_env"] = {"python": hta_py, **hta_info}
    else:
        res["versions"]["hta"] = None
        res["hta_skipped"] = hta_info

    res["warm_read_s"] = round(warm(trace), 3)
    runs = res["runs"]
    try:
        def step(key: str, label: str, cmd: list[str], repeat: int = 1,
                 env: dict[str, str] = env, split: bool = False, **kw) -> None:
            """``split``: one run with the memory sampler, then ``repeat`` timed runs without
            it (on a 2-core box the sampler's /proc reads take CPU from a two-process ingest,
            not from a one-process load); otherwise ``repeat`` sampled runs, the fastest kept."""
            tries = []
            mem = None
            if split:
                print(f"  {label} (memory run) ...", file=sys.stderr, flush=True)
                mem = measure(cmd(repeat) if callable(cmd) else cmd, env=env, timeout=a.timeout,
                              label=label, **kw)
                print(f"    {mem['wall_s']:.2f} s, tree {mem.get('tree_peak_rss_mb', 0):.0f} MB",
                      file=sys.stderr)
            for i in range(repeat):
                print(f"  {label}{f' ({i + 1}/{repeat})' if repeat > 1 else ''}"
                      f"{' (timed)' if split else ''} ...", file=sys.stderr, flush=True)
                r = measure(cmd(i) if callable(cmd) else cmd, env=env, timeout=a.timeout,
                            label=label, sample=not split, **kw)
                tries.append(r)
                print(f"    {r['wall_s']:.2f} s, {r['peak_rss_mb']:.0f} MB", file=sys.stderr)
            ok = [t for t in tries if t["exit_code"] == 0] or tries
            best = dict(min(ok, key=lambda t: t["wall_s"]))
            if mem is not None:
                for k in ("tree_peak_rss_mb", "tree_peak_pss_mb"):
                    if k in mem:
                        best[k] = mem[k]
                best["memory_run_wall_s"] = mem["wall_s"]
                if mem["exit_code"] != 0:
                    best["exit_code"] = mem["exit_code"]
            best["label"] = label
            if repeat > 1:
                best["repeat"] = repeat
                best["all_wall_s"] = [t["wall_s"] for t in tries]
                best["all_peak_rss_mb"] = [t["peak_rss_mb"] for t in tries]
            runs[key] = best

        if not a.no_context:
            step("python_startup", "python -c pass", [py, "-c", "pass"])
            step("ti_import", "import traceinsight (cli, ingest)",
                 [py, "-c", "import traceinsight.cli, traceinsight.ingest"])
            if hta_py is not None:
                step("hta_import", "import hta.trace_analysis",
                     [hta_py, "-c", "import hta.trace_analysis"])
            step("read", "read file (bytes)", [py, "-c", READ_SNIPPET, str(trace)])
            step("json_loads", "json.loads", [py, "-c", JSON_SNIPPET, str(trace)])
            step("json_loads_nogc", "json.loads, gc paused",
                 [py, "-c", JSON_NOGC_SNIPPET, str(trace)])
            if importlib.util.find_spec("msgspec") is not None:
                step("msgspec_decode", "msgspec.json.decode (dicts)",
                     [py, "-c", MSGSPEC_SNIPPET, str(trace)])
                step("msgspec_typed", "msgspec typed, raw args, gc paused",
                     [py, "-c", MSGSPEC_TYPED_SNIPPET, str(trace)])

        def ingest_cmd(i: int) -> list[str]:
            store = scratch / f"store-{i}.tistore"
            shutil.rmtree(store, ignore_errors=True)  # fresh: an existing store would be reused
            return [py, "-m", "traceinsight", "--quiet", "ingest", str(trace), "-o", str(store),
                    "--force"]

        step("ingest", "traceinsight ingest" + (f" (best of {a.repeat})" if a.repeat > 1 else ""),
             ingest_cmd, repeat=a.repeat, split=True)
        runs["ingest"]["command"] = "traceinsight --quiet ingest TRACE -o STORE --force"

        # issue 3: attribution + breakdown from the store, against the ingest itself
        store0 = scratch / "store-0.tistore"
        if not store0.exists():
            subprocess.run(ingest_cmd(0), env=env, check=True, capture_output=True)
        step("analysis", "attribution + breakdown (from the store)",
             [py, "-c", ANALYSIS_SNIPPET, str(store0)])
        with contextlib.suppress(ValueError, IndexError):
            runs["analysis"]["inner"] = json.loads(runs["analysis"]["stdout_tail"].splitlines()[-1])
        # a first diagnose (ingest + analysis + rules); a second one that finds the store and
        # the cached result in it; a third with one threshold changed, so the analysis reruns
        # from the store
        diag_cache = scratch / "diag-cache"
        denv = dict(env, TRACEINSIGHT_CACHE_DIR=str(diag_cache))
        diag = [py, "-m", "traceinsight", "--quiet", "diagnose", str(trace), "--json",
                str(scratch / "result.json")]
        step("diagnose_first", "diagnose, first run (ingest + analysis)", diag, env=denv)
        step("diagnose_again", "diagnose again (result cached in the store)", diag, env=denv)
        step("diagnose_reanalyse", "diagnose again, a threshold changed (analysis from the store)",
             [*diag, "--set", "jitter.min_cv_pct=11"], env=denv)

        if hta_py is not None:
            v = hta_info.get("hta", "?") if isinstance(hta_info, dict) else "?"
            step("hta", f"HTA {v} TraceAnalysis load",
                 [hta_py, "-c", HTA_SNIPPET, str(trace.parent), str(trace)],
                 repeat=a.hta_repeat, split=True,
                 log_lines=("Parsed", "Overall parsing", "leaving parse_traces"))
            runs["hta"]["command"] = "TraceAnalysis(trace_dir=DIR, trace_files={0: TRACE})"
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    res["load_avg_after"] = loadavg()

    ing, hta = runs.get("ingest"), runs.get("hta")
    if ing and hta and ing["exit_code"] == 0 and hta["exit_code"] == 0:
        tr = hta["wall_s"] / ing["wall_s"]
        # memory: the whole process tree (traceinsight forks two parse workers), summed RSS
        # (strict: shared pages counted once per process); PSS shown beside it
        tree = "tree_peak_rss_mb"
        mem = tree if tree in ing and tree in hta else "peak_rss_mb"
        rr = ing[mem] / hta[mem]
        pss = ("tree_peak_pss_mb" in ing and "tree_peak_pss_mb" in hta
               and ing["tree_peak_pss_mb"] / hta["tree_peak_pss_mb"])
        res["ratios"] = {"time_hta_over_ingest": round(tr, 2), "rss_ingest_over_hta": round(rr, 3),
                         "rss_measure": mem,
                         "pss_ingest_over_hta": round(pss, 3) if pss else None,
                         # CPU seconds (user + sys) are less sensitive to other load on the box
                         "cpu_time_hta_over_ingest": round(hta["cpu_s"] / max(ing["cpu_s"], 1e-9),
                                                           2)}
        res["target"] = {"time_ratio_min": TARGET_TIME_RATIO, "rss_ratio_max": TARGET_RSS_RATIO,
                         "time_met": tr >= TARGET_TIME_RATIO, "rss_met": rr <= TARGET_RSS_RATIO}
        res["target"]["met"] = res["target"]["time_met"] and res["target"]["rss_met"]
    an = runs.get("analysis", {}).get("inner")
    if an and ing:
        both = an["attribution_s"] + an["breakdown_s"]
        res["analysis"] = {"attribution_plus_breakdown_s": round(both, 3),
                           "ingest_s": ing["wall_s"],
                           "faster_than_ingest": both < ing["wall_s"],
                           "coverage_pct": an["coverage_pct"]}
    d1, d2 = runs.get("diagnose_first"), runs.get("diagnose_again")
    d3 = runs.get("diagnose_reanalyse")
    if d1 and d2 and d1["exit_code"] == 0 and d2["exit_code"] == 0:
        res["rediagnosis"] = {"first_s": d1["wall_s"], "again_s": d2["wall_s"],
                              "fraction": round(d2["wall_s"] / d1["wall_s"], 3)}
        if d3 and d3["exit_code"] == 0:
            res["rediagnosis"].update(reanalyse_s=d3["wall_s"],
                                      reanalyse_fraction=round(d3["wall_s"] / d1["wall_s"], 3))
    return res


def render(res: dict) -> str:
    t = res["trace"]
    m = res["machine"]
    lines = [
        f"trace: {t['path']}  {t['bytes'] / 1e6:.1f} MB"
        + (f", {t['events']:,} events, {t['steps']} steps" if "events" in t else "")
        + (f" (built in {t['build_s']:.0f} s)" if t.get("built") else ""),
        f"machine: {m['cpus']} CPUs, {m['mem_gib']} GiB; load average {res['load_avg_before']} "
        f"before, {res['load_avg_after']} after",
        "versions: " + ", ".join(f"{k} {v}" for k, v in res["versions"].items()
                                 if k != "hta_env" and v),
        "",
        f"{'':38} {'wall s':>8} {'CPU s':>8} {'tree RSS MB':>12} {'tree PSS MB':>12} {'MB/s':>8}",
    ]
    for key, r in res["runs"].items():
        mbps = (t["bytes"] / 1e6 / r["wall_s"]
                if key not in ("python_startup", "ti_import", "hta_import") else None)
        flag = "" if r["exit_code"] == 0 else f"  FAILED (exit {r['exit_code']})"
        lines.append(f"{r['label']:38} {r['wall_s']:8.2f} {r['cpu_s']:8.2f} "
                     f"{r.get('tree_peak_rss_mb', r['peak_rss_mb']):12.0f} "
                     f"{r.get('tree_peak_pss_mb', float('nan')):12.0f} "
                     f"{(f'{mbps:8.1f}' if mbps else ''):>8}{flag}")
    hta_log = res["runs"].get("hta", {}).get("log")
    if hta_log:
        lines.append("HTA's own stage log: " + " | ".join(ln.split(" - ")[-1] for ln in hta_log))
    lines.append("")
    if "ratios" in res:
        r, tg = res["ratios"], res["target"]
        lines.append(f"time  HTA / ingest     = {r['time_hta_over_ingest']:.2f}x   "
                     f"(target >= {tg['time_ratio_min']:g}x: "
                     f"{'met' if tg['time_met'] else 'NOT met'})")
        lines.append(f"peak RSS ingest / HTA = {r['rss_ingest_over_hta']:.3f}    "
                     f"(target <= {tg['rss_ratio_max']:g}: "
                     f"{'met' if tg['rss_met'] else 'NOT met'}; summed over each process tree)")
        if r.get("pss_ingest_over_hta"):
            lines.append(f"peak PSS ingest / HTA = {r['pss_ingest_over_hta']:.3f}    "
                         "(shared pages split between the processes that map them)")
        lines.append(f"CPU time HTA / ingest = {r['cpu_time_hta_over_ingest']:.2f}x   "
                     "(user + sys: less sensitive to other load than wall time)")
    elif res.get("hta_skipped"):
        lines.append(f"HTA: {res['hta_skipped']}")
    if res.get("analysis"):
        x = res["analysis"]
        less = "less" if x["faster_than_ingest"] else "NOT less"
        lines.append(f"attribution + breakdown from the store: "
                     f"{x['attribution_plus_breakdown_s']:.2f} s "
                     f"(ingest {x['ingest_s']:.2f} s: {less}); "
                     f"kernels linked {x['coverage_pct']:.1f}%")
    if res.get("rediagnosis"):
        x = res["rediagnosis"]
        lines.append(f"diagnose again from the store: {x['again_s']:.2f} s = "
                     f"{100 * x['fraction']:.0f}% of the first run ({x['first_s']:.2f} s)")
        if "reanalyse_s" in x:
            lines.append(f"diagnose again with a changed threshold (analysis from the store): "
                         f"{x['reanalyse_s']:.2f} s = {100 * x['reanalyse_fraction']:.0f}% "
                         "of the first run")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=float, default=320,
                    help="trace size in MB (10^6 B); default 320")
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED)
    ap.add_argument("--trace", help="benchmark this trace file instead of the generated one")
    ap.add_argument("--repeat", type=int, default=1,
                    help="timed runs of traceinsight ingest; the best counts")
    ap.add_argument("--hta-repeat", type=int, default=1,
                    help="timed runs of the HTA load; the best counts")
    ap.add_argument("--skip-hta", action="store_true", help="measure traceinsight only")
    ap.add_argument("--hta-python", help="interpreter that has HTA (default: this one)")
    ap.add_argument("--no-context", action="store_true",
                    help="skip the read / json.loads / msgspec context rows")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per child process")
    ap.add_argument("--out", default=str(RESULTS),
                    help="result JSON (default bench/results/latest.json)")
    ap.add_argument("--check", action="store_true", help="exit 1 when the target is not met")
    a = ap.parse_args(argv)

    res = run(a)
    print(render(res))
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2) + "\n")
    print(f"\nresult: {out.resolve()}")
    failed = any(r["exit_code"] != 0 for r in res["runs"].values())
    if failed:
        return 2
    if a.check and not res.get("target", {}).get("met", False):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
