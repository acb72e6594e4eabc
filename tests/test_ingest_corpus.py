"""Every Kineto trace of the shared corpus ingests, and the store holds every event.

The counts are checked against an independent classification written here with the stdlib
JSON parser, and kernel time against an exact (Decimal) sum of ``dur``.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from decimal import Decimal
from pathlib import Path

import pyarrow.compute as pc
import pytest
from conftest import corpus_id, corpus_kineto_files, requires_corpus

from traceinsight.ingest import ingest

FILES = corpus_kineto_files()

GPU = {
    "kernel": "kernel",
    "mtia_ccp_events": "kernel",
    "gpu_memcpy": "memcpy",
    "memcpy": "memcpy",
    "gpu_memset": "memset",
    "memset": "memset",
    "cuda_sync": "sync",
}
RUNTIME = {
    "cuda_runtime",
    "runtime",
    "cuda_driver",
    "xpu_runtime",
    "xpu_driver",
    "mtia_runtime",
    "privateuse1_runtime",
    "privateuse1_driver",
}


def load_json(path: Path):
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return json.loads(raw, parse_float=Decimal)


def independent_counts(doc) -> tuple[Counter, dict[int, Decimal]]:
    """Rows expected per store table (and per GPU kind), plus exact kernel µs per device."""
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    c: Counter = Counter()
    kernel_us: dict[int, Decimal] = {}
    for e in events:
        ph, cat, name = e.get("ph"), str(e.get("cat") or "").lower(), e.get("name")
        if ph == "X":
            if cat in GPU:
                c["gpu_activities"] += 1
                c["gpu:" + GPU[cat]] += 1
                if GPU[cat] == "kernel":
                    kernel_us[0] = kernel_us.get(0, Decimal(0)) + Decimal(str(e.get("dur", 0)))
            elif cat in RUNTIME:
                c["runtime_calls"] += 1
            elif cat in ("cpu_op", "operator"):
                c["ranges" if str(name).startswith("ProfilerStep#") else "cpu_ops"] += 1
            elif cat in ("user_annotation", "user", "gpu_user_annotation"):
                c["ranges"] += 1
            elif cat in ("python_function", "python"):
                c["python_frames"] += 1
            else:
                c["other_events"] += 1
        elif ph in ("i", "I") and name in ("[memory]", "[OutOfMemory]"):
            c["memory_events"] += 1
        elif ph in ("s", "f", "t"):
            c["flows"] += 1
        elif ph == "M" or ph is None:
            pass
        else:
            c["other_events"] += 1
    return c, kernel_us


@requires_corpus
@pytest.mark.corpus
@pytest.mark.parametrize("path", FILES, ids=[corpus_id(p) for p in FILES])
def test_corpus_trace_ingests_with_every_event(path: Path, tmp_path: Path) -> None:
    # GIVEN a real trace and an independent count of its events
    expected, kernel_us = independent_counts(load_json(path))
    # WHEN it is ingested into a store
    store = ingest([path], tmp_path / "s.tistore", quiet=True)
    # THEN every table holds exactly the expected rows
    for table in (
        "gpu_activities",
        "runtime_calls",
        "cpu_ops",
        "ranges",
        "python_frames",
        "memory_events",
        "flows",
        "other_events",
    ):
        assert store.row_counts[table] == expected.get(table, 0), table
    gpu = store.table("gpu_activities")
    kinds = Counter(gpu["kind"].cast("string").to_pylist())
    for k in ("kernel", "memcpy", "memset", "sync"):
        assert kinds.get(k, 0) == expected.get("gpu:" + k, 0), k
    # AND the kernel time is the exact sum of the recorded durations, to the nanosecond
    kern = gpu.filter(pc.equal(gpu["kind"].cast("string"), "kernel"))
    total_ns = int(pc.sum(kern["dur_ns"]).as_py() or 0)
    exact = sum(kernel_us.values(), Decimal(0)) * 1000
    assert total_ns == int(exact.to_integral_value())
    # AND times are int64 ns, durations never negative
    assert str(gpu.schema.field("start_ns").type) == "int64"
    assert (pc.min(gpu["dur_ns"]).as_py() or 0) >= 0
