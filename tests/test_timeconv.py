"""Exact µs -> ns conversion: every encoding Kineto has used, never through float64 rounding."""

from __future__ import annotations

import random
from decimal import Decimal

import pyarrow.compute as pc
import pytest
from conftest import KINETO, requires_corpus
from test_ingest_corpus import load_json

from tracegen.synth import KinetoTraceBuilder
from traceinsight.ingest import ingest
from traceinsight.ingest.readers.kineto.timeconv import (
    ConversionStats,
    NeedExactText,
    text_us_to_ns,
    us_to_ns,
)


def test_integer_microseconds_are_exact() -> None:
    assert us_to_ns([1623142623460172, 0, None]).to_pylist() == [1623142623460172000, 0, None]


def test_text_values_parse_digit_by_digit() -> None:
    stats = ConversionStats()
    got = us_to_ns(
        [
            "1712195495519689.047",
            "1419247333430.849",
            "0.5",
            "-1.25",
            "7",
            ".5",
            "12.3456",
            "1e3",
            "abc",
            None,
        ],
        stats,
    ).to_pylist()
    assert got == [
        1712195495519689047,
        1419247333430849,
        500,
        -1250,
        7000,
        500,
        12346,
        1_000_000,
        None,
        None,
    ]
    assert stats.rounded == 1 and stats.invalid == 1 and stats.negative == 1


def test_absolute_float_timestamps_ask_for_text() -> None:
    # 1712195495519689.047 as a float64 is 1712195495519689.0: 99.6% of such values are wrong
    with pytest.raises(NeedExactText):
        us_to_ns([1712195495519689.047])


def test_floats_below_2_43_us_are_exact() -> None:
    # GIVEN 3-decimal values up to 2**43 µs (101 days), as relative Kineto timestamps are
    rng = random.Random(7)
    ns = [rng.randrange(2**40 * 1000, 2**43 * 1000) for _ in range(20000)] + [2**43 * 1000 - 1]
    floats = [float(f"{v // 1000}.{v % 1000:03d}") for v in ns]
    # THEN the float path recovers every nanosecond (naive rint(x*1000) misses ~0.3%)
    assert us_to_ns(floats).to_pylist() == ns


def test_text_path_agrees_with_decimal() -> None:
    import pyarrow as pa

    rng = random.Random(3)
    vals = [f"{rng.randrange(10**15, 2 * 10**15)}.{rng.randrange(1000):03d}" for _ in range(5000)]
    got = text_us_to_ns(pa.array(vals)).to_pylist()
    assert got == [int(Decimal(v) * 1000) for v in vals]


@pytest.mark.parametrize("style", ["relative", "absolute", "legacy"])
def test_builder_styles_round_trip(style: str, tmp_path) -> None:
    # GIVEN a kernel at 30,011 ns lasting 50,013 ns written in each timestamp style
    b = KinetoTraceBuilder(style=style)
    with b.step(1, 0, 1_000_000):
        with b.cpu_op("aten::mm", 10_001, 100_003):
            b.launch("gemm", cpu_start=20_007, gpu_start=30_011, gpu_dur=50_013)
    store = ingest([b.write(tmp_path / "t.json")], tmp_path / "s", quiet=True)
    row = store.table("gpu_activities").to_pylist()[0]
    # THEN start and duration come back to the ns (legacy integer µs keeps whole µs only)
    if style == "legacy":
        assert (row["start_ns"] - b.base_ns, row["dur_ns"]) == (30_000, 50_000)
    else:
        assert (row["start_ns"] - b.base_ns, row["dur_ns"]) == (30_011, 50_013)


@requires_corpus
@pytest.mark.parametrize(
    "rel",
    [
        "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",  # absolute, 3 decimals
        "hta/nccl_parser_config/nccl_data.json.gz",  # relative, beyond 2**42 µs
        "hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz",  # relative, ROCm
    ],
)
def test_corpus_timestamps_are_exact(rel: str, tmp_path) -> None:
    path = KINETO / rel
    doc = load_json(path)
    base = int(doc.get("baseTimeNanoseconds", 0))
    want = sorted(
        base + int(Decimal(str(e["ts"])) * 1000)
        for e in doc["traceEvents"]
        if e.get("ph") == "X" and str(e.get("cat", "")).lower() == "kernel"
    )
    store = ingest([path], tmp_path / "s", quiet=True)
    gpu = store.table("gpu_activities")
    got = sorted(gpu.filter(pc.equal(gpu["kind"].cast("string"), "kernel"))["start_ns"].to_pylist())
    assert got == want and len(got) > 0
