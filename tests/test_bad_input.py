"""Bad input: one line on stderr naming the file, the problem and a hint; exit 2; no output."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from conftest import KINETO, invoke, requires_corpus

from tracegen.synth import KinetoTraceBuilder


def small_trace() -> str:
    b = KinetoTraceBuilder(rank=0, world_size=1)
    with b.step(1, 0, 500_000):
        with b.cpu_op("aten::add", 10_000, 50_000):
            b.launch("add_kernel", cpu_start=20_000, gpu_start=40_000, gpu_dur=30_000)
    return b.dumps()


def assert_clean_failure(res, out_dir: Path, *fragments: str) -> None:
    err = res.stderr.strip()
    assert res.exit_code == 2
    assert err.count("\n") == 0, f"not one line: {err!r}"
    assert "Traceback" not in err
    assert "hint:" in err
    for f in fragments:
        assert f in err, err
    # no half-written store, no temporary leftovers
    assert not (out_dir / "out.tistore").exists()
    assert not [p for p in out_dir.iterdir() if p.name.startswith(".out.tistore")]


def run_ingest(tmp_path: Path, *inputs: Path):
    return invoke(["ingest", *inputs, "-o", tmp_path / "out.tistore"], exit_code=None)


def test_truncated_json(tmp_path: Path) -> None:
    text = small_trace()
    p = tmp_path / "crashed.json"
    p.write_text(text[: len(text) // 2])
    assert_clean_failure(
        run_ingest(tmp_path, p), tmp_path, "crashed.json", "truncated", "--salvage"
    )


def test_truncated_json_salvaged(tmp_path: Path) -> None:
    # GIVEN a trace cut after its GPU kernel event
    text = small_trace()
    cut = text.index('"cat": "ac2g", "name": "ac2g", "bp": "e"')
    p = tmp_path / "crashed.json"
    p.write_text(text[:cut])
    # WHEN ingested with --salvage THEN the complete events are kept, with a diagnostic
    invoke(["ingest", p, "-o", tmp_path / "s", "--salvage"])
    res = invoke(["summary", tmp_path / "s", "--json"])
    s = json.loads(res.stdout)
    assert s["ranks"][0]["kernel_count"] == 1
    assert any(d["code"] == "truncated-salvaged" for d in s["diagnostics"])


def test_not_json(tmp_path: Path) -> None:
    p = tmp_path / "notes.json"
    p.write_text("step time was slow, see attached\n")
    assert_clean_failure(run_ingest(tmp_path, p), tmp_path, "notes.json", "not JSON")


def test_corrupt_gzip(tmp_path: Path) -> None:
    p = tmp_path / "t.json.gz"
    good = gzip.compress(small_trace().encode())
    p.write_bytes(good[:10] + bytes(b ^ 0x5A for b in good[10:60]) + good[60:])
    assert_clean_failure(run_ingest(tmp_path, p), tmp_path, "t.json.gz", "gzip")


def test_truncated_gzip(tmp_path: Path) -> None:
    p = tmp_path / "t.json.gz"
    good = gzip.compress(small_trace().encode())
    p.write_bytes(good[: len(good) // 2])
    assert_clean_failure(run_ingest(tmp_path, p), tmp_path, "t.json.gz", "truncated")


@pytest.mark.parametrize(
    "content,fragment",
    [
        ('{"traceEvents": []}', "no events"),
        ("[]", "no events"),
        ("", "empty"),
        (
            '{"schemaVersion": 1, "traceEvents": [{"ph": "M", "name": "process_name", "pid": 1, '
            '"tid": 0, "args": {"name": "python"}}]}',
            "only metadata",
        ),
    ],
)
def test_empty_trace(tmp_path: Path, content: str, fragment: str) -> None:
    p = tmp_path / "empty.json"
    p.write_text(content)
    assert_clean_failure(run_ingest(tmp_path, p), tmp_path, "empty.json", fragment)


@pytest.mark.parametrize(
    "content,fragment",
    [
        ('{"model": "llama", "loss": 1.25}', "traceEvents"),
        ('{"traceEvents": 5}', "not a PyTorch profiler trace"),
        ("[1, 2, 3]", "not a PyTorch profiler trace"),
        ('[{"a": 1}, {"b": 2}]', "no trace events"),
    ],
)
def test_json_that_is_not_a_trace(tmp_path: Path, content: str, fragment: str) -> None:
    p = tmp_path / "config.json"
    p.write_text(content)
    assert_clean_failure(run_ingest(tmp_path, p), tmp_path, "config.json", fragment)


@requires_corpus
def test_execution_trace_is_recognised(tmp_path: Path) -> None:
    p = KINETO / "hta/execution_trace/benchmark_simple_add_et.json.gz"
    assert_clean_failure(run_ingest(tmp_path, p), tmp_path, "Execution Trace")


def test_two_files_claim_the_same_rank(tmp_path: Path) -> None:
    d = tmp_path / "run"
    d.mkdir()
    (d / "a.json").write_text(small_trace())
    (d / "b.json").write_text(small_trace())
    assert_clean_failure(
        run_ingest(tmp_path, d), tmp_path, "two files claim rank 0", "a.json", "b.json"
    )


def test_same_named_files_of_two_folders_are_told_apart(tmp_path: Path) -> None:
    # two runs' rank-0 traces passed together: the error names each by its folder
    for run in ("h100", "mi300"):
        (tmp_path / run).mkdir()
        (tmp_path / run / "trace.json").write_text(small_trace())
    res = run_ingest(tmp_path, tmp_path / "h100" / "trace.json", tmp_path / "mi300" / "trace.json")
    assert_clean_failure(
        res, tmp_path, "two files claim rank 0: h100/trace.json and mi300/trace.json"
    )


def test_files_without_rank_information(tmp_path: Path) -> None:
    d = tmp_path / "run"
    d.mkdir()
    b = KinetoTraceBuilder()  # no distributedInfo
    b.op("aten::add", 0, 10_000)
    b.write(d / "first.json")
    b.write(d / "second.json")
    assert_clean_failure(run_ingest(tmp_path, d), tmp_path, "cannot tell the rank", "first.json")


def test_rank_from_file_names(tmp_path: Path) -> None:
    d = tmp_path / "run"
    d.mkdir()
    b = KinetoTraceBuilder()
    b.op("aten::add", 0, 10_000)
    b.write(d / "trainer_rank-3.json")
    b.write(d / "trainer_rank-1.json")
    res = invoke(["ingest", d, "-o", tmp_path / "s", "--json"])
    assert json.loads(res.stdout)["ranks"] == [1, 3]


def test_missing_file(tmp_path: Path) -> None:
    assert_clean_failure(
        run_ingest(tmp_path, tmp_path / "nope.json.gz"), tmp_path, "nope.json.gz", "no such file"
    )


def test_nsight_report_gets_the_export_command(tmp_path: Path) -> None:
    p = tmp_path / "run.nsys-rep"
    p.write_bytes(b"NVIDIA Tegra Profiler Report 2024@6@2@\x00\x01binary")
    assert_clean_failure(
        run_ingest(tmp_path, p), tmp_path, "run.nsys-rep", "nsys export --type sqlite"
    )


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    p = tmp_path / "notes.json"
    p.write_text("not a trace")
    res = invoke(["--debug", "ingest", p, "-o", tmp_path / "out"], exit_code=None)
    assert res.exit_code != 0
    assert res.exception is not None and type(res.exception).__name__ == "TraceFormatError"


@pytest.mark.parametrize(
    "bad,repair",
    [
        (b'"name": "aten::mm"', b'"name": "C:\\Users\\me\\model.py(12): fwd"'),  # lone backslashes
        (b'"cbid": 211', b'"cbid": N/A'),  # bare N/A
    ],
)
def test_repairable_json_ingests_with_a_diagnostic(
    tmp_path: Path, bad: bytes, repair: bytes
) -> None:
    b = KinetoTraceBuilder(rank=0)
    with b.cpu_op("aten::mm", 0, 50_000):
        b.launch("gemm", cpu_start=10_000, gpu_start=20_000, gpu_dur=10_000)
    text = b.dumps().encode().replace(bad, repair, 1)
    assert repair in text
    p = tmp_path / "t.json"
    p.write_bytes(text)
    invoke(["ingest", p, "-o", tmp_path / "s"])
    s = json.loads(invoke(["summary", tmp_path / "s", "--json"]).stdout)
    assert s["ranks"][0]["kernel_count"] == 1
    assert any(d["code"] == "json-repaired" for d in s["diagnostics"])


def test_huge_integers_are_kept_or_reported(tmp_path: Path) -> None:
    # GIVEN ids and a Comms Id beyond int64 (HTA#324), which some JSON decoders reject
    b = KinetoTraceBuilder(rank=0)
    b.op("record_param_comms", 0, 50_000, **{"Comms Id": 10159970886766084423})
    b.events.append(
        {
            "ph": "s",
            "id": 18446744073709551615,
            "pid": 4242,
            "tid": 4242,
            "ts": 1,
            "cat": "fwdbwd",
            "name": "fwdbwd",
        }
    )
    p = b.write(tmp_path / "big.json")
    invoke(["ingest", p, "-o", tmp_path / "s"])
    from traceinsight.store.core import TraceStore

    st = TraceStore.open(tmp_path / "s")
    assert st.row_counts["cpu_ops"] == 1 and st.row_counts["flows"] == 1
    assert st.table("flows")["flow_id"].to_pylist() == [None]
    assert any("beyond int64" in d.message for d in st.diagnostics)
