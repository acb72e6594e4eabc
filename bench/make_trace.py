"""Build the ingest benchmark trace: a large, realistic, deterministic Kineto trace.

The trace is one rank of a data-parallel GPT-2-medium-sized training run on an H100, made by the
project's scenario simulator and written one step at a time up to the requested size (memory
stays flat whatever ``--size-mb`` is); :mod:`tracegen.bench` describes it.

Usage::

    python bench/make_trace.py --size-mb 320 --out bench/.cache/bench_320mb.pt.trace.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the checkout's tracegen and traceinsight

from tracegen.bench import DEFAULT_SEED, N_LAYERS, write_trace


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--size-mb",
        type=float,
        default=320,
        help="uncompressed size to reach, in MB (10^6 bytes); default 320",
    )
    ap.add_argument(
        "--out",
        default=str(HERE / ".cache" / "bench_{size}mb.pt.trace.json"),
        help="output path (uncompressed .json); {size} is replaced by --size-mb",
    )
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED)
    ap.add_argument(
        "--layers", type=int, default=N_LAYERS, help=f"transformer blocks (default {N_LAYERS})"
    )
    ap.add_argument("-q", "--quiet", action="store_true")
    a = ap.parse_args(argv)
    out = a.out.replace("{size}", f"{a.size_mb:g}")
    write_trace(out, a.size_mb, a.seed, a.quiet, a.layers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
