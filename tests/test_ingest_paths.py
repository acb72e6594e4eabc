"""The reader's fast paths give the same tables as the plain one.

Large files are cut into chunks of whole events by text and, on Linux, parsed by two processes
(a forked helper takes the second half and hands its pages of the first half back). Here the
thresholds are lowered so a small trace takes each path; every table must hold the same rows as
the plain decode's (chunks group events per chunk, so only the order may differ), with no
fallback diagnostic.
"""

from __future__ import annotations

import sys

import pyarrow as pa
import pytest

from tracegen.workloads import Workload, build
from traceinsight.ingest import parallel
from traceinsight.ingest.readers import kineto
from traceinsight.ingest.readers.kineto import decode


def _plain(t: pa.Table) -> list[str]:
    """The rows as sorted text: chunks group events by family per chunk, so row order differs."""
    cols = {}
    for name in t.column_names:
        c = t.column(name)
        if pa.types.is_dictionary(c.type):
            c = c.cast(c.type.value_type)
        cols[name] = c
    return sorted(repr(sorted(r.items())) for r in pa.table(cols).to_pylist())


@pytest.fixture(scope="module")
def data() -> bytes:
    return build(Workload(layers=2, steps=3, world_size=2, comm_bytes=1 << 20)).dumps().encode()


def _read(data: bytes):
    return kineto.read_kineto(data, source="t.json")


@pytest.mark.parametrize(
    "workers,text_split", [("1", True), ("2", True), ("1", False), ("2", False)]
)
def test_chunked_and_two_process_paths_equal_the_plain_decode(
    data: bytes, workers: str, text_split: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if workers == "2" and not sys.platform.startswith("linux"):
        pytest.skip("the two-process path forks (Linux only)")
    plain = _read(data)
    monkeypatch.setattr(decode, "BATCH_BYTES", 1)
    monkeypatch.setattr(decode, "CHUNK_BYTES", 16 * 1024)
    monkeypatch.setattr(decode, "BATCH_EVENTS", 500)
    monkeypatch.setattr(parallel, "PARALLEL_MIN_EVENTS", 1)
    monkeypatch.setenv("TRACEINSIGHT_WORKERS", workers)
    if not text_split:  # a layout the text cutter refuses: the raw-event-list path
        monkeypatch.setattr(decode, "fast_split", lambda data, chunk_bytes: None)
    calls = []
    for fn in ("chunks_two_processes", "events_in_processes"):
        real = getattr(decode, fn)
        monkeypatch.setattr(
            decode, fn, lambda *a, _f=real, _n=fn, **k: calls.append(_n) or _f(*a, **k)
        )
    fast = _read(data)
    want = (
        [] if workers == "1" else ["chunks_two_processes" if text_split else "events_in_processes"]
    )
    assert calls == want
    assert len(data) > 8 * decode.CHUNK_BYTES  # several chunks on each side
    assert fast.counts == plain.counts and sum(plain.counts.values()) > 1000
    codes = {d.code for d in fast.meta.diagnostics.items}
    assert "split-fallback" not in codes, codes
    assert set(fast.tables) == set(plain.tables)
    for name, t in plain.tables.items():
        assert fast.tables[name].num_rows == t.num_rows, name
        assert _plain(fast.tables[name]) == _plain(t), name
    assert fast.meta.to_dict() == plain.meta.to_dict()


def test_released_pages_read_as_zero_only_in_the_helper() -> None:
    if not sys.platform.startswith("linux"):
        pytest.skip("MADV_DONTNEED is Linux only")
    import os

    data = bytes(range(256)) * (64 * 1024)  # 16 MiB
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the helper: give back the middle, then look at it
        try:
            parallel.release_pages(data, 4 << 20, 12 << 20)
            mid = data[8 << 20 : (8 << 20) + 4096]
            edge = data[:4096] + data[-4096:]
            ok = mid == bytes(4096) and edge == (bytes(range(256)) * 16) * 2
            os.write(w, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(w)
    got = os.read(r, 1)
    os.waitpid(pid, 0)
    assert got == b"1"
    assert data[8 << 20 : (8 << 20) + 256] == bytes(range(256))  # the parent's copy is intact
