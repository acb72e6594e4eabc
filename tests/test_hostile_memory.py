"""Hostile memory inputs and whole-file reads (the hostile-input style of tests/test_hostile.py:
the CLI in a subprocess under the address-space cap, one-line errors, bounded peaks).

- Files read whole (memory snapshots, a damaged Kineto trace the streaming reader hands
  back, a timeline export with TRACEINSIGHT_STREAM=0) hold their content in memory: gzip is
  decompressed up to a quarter of TRACEINSIGHT_MAX_MEMORY_MB and no further, and a plain
  memory input beyond it is refused before it is read.
- A memory-timeline export streams: read from disk (a gzip one decompressed to a temporary
  file first) a chunk of text at a time into int64 columns, written as they come, whatever
  its size (never a Python object per row, never the whole file).
- Large snapshot pickles (unpickled in a capped child process) give the same one-line errors
  as small ones (read in process) for values out of range and for deep nesting.
"""

from __future__ import annotations

import gzip
import json
import pickle
import random
from pathlib import Path

import pytest
from hostile import bounded, cli, error, ok

from tracegen.snapshot import fragmented_oom

#: TRACEINSIGHT_MAX_MEMORY_MB of the capped runs: files read whole may hold 16 MiB
SMALL_MB = 64
WHOLE = SMALL_MB * (1 << 20) // 4
CAPPED = {"TRACEINSIGHT_MAX_MEMORY_MB": str(SMALL_MB)}
IN_PROCESS = {"TRACEINSIGHT_SNAPSHOT_ISOLATE_BYTES": str(1 << 30)}


def _timeline(path: Path, rows: int, *, gz: bool = False, seed: int = 3) -> tuple[Path, int]:
    """A memory-timeline export of ``rows`` rows, and the sum of its byte column."""
    rnd = random.Random(seed)
    t = 1_700_000_000_000_000_000
    parts = []
    total = 0
    for i in range(rows):
        t += rnd.randint(1, 5000)
        size = rnd.randint(1, 1 << 24) * (1 if i % 3 else -1)
        total += size
        parts.append(f"[{-1 if i < 5 else t}, {rnd.choice((1, 2, 3, 4))}, {size}, {i % 8}]")
    text = ("[" + ", ".join(parts) + "]").encode()
    path.write_bytes(gzip.compress(text, 1) if gz else text)
    return path, total


def _zeros_gz(path: Path, head: bytes, content_mb: int, tail: bytes = b"") -> Path:
    """A gzip file of ``head`` then ``content_mb`` MiB of the same byte (a bomb: ~1000x)."""
    with gzip.open(path, "wb", compresslevel=9) as f:
        f.write(head)
        block = b"0" * (1 << 20)
        for _ in range(content_mb):
            f.write(block)
        f.write(tail)
    return path


# --- whole-file reads are bounded ----------------------------------------------------------------


def test_memory_timeline_decodes_in_bounded_memory(tmp_path: Path) -> None:
    p, total = _timeline(tmp_path / "tl.raw.json", 1_500_000)
    mb = p.stat().st_size / 2**20
    assert mb > 50
    run = ok(cli(["ingest", p, "-o", "s", "--json"], tmp_path, timeout=300))
    assert json.loads(run.stdout)["tables"]["memory_categories"] == 1_500_000
    # a chunk of text, its rows and the sink's pending row groups, whatever the file's size
    # (held whole: the file, its int64 columns and Arrow's copies, ~2.7x the text; a Python
    # tuple per row took 8x: 984 MB for a 115 MB export)
    bounded(run, 150 + 1.0 * mb)
    import pyarrow.compute as pc

    from traceinsight.store.core import TraceStore

    t = TraceStore.open(tmp_path / "s").table("memory_categories")
    assert pc.sum(t["delta_bytes"]).as_py() == total
    assert t["ts_ns"].null_count == 5
    assert t["seq"].to_pylist()[-1] == 1_499_999


@pytest.mark.parametrize(
    "name, head, tail",
    [
        ("snap.pickle.gz", b"\x80\x04\x95", b""),
        # damaged: the streaming reader hands it back, the whole-file reader would repair it
        ("damaged.json.gz", b'{"traceEvents": [', b"]}"),
    ],
)
def test_gzip_read_whole_stops_at_the_memory_bound(
    tmp_path: Path, name: str, head: bytes, tail: bytes
) -> None:
    p = _zeros_gz(tmp_path / name, head, 40, tail)
    assert p.stat().st_size < 200_000  # 40 MiB within the 200x ratio guard's 64 MiB floor
    before = p.read_bytes()
    run = cli(["ingest", p, "-o", "s"], tmp_path, env=CAPPED)
    error(run, name, "gzip content is over", f"{WHOLE:,} bytes", "TRACEINSIGHT_MAX_MEMORY_MB")
    bounded(run, 300)
    assert p.read_bytes() == before


def test_gzip_timeline_bomb_streams_to_a_bounded_error(tmp_path: Path) -> None:
    """A timeline export streams (gzip decompressed to disk under the ratio guard): 40 MiB of
    one digit is a row that never ends, refused once a chunk and a row's most text are held."""
    p = _zeros_gz(tmp_path / "timeline.raw.json.gz", b"[[1, 2, 3, 0], [1, 2, 3, 0", 40, b"]]")
    run = cli(["ingest", p, "-o", "s"], tmp_path, env=CAPPED)
    error(run, "timeline.raw.json.gz", "not a memory-timeline export", "no row ends within")
    bounded(run, 200)


def test_plain_memory_input_beyond_the_bound_streams_or_is_refused_when_read_whole(
    tmp_path: Path,
) -> None:
    p, _ = _timeline(tmp_path / "tl.raw.json", 700_000)
    assert p.stat().st_size > WHOLE
    # read whole (streaming off): refused from its size, never read
    run = cli(["ingest", p, "-o", "s"], tmp_path, env={**CAPPED, "TRACEINSIGHT_STREAM": "0"})
    error(run, "tl.raw.json", "memory input is over", "TRACEINSIGHT_MAX_MEMORY_MB")
    bounded(run, 200)
    # streamed (the default): read in bounded memory, the same table as read whole
    run = ok(cli(["ingest", p, "-o", "s1", "--json"], tmp_path, env=CAPPED, timeout=300))
    assert json.loads(run.stdout)["tables"]["memory_categories"] == 700_000
    bounded(run, 200)
    ok(cli(["ingest", p, "-o", "s0"], tmp_path, env={"TRACEINSIGHT_STREAM": "0"}, timeout=300))
    import pyarrow.parquet as pq

    a, b = (pq.read_table(tmp_path / s / "memory_categories.parquet") for s in ("s1", "s0"))
    assert a.num_rows == 700_000 and a.equals(b)
    # a Kineto trace of the same size streams, whatever the bound
    from hostile import events, trace, write

    t = write(tmp_path / "t.json", trace(events(40_000)))
    assert t.stat().st_size > WHOLE
    ok(cli(["ingest", t, "-o", "s2"], tmp_path, env=CAPPED, timeout=300))


def test_gzip_memory_input_within_the_bound_reads(tmp_path: Path) -> None:
    p, _ = _timeline(tmp_path / "tl.raw.json.gz", 200_000, gz=True)
    run = ok(cli(["ingest", p, "-o", "s", "--json"], tmp_path, env=CAPPED))
    assert json.loads(run.stdout)["tables"]["memory_categories"] == 200_000


# --- large pickles: the small path's errors ------------------------------------------------------


def _snapshot_bytes(**change: object) -> bytes:
    """A real-shaped snapshot pickle (protocol 2, no frames) with a placeholder state."""
    snap = fragmented_oom().snapshot()
    snap["segments"][0]["blocks"][0]["state"] = "PLACEHOLDER-STATE"
    for k, v in change.items():
        snap["segments"][0][k] = v
    # padding: a long, valid call stack on the last block makes the file large
    snap["segments"][-1]["blocks"][-1]["frames"] = [
        {"filename": f"/src/model_{i}.py", "line": i, "name": f"fn_{i}"} for i in range(20_000)
    ]
    return pickle.dumps(snap, protocol=2)


def _with_state(data: bytes, opcodes: bytes) -> bytes:
    tok = b"X" + len(b"PLACEHOLDER-STATE").to_bytes(4, "little") + b"PLACEHOLDER-STATE"
    assert data.count(tok) == 1
    return data.replace(tok, opcodes)


def _same_error_both_ways(tmp_path: Path, p: Path, *fragments: str) -> str:
    assert p.stat().st_size >= 1 << 20  # read in a capped child process by default
    large = error(cli(["ingest", p, "-o", "s"], tmp_path), p.name, *fragments)
    small = error(cli(["ingest", p, "-o", "s"], tmp_path, env=IN_PROCESS), p.name, *fragments)
    assert large == small
    return large


def test_large_pickle_with_a_device_beyond_int32(tmp_path: Path) -> None:
    p = tmp_path / "dev.pickle"
    p.write_bytes(
        _with_state(_snapshot_bytes(device=2**40), b"X" + (8).to_bytes(4, "little") + b"inactive")
    )
    err = _same_error_both_ways(tmp_path, p, "out of the range")
    assert "internal error" not in err


@pytest.mark.parametrize(
    "what, opcodes, fragment",
    [
        # a tuple of a tuple of ... a million deep: hashing it overflows the C stack
        ("tuples", b")" + b"\x85" * 1_200_000, "nests too deeply"),
        # lists nested 600,000 deep: unhashable as a block state
        ("lists", b"]" * 600_000 + b"a" * 599_999, "out of the range"),
    ],
)
def test_large_pickle_nested_deep(tmp_path: Path, what: str, opcodes: bytes, fragment: str) -> None:
    p = tmp_path / f"deep-{what}.pickle"
    p.write_bytes(_with_state(_snapshot_bytes(), opcodes))
    err = _same_error_both_ways(tmp_path, p, fragment)
    assert "signal" not in err and "internal error" not in err


def test_small_pickle_nested_deep_does_not_crash(tmp_path: Path) -> None:
    """Below the isolation size the pure-Python unpickler reads it, in the CLI's own process:
    a deep tuple is refused while it is built, before anything hashes it."""
    snap = fragmented_oom().snapshot()
    snap["segments"][0]["blocks"][0]["state"] = "PLACEHOLDER-STATE"
    p = tmp_path / "deep.pickle"
    p.write_bytes(_with_state(pickle.dumps(snap, protocol=2), b")" + b"\x85" * 1_000_000))
    assert p.stat().st_size < 1 << 20
    error(cli(["ingest", p, "-o", "s"], tmp_path), "deep.pickle", "nests too deeply")


# --- a history that contradicts the end state ----------------------------------------------------


def _history_snapshot(tmp: Path, name: str, *, contradict: bool) -> tuple[Path, int]:
    """fragmented_history()'s snapshot; with ``contradict`` a 64 GiB allocation that the end
    state does not hold (and no free of it) is put in the middle of its history: replayed
    back from the end, every level before it falls below zero. Returns the file and the index
    of that action."""
    from tracegen.snapshot import GiB, fragmented_history

    snap = fragmented_history().snapshot()
    trace = snap["device_traces"][-1]
    k = len(trace) // 2
    if contradict:
        e = dict(trace[k])
        e.update(action="alloc", addr=0x7F00_0000_0000, size=64 * GiB)
        trace.insert(k, e)
    p = tmp / name
    p.write_bytes(pickle.dumps(snap, protocol=4))
    return p, k


def _memory(tmp: Path, p: Path) -> dict:
    ok(cli(["diagnose", p, "--json", "r.json"], tmp))
    return json.loads((tmp / "r.json").read_text())


def test_history_contradicting_the_end_state_is_reported_and_never_drawn_negative(
    tmp_path: Path,
) -> None:
    good, _ = _history_snapshot(tmp_path, "good.pickle", contradict=False)
    want = _memory(tmp_path, good)
    bad, k = _history_snapshot(tmp_path, "bad.pickle", contradict=True)
    got = _memory(tmp_path, bad)
    c0, c = want["memory"]["snapshot"]["curve"], got["memory"]["snapshot"]["curve"]
    assert c0["omitted"] == 0
    assert "snapshot-history-contradicts" not in {d["code"] for d in want["diagnostics"]}
    # the levels before the contradicting action are impossible: left out, not clamped
    assert c["omitted"] == k
    assert min(c["allocated"]) >= 0 and min(c["reserved"]) >= 0
    assert len(c["x"]) == len(c0["x"]) + 1 - k
    # from the contradicting action on, the levels are the consistent history's own
    assert c["allocated"][1:] == c0["allocated"][k:]
    assert c["reserved"][1:] == c0["reserved"][k:]
    d = next(x for x in got["diagnostics"] if x["code"] == "snapshot-history-contradicts")
    assert d["count"] == k and f"first {k:,} of its {len(c0['x']) + 1:,} actions" in d["message"]
    assert "below zero" in d["message"] and d["hint"]
    # the history's peak is searched where the levels are possible (the level right after
    # the contradicting action is the consistent history's level before it)
    assert c["allocated"][0] == c0["allocated"][k - 1]
    peak = got["metrics"]["values"]["snapshot_peak_allocated_bytes"]
    assert peak == max(c0["allocated"][k - 1 :])


# --- a memory input from another run -------------------------------------------------------------

BASE_NS = 1_750_000_000_000_000_000  # 2025-06-15


def _trace_and_timeline(tmp: Path, offset_ns: int) -> tuple[Path, Path]:
    from hostile import events, trace, write

    t = write(tmp / "t.json", trace(events(3), baseTimeNanoseconds=BASE_NS))
    t0 = BASE_NS + offset_ns
    rows = [[-1, 1, 4096, 0]] + [[t0 + 1000 * i, 2, 1 << 20, 4] for i in range(50)]
    tl = tmp / "tl.raw.json"
    tl.write_text(json.dumps(rows))
    return t, tl


@pytest.mark.parametrize(
    "offset_ns, joined",
    [
        (500_000, True),  # inside the trace's window
        (-400 * 86_400 * 10**9, False),  # the year before
    ],
)
def test_memory_timeline_is_joined_only_when_its_times_fit_the_trace(
    tmp_path: Path, offset_ns: int, joined: bool
) -> None:
    t, tl = _trace_and_timeline(tmp_path, offset_ns)
    ok(cli(["diagnose", t, "--memory-snapshot", tl, "--json", "r.json"], tmp_path))
    d = json.loads((tmp_path / "r.json").read_text())
    diags = [x for x in d["diagnostics"] if x["code"] == "memory-input-not-joined"]
    cats = (d.get("memory") or {}).get("categories")
    if joined:
        assert not diags and cats
        assert [f["name"] for f in d["trace"]["memory_inputs"]] == ["tl.raw.json"]
    else:
        assert not cats and "memory_inputs" not in d["trace"]
        (x,) = diags
        assert x["source"] == "tl.raw.json" and x["severity"] == "warning"
        assert "400 days from the trace's (2025-06-15" in x["message"]
        assert "another run" in x["message"]


def test_snapshot_child_never_gets_more_than_the_memory_limit(tmp_path: Path) -> None:
    """A gzip pickle of 20 million small ints (40 MB of content in 40 kB): within the gzip
    bound, but unpickled it needs far more than a 200 MB limit allows."""
    body = b"\x80\x04](" + b"K\x01" * 20_000_000 + b"e."
    p = tmp_path / "ints.pickle.gz"
    p.write_bytes(gzip.compress(body, 9))
    env = {"TRACEINSIGHT_MAX_MEMORY_MB": "200"}
    run = cli(["ingest", p, "-o", "s"], tmp_path, env=env)
    error(run, "ints.pickle.gz", "needs more memory", "TRACEINSIGHT_MAX_MEMORY_MB")
    bounded(run, 500)
