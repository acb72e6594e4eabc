"""The parquet store: schema, atomic writes, reuse by content hash, metadata allow-list."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import invoke

from tracegen.synth import KinetoTraceBuilder
from traceinsight.errors import StoreError, TraceInsightError
from traceinsight.ingest import ingest, load, readers
from traceinsight.store import schema
from traceinsight.store.core import TraceStore

FAKE_TOKEN = "hf_FAKEtokenFAKEtokenFAKEtoken1234"


def trace(tmp_path: Path, name: str = "t.json", kernels: int = 3) -> Path:
    b = KinetoTraceBuilder(rank=0, world_size=1)
    with b.step(1, 0, 1_000_000):
        for i in range(kernels):
            with b.cpu_op("aten::mul", 10_000 + i * 100_000, 50_000):
                b.launch(
                    "mul_kernel",
                    cpu_start=20_000 + i * 100_000,
                    gpu_start=30_000 + i * 100_000,
                    gpu_dur=40_000,
                )
    return b.write(tmp_path / name)


def test_store_layout_and_schema(tmp_path: Path) -> None:
    store = ingest([trace(tmp_path)], tmp_path / "s.tistore", quiet=True)
    files = sorted(p.name for p in (tmp_path / "s.tistore").iterdir())
    assert files == sorted(["meta.json"] + [f"{t}.parquet" for t in schema.TABLES])
    meta = json.loads((tmp_path / "s.tistore" / "meta.json").read_text())
    assert meta["schema_version"] == schema.SCHEMA_VERSION
    assert len(meta["sources"][0]["sha256"]) == 64
    f = pq.ParquetFile(tmp_path / "s.tistore" / "gpu_activities.parquet")
    assert f.metadata.row_group(0).column(0).compression == "ZSTD"
    # names are dictionary-encoded in the file and come back as dictionaries
    assert str(store.table("gpu_activities").schema.field("name").type).startswith("dictionary")
    assert TraceStore.open(tmp_path / "s.tistore").row_counts["gpu_activities"] == 3


def no_parsing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every reader fails the test if it is asked to parse."""

    def boom(*a, **k):
        raise AssertionError("re-parsed an unchanged trace")

    monkeypatch.setattr(readers, "READERS", [replace(r, read=boom) for r in readers.READERS])


def test_reingest_of_unchanged_input_reuses_the_store(tmp_path: Path, monkeypatch) -> None:
    p = trace(tmp_path)
    first = ingest([p], None, quiet=True)
    # WHEN the same content is ingested again, nothing is parsed
    no_parsing(monkeypatch)
    again = ingest([p], None, quiet=True)
    assert again.path == first.path
    # also via a copy with another name/mtime (found by content hash after reading the bytes)
    copy = tmp_path / "copy.json"
    copy.write_bytes(p.read_bytes())
    assert ingest([copy], None, quiet=True).path == first.path
    # and an explicit -o store with the same inputs is reused too
    ingest_o = tmp_path / "o.tistore"
    monkeypatch.undo()
    ingest([p], ingest_o, quiet=True)
    no_parsing(monkeypatch)
    assert ingest([p], ingest_o, quiet=True).path == ingest_o


def test_changed_input_is_reingested(tmp_path: Path) -> None:
    p = trace(tmp_path, kernels=3)
    a = ingest([p], None, quiet=True)
    trace(tmp_path, kernels=5)  # same path, new content
    b = ingest([p], None, quiet=True)
    assert a.path != b.path and b.row_counts["gpu_activities"] == 5


def test_existing_store_of_other_traces_needs_force(tmp_path: Path) -> None:
    out = tmp_path / "s.tistore"
    ingest([trace(tmp_path, "a.json", 2)], out, quiet=True)
    other = trace(tmp_path, "b.json", 4)
    res = invoke(["ingest", other, "-o", out], exit_code=2, stderr_contains="--force")
    assert "Traceback" not in res.stderr
    invoke(["ingest", other, "-o", out, "--force"])
    assert TraceStore.open(out).row_counts["gpu_activities"] == 4


def test_failed_write_leaves_no_store(tmp_path: Path, monkeypatch) -> None:
    import traceinsight.store.core as st

    calls = {"n": 0}
    real = pq.write_table

    def flaky(table, where, **kw):
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError("disk full")
        return real(table, where, **kw)

    monkeypatch.setattr(st.pq, "write_table", flaky)
    with pytest.raises((OSError, TraceInsightError)):  # a clear error naming the store
        ingest([trace(tmp_path)], tmp_path / "s.tistore", quiet=True)
    assert not (tmp_path / "s.tistore").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".s.tistore")]


def test_incomplete_or_foreign_store_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "s.tistore"
    ingest([trace(tmp_path)], out, quiet=True)
    (out / "cpu_ops.parquet").unlink()
    with pytest.raises(StoreError, match="incomplete"):
        TraceStore.open(out)
    meta = json.loads((out / "meta.json").read_text())
    meta["schema_version"] = 999
    (out / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(StoreError, match="schema version 999"):
        TraceStore.open(out)


def test_secrets_in_trace_metadata_never_reach_the_store_or_output(tmp_path: Path) -> None:
    # GIVEN a trace whose metadata carries an environment with a token (as real ones do)
    b = KinetoTraceBuilder(
        rank=0,
        metadata={
            "metadata": {"system": {"env": {"HF_TOKEN": FAKE_TOKEN, "HOME": "/home/alice"}}},
            "host_name": "gpu-node-17.internal",
            "username": "alice",
            "INFO": [f"connected with {FAKE_TOKEN}"],
        },
    )
    b.op("aten::add", 0, 10_000, **{"Call stack": f"/home/alice/train.py;{FAKE_TOKEN}"})
    p = b.write(tmp_path / "t.json")
    out = tmp_path / "s.tistore"
    # WHEN it is ingested and summarised
    res_ingest = invoke(["ingest", p, "-o", out, "--json"])
    res = invoke(["summary", out])
    res_json = invoke(["summary", out, "--json"])
    # THEN the token, host and user appear in no file of the store and no output
    blobs = [f.read_bytes() for f in out.iterdir()]
    store = TraceStore.open(out)
    for name in schema.TABLES:
        blobs.append(json.dumps(store.table(name).to_pylist(), default=str).encode())
    for text in blobs + [x.encode() for x in (res_ingest.stdout, res.stdout, res_json.stdout)]:
        for secret in (FAKE_TOKEN.encode(), b"gpu-node-17", b"alice"):
            assert secret not in text


def test_load_accepts_a_store_or_traces(tmp_path: Path) -> None:
    p = trace(tmp_path)
    s = ingest([p], tmp_path / "s.tistore", quiet=True)
    assert load([tmp_path / "s.tistore"]).path == s.path
    assert load([p]).row_counts == s.row_counts


def test_store_reference_doc_is_current() -> None:
    # docs/STORE.md is generated from traceinsight/store/schema.py and the readers
    from conftest import REPO

    want = schema.markdown(readers.documented()) + "\n"
    assert (REPO / "docs" / "STORE.md").read_text() == want


def test_a_table_of_no_rows_is_not_read(tmp_path, monkeypatch) -> None:
    """A table the store's metadata counts no row of comes from the schema, not from disk
    (six of a small rank's twelve tables, read per partition and per rank)."""
    from traceinsight.ingest import ingest
    from traceinsight.store import core, schema

    st = ingest(
        [Path(__file__).parent.parent / "sample_traces" / "synthetic_h100_healthy.json.gz"],
        tmp_path / "s",
        quiet=True,
    )
    empty = [n for n, c in st.meta["tables"].items() if c == 0]
    full = [n for n, c in st.meta["tables"].items() if c > 0]
    assert empty and full
    reads: list[str] = []
    real = core.partitions.read_file
    monkeypatch.setattr(
        core.partitions, "read_file", lambda f, *a: (reads.append(str(f)), real(f, *a))[1]
    )
    st2 = core.TraceStore.open(st.path)
    for n in empty:
        t = st2.table(n)
        assert t.num_rows == 0 and t.schema.equals(schema.empty_table(n).schema)
    assert reads == []
    assert st2.table(full[0]).num_rows == st.meta["tables"][full[0]]
    assert len(reads) == 1
