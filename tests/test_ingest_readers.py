"""The reader seam: readers are chosen by content, registered in one line, and give a typed
per-rank result; store columns carry meanings, not Kineto's words."""

from __future__ import annotations

import gzip
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest

from tracegen.synth import KinetoTraceBuilder
from traceinsight.errors import TraceFormatError
from traceinsight.ingest import ingest, readers
from traceinsight.ingest.columns import dict_col, int_col, rank_col
from traceinsight.ingest.readers.base import RankMeta, RankRead, Reader
from traceinsight.store import schema

MAGIC = b"FAKETRACE v1\n"


def read_fake(
    data: bytes,
    *,
    source: str,
    rank_hint: int | None = None,
    salvage: bool = False,
    progress=None,
    background=None,
) -> RankRead:
    """A made-up format: a magic line, then ``kernel NAME START_NS DUR_NS`` lines."""
    if background:
        background()
    rows = [line.split() for line in data[len(MAGIC) :].decode().splitlines() if line.strip()]
    if not rows:
        raise TraceFormatError("holds no kernels", path=source)
    rank = rank_hint if rank_hint is not None else 0
    n = len(rows)
    gpu = schema.conform(
        "gpu_activities",
        {
            "rank": rank_col(n, rank),
            "kind": dict_col(["kernel"] * n),
            "name": dict_col([r[1] for r in rows]),
            "device": pa.array([0] * n, pa.int32()),
            "stream": int_col([7] * n),
            "start_ns": int_col([int(r[2]) for r in rows]),
            "dur_ns": int_col([int(r[3]) for r in rows]),
        },
    )
    tables = {name: schema.empty_table(name) for name in schema.TABLES}
    tables["gpu_activities"] = gpu
    meta = RankMeta(
        rank=rank,
        rank_source="file name" if rank_hint is not None else "default",
        source=source,
        format="fake",
        vendor="nvidia",
        devices_used=[0],
        distributed={"world_size": 2, "backend": "fake"},
    )
    meta.diagnostics.add("fake-read", "read by the fake reader", severity="info", source=source)
    return RankRead(tables=tables, meta=meta, counts={"kernel": n})


FAKE = Reader(
    name="fake",
    title="Fake",
    doc="a test format",
    suffixes=(".fake",),
    sniff=lambda head: head.startswith(MAGIC),
    looks_for="a FAKETRACE magic line",
    read=read_fake,
    column_sources={"gpu_activities": {"name": "the second word"}},
)


@pytest.fixture
def fake_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(readers, "READERS", [*readers.READERS, FAKE])  # restored after the test


def fake_file(path: Path, kernels: list[tuple[str, int, int]]) -> Path:
    lines = "".join(f"kernel {n} {s} {d}\n" for n, s, d in kernels)
    path.write_bytes(MAGIC + lines.encode())
    return path


def test_a_registered_reader_ingests_its_format(tmp_path: Path, fake_registered: None) -> None:
    # GIVEN a folder of per-rank files in a made-up format, one of them gzip-compressed
    d = tmp_path / "run"
    d.mkdir()
    fake_file(d / "rank-0.fake", [("gemm", 1_000, 500), ("relu", 2_000, 100)])
    plain = fake_file(tmp_path / "x", [("gemm", 1_000, 700)])
    (d / "rank-1.fake").write_bytes(gzip.compress(plain.read_bytes()))
    (d / "notes.txt").write_text("not a trace")  # no reader lists .txt
    # WHEN the folder is ingested
    store = ingest([d], tmp_path / "s.tistore", quiet=True)
    # THEN the fake reader filled the store, and the metadata names its format
    gpu = store.table("gpu_activities")
    assert gpu.num_rows == 3
    assert sorted(gpu["name"].cast(pa.string()).to_pylist()) == ["gemm", "gemm", "relu"]
    assert [s["format"] for s in store.meta["sources"]] == ["fake", "fake"]
    assert [r["rank"] for r in store.ranks] == [0, 1]
    assert {r["format"] for r in store.ranks} == {"fake"}
    assert store.ranks[0]["distributed"] == {"world_size": 2, "backend": "fake"}
    assert store.meta["event_counts"] == {"0": {"kernel": 2}, "1": {"kernel": 1}}
    assert [d.code for d in store.diagnostics] == ["fake-read", "fake-read"]


def test_readers_are_chosen_by_content_not_by_extension(
    tmp_path: Path, fake_registered: None
) -> None:
    # a fake trace named .json and a Kineto trace named .fake each go to their own reader
    fake = fake_file(tmp_path / "rank-0.json", [("gemm", 0, 10)])
    assert ingest([fake], None, quiet=True).meta["sources"][0]["format"] == "fake"
    b = KinetoTraceBuilder(rank=0)
    b.launch("k", cpu_start=0, gpu_start=1_000, gpu_dur=2_000)
    kin = b.write(tmp_path / "trace.fake")
    assert ingest([kin], None, quiet=True).meta["sources"][0]["format"] == "kineto"


def test_kineto_reads_through_the_registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN the registered Kineto reader wrapped to count its calls
    [kineto] = [r for r in readers.READERS if r.name == "kineto"]
    calls = []

    def counted(data: bytes, **kw) -> RankRead:
        calls.append(kw["source"])
        return kineto.read(data, **kw)

    def counted_stream(path: Path, sink: object, **kw) -> object:  # the large-file entry
        calls.append(kw["source"])
        return kineto.stream(path, sink, **kw)

    monkeypatch.setattr(readers, "READERS", [replace(kineto, read=counted, stream=counted_stream)])
    b = KinetoTraceBuilder(rank=3, world_size=4)
    b.launch("k", cpu_start=0, gpu_start=1_000, gpu_dur=2_000)
    p = b.write(tmp_path / "t.json.gz")
    # WHEN it is ingested THEN the registry's reader parsed it, with a typed RankMeta
    store = ingest([p], None, quiet=True)
    assert calls == ["t.json.gz"]
    assert store.ranks[0]["rank"] == 3 and store.ranks[0]["format"] == "kineto"
    r = counted(gzip.decompress(p.read_bytes()), source="t.json.gz")
    assert isinstance(r.meta, RankMeta)
    assert (r.meta.rank, r.meta.world_size, r.meta.backend) == (3, 4, "nccl")
    assert r.meta.capture_flags and r.meta.versions == {"cuda_runtime_version": 12040}


def test_a_file_no_reader_claims_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(readers, "READERS", [])
    b = KinetoTraceBuilder(rank=0)
    b.launch("k", cpu_start=0, gpu_start=1_000, gpu_dur=2_000)
    with pytest.raises(TraceFormatError, match="no registered reader"):
        ingest([b.write(tmp_path / "t.json")], None, quiet=True, use_cache=False)


def test_store_columns_carry_meanings(tmp_path: Path) -> None:
    # GIVEN a Kineto trace with launch and forward/backward flows, memory events, Python
    # frames and a counter
    b = KinetoTraceBuilder(rank=0, world_size=1)
    with b.step(1, 0, 1_000_000):
        with b.module("Linear", 5_000, 300_000):
            b.python("<built-in method mm of type object>", 6_000, 1_000)
            b.python("model.py(12): forward", 7_000, 1_000)
            with b.cpu_op("aten::mm", 10_000, 50_000):
                b.launch("gemm", cpu_start=20_000, gpu_start=30_000, gpu_dur=40_000)
        b.fwdbwd(10_000, 400_000)
        b.memory(50_000, 1024, 1024, 2048)
        b.memory(60_000, 512, 512, 512, device=-1, device_type=0)
    b.events.append({"ph": "C", "name": "util", "pid": 1, "tid": 1, "ts": 1, "args": {"v": 1}})
    store = ingest([b.write(tmp_path / "t.json")], None, quiet=True)

    def values(table: str, col: str) -> list:
        return store.table(table)[col].cast(pa.string()).to_pylist()

    # THEN flows, frames, memory devices and event shapes read as meanings
    assert sorted(set(zip(values("flows", "kind"), values("flows", "phase")))) == [
        ("fwd_bwd", "end"),
        ("fwd_bwd", "start"),
        ("launch", "end"),
        ("launch", "start"),
    ]
    frames = dict(zip(values("python_frames", "name"), values("python_frames", "frame_kind")))
    assert frames == {
        "nn.Module: Linear_0": "module",
        "<built-in method mm of type object>": "builtin",
        "model.py(12): forward": "function",
    }
    assert values("memory_events", "device_type") == ["cuda", "cpu"]
    assert values("other_events", "event_shape") == ["counter"]


def test_every_column_source_names_a_store_column() -> None:
    for reader in readers.READERS:
        for table, cols in reader.column_sources.items():
            assert set(cols) <= set(schema.TABLES[table].column_names), (reader.name, table)
    [kineto] = [r for r in readers.READERS if r.name == "kineto"]
    memory_only = {t for r in readers.READERS if r.memory for t in r.column_sources}
    unfilled = {
        (t.name, c)
        for t in schema.TABLES.values()
        for c in t.column_names
        if c not in kineto.column_sources.get(t.name, {}) and t.name not in memory_only
    }
    assert unfilled == {("ranges", "domain")}


@pytest.mark.parametrize(
    "content",
    [
        b'{"model": "llama", "loss": 1.25}',  # JSON, but no Kineto key
        b"[1, 2, 3]",  # a JSON list, not of events
        b'{"schema": "1.0.2", "pid": 1, "nodes": []}',  # an Execution Trace
    ],
)
def test_kineto_claims_only_json_that_looks_like_a_trace(content: bytes) -> None:
    [kineto] = [r for r in readers.READERS if r.name == "kineto"]
    assert not kineto.sniff(content)


def test_kineto_claims_a_trace_whose_first_key_is_long() -> None:
    # GIVEN an object whose first (unknown) key holds 20 KB before "traceEvents"
    head = b'{"metadata": {"notes": "' + b"x" * 20_000 + b'"}, "traceEvents": []}'
    [kineto] = [r for r in readers.READERS if r.name == "kineto"]
    assert kineto.sniff(head[: readers.HEAD_BYTES])
    assert kineto.sniff(b'{"schemaVersion": 1}') and kineto.sniff(b" [ {")


def test_nsight_claims_only_an_sqlite_database_with_export_tables(tmp_path: Path) -> None:
    import sqlite3

    notes, export = tmp_path / "notes.sqlite", tmp_path / "run.sqlite"
    for p, table in ((notes, "notes"), (export, "StringIds")):
        con = sqlite3.connect(p)
        con.execute(f"CREATE TABLE {table} (x)")
        con.commit()
        con.close()
    assert readers.reader_for(export).name == "nsys"
    # a gzip-compressed export is checked from its content
    gz = tmp_path / "run.sqlite.gz"
    gz.write_bytes(gzip.compress(export.read_bytes()))
    assert readers.reader_for(gz).name == "nsys"
    with pytest.raises(TraceFormatError) as e:
        readers.reader_for(notes)
    assert "without Nsight Systems tables" in e.value.message


def test_a_file_no_reader_claims_lists_what_each_reader_looked_for(tmp_path: Path) -> None:
    p = tmp_path / "config.json"
    p.write_text('{"model": "llama"}')
    with pytest.raises(TraceFormatError) as e:
        readers.reader_for(p)
    hint = e.value.hint or ""
    assert "\n" not in hint
    for r in readers.READERS:
        assert r.looks_for and f"{r.title}: {r.looks_for}" in hint
