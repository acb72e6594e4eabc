"""Where ``traceinsight ingest`` spends its time: cProfile of one ingest of a trace.

Runs ``traceinsight.ingest.ingest([TRACE], <fresh store>, force=True, quiet=True)`` under
cProfile, prints the top functions by own time (tottime) and by cumulative time, and the wall
time and peak RSS of the run (cProfile's overhead included: compare wall times with
``bench_ingest.py``, not with this).

Usage::

    .venv/bin/python bench/profile_ingest.py                   # the cached 320 MB bench trace
    .venv/bin/python bench/profile_ingest.py TRACE --top 25 --save /tmp/ingest.prof
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", nargs="?", help="trace file (default: the newest bench/.cache trace)")
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--save", help="also write the raw profile here (for snakeviz, pstats)")
    a = ap.parse_args(argv)
    trace = a.trace
    if trace is None:
        cached = sorted(
            (HERE / ".cache").glob("bench_*.pt.trace.json"), key=lambda p: p.stat().st_mtime
        )
        if not cached:
            ap.error("no cached bench trace: run bench/bench_ingest.py first, or pass TRACE")
        trace = str(cached[-1])

    from traceinsight.ingest import ingest

    out = Path(tempfile.mkdtemp(prefix="ti-prof-")) / "store.tistore"
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    try:
        prof.enable()
        store = ingest([trace], out, force=True, quiet=True)
        prof.disable()
        wall = time.perf_counter() - t0
        rows = store.row_counts
    finally:
        shutil.rmtree(out.parent, ignore_errors=True)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"trace: {trace} ({Path(trace).stat().st_size / 1e6:.1f} MB)")
    print(f"ingest under cProfile: {wall:.2f} s wall, peak RSS {rss:.0f} MB; rows: {rows}")
    if a.save:
        prof.dump_stats(a.save)
    for key in ("tottime", "cumulative"):
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).strip_dirs().sort_stats(key).print_stats(a.top)
        text = buf.getvalue()
        print(f"\n=== top {a.top} by {key} ===")
        print(text[text.index("   ncalls") :].rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
