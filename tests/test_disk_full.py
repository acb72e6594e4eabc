"""A disk that fills while a trace is ingested or a result is cached: one line naming the
path, exit 2, and nothing half-written left (the ingest's temporaries, a store, a cache file).
The full disk is simulated where the bytes are written (a parquet row group, a decompressed
temporary, a cache file), so no test needs root or a small file system."""

from __future__ import annotations

import errno
import gzip
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import invoke
from hostile import events, trace

from traceinsight.ingest import streamed


def _full(*_a: object, **_k: object) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


def _listing(d: Path) -> list[str]:
    return sorted(str(p.relative_to(d)) for p in d.rglob("*"))


def _one_line(res, *fragments: str) -> str:
    err = res.stderr.strip()
    assert res.exit_code == 2, (res.exit_code, res.stdout, err, res.exception)
    assert err.startswith("traceinsight: error: ") and "\n" not in err, err
    assert "internal error" not in err and "Traceback" not in err and "hint:" in err, err
    for f in fragments:
        assert f in err, err
    return err


@pytest.fixture
def trace_file(tmp_path: Path) -> Path:
    d = tmp_path / "in"
    d.mkdir()
    p = d / "t.json.gz"
    p.write_bytes(gzip.compress(json.dumps(trace(events(50))).encode()))
    return p


@pytest.mark.parametrize("where", ["row group", "decompressed copy"])
def test_disk_full_while_ingesting(
    tmp_path: Path, trace_file: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    if where == "row group":
        monkeypatch.setattr(pq.ParquetWriter, "write_table", _full)
    else:
        real = streamed.gunzip_pieces

        def half(*a: object, **k: object):
            for i, piece in enumerate(real(*a, **k)):
                if i:
                    _full()
                yield piece[: len(piece) // 2]
                _full()

        monkeypatch.setattr(streamed, "gunzip_pieces", half)
    before = trace_file.read_bytes()
    res = invoke(["ingest", trace_file, "-o", out / "s"], exit_code=None)
    _one_line(res, str(out / "s"), "no space left on the device", "nothing was kept")
    assert _listing(out) == []  # no store, no temporaries of this ingest
    assert trace_file.read_bytes() == before


def test_disk_full_in_the_cache(
    tmp_path: Path, trace_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv("TRACEINSIGHT_CACHE_DIR", str(cache))
    monkeypatch.setattr(pq.ParquetWriter, "write_table", _full)
    res = invoke(["diagnose", trace_file], exit_code=None)
    _one_line(res, str(cache), "no space left on the device", "TRACEINSIGHT_CACHE_DIR")
    stores = cache / "stores"
    assert not stores.exists() or _listing(stores) == []


def test_disk_full_writing_the_cached_result(
    tmp_path: Path, trace_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The diagnosis is still printed (the result cache is best effort) and no half-written
    cache file stays."""
    import os

    from traceinsight.store import core

    store = tmp_path / "s"
    invoke(["ingest", trace_file, "-o", store])
    real_fdopen = os.fdopen

    class FullFile:
        def __init__(self, fd: int, mode: str) -> None:
            self._f = real_fdopen(fd, mode)

        def __enter__(self) -> FullFile:
            return self

        def __exit__(self, *exc: object) -> None:
            self._f.close()

        def write(self, data: bytes) -> int:
            self._f.write(data[: len(data) // 2])
            self._f.flush()
            _full()
            return 0

    monkeypatch.setattr(core.os, "fdopen", FullFile)
    res = invoke(["diagnose", store], exit_code=None)
    monkeypatch.undo()
    assert res.exit_code == 0, res.stderr
    derived = store / core.DERIVED_DIR
    assert not derived.exists() or _listing(derived) == []


# --- replacing a store through a symbolic link ---------------------------------------------------


@pytest.mark.parametrize("how", ["relative", "absolute"])
def test_force_through_a_link_replaces_the_store_it_points_to(tmp_path: Path, how: str) -> None:
    from hostile import cli, ok, snapshot, write

    t = write(tmp_path / "t.json", trace())
    t2 = write(tmp_path / "t2.json", trace(events(3)))
    ok(cli(["ingest", t, "-o", "real"], tmp_path))
    link = tmp_path / "link"
    link.symlink_to("real" if how == "relative" else tmp_path / "real")
    inputs = snapshot(t, t2)
    ok(cli(["ingest", t2, "-o", "link", "--force"], tmp_path))
    # exactly what was there, the store replaced behind the link: no renamed link, no old
    # store, no temporaries
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != ".ti-cache") == [
        "link",
        "real",
        "t.json",
        "t2.json",
    ]
    assert link.is_symlink() and link.resolve() == (tmp_path / "real").resolve()
    s = json.loads(ok(cli(["summary", "link", "--json"], tmp_path)).stdout)
    assert [x["name"] for x in s["sources"]] == ["t2.json"]
    assert snapshot(t, t2) == inputs
