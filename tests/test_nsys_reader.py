"""The Nsight Systems reader on hand-made exports with known answers: attribution through
emit_nvtx ranges, schema variants, ranks, the read-only open, and ``.nsys-rep`` conversion."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import sqlite3
import stat
from pathlib import Path

import pytest
from conftest import TRACES, invoke

from tracegen.nsys import NsysExportBuilder
from tracegen.synth import KinetoTraceBuilder
from traceinsight.analysis import Analysis
from traceinsight.errors import TraceFormatError
from traceinsight.ingest import ingest, readers
from traceinsight.ingest.readers.nsys import READER

P, T, BWD = 100, 100, 101  # pid, main thread, autograd thread


def training_step(b: NsysExportBuilder, pid: int = P, device: int = 0, t0: int = 0) -> None:
    """A forward op under a user layer range, its backward through emit_nvtx seq, a copy."""
    b.process(pid)
    b.thread(pid, pid, "python3")
    with b.nvtx(pid, pid, "step 3", t0, t0 + 1_000_000):
        with b.nvtx(pid, pid, "encoder", t0 + 10_000, t0 + 400_000):
            with b.nvtx(
                pid,
                pid,
                "aten::linear, seq = 5, op_id = 10, sizes = [[8, 64], [128, 64], [128]]",
                t0 + 20_000,
                t0 + 300_000,
            ):
                with b.nvtx(pid, pid, "aten::mm, op_id = 11", t0 + 30_000, t0 + 200_000):
                    b.launch(
                        pid,
                        pid,
                        "sm90_xmma_gemm_bf16",
                        cpu_start=t0 + 40_000,
                        gpu_start=t0 + 100_000,
                        gpu_dur=50_000,
                        device=device,
                    )
    tid = pid + 1
    with b.nvtx(
        pid,
        tid,
        "autograd::engine::evaluate_function: MmBackward0, op_id = 20",
        t0 + 500_000,
        t0 + 700_000,
    ):
        with b.nvtx(pid, tid, "MmBackward0, seq = 5, op_id = 21", t0 + 510_000, t0 + 690_000):
            b.launch(
                pid,
                tid,
                "sm90_xmma_gemm_bf16_dgrad",
                cpu_start=t0 + 530_000,
                gpu_start=t0 + 600_000,
                gpu_dur=60_000,
                device=device,
            )
    corr = b.runtime(pid, pid, "cudaMemcpyAsync_v3020", t0 + 750_000, 5_000)
    b.memcpy(pid, t0 + 760_000, 20_000, 4_000_000, corr=corr, device=device)


def build(tmp_path: Path, name: str = "run.sqlite", **kw) -> tuple[NsysExportBuilder, Path]:
    b = NsysExportBuilder(**kw)
    b.gpu()
    training_step(b)
    return b, tmp_path / name


def test_operators_layers_and_backward_come_from_nvtx(tmp_path: Path) -> None:
    b, path = build(tmp_path)
    b.write(path)
    store = ingest([path], None, quiet=True)
    ops = store.table("cpu_ops").to_pandas()
    assert list(ops["name"].astype(str)) == [
        "aten::linear",
        "aten::mm",
        "autograd::engine::evaluate_function: MmBackward0",
        "MmBackward0",
    ]
    # the evaluate_function range takes the seq of the backward node it runs
    assert ops["sequence_nr"].tolist()[2:] == [5, 5]
    assert ops["input_dims"].iloc[0] == "[[8, 64], [128, 64], [128]]"
    g = Analysis(store).attribution.gpu.set_index("name")
    assert g.loc["sm90_xmma_gemm_bf16", ["op", "module", "phase", "step"]].tolist() == [
        "aten::mm",
        "encoder",
        "forward",
        3,
    ]
    bwd = g.loc["sm90_xmma_gemm_bf16_dgrad"]
    assert (bwd["op"], bwd["module"], bwd["phase"]) == ("MmBackward0", "encoder", "backward")
    assert g.loc["Memcpy HtoD (Pageable -> Device)", "op"] == "[cudaMemcpyAsync]"
    meta = store.ranks[0]
    assert meta["format"] == "nsys" and meta["framework"] == "PyTorch (emit_nvtx)"
    assert meta["capture_flags"]["record_shapes"] is True
    assert meta["devices"][0]["name"] == "NVIDIA H100 80GB HBM3"
    assert meta["devices"][0]["numSms"] == 132
    flows = store.table("flows").to_pandas()
    assert sorted(flows["phase"].astype(str).value_counts().items()) == [("end", 3), ("start", 3)]


def test_times_are_exact_integers_on_the_session_epoch(tmp_path: Path) -> None:
    b, path = build(tmp_path)
    b.write(path)
    store = ingest([path], None, quiet=True)
    g = store.table("gpu_activities").to_pandas()
    k = g[g["name"].astype(str) == "sm90_xmma_gemm_bf16"].iloc[0]
    assert int(k["start_ns"]) == b.epoch_ns + 100_000 and int(k["dur_ns"]) == 50_000
    assert store.ranks[0]["time_origin"] == "epoch"


def test_legacy_export_without_enum_tables_uses_builtin_maps(tmp_path: Path) -> None:
    b, path = build(tmp_path, legacy=True, epoch_ns=None)
    b.sync(P, 800_000, 3_000, sync_type=1)
    b.runtime(P, T, "cudaMalloc", 10, 5, corr=1, event_class=67)  # a backtrace copy
    b.write(path)
    store = ingest([path], None, quiet=True)
    names = set(store.table("gpu_activities").to_pandas()["name"].astype(str))
    assert {"Memcpy HtoD (Pageable -> Device)", "Event Sync"} <= names
    meta = store.ranks[0]
    assert meta["versions"]["export_schema"] == "2.9.1" and meta["time_origin"] == "trace"
    assert "cudaMalloc" not in set(store.table("runtime_calls").to_pandas()["name"].astype(str))
    assert "nsys-backtrace-rows" in {d.code for d in store.diagnostics}


def test_registered_strings_and_domains_make_communication_ops(tmp_path: Path) -> None:
    b = NsysExportBuilder()
    b.process(P)
    b.domain(P, T, 1, "NCCL")
    with b.nvtx(P, T, "ncclAllReduce", 1_000, 90_000, domain_id=1, registered=True):
        b.launch(
            P,
            T,
            "ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
            cpu_start=2_000,
            gpu_start=10_000,
            gpu_dur=70_000,
        )
    with b.nvtx(P, T, "marker range", 95_000, 99_000, event_type=60):
        pass
    b.mark(P, T, "checkpoint", 99_500)
    b.write(tmp_path / "c.sqlite")
    store = ingest([tmp_path / "c.sqlite"], None, quiet=True)
    ops = store.table("cpu_ops").to_pandas()
    assert ops["name"].astype(str).tolist() == ["NCCL:ncclAllReduce"]
    assert ops["collective_name"].astype(str).tolist() == ["allreduce"]
    rng = store.table("ranges").to_pandas()
    assert rng[["kind", "name"]].astype(str).values.tolist() == [["nvtx", "marker range"]]
    other = store.table("other_events").to_pandas()
    assert other[["event_shape", "name"]].astype(str).values.tolist() == [["instant", "checkpoint"]]
    g = Analysis(store).attribution.gpu
    assert g["cls"].astype(str).tolist() == ["communication"]
    assert g["op"].tolist() == ["NCCL:ncclAllReduce"]


def test_processes_become_ranks_ordered_by_gpu(tmp_path: Path) -> None:
    b = NsysExportBuilder()
    b.gpu(0)
    b.gpu(1)
    training_step(b, pid=300, device=1)
    training_step(b, pid=200, device=0, t0=5_000)
    b.write(tmp_path / "two.sqlite")
    store = ingest([tmp_path / "two.sqlite"], None, quiet=True)
    assert [(r["rank"], r["devices_used"], r["label"]) for r in store.ranks] == [
        (0, [0], "pid 200 python3, GPU 0"),
        (1, [1], "pid 300 python3, GPU 1"),
    ]
    rt = store.table("runtime_calls").to_pandas()
    assert rt.groupby("rank")["process"].agg(lambda s: set(s.astype(str))).to_dict() == {
        0: {"200"},
        1: {"300"},
    }
    assert [s["name"] for s in store.meta["sources"]] == [
        "two.sqlite (pid 200 python3, GPU 0)",
        "two.sqlite (pid 300 python3, GPU 1)",
    ]


def test_a_single_process_takes_the_rank_of_its_file_name(tmp_path: Path) -> None:
    d = tmp_path / "run"
    d.mkdir()
    for r in (0, 1):
        b, _ = build(tmp_path)
        b.write(d / f"rank-{r}.sqlite")
    store = ingest([d], None, quiet=True)
    assert [(r["rank"], r["rank_source"]) for r in store.ranks] == [
        (0, "file name"),
        (1, "file name"),
    ]


def test_gpu_rows_without_a_process_take_the_process_of_their_launch(tmp_path: Path) -> None:
    b = NsysExportBuilder()
    b.process(P)
    corr = b.runtime(P, T, "cudaLaunchKernel", 1_000, 3_000)
    b.kernel(None, "k", 10_000, 5_000, corr=corr)
    b.write(tmp_path / "x.sqlite")
    store = ingest([tmp_path / "x.sqlite"], None, quiet=True)
    g = Analysis(store).attribution.gpu
    assert g["op"].tolist() == ["[cudaLaunchKernel]"]


def test_memory_usage_os_runtime_and_unclosed_ranges(tmp_path: Path) -> None:
    b, path = build(tmp_path)
    b.memory(P, 50_000, 1 << 30)
    b.memory(P, 60_000, 1 << 20, address=0x7F0010000000)
    b.memory(P, 900_000, 1 << 20, free=True, address=0x7F0010000000)
    b.osrt(P, P, "pthread_cond_wait", 200_000, 90_000)  # the launching thread
    b.osrt(P, 150, "poll", 200_000, 90_000)  # a thread that never calls CUDA
    with b.nvtx(P, P, "never closed", 950_000, None):
        pass
    b.write(path)
    store = ingest([path], None, quiet=True)
    mem = store.table("memory_events").to_pandas()
    assert mem["kind"].astype(str).tolist() == ["alloc", "alloc", "free"]
    assert mem["total_reserved_bytes"].tolist() == [1 << 30, (1 << 30) + (1 << 20), 1 << 30]
    assert mem["bytes"].tolist()[-1] == -(1 << 20)
    frames = store.table("python_frames").to_pandas()
    assert set(frames.loc[frames["frame_kind"].astype(str) == "builtin", "name"].astype(str)) == {
        "pthread_cond_wait"
    }
    other = store.table("other_events").to_pandas()
    assert "poll" in set(other["name"].astype(str))
    codes = {d.code for d in store.diagnostics}
    assert {"nsys-memory-segments", "nsys-unclosed-ranges"} <= codes
    assert store.ranks[0]["capture_flags"]["profile_memory"] is True


def test_export_without_cuda_activity_gets_a_diagnostic(tmp_path: Path) -> None:
    b = NsysExportBuilder()
    b.gpu()
    b.process(P)
    b.thread(P, T, "main")
    b.write(tmp_path / "empty.sqlite")
    res = invoke(["diagnose", tmp_path / "empty.sqlite", "--json", tmp_path / "r.json"])
    data = json.loads((tmp_path / "r.json").read_text())
    assert "nsys-no-cuda-activity" in {d["code"] for d in data["diagnostics"]}
    assert res.exit_code == 0


def test_an_sqlite_database_that_is_not_an_export_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "notes.sqlite"
    con = sqlite3.connect(p)
    con.execute("CREATE TABLE notes (x)")
    con.commit()
    con.close()
    res = invoke(["diagnose", p], exit_code=2)
    assert "without Nsight Systems tables" in res.stderr


def test_the_database_is_opened_read_only_and_never_changed(tmp_path: Path) -> None:
    b, path = build(tmp_path)
    b.write(path)
    path.chmod(stat.S_IRUSR)  # a read-only file: opening it for writing would fail
    before = (hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns)
    invoke(["diagnose", path], exit_code=None)
    assert not list(tmp_path.glob("run.sqlite-*"))  # no journal, no WAL
    assert (hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns) == before


def test_a_gzipped_export_is_read_from_its_content(tmp_path: Path) -> None:
    b, path = build(tmp_path)
    b.write(path)
    gz = tmp_path / "run.sqlite.gz"
    gz.write_bytes(gzip.compress(path.read_bytes()))
    store = ingest([gz], None, quiet=True)
    assert store.table("gpu_activities").num_rows == 3


def test_a_folder_mixing_formats_is_refused(tmp_path: Path) -> None:
    d = tmp_path / "run"
    d.mkdir()
    b, _ = build(tmp_path)
    b.write(d / "rank-0.sqlite")
    k = KinetoTraceBuilder(rank=1)
    k.op("aten::add", 0, 10_000)
    k.write(d / "rank-1.json")
    res = invoke(["diagnose", d], exit_code=2)
    assert "mix trace formats" in res.stderr and "rank-0.sqlite (nsys)" in res.stderr


def test_the_reader_is_registered_in_the_seam() -> None:
    assert READER in readers.READERS and READER.opens_path
    assert {".sqlite", ".nsys-rep", ".qdrep"} <= set(readers.suffixes())
    with pytest.raises(TraceFormatError):
        READER.read(b"SQLite format 3\x00" + b"\x00" * 200, source="bad.sqlite")


# --- .nsys-rep through a fake nsys -----------------------------------------------------------

REPORT = b"NVIDIA Tegra Profiler Report 2024@6@2@25-246234924588v0.\n\x0bLocal (CLI)" + b"\x00" * 64


def fake_nsys(
    tmp_path: Path, export: Path | None, version: str = "2025.1.1.65", fail: bool = False
) -> Path:
    """An ``nsys`` script: ``--version`` prints ``version``; ``export`` copies ``export`` to
    ``--output`` (or writes half a file and fails)."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    script = bindir / "nsys"
    action = (
        f'head -c 100 "{export}" > "$out"; echo "export failed" >&2; exit 1'
        if fail
        else f'cp "{export}" "$out"'
    )
    script.write_text(f"""#!/bin/sh
if [ "$1" = "--version" ]; then echo "NVIDIA Nsight Systems version {version}"; exit 0; fi
out=""
while [ $# -gt 0 ]; do
  if [ "$1" = "--output" ]; then out="$2"; shift; fi
  shift
done
{action}
""")
    script.chmod(0o755)
    return bindir


def test_a_report_is_exported_with_nsys_into_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    b, db = build(tmp_path)
    b.write(db)
    monkeypatch.setenv("PATH", str(fake_nsys(tmp_path, db)) + os.pathsep + os.environ["PATH"])
    rep = tmp_path / "run.nsys-rep"
    rep.write_bytes(REPORT)
    invoke(["diagnose", rep, "--json", tmp_path / "r.json"], exit_code=None)
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["trace"]["format"] == "nsys"
    exports = Path(os.environ["TRACEINSIGHT_CACHE_DIR"]) / "nsys-exports"
    assert [p.suffix for p in exports.iterdir()] == [".sqlite"]  # no temporary file left


def test_a_failed_export_leaves_nothing_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    b, db = build(tmp_path)
    b.write(db)
    monkeypatch.setenv("TRACEINSIGHT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv(
        "PATH", str(fake_nsys(tmp_path, db, fail=True)) + os.pathsep + os.environ["PATH"]
    )
    rep = tmp_path / "bad.nsys-rep"
    rep.write_bytes(REPORT + b"other")
    res = invoke(["diagnose", rep], exit_code=2)
    assert "nsys export failed" in res.stderr and "export failed" in res.stderr
    assert not list((tmp_path / "cache" / "nsys-exports").iterdir())


def test_a_report_newer_than_the_installed_nsys_names_the_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(fake_nsys(tmp_path, None, version="2023.4.4.54")))
    rep = tmp_path / "new.nsys-rep"
    rep.write_bytes(REPORT + b"never exported")
    res = invoke(["diagnose", rep], exit_code=2)
    assert "newer than the installed nsys 2023.4.4" in res.stderr
    assert "Nsight Systems 2024.6.2 or newer" in res.stderr
    assert "nsys export --type sqlite --output new.sqlite new.nsys-rep" in res.stderr


def test_shared_export_through_a_fake_nsys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shared = TRACES / "nsys/NVIDIA+Fuser/report3.sqlite"
    report = TRACES / "nsys/NVIDIA+Fuser/report3.nsys-rep"
    if not report.exists():
        pytest.skip("../shared/traces is absent")
    monkeypatch.setenv("PATH", str(fake_nsys(tmp_path, shared)) + os.pathsep + os.environ["PATH"])
    via_report = ingest([report], None, quiet=True)
    direct = ingest([shared], None, quiet=True)
    for table in ("gpu_activities", "runtime_calls", "ranges"):
        assert via_report.table(table).to_pylist() == direct.table(table).to_pylist()
    assert via_report.ranks[0]["layout"] == "sqlite (exported from the report)"


def test_graph_launches_keep_their_graph_and_node_ids(tmp_path: Path) -> None:
    b = NsysExportBuilder()
    b.process(P)
    with b.nvtx(P, T, "aten::_graph_replay, op_id = 3", 0, 50_000):
        corr = b.runtime(P, T, "cudaGraphLaunch_v10000", 1_000, 4_000)
    for i in range(2):
        b.kernel(
            P, f"fused_{i}", 10_000 + 20_000 * i, 15_000, corr=corr, graph_id=7, graph_node=40 + i
        )
    b.write(tmp_path / "g.sqlite")
    store = ingest([tmp_path / "g.sqlite"], None, quiet=True)
    g = store.table("gpu_activities").to_pandas()
    assert g[["graph_id", "graph_node_id"]].values.tolist() == [[7, 40], [7, 41]]
    att = Analysis(store).attribution.gpu
    assert att["method"].astype(str).tolist() == ["graph", "graph"]
    assert att["op"].tolist() == ["aten::_graph_replay"] * 2
