"""Do two checkouts ingest the same stores? Every shared Kineto trace and the cached bench inputs.

Each checkout ingests every ``.json`` / ``.json.gz`` under the shared Kineto traces and the
cached benchmark inputs (``bench/.cache/shape_*.json``, ``bench_128mb_*.pt.trace.json``) in a
process of its own (run from that checkout, so its ``traceinsight`` is the one imported); then
every table of every store is compared with pyarrow's ``Table.equals``, and inputs that fail
must fail with the same message in both.

Usage::

    .venv/bin/python bench/compare_stores.py --base /work/main      # base vs this checkout
    .venv/bin/python bench/compare_stores.py --base A --head B --match resnet
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SHARED = Path(os.environ.get("TRACEINSIGHT_SHARED_TRACES", "/work/shared/traces"))

#: run inside a checkout: ingest each input of argv[2] (a JSON list) into argv[1]/NNN.tistore
_INGEST = """\
import json, os, sys
sys.path.insert(0, os.getcwd())
from traceinsight.ingest import ingest
out, files = sys.argv[1], json.load(open(sys.argv[2]))
index = {}
for i, f in enumerate(files):
    dest = os.path.join(out, f"{i:03d}.tistore")
    try:
        ingest([f], dest, force=True, quiet=True)
        index[f] = {"store": dest}
    except Exception as e:
        index[f] = {"error": f"{type(e).__name__}: {e}"}
json.dump(index, open(os.path.join(out, "index.json"), "w"))
"""


def inputs(match: list[str]) -> list[str]:
    files = sorted(
        str(p)
        for p in (SHARED / "kineto").rglob("*")
        if p.is_file() and p.name.endswith((".json", ".json.gz"))
    )
    cache = HERE / ".cache"
    files += sorted(str(p) for p in cache.glob("shape_*.json") if not p.name.endswith(".info.json"))
    files += sorted(str(p) for p in cache.glob("bench_128mb_*.pt.trace.json"))
    return [f for f in files if not match or any(m in f for m in match)]


def ingest_all(checkout: Path, files: list[str], out: Path) -> dict:
    out.mkdir(parents=True)
    listing = out / "inputs.json"
    listing.write_text(json.dumps(files))
    subprocess.run(
        [sys.executable, "-c", _INGEST, str(out), str(listing)], cwd=checkout, check=True
    )
    return json.loads((out / "index.json").read_text())


def compare(a: dict, b: dict) -> tuple[int, int]:
    """(tables compared, differences), each difference printed."""
    import pyarrow.parquet as pq

    tables = bad = 0
    for f, ra in a.items():
        rb = b[f]
        if ra.get("error") != rb.get("error"):
            print(f"DIFF outcome {f}: {ra} / {rb}")
            bad += 1
            continue
        if "error" in ra:
            continue
        sa, sb = Path(ra["store"]), Path(rb["store"])
        names = sorted(p.name for p in sa.glob("*.parquet"))
        if names != sorted(p.name for p in sb.glob("*.parquet")):
            print(f"DIFF tables {f}")
            bad += 1
            continue
        for n in names:
            tables += 1
            ta, tb = pq.read_table(sa / n), pq.read_table(sb / n)
            if not ta.equals(tb):
                cols = [
                    c
                    for c in ta.column_names
                    if c not in tb.column_names or not ta[c].equals(tb[c])
                ]
                print(f"DIFF {f} {n}: rows {ta.num_rows} / {tb.num_rows}, columns {cols}")
                bad += 1
    return tables, bad


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", required=True, type=Path, help="the checkout to compare with")
    ap.add_argument("--head", type=Path, default=HERE.parent, help="default: this checkout")
    ap.add_argument("--match", nargs="*", default=[], help="only inputs whose path has one")
    a = ap.parse_args(argv)
    files = inputs(a.match)
    with tempfile.TemporaryDirectory(prefix="ti-compare-") as tmp:
        base = ingest_all(a.base, files, Path(tmp) / "base")
        head = ingest_all(a.head, files, Path(tmp) / "head")
        tables, bad = compare(base, head)
    print(f"{len(files)} inputs, {tables} tables compared, {bad} differences")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
