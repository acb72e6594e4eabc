"""Truncated traces (a job killed while the profiler wrote the file): refused with a hint to
pass --salvage, which every command that reads traces takes; salvaged (plain JSON and a gzip
stream that ends early) up to the last complete event by the streaming reader; and headlined
as truncated, never as the CPU-only run a trace cut before its GPU events looks like.

The expected counts are computed here independently of the reader: Python's own JSON decoder
walks the cut file's event list event by event until the text ends."""

from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path

import pytest
from conftest import KINETO, NO_CORPUS
from hostile import bounded, cli, error, ok

from traceinsight.ingest.readers.kineto import salvage

H100 = KINETO / "tracelens/traces/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
needs_h100 = pytest.mark.skipif(not H100.is_file(), reason=NO_CORPUS)


def _complete_events(text: bytes) -> list[dict]:
    """The events of a cut Kineto object that Python's JSON decoder reads whole."""
    s = text.decode("utf-8", "replace")
    dec = json.JSONDecoder()
    i = s.index("[", s.index('"traceEvents"')) + 1
    out: list[dict] = []
    while True:
        while i < len(s) and s[i] in " \t\r\n,":
            i += 1
        try:
            ev, i = dec.raw_decode(s, i)
        except json.JSONDecodeError:
            return out
        out.append(ev)


def _expected(evs: list[dict]) -> dict[str, int]:
    cat = [e.get("cat") for e in evs]
    return {
        "events": len(evs),
        "cpu_ops": cat.count("cpu_op"),
        "memory_events": sum(e.get("name") == "[memory]" for e in evs),
        "python_frames": cat.count("python_function"),
        "kernels": cat.count("kernel"),
    }


@pytest.fixture(scope="module")
def full() -> bytes:
    return gzip.decompress(H100.read_bytes())


def _cut_plain(tmp: Path, full: bytes, share: float) -> tuple[Path, dict[str, int]]:
    cut = full[: int(len(full) * share)]
    p = tmp / "qwen-killed.json"
    p.write_bytes(cut)
    return p, _expected(_complete_events(cut))


def _cut_gzip(tmp: Path, full: bytes, share: float) -> tuple[Path, dict[str, int]]:
    """A gzip stream cut short: no end-of-stream marker, no trailer."""
    z = gzip.compress(full)
    cut = z[: int(len(z) * share)]
    p = tmp / "qwen-killed.json.gz"
    p.write_bytes(cut)
    content = zlib.decompressobj(wbits=31).decompress(cut)  # what the cut stream holds
    return p, _expected(_complete_events(content))


def _diagnosis(tmp: Path, p: Path, *extra: str, env: dict[str, str] | None = None) -> dict:
    run = ok(cli(["diagnose", p, "--salvage", "--json", "r.json", *extra], tmp, env=env))
    bounded(run)
    return json.loads((tmp / "r.json").read_text())


def _rows(tmp: Path, p: Path, env: dict[str, str] | None = None) -> dict[str, int]:
    run = ok(cli(["ingest", p, "-o", "s", "--salvage", "--force", "--json"], tmp, env=env))
    return json.loads(run.stdout)["tables"]


@needs_h100
@pytest.mark.parametrize("cut", [_cut_plain, _cut_gzip], ids=["plain", "gzip"])
def test_truncated_h100_trace_is_refused_with_a_hint_diagnose_takes(
    tmp_path: Path, full: bytes, cut
) -> None:
    p, _ = cut(tmp_path, full, 0.5)
    before = p.read_bytes()
    err = error(cli(["diagnose", p], tmp_path), p.name, "truncated", "--salvage")
    assert "no such option" not in err
    assert p.read_bytes() == before


@needs_h100
@pytest.mark.parametrize("cut", [_cut_plain, _cut_gzip], ids=["plain", "gzip"])
def test_h100_trace_cut_before_its_gpu_events_is_headlined_truncated(
    tmp_path: Path, full: bytes, cut
) -> None:
    p, want = cut(tmp_path, full, 0.5)
    assert want["kernels"] == 0 and want["cpu_ops"] > 1000  # the cut is before the GPU part
    rows = _rows(tmp_path, p)
    assert rows["cpu_ops"] == want["cpu_ops"]
    assert rows["memory_events"] == want["memory_events"]
    assert rows["python_frames"] == want["python_frames"]
    assert rows["gpu_activities"] == 0
    d = _diagnosis(tmp_path, p)
    h = d["headline"]
    assert h.startswith(f"Truncated trace: {p.name} ended early")
    assert "no GPU event survived the cut" in h and "GPU verdicts are not possible" in h
    assert f"{want['cpu_ops']:,} CPU ops" in h
    assert "CPU-only" not in h and "Python overhead" not in h
    assert not [f["rule"] for f in d["findings"] if f["rule"].startswith("cpu-")]
    assert "cpu_only" not in d["metrics"]["values"]
    codes = {x["code"] for x in d["diagnostics"]}
    assert "truncated-salvaged" in codes
    assert ("gzip-truncated" in codes) == p.name.endswith(".gz")
    # every report says so: the terminal's device line, the HTML, the Markdown
    run = ok(cli(["diagnose", p, "--salvage", "--html", "r.html", "--markdown", "r.md"], tmp_path))
    assert "no GPU events (truncated trace: the cut lost them)" in run.stdout
    for page in ("r.html", "r.md"):
        text = (tmp_path / page).read_text()
        assert "Truncated trace" in text and "CPU-only trace" not in text, page
    salvaged = next(x for x in d["diagnostics"] if x["code"] == "truncated-salvaged")
    assert f"read {want['events']:,} complete events" in salvaged["message"]


@needs_h100
@pytest.mark.parametrize("cut", [_cut_plain, _cut_gzip], ids=["plain", "gzip"])
def test_whole_file_reader_salvages_the_same_events(tmp_path: Path, full: bytes, cut) -> None:
    p, want = cut(tmp_path, full, 0.5)
    streamed = _rows(tmp_path, p)
    whole = _rows(tmp_path, p, env={"TRACEINSIGHT_STREAM": "0"})
    assert whole == streamed
    assert whole["cpu_ops"] == want["cpu_ops"]


@needs_h100
def test_trace_cut_after_some_kernels_keeps_its_gpu_verdict_marked_truncated(
    tmp_path: Path, full: bytes
) -> None:
    p, want = _cut_plain(tmp_path, full, 0.8)
    assert want["kernels"] > 100
    d = _diagnosis(tmp_path, p)
    assert d["headline"].startswith(f"Truncated trace ({p.name} read up to its last complete")
    assert "GPU verdicts are not possible" not in d["headline"]
    assert d["metrics"]["values"]["has_gpu"] == 1.0
    assert d["extra"]["coverage"]["kernels"] == want["kernels"]


@needs_h100
def test_complete_trace_has_no_truncation_headline(tmp_path: Path, full: bytes) -> None:
    p = tmp_path / "qwen.json"
    p.write_bytes(full)
    d = _diagnosis(tmp_path, p)
    assert "Truncated" not in d["headline"]
    assert "truncated-salvaged" not in {x["code"] for x in d["diagnostics"]}


# --- the tail search, on hand-made text ----------------------------------------------------------


def _reader(data: bytes):
    return lambda at, n: data[at : at + n]


def test_last_event_end_skips_the_cut_events_nested_objects() -> None:
    evs = [{"ph": "X", "name": f"op{i}", "args": {"a": [{"x": 1}, {"y": 2}]}} for i in range(50)]
    text = json.dumps({"traceEvents": evs}).encode()
    last = text.rfind(b'{"ph"')
    cut = text[: last + 40]  # inside the last event's args (its nested objects closed)
    got = salvage.truncated_layout(_reader(cut), len(cut))
    assert got is not None
    header, layout, first, end = got
    assert header == {k: None for k in header}  # no key precedes the event list
    assert layout == "object" and cut[first : first + 1] == b"{"
    assert json.loads(b"[" + cut[first:end] + b"]") == evs[:-1]


def test_last_event_end_grows_its_window_past_a_long_event(monkeypatch) -> None:
    monkeypatch.setattr(salvage, "WINDOW", 1024)
    evs = [{"ph": "X", "name": "a" * 5000}, {"ph": "X", "name": "b" * 5000}, {"name": "c" * 40}]
    text = json.dumps(evs).encode()
    cut = text[:-20]
    got = salvage.truncated_layout(_reader(cut), len(cut))
    assert got is not None and got[1] == "array"
    assert json.loads(b"[" + cut[got[2] : got[3]] + b"]") == evs[:2]


def test_no_complete_event_is_no_layout() -> None:
    cut = b'{"schemaVersion": 1, "traceEvents": [{"ph": "X", "na'
    assert salvage.truncated_layout(_reader(cut), len(cut)) is None


@pytest.mark.parametrize("tail", [b"]}garbage", b'], "baseTimeNanoseconds": 1} {"x": 1}'])
def test_text_after_the_event_list_is_no_truncation(tail: bytes) -> None:
    evs = [{"ph": "X", "name": f"op{i}"} for i in range(20)]
    text = json.dumps({"traceEvents": evs}).encode()
    cut = text[: text.rfind(b"]")] + tail
    assert salvage.truncated_layout(_reader(cut), len(cut)) is None


def test_salvaged_trace_with_trailing_data_keeps_its_header(tmp_path: Path) -> None:
    """Data after a complete document is reported as such (the whole-file reader), not
    salvaged as a cut: the keys after the event list are kept."""
    from hostile import events, trace

    doc = trace(events(3), baseTimeNanoseconds=1_700_000_000_000_000_000)
    p = tmp_path / "t.json"
    p.write_bytes(json.dumps(doc).encode() + b"\ngarbage")
    ok(cli(["ingest", p, "-o", "s", "--salvage"], tmp_path))
    meta = json.loads((tmp_path / "s" / "meta.json").read_text())
    codes = {d["code"] for d in meta["diagnostics"]}
    assert "trailing-data" in codes and "truncated-salvaged" not in codes
    assert meta["ranks"][0]["base_time_ns"] == 1_700_000_000_000_000_000
