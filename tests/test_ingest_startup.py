"""What keeps an ingest's fixed cost low, and the column helpers the Kineto tables use.

The modules that read an nsys export or a memory snapshot are imported only when such a file is
read; the sha256 computed while the command starts is stopped before the parse helper forks
and goes on from where it stopped (never hashed twice, never a thread at the fork); the args
of a family are gathered per field when first read; text columns go straight into a
dictionary, in the order ``dictionary_encode`` gives.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import msgspec
import pyarrow as pa
import pytest

from traceinsight.ingest import ingest, prehash, streamed
from traceinsight.ingest.columns import dict_col
from traceinsight.ingest.readers.kineto.events import Event, GpuArgs, arg_columns

ROOT = Path(__file__).resolve().parents[1]


def test_a_kineto_ingest_imports_no_nsys_or_snapshot_reading_module(tmp_path: Path) -> None:
    trace = tmp_path / "t.json"
    trace.write_text(
        '{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, '
        '"ts": 1, "dur": 2, "args": {"device": 0, "stream": 7, "correlation": 1}}]}'
    )
    code = (
        "import sys\n"
        "from traceinsight.ingest import ingest\n"
        f"ingest([{str(trace)!r}], {str(tmp_path / 's.tistore')!r}, quiet=True)\n"
        "lazy = [m for m in sys.modules if m.startswith(('traceinsight.ingest.readers.nsys.',"
        " 'traceinsight.ingest.readers.snapshot.')) or m == 'sqlite3']\n"
        "print(sorted(lazy))\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


def test_the_nsys_reader_still_finds_its_modules_when_it_reads() -> None:
    from traceinsight.ingest.readers import nsys

    assert nsys.sniff(b"SQLite format 3\x00") is True
    assert nsys.sniff(b'{"traceEvents": []}') is False
    assert nsys.READER.name == nsys.FORMAT == "nsys"


def _big(tmp_path: Path, n: int = 3 * prehash.PIECE + 12345) -> Path:
    p = tmp_path / "big.bin"
    p.write_bytes(os.urandom(n))
    return p


def test_a_paused_start_up_hash_resumes_to_the_files_sha256(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(prehash, "MIN_BYTES", 1)
    monkeypatch.setattr(prehash, "PIECE", 1024)  # thousands of pieces: paused part way
    p = _big(tmp_path, 4 << 20)
    want = hashlib.sha256(p.read_bytes()).hexdigest()
    part = None
    for _ in range(20):  # the thread may finish before the pause: try until it is caught early
        prehash.start([p])
        got = prehash.pause(p)
        assert not prehash.pending()  # no thread runs once pause returns
        if isinstance(got, prehash.Partial):
            part = got
            break
        assert got == want
    assert part is not None
    assert 0 < part.offset < p.stat().st_size
    h = streamed.FileHasher(p, part)
    h.start()
    assert h.result() == want


def test_a_paused_hash_of_a_file_changed_since_starts_again(tmp_path: Path) -> None:
    p = _big(tmp_path)
    head = p.read_bytes()[: prehash.PIECE]
    part = prehash.Partial(hashlib.sha256(head), prehash.PIECE, prehash.stamp_of(p))
    p.write_bytes(b"x" + p.read_bytes())  # another file now: size and mtime differ
    assert not part.resumable(p)
    assert streamed.FileHasher(p, part).result() == hashlib.sha256(p.read_bytes()).hexdigest()


def test_an_ingest_to_a_target_keeps_the_sha256_of_the_whole_file(tmp_path: Path) -> None:
    events = ",".join(
        '{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, '
        f'"ts": {i}, "dur": 1, "args": {{"External id": {i}}}}}'
        for i in range(150_000)
    )
    trace = tmp_path / "t.json"
    trace.write_text('{"traceEvents": [' + events + "]}")
    assert trace.stat().st_size > prehash.MIN_BYTES
    prehash.start([trace])
    store = ingest([trace], tmp_path / "s.tistore", quiet=True)
    assert not prehash.pending()
    assert store.meta["sources"][0]["sha256"] == hashlib.sha256(trace.read_bytes()).hexdigest()


def _events(args: list[bytes]) -> list[Event]:
    return [Event(ph="X", cat="kernel", args=msgspec.Raw(a)) for a in args]


def test_args_columns_are_gathered_per_field_with_defaults_for_absent_args() -> None:
    evs = _events([b'{"device": 0, "stream": 7}', b"null", b'{"stream": "x", "grid": [1, 2, 3]}'])
    a = arg_columns(evs, GpuArgs, {})
    assert dict.__len__(a) == 0  # nothing gathered until read
    assert a["stream"] == [7, None, "x"]
    assert a["device"] == [0, None, None]
    assert a["grid"] == [None, None, [1, 2, 3]]
    assert set(dict.keys(a)) == {"stream", "device", "grid"}
    with pytest.raises(KeyError):
        a["no such field"]


@pytest.mark.parametrize(
    "values",
    [
        ["b", "a", None, "b"],
        ["x"] * 5,
        [None, None],
        [],
        ["é", "a", "é"],
    ],
)
def test_dict_col_equals_dictionary_encode_of_the_strings(values: list) -> None:
    got = dict_col(values)
    assert got.type == pa.dictionary(pa.int32(), pa.string())
    if values and any(v is not None for v in values):
        assert got.equals(pa.array(values, pa.string()).dictionary_encode())
    assert got.to_pylist() == values


def test_dict_col_of_mixed_types_converts_each_distinct_value_once() -> None:
    got = dict_col([1, "a", 1, None, 2.5])
    assert got.to_pylist() == ["1", "a", "1", None, "2.5"]
    assert got.dictionary.to_pylist() == ["1", "a", "", "2.5"]  # None: a null code


def test_hash_file_reads_the_rest_of_the_file_into_one_buffer(tmp_path: Path) -> None:
    p = _big(tmp_path, 2 * prehash.PIECE + 5)
    h = hashlib.sha256()
    with open(p, "rb", buffering=0) as f:
        f.seek(7)
        assert prehash.hash_file(h, f) == p.stat().st_size - 7
    assert h.hexdigest() == hashlib.sha256(p.read_bytes()[7:]).hexdigest()
