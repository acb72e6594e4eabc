"""Ingest benchmark on real-shaped traces: ``traceinsight ingest`` against HTA 0.5.0's load and
against the bare typed ``msgspec`` decode of the same file, per input shape, in one run.

Shapes (``--shapes``): ``generated`` (the scenario simulator's benchmark trace,
:mod:`tracegen.bench`) and real traces of the shared corpus repeated to the same size with
shifted times and ids (:mod:`shapes`: an HTA A100 training rank, ac2g-flow- and runtime-heavy;
a TraceLens H100 inference trace with Python frames and ``[memory]`` events; a tb_plugin
ResNet50 trace with the 2021 legacy categories). Inputs are built once into ``bench/.cache/``
(ignored by git) and read once before measuring, so every run starts with a warm page cache.

Every row runs in a fresh process (interpreter start-up and imports included):

* ``typed``: ``msgspec`` typed decode of the whole file into event structs, ``args`` kept raw,
  garbage collector paused (what traceinsight's decoder does, and nothing else);
* ``ingest``: ``traceinsight --quiet ingest TRACE -o STORE --force`` (best of ``--repeat``);
* ``hta``: ``TraceAnalysis(trace_dir=DIR, trace_files={0: TRACE})`` (best of ``--hta-repeat``).

Wall time is process start to exit; CPU is user + system time of the process and the helpers
it waited for. Peak memory is the PSS of the whole process tree (``/proc/PID/smaps_rollup`` of
every process in it, summed, sampled every 50 ms): PSS splits pages that forked helpers share
with their parent, where summed RSS would count them twice. Sampling costs CPU, so it runs in a
separate memory run of each row; the timed runs are not sampled.

Targets per real shape: ingest at least 10x faster than HTA, at most 1/3 of HTA's peak PSS,
within 2x of the typed decode (the floor: reading the file into event structs and nothing
else). MB/s of the typed decode and of the ingest are printed per shape.

Fixed cost (``--fixed``, on by default in ``make bench``): the ingest of the same shape at half
the size is timed too, and the fixed cost is the intercept of the line through the two points
(``2 * t(half) - t(full)``): start-up, imports and per-file set-up, what does not scale with the
file. A ``startup`` row times the ingest of a trace of three events (interpreter start, imports,
one file's set-up and an empty store written). Target: a fixed cost under 0.3 s.

For the generated shape, ``diagnose`` runs too: first (ingest +
analysis), again (the result cached in the store: target under 0.5 s) and with a changed
threshold (the analysis again, from the store).

``--size-mb 10240 --shapes generated --skip-hta --skip-typed --diagnose`` is the
larger-than-memory run (``bench/results/10gb.json``).

Usage::

    .venv/bin/python bench/bench_ingest.py                    # what `make bench` runs
    .venv/bin/python bench/bench_ingest.py --size-mb 40 --shapes hta_a100 --skip-hta
"""

from __future__ import annotations

import argparse
import hashlib
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
sys.path.insert(0, str(ROOT))  # the checkout's tracegen and traceinsight
sys.path.insert(0, str(HERE))  # bench/ is not a package: its helper modules

from measure import measure
from shapes import DEFAULT_SHAPES, SHAPES, ensure_shape

TARGET_HTA_TIME = 10.0  #: HTA wall / ingest wall, at least
TARGET_HTA_PSS = 1 / 3  #: ingest peak PSS / HTA peak PSS, at most
TARGET_TYPED = 2.0  #: ingest wall / typed decode wall, at most
TARGET_FIXED_S = 0.3  #: the fixed cost of one ingest (intercept over size), at most
TARGET_AGAIN_S = 0.5  #: a second diagnose on a cached store

TYPED_SNIPPET = """\
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
HTA_PROBE = """\
import json, importlib.metadata as m
import hta.trace_analysis
print(json.dumps({"hta": m.version("HolisticTraceAnalysis")}))
"""


# --- inputs ---------------------------------------------------------------------------------------
def generator_hash() -> str:
    h = hashlib.sha256()
    for p in sorted((ROOT / "tracegen").glob("*.py")):  # the simulator and its bench writer
        h.update(p.read_bytes())
    return h.hexdigest()[:10]


def ensure_generated(size_mb: float, seed: int) -> tuple[Path, dict]:
    CACHE.mkdir(parents=True, exist_ok=True)
    p = CACHE / f"bench_{size_mb:g}mb_s{seed}_{generator_hash()}.pt.trace.json"
    info_path = p.with_name(p.name + ".info.json")
    if p.exists() and info_path.exists():
        return p, {**json.loads(info_path.read_text()), "built": False}
    print(f"  building {p.name} ...", file=sys.stderr, flush=True)
    from tracegen.bench import write_trace

    info = write_trace(p, size_mb, seed, quiet=True)
    info["generator"] = generator_hash()
    info_path.write_text(json.dumps(info, indent=2))
    return p, {**info, "built": True}


def inputs(a: argparse.Namespace) -> list[tuple[str, Path, dict]]:
    out = []
    for name in a.shapes:
        print(f"input {name} ...", file=sys.stderr, flush=True)
        if a.trace:
            p = Path(a.trace).resolve()
            info = {"path": str(p), "bytes": p.stat().st_size, "built": False}
        elif name == "generated":
            p, info = ensure_generated(a.size_mb, a.seed)
            info["what"] = "simulator: GPT-2-medium-sized DDP rank on an H100 (tracegen/bench.py)"
        else:
            p, info = ensure_shape(name, a.size_mb)
            info["what"] = SHAPES[name].what
        info["bytes"] = p.stat().st_size
        out.append((name, p, info))
    return out


def warm(path: Path) -> None:
    with open(path, "rb") as f:
        while f.read(64 << 20):
            pass


TINY_TRACE = (
    b'{"traceEvents": [\n'
    b'{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1000.5, '
    b'"dur": 10.25, "args": {"External id": 1}},\n'
    b'{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, '
    b'"ts": 1002.0, "dur": 3.0, "args": {"External id": 1, "correlation": 7}},\n'
    b'{"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 1010.0, '
    b'"dur": 20.0, "args": {"External id": 1, "correlation": 7, "device": 0, "stream": 7}}\n'
    b'], "baseTimeNanoseconds": 1790000000000000000}\n'
)


# --- environment ----------------------------------------------------------------------------------
def find_hta(hta_python: str | None) -> tuple[str | None, str]:
    """(interpreter, HTA version) or (None, why not)."""
    py = hta_python or sys.executable
    r = subprocess.run([py, "-c", HTA_PROBE], capture_output=True, text=True)
    if r.returncode != 0:
        return None, f"HTA does not import with {py} (pip install holistictraceanalysis==0.5.0)"
    return py, json.loads(r.stdout)["hta"]


def versions() -> dict:
    out = {"python": platform.python_version()}
    for mod in ("traceinsight", "msgspec", "pyarrow", "numpy"):
        try:
            out[mod] = getattr(__import__(mod), "__version__", "?")
        except ImportError:
            out[mod] = None
    return out


def machine() -> dict:
    mem = cpu = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem = round(int(line.split()[1]) / 1024 / 1024, 1)
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpus": os.cpu_count(), "mem_gib": mem, "cpu": cpu, "platform": platform.platform()}


# --- running rows ---------------------------------------------------------------------------------
class Runner:
    def __init__(self, a: argparse.Namespace, env: dict[str, str]) -> None:
        self.a, self.env = a, env

    def row(
        self,
        label: str,
        cmd,
        repeat: int = 1,
        memory: bool = True,
        env: dict[str, str] | None = None,
        **kw,
    ) -> dict:
        """One memory run (PSS of the tree sampled) when ``memory``, then ``repeat`` timed
        runs; the fastest timed run is kept, with the memory run's peaks."""
        env = env or self.env
        mem = None
        if memory:
            print(f"  {label} (memory) ...", file=sys.stderr, flush=True)
            mem = measure(
                cmd(-1) if callable(cmd) else cmd,
                env=env,
                timeout=self.a.timeout,
                label=label,
                pss_every=1,
                **kw,
            )
            print(
                f"    {mem['wall_s']:.2f} s, PSS {mem.get('tree_peak_pss_mb', 0):.0f} MB",
                file=sys.stderr,
            )
        tries = []
        for i in range(repeat):
            r = measure(
                cmd(i) if callable(cmd) else cmd,
                env=env,
                timeout=self.a.timeout,
                label=label,
                sample=False,
                **kw,
            )
            print(
                f"  {label} {i + 1}/{repeat}: {r['wall_s']:.2f} s, CPU {r['cpu_s']:.2f} s",
                file=sys.stderr,
                flush=True,
            )
            tries.append(r)
        ok = [t for t in tries if t["exit_code"] == 0] or tries or [mem]
        best = dict(min(ok, key=lambda t: t["wall_s"]))
        if mem is not None:
            best["tree_peak_pss_mb"] = mem.get("tree_peak_pss_mb")
            best["tree_peak_rss_mb"] = mem.get("tree_peak_rss_mb")
            best["memory_run_wall_s"] = mem["wall_s"]
            if mem["exit_code"] != 0:
                best["exit_code"] = mem["exit_code"]
        best["label"] = label
        best["all_wall_s"] = [t["wall_s"] for t in tries]
        return best


def run_shape(
    run: Runner, name: str, trace: Path, info: dict, hta_py: str | None, scratch: Path
) -> dict:
    a, py = run.a, sys.executable
    print(f"shape {name}: {trace.name} ({info['bytes'] / 1e6:.0f} MB)", file=sys.stderr)
    warm(trace)
    rows: dict = {}
    if not a.skip_typed:
        rows["typed"] = run.row(
            "typed decode", [py, "-c", TYPED_SNIPPET, str(trace)], repeat=a.repeat
        )

    def ingest_cmd(i: int) -> list[str]:
        store = scratch / f"{name}-{i + 1}.tistore"
        shutil.rmtree(store, ignore_errors=True)  # fresh: an existing store would be reused
        return [
            py,
            "-m",
            "traceinsight",
            "--quiet",
            "ingest",
            str(trace),
            "-o",
            str(store),
            "--force",
        ]

    rows["ingest"] = run.row("ingest", ingest_cmd, repeat=a.repeat)
    if a.fixed:
        half, _ = (
            ensure_generated(a.size_mb / 2, a.seed)
            if name == "generated"
            else ensure_shape(name, a.size_mb / 2)
        )
        warm(half)
        rows["ingest_half"] = run.row(
            "ingest (half size)",
            lambda i: [*ingest_cmd(i)[:5], str(half), *ingest_cmd(i)[6:]],
            repeat=a.repeat,
            memory=False,
        )
        rows["ingest_half"]["bytes"] = half.stat().st_size
    if hta_py is not None:
        rows["hta"] = run.row(
            "HTA load",
            [hta_py, "-c", HTA_SNIPPET, str(trace.parent), str(trace)],
            repeat=a.hta_repeat,
            log_lines=("Parsed", "Overall parsing", "leaving parse_traces"),
        )
    if a.diagnose or (name == "generated" and not a.no_diagnose):
        cache = scratch / f"diag-cache-{name}"
        denv = dict(run.env, TRACEINSIGHT_CACHE_DIR=str(cache))
        diag = [
            py,
            "-m",
            "traceinsight",
            "--quiet",
            "diagnose",
            str(trace),
            "--json",
            str(scratch / f"{name}-result.json"),
        ]
        # one sampled run each for the first and the re-analysis (a second would be cached)
        rows["diagnose_first"] = run.row(
            "diagnose (first: ingest + analysis)", diag, env=denv, repeat=0
        )
        rows["diagnose_again"] = run.row(
            "diagnose again (cached result)", diag, env=denv, repeat=max(1, a.repeat)
        )
        rows["diagnose_reanalyse"] = run.row(
            "diagnose, a threshold changed (analysis from the store)",
            [*diag, "--set", "jitter.min_cv_pct=11"],
            env=denv,
            repeat=0,
        )
        shutil.rmtree(cache, ignore_errors=True)
    for i in range(-1, a.repeat):
        shutil.rmtree(scratch / f"{name}-{i + 1}.tistore", ignore_errors=True)
    return {"input": info, "rows": rows, "ratios": ratios(rows, info["bytes"])}


def fixed_cost(rows: dict, full_bytes: int) -> float | None:
    """The intercept at 0 bytes of the line through the half-size and full-size ingests."""
    ing, half = rows.get("ingest"), rows.get("ingest_half")
    if not ing or not half or ing["exit_code"] or half["exit_code"]:
        return None
    b0, b1 = half["bytes"], full_bytes
    if b1 <= b0:
        return None
    slope = (ing["wall_s"] - half["wall_s"]) / (b1 - b0)
    return round(half["wall_s"] - slope * b0, 3)


def ratios(rows: dict, full_bytes: int = 0) -> dict:
    ing, hta, typed = rows.get("ingest"), rows.get("hta"), rows.get("typed")
    out: dict = {}
    if full_bytes:
        for key, r in (("ingest_mb_s", ing), ("typed_mb_s", typed)):
            if r and r["exit_code"] == 0 and r["wall_s"] > 0:
                out[key] = round(full_bytes / 1e6 / r["wall_s"], 1)
        fixed = fixed_cost(rows, full_bytes)
        if fixed is not None:
            out["fixed_s"] = fixed
    if ing and ing["exit_code"] == 0:
        if hta and hta["exit_code"] == 0:
            out["hta_over_ingest_time"] = round(hta["wall_s"] / ing["wall_s"], 2)
            out["hta_over_ingest_cpu"] = round(hta["cpu_s"] / max(ing["cpu_s"], 1e-9), 2)
            if ing.get("tree_peak_pss_mb") and hta.get("tree_peak_pss_mb"):
                out["ingest_over_hta_pss"] = round(
                    ing["tree_peak_pss_mb"] / hta["tree_peak_pss_mb"], 3
                )
        if typed and typed["exit_code"] == 0:
            out["ingest_over_typed_time"] = round(ing["wall_s"] / typed["wall_s"], 2)
            out["ingest_over_typed_cpu"] = round(ing["cpu_s"] / max(typed["cpu_s"], 1e-9), 2)
    again = rows.get("diagnose_again")
    if again and again["exit_code"] == 0:
        out["diagnose_again_s"] = again["wall_s"]
    met = {}
    if "hta_over_ingest_time" in out:
        met["hta_time"] = out["hta_over_ingest_time"] >= TARGET_HTA_TIME
    if "ingest_over_hta_pss" in out:
        met["hta_pss"] = out["ingest_over_hta_pss"] <= TARGET_HTA_PSS
    if "ingest_over_typed_time" in out:
        met["typed_time"] = out["ingest_over_typed_time"] <= TARGET_TYPED
    if "fixed_s" in out:
        met["fixed_cost"] = out["fixed_s"] < TARGET_FIXED_S
    if "diagnose_again_s" in out:
        met["diagnose_again"] = out["diagnose_again_s"] < TARGET_AGAIN_S
    out["met"] = met
    return out


# --- the table ------------------------------------------------------------------------------------
def _f(x: float | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def render(res: dict) -> str:
    m = res["machine"]
    lines = [
        f"machine: {m['cpus']} CPUs, {m['mem_gib']} GiB ({m['cpu']}); load average "
        f"{res['load_avg_before']} before, {res['load_avg_after']} after",
        "versions: " + ", ".join(f"{k} {v}" for k, v in res["versions"].items() if v),
        "",
        f"{'':16}{'':>6}{'':>11} | {'typed':>6} | {'ingest':^22} | {'HTA 0.5.0 load':^22} | "
        f"{'HTA/ingest':>10} {'PSS ingest':>10} {'ingest/':>8} | {'MB/s':^13} | {'fixed':>5}",
        f"{'shape':16}{'MB':>6}{'events':>11} | {'wall s':>6} | {'wall s':>6} {'CPU s':>6} "
        f"{'PSS MB':>8} | {'wall s':>6} {'CPU s':>6} {'PSS MB':>8} | {'time':>10} {'/ HTA':>10} "
        f"{'typed':>8} | {'typed':>6} {'ingest':>6} | {'s':>5}",
    ]
    for name, s in res["shapes"].items():
        r, q, i = s["rows"], s["ratios"], s["input"]
        ing, hta, typed = r.get("ingest", {}), r.get("hta", {}), r.get("typed", {})
        lines.append(
            f"{name:16}{i['bytes'] / 1e6:6.0f}{i.get('events', 0):11,} | "
            f"{_f(typed.get('wall_s'), '6.2f')} | {_f(ing.get('wall_s'), '6.2f')} "
            f"{_f(ing.get('cpu_s'), '6.2f')} {_f(ing.get('tree_peak_pss_mb'), '8.0f')} | "
            f"{_f(hta.get('wall_s'), '6.2f')} {_f(hta.get('cpu_s'), '6.2f')} "
            f"{_f(hta.get('tree_peak_pss_mb'), '8.0f')} | "
            f"{_f(q.get('hta_over_ingest_time'), '9.1f')}x "
            f"{_f(q.get('ingest_over_hta_pss'), '10.2f')} "
            f"{_f(q.get('ingest_over_typed_time'), '7.2f')}x | "
            f"{_f(q.get('typed_mb_s'), '6.0f')} {_f(q.get('ingest_mb_s'), '6.0f')} | "
            f"{_f(q.get('fixed_s'), '5.2f')}"
        )
    cpu_ratios = [
        f"{name} {s['ratios']['hta_over_ingest_cpu']:.1f}x"
        for name, s in res["shapes"].items()
        if "hta_over_ingest_cpu" in s["ratios"]
    ]
    if cpu_ratios:
        lines.append(
            "HTA / ingest CPU time (user + system, all processes): " + ", ".join(cpu_ratios)
        )
    busy = max(res["load_avg_before"][0], res.get("load_avg_after", [0])[0])
    if busy > 0.75 * (m["cpus"] or 1):
        lines.append(
            f"WARNING: load average {busy:.1f} on {m['cpus']} CPUs: other work shared the "
            "cores, wall times (and the fixed-cost intercepts) are inflated and noisy; the CPU "
            "times and their ratios are the steadier figures"
        )
    lines.append(
        f"targets (real shapes): HTA/ingest time >= {TARGET_HTA_TIME:g}x, PSS ingest / "
        f"HTA <= {TARGET_HTA_PSS:.2f}, ingest / typed <= {TARGET_TYPED:g}x, fixed cost "
        f"(intercept of ingest time over size) < {TARGET_FIXED_S:g} s"
    )
    st = res.get("startup")
    if st:
        lines.append(
            f"startup (ingest of a 3-event trace): {st['wall_s']:.3f} s (best of "
            f"{len(st['all_wall_s'])}: {', '.join(f'{w:.3f}' for w in st['all_wall_s'])})"
        )
    for name, s in res["shapes"].items():
        met = s["ratios"].get("met", {})
        if met:
            miss = [k for k, ok in met.items() if not ok]
            lines.append(f"  {name}: " + ("all met" if not miss else "NOT met: " + ", ".join(miss)))
        r = s["rows"]
        if "diagnose_again" in r:
            lines.append(
                f"  diagnose ({name}): first {r['diagnose_first']['wall_s']:.2f} s (PSS "
                f"{_f(r['diagnose_first'].get('tree_peak_pss_mb'), '.0f')} MB), again "
                f"{r['diagnose_again']['wall_s']:.2f} s (cached result; target < "
                f"{TARGET_AGAIN_S} s), threshold changed {r['diagnose_reanalyse']['wall_s']:.2f} s "
                f"(PSS {_f(r['diagnose_reanalyse'].get('tree_peak_pss_mb'), '.0f')} MB)"
            )
    failed = [
        f"{n}/{k}"
        for n, s in res["shapes"].items()
        for k, r in s["rows"].items()
        if r["exit_code"] != 0
    ]
    if failed:
        lines.append("FAILED: " + ", ".join(failed))
    if res.get("hta_skipped"):
        lines.append(f"HTA: {res['hta_skipped']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--shapes",
        nargs="+",
        default=["generated", *DEFAULT_SHAPES],
        choices=["generated", *SHAPES],
        help="input shapes (default: all four)",
    )
    ap.add_argument(
        "--size-mb", type=float, default=128, help="size of each input in MB (10^6 B); default 128"
    )
    ap.add_argument("--seed", type=int, default=20260, help="the generated trace's seed")
    ap.add_argument("--trace", help="measure this file instead (one shape's row)")
    ap.add_argument("--repeat", type=int, default=1, help="timed runs of ingest (best kept)")
    ap.add_argument("--hta-repeat", type=int, default=1, help="timed runs of the HTA load")
    ap.add_argument("--skip-hta", action="store_true")
    ap.add_argument(
        "--skip-typed",
        action="store_true",
        help="no typed-decode row (a file larger than memory cannot be decoded whole)",
    )
    ap.add_argument("--hta-python", help="interpreter that has HTA (default: this one)")
    ap.add_argument("--diagnose", action="store_true", help="diagnose rows for every shape")
    ap.add_argument("--no-diagnose", action="store_true", help="no diagnose rows at all")
    ap.add_argument(
        "--fixed",
        action="store_true",
        help="also ingest each shape at half the size: the fixed cost per ingest (intercept)",
    )
    ap.add_argument("--timeout", type=float, default=7200, help="seconds per child process")
    ap.add_argument("--out", default=str(RESULTS), help="result JSON")
    ap.add_argument("--check", action="store_true", help="exit 1 when a target is not met")
    a = ap.parse_args(argv)

    # compiled like an installed package (pip compiles at install; an editable checkout run
    # with PYTHONDONTWRITEBYTECODE would compile every module at every start)
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(ROOT / "traceinsight")],
        check=False,
        capture_output=True,
        env=dict(os.environ, PYTHONDONTWRITEBYTECODE=""),
    )
    hta_py, hta_v = (None, "skipped (--skip-hta)") if a.skip_hta else find_hta(a.hta_python)
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env["PYTHONPATH"] = os.pathsep.join(x for x in (str(ROOT), env.get("PYTHONPATH")) if x)
    scratch = Path(tempfile.mkdtemp(prefix="ti-bench-"))
    env["TRACEINSIGHT_CACHE_DIR"] = str(scratch / "cache")  # never the user's cache
    res: dict = {
        "generated_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine(),
        "versions": {**versions(), "hta": hta_v if hta_py else None},
        "load_avg_before": [round(x, 2) for x in os.getloadavg()],
        "shapes": {},
    }
    if hta_py is None:
        res["hta_skipped"] = hta_v
    try:
        shapes = inputs(a)
        run = Runner(a, env)
        tiny = scratch / "tiny.pt.trace.json"
        tiny.write_bytes(TINY_TRACE)
        py = sys.executable
        res["startup"] = run.row(
            "ingest of a 3-event trace (start-up)",
            lambda i: [
                *[py, "-m", "traceinsight", "--quiet", "ingest", str(tiny)],
                *["-o", str(scratch / f"tiny-{i + 1}.tistore"), "--force"],
            ],
            repeat=max(3, a.repeat),
            memory=False,
        )
        for name, trace, info in shapes:
            res["shapes"][name] = run_shape(run, name, trace, info, hta_py, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    res["load_avg_after"] = [round(x, 2) for x in os.getloadavg()]
    print(render(res))
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2) + "\n")
    print(f"\nresult: {out}")
    if any(r["exit_code"] != 0 for s in res["shapes"].values() for r in s["rows"].values()):
        return 2
    real = [s for n, s in res["shapes"].items() if n != "generated"]
    if a.check and not all(all(s["ratios"]["met"].values()) for s in real):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
