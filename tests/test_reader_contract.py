"""Every registered reader passes the same checks on a sample of its format.

Each reader of ``readers.READERS`` must have an entry in :data:`SAMPLES`: how to write a
sample file, how to count a conserved total straight from that file (not through
traceinsight), and a truncated and a wrong-type file of its format. A reader added without
its entry fails :func:`test_every_reader_has_a_sample`; the checks are exact int64 ns columns,
the store schema, a typed :class:`RankMeta`, the conserved total, and a one-line error with
exit code 2 through the CLI on the truncated and the wrong-type file.
"""

from __future__ import annotations

import gzip
import json
import pickle
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, fields
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from conftest import invoke

from tracegen.nsys import NsysExportBuilder
from tracegen.snapshot import fragmented_oom
from tracegen.synth import KinetoTraceBuilder
from traceinsight.diagnostics import DiagnosticLog
from traceinsight.ingest import ingest, readers
from traceinsight.ingest.readers.base import RankMeta, RankRead
from traceinsight.store import schema

#: kernel durations with sub-µs parts: exact ns survive only if no float is involved
KERNELS_NS = [(1_000, 2_001), (5_500, 1_250), (9_999, 333), (20_000, 70_123)]


@dataclass(frozen=True)
class Sample:
    """A reader's sample: ``write(folder) -> file``; ``total(file) -> (table, column, rows
    filter, value)`` counted independently; a truncated and a wrong-type file."""

    write: Callable[[Path], Path]
    total: Callable[[Path], tuple[str, str, Callable[[pa.Table], pa.Table], int]]
    truncated: Callable[[Path], Path]
    wrong_type: Callable[[Path], Path]


def _kernels(t: pa.Table) -> pa.Table:
    return t.filter(pc.equal(t["kind"].cast(pa.string()), "kernel"))


def _all(t: pa.Table) -> pa.Table:
    return t


# --- Kineto ---------------------------------------------------------------------------------


def kineto_write(d: Path) -> Path:
    b = KinetoTraceBuilder(rank=1, world_size=2)
    with b.step(1, 0, 200_000):
        for i, (start, dur) in enumerate(KERNELS_NS):
            b.launch(f"k{i}", cpu_start=start - 500, gpu_start=start + 100_000, gpu_dur=dur)
    return b.write(d / "rank1.json.gz")


def kineto_total(p: Path) -> tuple[str, str, Callable[[pa.Table], pa.Table], int]:
    top = json.loads(gzip.decompress(p.read_bytes()), parse_float=Decimal)
    ns = sum(int(e["dur"] * 1000) for e in top["traceEvents"] if e.get("cat") == "kernel")
    return "gpu_activities", "dur_ns", _kernels, ns


def kineto_truncated(d: Path) -> Path:
    text = gzip.decompress(kineto_write(d).read_bytes())
    p = d / "cut.json"
    p.write_bytes(text[: len(text) // 2])
    return p


def kineto_wrong(d: Path) -> Path:
    p = d / "wrong.json"
    p.write_text('{"schemaVersion": 1, "traceEvents": 5}')
    return p


# --- Nsight Systems -------------------------------------------------------------------------


def nsys_write(d: Path) -> Path:
    b = NsysExportBuilder()
    b.gpu()
    b.process(100)
    b.thread(100, 100, "python3")
    for i, (start, dur) in enumerate(KERNELS_NS):
        b.launch(100, 100, f"k{i}", cpu_start=start, gpu_start=start + 100_000, gpu_dur=dur)
    return b.write(d / "run.sqlite")


def nsys_total(p: Path) -> tuple[str, str, Callable[[pa.Table], pa.Table], int]:
    con = sqlite3.connect(p)
    try:
        [(ns,)] = con.execute('SELECT SUM("end" - start) FROM CUPTI_ACTIVITY_KIND_KERNEL')
    finally:
        con.close()
    return "gpu_activities", "dur_ns", _kernels, int(ns)


def nsys_truncated(d: Path) -> Path:
    data = nsys_write(d).read_bytes()
    p = d / "cut.sqlite"
    p.write_bytes(data[: len(data) // 3])
    return p


def nsys_wrong(d: Path) -> Path:
    p = d / "notes.sqlite"
    con = sqlite3.connect(p)
    con.execute("CREATE TABLE notes (x)")
    con.commit()
    con.close()
    return p


# --- CUDA memory snapshot -------------------------------------------------------------------


def snapshot_write(d: Path) -> Path:
    p = d / "snap.pickle"
    p.write_bytes(pickle.dumps(fragmented_oom().snapshot(), protocol=4))
    return p


def snapshot_total(p: Path) -> tuple[str, str, Callable[[pa.Table], pa.Table], int]:
    snap = pickle.loads(p.read_bytes())  # our own file: safe to load here
    return "memory_segments", "total_bytes", _all, sum(s["total_size"] for s in snap["segments"])


def snapshot_truncated(d: Path) -> Path:
    data = snapshot_write(d).read_bytes()
    p = d / "cut.pickle"
    p.write_bytes(data[: len(data) // 2])
    return p


def snapshot_wrong(d: Path) -> Path:
    p = d / "other.pickle"
    p.write_bytes(pickle.dumps([1, 2, 3], protocol=4))
    return p


# --- memory timeline ------------------------------------------------------------------------

TIMELINE_ROWS = [
    [-1, 1, 4096, 0],
    [1_790_000_000_000_001_234, 2, 1 << 20, 4],
    [1_790_000_000_000_005_678, 3, -(1 << 20), 4],
    [1_790_000_000_000_005_678, 3, 1 << 20, 5],
    [1_790_000_000_000_009_999, 4, -(1 << 20), 5],
]


def timeline_write(d: Path) -> Path:
    p = d / "mem.raw.json.gz"
    p.write_bytes(gzip.compress(json.dumps(TIMELINE_ROWS).encode(), mtime=0))
    return p


def timeline_total(p: Path) -> tuple[str, str, Callable[[pa.Table], pa.Table], int]:
    rows = json.loads(gzip.decompress(p.read_bytes()))
    return "memory_categories", "delta_bytes", _all, sum(r[2] for r in rows)


def timeline_truncated(d: Path) -> Path:
    text = json.dumps(TIMELINE_ROWS)
    p = d / "cut.raw.json"
    p.write_text(text[: len(text) // 2])
    return p


def timeline_wrong(d: Path) -> Path:
    p = d / "wrong.raw.json"
    p.write_text("[[0, 9, 100, 0]]")  # action 9 does not exist
    return p


#: reader name -> its sample (every reader of READERS must have one)
SAMPLES: dict[str, Sample] = {
    "kineto": Sample(kineto_write, kineto_total, kineto_truncated, kineto_wrong),
    "nsys": Sample(nsys_write, nsys_total, nsys_truncated, nsys_wrong),
    "cuda-memory-snapshot": Sample(
        snapshot_write, snapshot_total, snapshot_truncated, snapshot_wrong
    ),
    "memory-timeline": Sample(timeline_write, timeline_total, timeline_truncated, timeline_wrong),
}

NAMES = [r.name for r in readers.READERS]


def sample_of(name: str) -> Sample:
    assert name in SAMPLES, f"reader {name!r} has no sample in tests/test_reader_contract.py"
    return SAMPLES[name]


def test_every_reader_has_a_sample() -> None:
    assert set(NAMES) == set(SAMPLES), "a reader without a sample, or a sample without a reader"
    assert len(NAMES) == len(set(NAMES))
    for r in readers.READERS:
        assert r.looks_for and r.title and r.doc, r.name


def _read(name: str, p: Path) -> RankRead:
    reader = readers.reader_for(p)
    assert reader.name == name  # the sample is claimed by its own reader
    raw = p.read_bytes()
    data = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    kw = {"path": p} if reader.opens_path else {}
    return reader.read(data, source=p.name, **kw)


@pytest.mark.parametrize("name", NAMES)
def test_typed_rank_meta(tmp_path: Path, name: str) -> None:
    p = sample_of(name).write(tmp_path)
    r = _read(name, p)
    for part in r.parts():
        m = part.meta
        assert type(m) is RankMeta
        assert m.format == name and m.source == p.name
        assert type(m.rank) is int and m.rank >= 0
        assert m.rank_source in ("distributedInfo", "file name", "default")
        assert m.vendor in ("nvidia", "amd", "mtia", "other", "unknown")
        assert m.time_origin in ("epoch", "trace")
        if m.span_ns is not None:
            a, b = m.span_ns
            assert type(a) is int and type(b) is int and a <= b
        assert isinstance(m.diagnostics, DiagnosticLog)
        for f in fields(m):
            if f.name in ("devices", "devices_used"):
                assert isinstance(getattr(m, f.name), list)
            elif f.name in ("distributed", "process_names", "thread_names", "memory"):
                assert isinstance(getattr(m, f.name), dict)
        json.dumps(m.to_dict())  # what meta.json keeps is plain JSON
        assert set(part.tables) <= set(schema.TABLES)


@pytest.mark.parametrize("name", NAMES)
def test_store_schema_exact_ns_and_conserved_total(tmp_path: Path, name: str) -> None:
    sample = sample_of(name)
    p = sample.write(tmp_path)
    table, column, rows, want = sample.total(p)
    store = ingest([p], tmp_path / "s.tistore", quiet=True, use_cache=False)
    assert [s["format"] for s in store.meta["sources"]] == [name]
    for t_name, spec in schema.TABLES.items():
        t = store.table(t_name)
        # the store schema, column for column (names, types, nullability)
        assert t.schema.remove_metadata().equals(spec.arrow_schema), t_name
        for col in spec.column_names:
            if col.endswith("_ns"):
                assert t.schema.field(col).type == pa.int64(), (t_name, col)
    got = pc.sum(rows(store.table(table))[column]).as_py()
    assert type(got) is int and got == want, (table, column, got, want)
    assert want != 0


def _one_line_refusal(tmp_path: Path, p: Path) -> None:
    res = invoke(["ingest", p, "-o", tmp_path / "out.tistore"], exit_code=None)
    err = res.stderr.strip()
    assert res.exit_code == 2, (res.exit_code, err)
    assert err and err.count("\n") == 0, f"not one line: {err!r}"
    assert "Traceback" not in err and p.name in err
    assert not (tmp_path / "out.tistore").exists()


@pytest.mark.parametrize("name", NAMES)
def test_a_truncated_file_is_one_line_error(tmp_path: Path, name: str) -> None:
    _one_line_refusal(tmp_path, sample_of(name).truncated(tmp_path))


@pytest.mark.parametrize("name", NAMES)
def test_a_wrong_type_file_is_one_line_error(tmp_path: Path, name: str) -> None:
    _one_line_refusal(tmp_path, sample_of(name).wrong_type(tmp_path))
