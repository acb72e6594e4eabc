"""Hostile Nsight Systems exports: views and crafted schema never run, reading is bounded in time
and memory, damaged pages and write-ahead logs are one-line errors, long names are capped, and
command lines, thread names and versions from the export are filtered before any output."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import pytest
from hostile import bounded, clean_output, cli, error, ok, snapshot

from tracegen.nsys import NsysExportBuilder
from traceinsight.util.safetext import NAME_CAP


def _export(
    path: Path, *, kernel: str = "sm90_xmma_gemm_bf16", process: str = "python3", n: int = 3
) -> Path:
    b = NsysExportBuilder()
    b.gpu()
    b.process(1, process)
    b.thread(1, 1, "python3")
    for i in range(n):
        t0 = 1_000_000 * (i + 1)
        b.launch(1, 1, kernel, cpu_start=t0, gpu_start=t0 + 50_000, gpu_dur=200_000)
    return b.write(path)


def _add_view(path: Path, sql: str) -> None:
    con = sqlite3.connect(path)
    con.execute(sql)
    con.commit()
    con.close()


@pytest.mark.parametrize(
    "view",
    [
        # a query that never ends
        "CREATE VIEW NVTX_EVENTS AS WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 "
        "FROM r) SELECT x AS start, x AS end FROM r",
        # gigabytes from a few bytes
        "CREATE VIEW CUPTI_ACTIVITY_KIND_MEMSET AS WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL "
        "SELECT x + 1 FROM r WHERE x < 100000) SELECT zeroblob(100000000) AS start FROM r",
        # a cross join of the export with itself, many times over
        "CREATE VIEW CUPTI_ACTIVITY_KIND_MEMCPY AS SELECT a.start FROM StringIds a, StringIds b, "
        "StringIds c, StringIds d, StringIds e, StringIds f, StringIds g, StringIds h",
    ],
    ids=["recursive-cte", "zeroblob", "cross-join"],
)
def test_views_are_never_read(tmp_path: Path, view: str) -> None:
    p = _export(tmp_path / "run.sqlite")
    _add_view(p, view)
    before = snapshot(p)
    t0 = time.monotonic()
    run = cli(["diagnose", p, "--no-color"], tmp_path, timeout=120)
    assert time.monotonic() - t0 < 60, run
    ok(run)  # the export's real tables are read; the view is not one of them
    bounded(run)
    assert snapshot(p) == before


def test_an_export_made_only_of_views_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "views.sqlite"
    con = sqlite3.connect(p)
    con.execute("CREATE VIEW StringIds AS SELECT 1 AS id, 'x' AS value")
    con.execute("CREATE VIEW CUPTI_ACTIVITY_KIND_KERNEL AS SELECT 1 AS start")
    con.commit()
    con.close()
    error(cli(["diagnose", p], tmp_path), "views.sqlite", "without Nsight Systems tables")


def test_a_view_calling_load_extension_never_runs(tmp_path: Path) -> None:
    p = _export(tmp_path / "run.sqlite")
    con = sqlite3.connect(p)
    con.execute("DROP TABLE IF EXISTS TARGET_INFO_SESSION_START_TIME")
    con.execute(
        "CREATE VIEW TARGET_INFO_SESSION_START_TIME AS SELECT "
        "load_extension('/nonexistent/evil') AS utcEpochNs"
    )
    con.commit()
    con.close()
    ok(cli(["diagnose", p, "--no-color"], tmp_path))


def test_read_deadline_is_a_one_line_error(tmp_path: Path) -> None:
    p = _export(tmp_path / "run.sqlite", n=3000)
    run = cli(["diagnose", p], tmp_path, env={"TRACEINSIGHT_NSYS_TIMEOUT_S": "0.000001"})
    error(run, "run.sqlite", "took longer than", "TRACEINSIGHT_NSYS_TIMEOUT_S")


def test_damaged_page_is_a_one_line_error(tmp_path: Path) -> None:
    p = _export(tmp_path / "run.sqlite")
    data = bytearray(p.read_bytes())
    page = 4096
    assert len(data) > 3 * page
    for i in range(2 * page, len(data)):  # every page after the schema's: garbage
        data[i] = (i * 131) & 0xFF
    p.write_bytes(bytes(data))
    error(cli(["diagnose", p], tmp_path), "run.sqlite", "nsys export --type sqlite")


def test_write_ahead_log_beside_the_export_is_refused(tmp_path: Path) -> None:
    p = _export(tmp_path / "run.sqlite")
    Path(f"{p}-wal").write_bytes(b"\0" * 4096)
    error(cli(["diagnose", p], tmp_path), "run.sqlite", "write-ahead log", "wal_checkpoint")


def test_a_60_mb_kernel_name_is_capped(tmp_path: Path) -> None:
    long = "k" * (60 * 2**20)
    p = _export(tmp_path / "run.sqlite", kernel=long)
    t0 = time.monotonic()
    run = ok(cli(["diagnose", p, "--json", tmp_path / "r.json"], tmp_path, timeout=180))
    assert time.monotonic() - t0 < 90, run
    bounded(run, 900)
    assert (tmp_path / "r.json").stat().st_size < 2 * 2**20
    text = (tmp_path / "r.json").read_text()
    assert "62,914,560 characters, sha256:" in text
    assert "k" * (NAME_CAP + 1) not in text


def test_command_line_and_versions_are_filtered(tmp_path: Path) -> None:
    cmd = "/home/alice.admin/venv/bin/python3 train.py --password hunter2 --host db-prod-7.corp.example.com"
    b = NsysExportBuilder()
    b.gpu()
    for pid in (1, 2):  # two processes: each is a rank, labelled by its process name
        b.process(pid, cmd)
        b.thread(pid, pid, "worker alice.admin@db-prod-7.corp.example.com \x1b[31m")
        b.launch(
            pid,
            pid,
            "sm90_xmma_gemm_bf16",
            cpu_start=1_000_000,
            gpu_start=1_050_000,
            gpu_dur=100_000,
            device=pid - 1,
        )
    p = b.write(tmp_path / "run.sqlite")
    con = sqlite3.connect(p)
    con.execute("CREATE TABLE IF NOT EXISTS TARGET_INFO_SYSTEM_ENV (name TEXT, value TEXT)")
    con.execute(
        "INSERT INTO TARGET_INFO_SYSTEM_ENV VALUES ('CudaDriverVersion', '12.4 token=s3cr3t-pa55')"
    )
    con.commit()
    con.close()
    outs = [tmp_path / "r.json", tmp_path / "r.md", tmp_path / "r.html"]
    run = ok(
        cli(["diagnose", p, "--json", outs[0], "--markdown", outs[1], "--html", outs[2]], tmp_path)
    )
    store = ok(cli(["ingest", p, "-o", tmp_path / "store", "--json"], tmp_path))
    meta = (tmp_path / "store" / "meta.json").read_text()
    texts = [run.stdout, run.stderr, store.stdout, meta, *(o.read_text() for o in outs)]
    clean_output(*texts)
    ranks = json.loads(meta)["ranks"]
    assert {r["process_names"]["1" if r["rank"] == 0 else "2"] for r in ranks} <= {"python3"}
    assert all("train.py" not in t for t in texts)


def test_times_that_would_wrap_int64_are_dropped(tmp_path: Path) -> None:
    p = _export(tmp_path / "run.sqlite", n=4)
    con = sqlite3.connect(p)
    (rowid,) = con.execute("SELECT min(rowid) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
    con.execute(
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = ? WHERE rowid = ?", (-(2**63), rowid)
    )
    con.commit()
    con.close()
    js = tmp_path / "r.json"
    ok(cli(["diagnose", p, "--json", js], tmp_path))
    doc = json.loads(js.read_text())
    text = json.dumps(doc["diagnostics"])
    assert "outside a capture clock" in text
    k = doc["summary"]["kernels"] if "kernels" in doc.get("summary", {}) else None
    assert k in (None, 3)
