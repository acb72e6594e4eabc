"""The memory-timeline export read in chunks: rows cut at any byte give the same table, whether
the file is read from disk piece by piece (the stream entry) or held whole; a damaged export
gives the same errors either way."""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from traceinsight.errors import EmptyTraceError, TraceFormatError
from traceinsight.ingest.readers import memtimeline
from traceinsight.ingest.readers.base import RankStreamed
from traceinsight.ingest.sink import TableSink


def _text(rows: int, seed: int = 5) -> tuple[bytes, list[list[int]]]:
    rnd = random.Random(seed)
    t = 1_700_000_000_123_456_789
    out = []
    for i in range(rows):
        t += rnd.randint(1, 9000)
        out.append([-1 if i < 3 else t, rnd.randint(1, 4), rnd.randint(-(1 << 40), 1 << 40), i % 8])
    # uneven spacing and a BOM-free leading blank: the cut must not depend on layout
    body = ",\n ".join(f"[{a},{b}, {c} ,{d}]" for a, b, c, d in out)
    return (" [" + body + "]\n\0\0").encode(), out


def _streamed(path: Path, tmp: Path) -> tuple[pa.Table, RankStreamed]:
    sink = TableSink(tmp / "sink")
    got = memtimeline.stream_timeline(path, sink, source=path.name, rank_hint=3)
    stored = sink.close()["memory_categories"]
    return pq.read_table(stored.path), got


@pytest.mark.parametrize("chunk", [1, 2, 7, 23, 64, 1 << 20])
def test_any_chunk_size_gives_the_rows_exactly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    data, rows = _text(1_000)
    p = tmp_path / "tl.raw.json"
    p.write_bytes(data)
    monkeypatch.setattr(memtimeline, "CHUNK_BYTES", chunk)
    whole = memtimeline.read_timeline(data, source=p.name, rank_hint=3)
    table, got = _streamed(p, tmp_path)
    mc = whole.tables["memory_categories"]
    assert table.equals(mc)
    assert got.counts == whole.counts == {"memory_categories": 1_000}
    assert got.meta.to_dict() == whole.meta.to_dict()
    assert mc["ts_ns"].to_pylist() == [r[0] if r[0] >= 0 else None for r in rows]
    assert mc["delta_bytes"].to_pylist() == [r[2] for r in rows]  # exact int64, signed
    assert mc["seq"].to_pylist() == list(range(1_000))
    assert set(mc["rank"].to_pylist()) == {3}
    names = list(memtimeline.ACTIONS.values())
    assert mc["action"].to_pylist() == [names[r[1] - 1] for r in rows]
    assert mc["category"].to_pylist() == [memtimeline.CATEGORIES[r[3]] for r in rows]
    known = [r[0] for r in rows if r[0] >= 0]
    assert got.meta.span_ns == [min(known), max(known)]


@pytest.mark.parametrize(
    "text, what",
    [
        (b"[[1, 2, 3, 0], [5, 2, 3, 0]", "truncated"),
        (b"[[1, 2, 3, 0], [5, 2, 3", "truncated"),
        (b"[[1, 2, 3, 0], [5, 9, 3, 0]]", "unknown action or category"),
        (b"[[1, 2, 3, 0], [5, 2, x, 0]]", "is not a memory-timeline export"),
        (b"  ", "no JSON list"),
    ],
)
def test_damaged_exports_fail_alike_streamed_and_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: bytes, what: str
) -> None:
    p = tmp_path / "tl.raw.json"
    p.write_bytes(text)
    for chunk in (3, 1 << 20):
        monkeypatch.setattr(memtimeline, "CHUNK_BYTES", chunk)
        with pytest.raises(TraceFormatError) as whole:
            memtimeline.read_timeline(text, source=p.name)
        with pytest.raises(TraceFormatError) as streamed:
            memtimeline.stream_timeline(p, TableSink(tmp_path / f"s{chunk}"), source=p.name)
        assert what in whole.value.message
        assert what in streamed.value.message


def test_an_empty_list_holds_no_rows(tmp_path: Path) -> None:
    p = tmp_path / "tl.raw.json"
    p.write_bytes(b"[ ]")
    with pytest.raises(EmptyTraceError):
        memtimeline.stream_timeline(p, TableSink(tmp_path / "s"), source=p.name)


def test_text_without_row_ends_is_refused_after_a_bounded_carry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A row that never ends (a damaged or hostile export) is refused once a chunk and
    ROW_TEXT_MAX of it are held, not read to the end of the file into memory."""
    monkeypatch.setattr(memtimeline, "CHUNK_BYTES", 1 << 10)
    monkeypatch.setattr(memtimeline, "ROW_TEXT_MAX", 1 << 12)
    p = tmp_path / "tl.raw.json"
    p.write_bytes(b"[[1, 2, 3, 0], [1, 2, 3, " + b"0" * (1 << 20) + b"]]")
    with pytest.raises(TraceFormatError) as e:
        memtimeline.stream_timeline(p, TableSink(tmp_path / "s"), source=p.name)
    assert "no row ends within" in e.value.message
    held = int(e.value.message.split("within ")[1].split(" ")[0].replace(",", ""))
    assert held <= (1 << 10) + (1 << 12) + (1 << 10)


def test_the_reader_streams() -> None:
    assert memtimeline.READER.stream is memtimeline.stream_timeline


#: run in a fresh interpreter: Arrow's peak (``max_memory``) counts the whole process's life
_MEASURE = """
import sys, tracemalloc
from pathlib import Path
import pyarrow as pa
from traceinsight.ingest.readers import memtimeline
from traceinsight.ingest.sink import TableSink
small, big, tmp = (Path(a) for a in sys.argv[1:])
sink = TableSink(tmp / "warm")  # the imports and first writes, before measuring
memtimeline.stream_timeline(small, sink, source=small.name)
sink.close()
tracemalloc.start()
sink = TableSink(tmp / "big")
got = memtimeline.stream_timeline(big, sink, source=big.name)
stored = sink.close()["memory_categories"]
print(tracemalloc.get_traced_memory()[1], pa.default_memory_pool().max_memory(),
      got.counts["memory_categories"], stored.rows, stored.path)
"""


def test_a_100_mb_export_streams_in_memory_well_under_its_size(tmp_path: Path) -> None:
    """Reading a ~100 MB export from disk holds a chunk of text, its rows and the sink's
    pending row groups (TRACEINSIGHT_PENDING_BYTES): Python's and Arrow's peaks together stay
    under half the file, about 40 MB whatever its size (reading it whole held the file, its
    columns and their copies: about 2.7x the file)."""
    import os
    import subprocess
    import sys

    small = tmp_path / "small.raw.json"
    small.write_bytes(_text(2_000)[0])
    body, _ = _text(30_000, seed=9)
    block = body.strip(b" \0\n")[1:-1]
    reps = (100 << 20) // len(block) + 1
    p = tmp_path / "big.raw.json"
    with open(p, "wb") as f:
        f.write(b"[")
        for i in range(reps):
            f.write(b",\n" + block if i else block)
        f.write(b"]")
    size = p.stat().st_size
    assert size > 100 << 20
    root = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(small), str(p), str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=True,
    ).stdout.split()
    py_peak, arrow_peak, counted, stored = (int(v) for v in out[:4])
    assert py_peak + arrow_peak < size / 2, (py_peak >> 20, arrow_peak >> 20)
    assert counted == stored == 30_000 * reps
    f = pq.ParquetFile(out[4])
    last = f.read_row_group(f.num_row_groups - 1, columns=["seq"])["seq"]
    assert last[-1].as_py() == 30_000 * reps - 1


@pytest.mark.parametrize("stream", ["1", "0"])
def test_a_streamed_timeline_joins_its_trace_rank(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stream: str
) -> None:
    """Beside a rank-3 trace the export's rows take rank 3 (rewritten a row group at a time
    when the trace streamed; as tables when it was read whole), the rows otherwise unchanged."""
    from hostile import events, trace, write

    from traceinsight.ingest import ingest

    monkeypatch.setenv("TRACEINSIGHT_STREAM", stream)
    monkeypatch.setattr(memtimeline, "CHUNK_BYTES", 97)
    base = 1_750_000_000_000_000_000
    t = write(
        tmp_path / "trace_rank-3.json",
        trace(
            events(3),
            baseTimeNanoseconds=base,
            distributedInfo={"backend": "nccl", "rank": 3, "world_size": 4},
        ),
    )
    rows = [[-1, 1, 4096, 0]] + [[base + 1000 * i, 2, (i + 1) << 10, i % 8] for i in range(300)]
    tl = tmp_path / "tl.raw.json"
    tl.write_text(str(rows))
    store = ingest([t, tl], tmp_path / "s", quiet=True, use_cache=False)
    mc = store.table("memory_categories")
    assert mc.num_rows == 301 and set(mc["rank"].to_pylist()) == {3}
    assert mc["delta_bytes"].to_pylist() == [r[2] for r in rows]
    assert mc["ts_ns"].to_pylist() == [None] + [r[0] for r in rows[1:]]
    assert mc["seq"].to_pylist() == list(range(301))
    (rank,) = store.meta["ranks"]
    assert [m["name"] for m in rank["memory"]["inputs"]] == ["tl.raw.json"]
