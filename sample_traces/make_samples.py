"""Write the bundled synthetic GPU-shaped sample traces (deterministic bytes).

Every file comes from a named scenario in :mod:`tracegen.workloads` (``PRESETS``); the
bottleneck of each is known by construction. Run from a checkout::

    python sample_traces/make_samples.py            # (re)write the samples next to this script
    python sample_traces/make_samples.py --check    # exit 1 if a file is not what it would write

The output is the same bytes on every run and machine (gzip ``mtime=0``, no clock, no unseeded
randomness), so regenerated files only show up in ``git status`` when the generator changed.
``sample_traces/README.md`` documents each file.
"""

from __future__ import annotations

import argparse
import gzip
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
if str(REPO) not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, str(REPO))

from tracegen.workloads import PRESETS, build, build_ranks

MAX_BYTES = 2 * 1024 * 1024

#: single-rank samples: file name -> preset
SINGLE = {
    "synthetic_h100_healthy.json.gz": "healthy",
    "synthetic_h100_launch_bound.json.gz": "launch_bound",
    "synthetic_h100_fp32_gemms.json.gz": "fp32_gemms",
    "synthetic_mi300x.json.gz": "mi300x",
}
#: multi-rank samples: folder -> preset (one rank-<r>.json.gz per rank)
RANKS = {
    "synthetic_comm_bound_4rank": "comm_bound",
    "synthetic_straggler_4rank": "straggler",
}


def render() -> dict[Path, bytes]:
    """Every sample file's path (relative to this folder) and gzipped bytes."""
    out: dict[Path, bytes] = {}
    for name, preset in SINGLE.items():
        out[Path(name)] = _gz(build(PRESETS[preset]).dumps())
    for folder, preset in RANKS.items():
        for rank, b in enumerate(build_ranks(PRESETS[preset])):
            out[Path(folder) / f"rank-{rank}.json.gz"] = _gz(b.dumps())
    return out


def _gz(text: str) -> bytes:
    # what KinetoTraceBuilder.write() does for a .gz path
    return gzip.compress(text.encode(), mtime=0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--out", type=Path, default=HERE, help="folder to write into (default: next to this script)"
    )
    ap.add_argument(
        "--check", action="store_true", help="compare with the files on disk, write nothing"
    )
    args = ap.parse_args(argv)

    status = 0
    for rel, data in render().items():
        path = args.out / rel
        if len(data) >= MAX_BYTES:
            print(f"error: {rel} is {len(data)} bytes, over the 2 MB budget", file=sys.stderr)
            status = 1
        if args.check:
            if not path.is_file() or path.read_bytes() != data:
                print(f"stale: {rel} (run python sample_traces/make_samples.py)", file=sys.stderr)
                status = 1
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        print(f"wrote {rel} ({len(data):,} bytes)")
    return status


if __name__ == "__main__":
    sys.exit(main())
