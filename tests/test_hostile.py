"""Hostile and careless input (issue 12): every case runs the CLI in a subprocess under an
address-space limit (tests/hostile.py) and checks the exit code, the one-line error naming the
file with a hint, that inputs and unrelated files are left untouched (hashes before and after),
that the resident peak stays bounded, and that no output holds a secret or a control
character. Sections follow the issue: 1 outputs, 2 resources, 3 silent loss, 4 secrets and
terminal safety, 5 clear errors, 6 options.
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hostile import (
    SECRETS,
    bounded,
    clean_output,
    cli,
    error,
    events,
    ok,
    ok_or_error,
    snapshot,
    trace,
    write,
)

ROOT = os.geteuid() == 0


@pytest.fixture
def t(tmp_path: Path) -> Path:
    """A small valid trace, t.json, in the test's folder."""
    return write(tmp_path / "t.json", trace())


def _mkfifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


# === 1. outputs never destroy inputs or unrelated files =========================================


@pytest.mark.parametrize("force", [False, True])
def test_force_never_empties_a_folder_of_unrelated_files(
    tmp_path: Path, t: Path, force: bool
) -> None:
    d = tmp_path / "photos"
    d.mkdir()
    (d / "cat.jpg").write_bytes(b"\xff\xd8 not a store")
    before = snapshot(d, t)
    err = error(
        cli(["ingest", t, "-o", d, *(["--force"] if force else [])], tmp_path),
        "photos",
        "not a trace store",
    )
    assert "--force" not in err.split("hint:")[1]  # the hint never suggests destroying it
    assert snapshot(d, t) == before


def test_force_never_replaces_the_folder_holding_the_input(tmp_path: Path) -> None:
    d = tmp_path / "run"
    d.mkdir()
    t = write(d / "t.json", trace())
    before = snapshot(d)
    error(cli(["ingest", t, "-o", d, "--force"], tmp_path), "run", "input")
    assert snapshot(d) == before


@pytest.mark.parametrize("out", [".", ".."])
def test_store_output_is_never_the_working_folder_or_above(tmp_path: Path, out: str) -> None:
    work = tmp_path / "work"
    work.mkdir()
    write(work / "t.json", trace())
    before = snapshot(work)
    error(cli(["ingest", "t.json", "-o", out, "--force"], work), "working folder")
    assert snapshot(work) == before


def test_store_output_equal_to_the_input_file(tmp_path: Path, t: Path) -> None:
    before = snapshot(t)
    error(cli(["ingest", t, "-o", t, "--force"], tmp_path), "t.json", "input")
    assert snapshot(t) == before


def test_store_output_equal_to_the_input_folder(tmp_path: Path) -> None:
    d = tmp_path / "ranks"
    d.mkdir()
    write(d / "rank-0.json", trace())
    before = snapshot(d)
    error(cli(["ingest", d, "-o", d, "--force"], tmp_path), "ranks", "input")
    assert snapshot(d) == before


def test_force_replaces_a_store(tmp_path: Path, t: Path) -> None:
    s = tmp_path / "s.tistore"
    ok(cli(["ingest", t, "-o", s], tmp_path))
    t2 = write(tmp_path / "t2.json", trace(events(3)))
    error(cli(["ingest", t2, "-o", s], tmp_path), "holds other traces")
    ok(cli(["ingest", t2, "-o", s, "--force"], tmp_path))
    summary = json.loads(ok(cli(["summary", s, "--json"], tmp_path)).stdout)
    assert summary["sources"][0]["name"] == "t2.json"


@pytest.mark.parametrize("flag", ["--html", "--json", "--markdown"])
def test_diagnose_output_equal_to_the_input(tmp_path: Path, t: Path, flag: str) -> None:
    before = snapshot(t)
    error(cli(["diagnose", t, flag, t], tmp_path), "t.json", "input")
    assert snapshot(t) == before


def test_diagnose_output_through_another_name_of_the_input(tmp_path: Path, t: Path) -> None:
    link = tmp_path / "alias.html"
    link.symlink_to(t)
    before = snapshot(t)
    error(cli(["diagnose", t, "--html", link], tmp_path), "alias.html", "input")
    assert snapshot(t) == before


def test_two_outputs_sharing_one_path(tmp_path: Path, t: Path) -> None:
    error(cli(["diagnose", t, "--html", "r.out", "--markdown", "./r.out"], tmp_path), "two outputs")
    assert not (tmp_path / "r.out").exists()


def test_output_into_a_store(tmp_path: Path, t: Path) -> None:
    s = tmp_path / "s.tistore"
    ok(cli(["ingest", t, "-o", s], tmp_path))
    before = snapshot(s)
    error(cli(["diagnose", s, "--json", s / "meta.json"], tmp_path), "meta.json")
    error(cli(["diagnose", t, "--html", s / "report.html"], tmp_path), "store")
    assert snapshot(s) == before


def test_report_output_equal_to_its_result(tmp_path: Path, t: Path) -> None:
    ok(cli(["diagnose", t, "--json", "r.json"], tmp_path))
    r = tmp_path / "r.json"
    before = snapshot(r)
    error(cli(["report", r, "-o", r], tmp_path), "r.json", "input")
    assert snapshot(r) == before


def test_compare_output_equal_to_an_input(tmp_path: Path, t: Path) -> None:
    t2 = write(tmp_path / "t2.json", trace(events(3)))
    before = snapshot(t, t2)
    error(cli(["compare", t, t2, "--html", t2], tmp_path), "t2.json", "input")
    assert snapshot(t, t2) == before


@pytest.mark.skipif(not ROOT, reason="needs root to make a character device")
def test_character_device_output_is_written_in_place(tmp_path: Path, t: Path) -> None:
    null = tmp_path / "null"
    os.mknod(null, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # a /dev/null of our own
    ok(cli(["diagnose", t, "--json", null], tmp_path))
    assert stat.S_ISCHR(null.stat().st_mode)


def test_fifo_output_is_written_in_place(tmp_path: Path, t: Path) -> None:
    fifo = _mkfifo(tmp_path / "out.fifo")
    got: list[bytes] = []

    def read() -> None:
        with open(fifo, "rb") as f:
            got.append(f.read())

    reader = threading.Thread(target=read)
    reader.start()
    time.sleep(0.2)
    ok(cli(["diagnose", t, "--json", fifo], tmp_path))
    reader.join(30)
    assert stat.S_ISFIFO(fifo.stat().st_mode)
    assert json.loads(got[0])["schema"] == "traceinsight.diagnosis"


def test_fifo_output_without_a_reader(tmp_path: Path, t: Path) -> None:
    fifo = _mkfifo(tmp_path / "out.fifo")
    error(cli(["diagnose", t, "--json", fifo], tmp_path, timeout=60), "out.fifo", "reads")
    assert stat.S_ISFIFO(fifo.stat().st_mode)


def test_stale_temporaries_of_dead_runs_are_removed(tmp_path: Path, t: Path) -> None:
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    ).stdout.strip()
    stale = tmp_path / f".s.tistore.tmp-{dead}-abc"
    stale.mkdir()
    (stale / "gpu_activities.parquet").write_bytes(b"half")
    live = tmp_path / f".s.tistore.tmp-{os.getpid()}-xyz"
    live.mkdir()
    ok(cli(["ingest", t, "-o", tmp_path / "s.tistore"], tmp_path))
    assert not stale.exists()
    assert live.exists()  # a running process's temporary is left alone


def test_forked_helper_exits_quietly_when_its_parent_is_killed(tmp_path: Path) -> None:
    t = write(tmp_path / "big.json", trace(events(60_000)))
    env = {
        **os.environ,
        "TRACEINSIGHT_BATCH_BYTES": "100000",
        "TRACEINSIGHT_CHUNK_BYTES": "1000000",
        "TRACEINSIGHT_WORKERS": "2",
        "TRACEINSIGHT_NO_PROGRESS": "1",
        "TRACEINSIGHT_CACHE_DIR": str(tmp_path / "c"),
        "PYTHONPATH": str(Path.cwd()),
    }
    err = tmp_path / "stderr.txt"
    with open(err, "wb") as f:
        p = subprocess.Popen(
            [sys.executable, "-m", "traceinsight.cli", "ingest", t, "-o", tmp_path / "s"],
            stderr=f,
            stdout=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
        deadline = time.time() + 60
        while time.time() < deadline:  # wait for the helper to exist, then kill the parent
            kids = subprocess.run(
                ["pgrep", "-P", str(p.pid)], capture_output=True, text=True
            ).stdout.split()
            if kids:
                break
            time.sleep(0.05)
        p.send_signal(signal.SIGKILL)
        p.wait()
        time.sleep(3)  # the helper notices
    left = subprocess.run(["pgrep", "-g", str(p.pid)], capture_output=True, text=True)
    assert not left.stdout.strip(), "a helper outlived its parent"
    assert "Traceback" not in err.read_text()
    assert not (tmp_path / "s").exists()


# === 2. bounded resources on hostile or damaged files ===========================================


def _nul_trace(path: Path, prefix: bytes, nul_mb: int) -> Path:
    with open(path, "wb") as f:
        f.write(prefix)
        block = b"\0" * (1 << 20)
        for _ in range(nul_mb):
            f.write(block)
    return path


@pytest.mark.parametrize("nul_mb", [10, 200])
def test_nul_bytes_after_the_list_opening(tmp_path: Path, nul_mb: int) -> None:
    p = _nul_trace(tmp_path / "t.json", b'{"traceEvents": [', nul_mb)
    run = cli(["ingest", p, "-o", "s"], tmp_path)
    error(run, "t.json", "truncated", "NUL bytes", "--salvage")
    bounded(run)
    run = cli(["ingest", p, "-o", "s", "--salvage"], tmp_path)
    error(run, "t.json", "no complete event")
    bounded(run)


def _crash_remnant(path: Path) -> Path:
    """A 1 MB valid prefix (cut after a complete event) followed by 8 MB of NUL bytes."""
    text = json.dumps(trace(events(2500))).encode()
    cut = text.rfind(b"}, {", 0, 1 << 20) + 1
    return _nul_trace(path, text[:cut] + b", ", 8)


def test_crash_remnant_is_refused_with_the_salvage_hint(tmp_path: Path) -> None:
    p = _crash_remnant(tmp_path / "t.json")
    run = cli(["ingest", p, "-o", "s"], tmp_path)
    error(run, "t.json", "truncated", "NUL bytes", "--salvage")
    bounded(run)


def test_crash_remnant_is_salvaged(tmp_path: Path) -> None:
    p = _crash_remnant(tmp_path / "t.json")
    run = ok(cli(["ingest", p, "-o", "s", "--salvage"], tmp_path))
    bounded(run)
    s = json.loads(ok(cli(["summary", "s", "--json"], tmp_path)).stdout)
    assert s["ranks"][0]["kernel_count"] > 1000
    assert {"truncated-salvaged", "nul-tail"} <= {d["code"] for d in s["diagnostics"]}


@pytest.mark.parametrize(
    "tail,what",
    [
        (b"garbage text\n", "text"),
        (b'{"traceEvents": []}', "another JSON value"),
        (b"\x00\x01\x02\xff" * 64, "binary data"),
    ],
)
def test_trailing_data_after_the_document(tmp_path: Path, tail: bytes, what: str) -> None:
    p = write(tmp_path / "t.json", json.dumps(trace()).encode() + b"\n" + tail)
    ok(cli(["ingest", p, "-o", "s"], tmp_path))
    s = json.loads(ok(cli(["summary", "s", "--json"], tmp_path)).stdout)
    assert s["ranks"][0]["kernel_count"] == 2
    d = [d for d in s["diagnostics"] if d["code"] == "trailing-data"]
    assert d and what in d[0]["message"] and "truncated" not in d[0]["message"]


def test_fifo_input_without_a_writer(tmp_path: Path) -> None:
    fifo = _mkfifo(tmp_path / "t.json")
    error(cli(["summary", fifo], tmp_path, timeout=30), "t.json", "FIFO")


@pytest.mark.parametrize("dev", ["/dev/zero", "/dev/urandom"])
def test_device_input(tmp_path: Path, dev: str) -> None:
    error(cli(["summary", dev], tmp_path, timeout=30), dev, "character device")


def test_trace_on_stdin(tmp_path: Path) -> None:
    data = json.dumps(trace()).encode()
    s = json.loads(ok(cli(["summary", "-", "--json"], tmp_path, stdin=data)).stdout)
    assert s["ranks"][0]["kernel_count"] == 2
    s = json.loads(
        ok(cli(["summary", "/dev/stdin", "--json"], tmp_path, stdin=gzip.compress(data))).stdout
    )
    assert s["ranks"][0]["kernel_count"] == 2


def test_trace_through_process_substitution(tmp_path: Path, t: Path) -> None:
    run = ok(cli(["ti summary --json <(cat t.json)"], tmp_path, shell=True))
    assert json.loads(run.stdout)["ranks"][0]["kernel_count"] == 2


def test_stdin_that_is_a_device(tmp_path: Path) -> None:
    run = cli(["ti summary - < /dev/zero"], tmp_path, shell=True, timeout=30)
    error(run, "character device")


def test_gzip_bomb(tmp_path: Path) -> None:
    p = tmp_path / "bomb.json.gz"
    with gzip.open(p, "wb", compresslevel=9) as f:
        f.write(b'{"traceEvents": [')
        block = b" " * (1 << 20)
        for _ in range(1024):
            f.write(block)
    assert p.stat().st_size < 1.2 * 2**20
    run = cli(["ingest", p, "-o", "s"], tmp_path)
    error(run, "bomb.json.gz", "decompression bomb")
    bounded(run)


def _rules_dir(tmp_path: Path, text: str, name: str = "mine.yaml") -> Path:
    d = tmp_path / "rules"
    d.mkdir(exist_ok=True)
    (d / name).write_bytes(text.encode() if isinstance(text, str) else text)
    return d


def test_billion_laughs_rule_file(tmp_path: Path, t: Path) -> None:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    d = _rules_dir(tmp_path, "\n".join(lines) + "\n")
    assert len((d / "mine.yaml").read_bytes()) < 2048
    run = cli(["rules", "--rules", d], tmp_path, timeout=60)
    error(run, "mine.yaml", "alias")
    bounded(run)


def test_billion_laughs_device_file(tmp_path: Path) -> None:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    f = tmp_path / "devices.yaml"
    f.write_text("\n".join(lines) + "\n")
    run = cli(["devices"], tmp_path, env={"TRACEINSIGHT_DEVICES": str(f)}, timeout=60)
    error(run, "devices.yaml", "alias")
    bounded(run)


def _rule(message: str, **extra: str) -> str:
    body = {
        "id": "my-rule",
        "title": "Mine",
        "category": "gpu",
        "summary": "a test rule",
        "fires_if": [{"metric": "gpu_idle_pct", "op": ">=", "threshold": "min_idle"}],
        "thresholds": {"min_idle": {"default": 0, "unit": "%", "help": "idle share"}},
        "message": message,
        "recommendations": ["do less"],
        "doc": {"symptom": "s", "why": "y", "fix": "f"},
    }
    text = json.dumps(body)
    for k, v in extra.items():
        text = text[:-1] + f', "{k}": {v}' + "}"
    return text


def test_rule_message_with_a_huge_format_width(tmp_path: Path, t: Path) -> None:
    d = _rules_dir(tmp_path, _rule("idle {gpu_idle_pct:>20000000.1f}"))
    run = cli(["diagnose", t, "--rules", d, "--markdown", "r.md"], tmp_path)
    error(run, "mine.yaml", "format")
    bounded(run)
    assert not (tmp_path / "r.md").exists()


# === 3. no silent loss or misreporting ==========================================================


def _ranks(tmp_path: Path) -> Path:
    d = tmp_path / "run"
    d.mkdir()
    for r in (0, 1):
        write(
            d / f"rank-{r}.json",
            trace(distributedInfo={"backend": "nccl", "rank": r, "world_size": 3}),
        )
    return d


def _break_rank(d: Path, how: str) -> None:
    bad = d / "rank-2.json"
    if how == "self-loop":
        bad.symlink_to(bad.name)
    elif how == "dangling":
        bad.symlink_to("gone.json")
    elif how == "fifo":
        os.mkfifo(bad)
    elif how == "folder":
        bad.mkdir()
    elif how == "truncated":
        text = json.dumps(trace(distributedInfo={"backend": "nccl", "rank": 2, "world_size": 3}))
        bad.write_text(text[: len(text) // 2])


@pytest.mark.parametrize("how", ["self-loop", "dangling", "fifo", "folder", "truncated"])
def test_unreadable_rank_file_is_a_headline_warning(tmp_path: Path, how: str) -> None:
    d = _ranks(tmp_path)
    _break_rank(d, how)
    run = ok(
        cli(
            ["diagnose", d, "--json", "r.json", "--markdown", "r.md", "--html", "r.html"],
            tmp_path,
            timeout=60,
        )
    )
    assert "rank-2.json" in run.stdout.split("\n\n")[1]  # the headline paragraph
    res = json.loads((tmp_path / "r.json").read_text())
    assert "rank-2.json" in res["headline"]
    assert any(x["code"] == "rank-missing" for x in res["diagnostics"])
    assert "rank-2.json" in (tmp_path / "r.md").read_text().split("\n\n")[0]  # the title
    assert "rank-2.json" in (tmp_path / "r.html").read_text()
    s = ok(cli(["summary", d], tmp_path))
    assert "rank-2.json" in s.stdout.splitlines()[0] + s.stdout.splitlines()[1]
    error(cli(["diagnose", d, "--strict"], tmp_path), "rank-2.json", "--strict")
    error(cli(["summary", d, "--strict"], tmp_path), "rank-2.json")


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_literals_are_missing_values(tmp_path: Path, literal: str) -> None:
    text = json.dumps(trace(events(2, kernel_dur=123.25)))
    text = text.replace('"dur": 123.25, "args"', f'"dur": {literal}, "args"', 1)
    p = write(tmp_path / "t.json", text.encode())
    ok(cli(["ingest", p, "-o", "s"], tmp_path))
    from traceinsight.store.core import TraceStore

    st = TraceStore.open(tmp_path / "s")
    k = st.table("gpu_activities").to_pylist()
    assert [x["correlation"] for x in k] == [100, 101]  # the kernel keeps its link
    codes = {d.code: d for d in st.diagnostics}
    assert "dur" in codes["non-finite-values"].message
    assert "json-repaired" not in codes  # no quote repair mangled it
    assert "missing-durations" in codes


@pytest.mark.parametrize(
    "field,value,code",
    [
        ("dur", None, "missing-durations"),
        ("ts", True, "invalid-values"),
        ("ts", -5_000_000_000, "negative-timestamps"),
    ],
)
def test_coercions_are_counted(tmp_path: Path, field: str, value: object, code: str) -> None:
    evs = events(2)
    k = evs[5]
    assert k["cat"] == "kernel"
    if value is None:
        del k[field]
    else:
        k[field] = value
    p = write(tmp_path / "t.json", trace(evs))
    s = json.loads(ok(cli(["summary", p, "--json"], tmp_path)).stdout)
    hit = [d for d in s["diagnostics"] if d["code"] == code]
    assert hit and hit[0].get("count") == 1, s["diagnostics"]


@pytest.mark.parametrize("dur", [33_600.0, 1e12])
def test_activity_longer_than_its_window_is_clipped(tmp_path: Path, dur: float) -> None:
    evs = events(3)
    assert evs[9]["cat"] == "kernel"
    evs[9]["dur"] = dur  # the middle step's kernel runs far past the next step
    p = write(tmp_path / "t.json", trace(evs))
    run = ok(cli(["diagnose", p, "--json", "r.json"], tmp_path))
    bounded(run)
    res = json.loads((tmp_path / "r.json").read_text())
    for r in res["breakdown"]["ranks"]:
        for k in ("compute_ns", "idle_ns", "comm_exposed_ns"):
            assert 0 <= r[k] <= r["wall_ns"], (k, r)
    for r in res["summary"]["ranks"]:
        assert r["gpu_idle_ns"] is None or r["gpu_idle_ns"] >= 0
    line = next(x for x in run.stdout.splitlines() if x.strip().startswith("compute "))
    pct = [float(x.rstrip("%")) for x in line.split() if x.endswith("%")]
    assert len(pct) == 4 and all(0 <= x <= 100 for x in pct), line  # the breakdown bar's shares


def test_content_change_with_kept_size_and_mtime(tmp_path: Path) -> None:
    p = write(tmp_path / "t.json", trace(events(2, kernel_dur=30.0)))
    st = p.stat()
    s1 = json.loads(ok(cli(["summary", p, "--json"], tmp_path)).stdout)
    ok(cli(["ingest", p, "-o", "s"], tmp_path))
    text = p.read_text().replace('"dur": 30.0', '"dur": 70.0')
    p.write_text(text)
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))  # touch -r: size and mtime kept
    assert p.stat().st_size == st.st_size and p.stat().st_mtime_ns == st.st_mtime_ns
    s2 = json.loads(ok(cli(["summary", p, "--json"], tmp_path)).stdout)
    assert s2["ranks"][0]["kernel_time_ns"] == 140_000 != s1["ranks"][0]["kernel_time_ns"]
    ok(cli(["diagnose", p, "--recompute", "--json", "r.json"], tmp_path))
    res = json.loads((tmp_path / "r.json").read_text())
    assert res["summary"]["ranks"][0]["kernel_time_ns"] == 140_000
    error(cli(["ingest", p, "-o", "s"], tmp_path), "holds other traces")


def test_store_missing_a_column(tmp_path: Path, t: Path) -> None:
    import pyarrow.parquet as pq

    ok(cli(["ingest", t, "-o", "s"], tmp_path))
    f = tmp_path / "s" / "gpu_activities.parquet"
    pq.write_table(pq.read_table(f).drop_columns(["dur_ns"]), f)
    error(cli(["diagnose", "s"], tmp_path), "gpu_activities", "dur_ns")


# === 4. secrets and terminal safety =============================================================


def _planted(tmp_path: Path) -> Path:
    evs = events(2)
    evs[0]["args"]["name"] = "python3 --token ghp_0123456789abcdefghij0123"
    evs.append(
        {
            "ph": "M",
            "name": "thread_name",
            "pid": 1,
            "tid": 1,
            "args": {"name": "worker alice.admin@db-prod-7.corp.example.com"},
        }
    )
    return write(
        tmp_path / "t.json",
        trace(
            evs,
            deviceProperties=[
                {
                    "id": 0,
                    "name": "db-prod-7.corp.example.com password=hunter2",
                    "totalGlobalMem": 1,
                    "computeMajor": "alice.admin",
                }
            ],
            distributedInfo={
                "backend": "nccl user=alice.admin pass=s3cr3t-pa55",
                "rank": 0,
                "world_size": 1,
                "nccl_version": "hunter2",
            },
            cuda_driver_version="db-prod-7.corp.example.com",
            cuda_runtime_version=12040,
            Framework="hf_PlantedTokenValue123456",
            displayTimeUnit={"key": "ghp_0123456789abcdefghij0123"},
            traceName="/home/alice.admin/runs/trace.json",
            WARNING=[
                "WARNING:2024 x.cpp:1] connecting to db-prod-7.corp.example.com as alice.admin"
            ],
            ERROR="ERROR: login failed for alice.admin with password s3cr3t-pa55",
            INFO=["INFO: Record counts: Out-of-range = 3, hunter2 = 1"],
        ),
    )


def test_planted_secrets_reach_no_output(tmp_path: Path) -> None:
    p = _planted(tmp_path)
    ok(cli(["ingest", p, "-o", "s"], tmp_path))
    clean_output((tmp_path / "s" / "meta.json").read_text())
    run = ok(
        cli(
            ["diagnose", "s", "--json", "r.json", "--markdown", "r.md", "--html", "r.html"],
            tmp_path,
        )
    )
    for f in ("r.json", "r.md", "r.html"):
        clean_output((tmp_path / f).read_text())
    ok(cli(["summary", "s"], tmp_path))
    ok(cli(["summary", "s", "--json"], tmp_path))
    ok(cli(["top", "s"], tmp_path))
    meta = json.loads((tmp_path / "s" / "meta.json").read_text())
    rank = meta["ranks"][0]
    assert rank["distributed"]["backend"] != "nccl user=alice.admin pass=s3cr3t-pa55"
    assert isinstance(rank["versions"]["cuda_runtime_version"], int)
    assert run.rc == 0


_NASTY = "gemm\x1b[2J\x1b]8;;http://evil.example/\x07click\x1b]8;;\x07\r\x07\u202eevil\u202c"


@pytest.mark.parametrize(
    "command",
    [["diagnose"], ["summary"], ["top"], ["top", "--by", "op"], ["diagnose", "-v", "--color"]],
)
def test_control_sequences_in_names_are_neutralised(tmp_path: Path, command: list) -> None:
    evs = events(2)
    for e in evs:
        if e.get("cat") in ("kernel", "cpu_op"):
            e["name"] = _NASTY
    p = write(tmp_path / "t.json", trace(evs))
    run = cli([*command, p], tmp_path)
    assert run.rc == 0, str(run)
    text = run.stdout
    if "--color" in command:  # our own colours only: SGR sequences, nothing else
        import re

        text = re.sub(r"\x1b\[[0-9;]*m", "", text)
    clean_output(text, run.stderr)


def test_control_sequences_in_compare_view(tmp_path: Path) -> None:
    evs = events(2)
    for e in evs:
        if e.get("cat") == "kernel":
            e["name"] = _NASTY
    a = write(tmp_path / "a.json", trace(evs))
    b = write(tmp_path / "b.json", trace(events(3)))
    run = cli(["compare", a, b], tmp_path)
    assert run.rc == 0, str(run)
    clean_output(run.stdout, run.stderr)


def test_control_characters_in_a_file_name(tmp_path: Path) -> None:
    name = "x\x1b[2J\u202e.json"
    run = cli(["summary", tmp_path / name], tmp_path)
    error(run, "no such file")


# === 5. clear errors instead of "internal error" ================================================


def _kernel_with(tmp_path: Path, **fields: object) -> Path:
    evs = events(2)
    evs[5].update(fields)
    return write(tmp_path / "t.json", trace(evs))


@pytest.mark.parametrize(
    "fields",
    [
        {"dur": 1e300},
        {"ts": 1e300},
        {"ts": 18446744073709551615},
        {"ts": 9.3e15},
    ],
)
def test_out_of_range_times(tmp_path: Path, fields: dict) -> None:
    p = _kernel_with(tmp_path, **fields)
    error(cli(["summary", p], tmp_path), "t.json")


def test_args_nested_ten_thousand_deep(tmp_path: Path) -> None:
    evs = events(2)
    text = json.dumps(trace(evs)).replace(
        '"args": {"device": 0',
        '"args": {"deep": ' + "[" * 10_000 + "]" * 10_000 + ', "device": 0',
        1,
    )
    p = write(tmp_path / "t.json", text.encode())
    run = cli(["summary", p], tmp_path)
    ok_or_error(run, "t.json")  # read with the nesting skipped is fine too


@pytest.mark.parametrize("rank", ["zero", 1e30])
def test_bad_distributed_rank(tmp_path: Path, rank: object) -> None:
    p = write(
        tmp_path / "t.json",
        trace(distributedInfo={"backend": "nccl", "rank": rank, "world_size": 2}),
    )
    error(cli(["summary", p], tmp_path), "t.json", "rank")


def test_huge_step_number(tmp_path: Path) -> None:
    evs = events(2)
    evs[2]["name"] = "ProfilerStep#99999999999999999999999"
    p = write(tmp_path / "t.json", trace(evs))
    run = cli(["diagnose", p], tmp_path)
    ok_or_error(run, "t.json")


def test_huge_memory_device_id(tmp_path: Path) -> None:
    evs = events(2)
    evs.append(
        {
            "ph": "i",
            "cat": "cpu_instant_event",
            "name": "[memory]",
            "pid": 1,
            "tid": 1,
            "ts": 50,
            "s": "t",
            "args": {"Device Type": 1, "Device Id": 2**40, "Addr": 1, "Bytes": 1024},
        }
    )
    p = write(tmp_path / "t.json", trace(evs))
    run = cli(["diagnose", p], tmp_path)
    ok_or_error(run, "t.json")


def test_garbage_parquet_in_a_store(tmp_path: Path, t: Path) -> None:
    ok(cli(["ingest", t, "-o", "s"], tmp_path))
    (tmp_path / "s" / "cpu_ops.parquet").write_bytes(b"PAR1 garbage PAR1")
    error(cli(["diagnose", "s"], tmp_path), "cpu_ops.parquet")


@pytest.mark.parametrize(
    "edit",
    [
        lambda m: m.update(tables="x"),
        lambda m: m.update(ranks="x"),
        lambda m: m.update(ranks=[{"rank": "zero"}]),
        lambda m: m.update(diagnostics=[5]),
        lambda m: m.update(sources={"a": 1}),
        lambda m: m["tables"].update(gpu_activities=-1),
    ],
)
def test_tampered_store_meta(tmp_path: Path, t: Path, edit) -> None:
    ok(cli(["ingest", t, "-o", "s"], tmp_path))
    f = tmp_path / "s" / "meta.json"
    m = json.loads(f.read_text())
    edit(m)
    f.write_text(json.dumps(m))
    error(cli(["diagnose", "s"], tmp_path), "meta.json")


@pytest.mark.parametrize("command", ["compare", "report"])
@pytest.mark.parametrize(
    "bad", [{"findings": "x"}, {"findings": ["x"]}, {"summary": 5}, {"trace": []}]
)
def test_tampered_result_json(tmp_path: Path, t: Path, command: str, bad: dict) -> None:
    ok(cli(["diagnose", t, "--json", "r.json"], tmp_path))
    r = tmp_path / "r.json"
    d = json.loads(r.read_text())
    d.update(bad)
    r.write_text(json.dumps(d))
    args = ["compare", r, r] if command == "compare" else ["report", r, "-o", "x.html"]
    error(cli(args, tmp_path), "r.json")


def test_rule_file_not_utf8(tmp_path: Path, t: Path) -> None:
    d = _rules_dir(tmp_path, b"id: caf\xe9-rule\n")
    error(cli(["rules", "--rules", d], tmp_path), "mine.yaml", "UTF-8")


def test_rule_with_null_condition(tmp_path: Path) -> None:
    d = _rules_dir(
        tmp_path,
        _rule("idle", fires_if="null").replace(
            '"fires_if": [{"metric": "gpu_idle_pct", "op": ">=", "threshold": "min_idle"}], ', ""
        ),
    )
    error(cli(["rules", "--rules", d], tmp_path), "mine.yaml", "fires_if")


@pytest.mark.parametrize("out", ["/proc/self/x.html", "/sys/x.html"])
def test_output_under_kernel_file_systems(tmp_path: Path, t: Path, out: str) -> None:
    error(cli(["diagnose", t, "--html", out], tmp_path), out, "kernel file system")


def test_output_is_a_folder(tmp_path: Path, t: Path) -> None:
    (tmp_path / "out").mkdir()
    error(cli(["diagnose", t, "--html", "out"], tmp_path), "out", "folder")


def test_output_parent_is_a_file(tmp_path: Path, t: Path) -> None:
    error(cli(["diagnose", t, "--html", "t.json/r.html"], tmp_path), "r.html", "not a folder")


@pytest.mark.skipif(ROOT, reason="root writes into read-only folders")
def test_output_in_a_read_only_folder(tmp_path: Path, t: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        error(cli(["diagnose", t, "--html", ro / "r.html"], tmp_path), "not writable")
    finally:
        ro.chmod(0o700)


def test_unwritable_cache_folder(tmp_path: Path, t: Path) -> None:
    (tmp_path / "file").write_text("x")
    run = cli(
        ["summary", t], tmp_path, env={"TRACEINSIGHT_CACHE_DIR": str(tmp_path / "file" / "cache")}
    )
    error(run, "cache")


def test_one_failing_output_leaves_nothing_half_written(tmp_path: Path, t: Path) -> None:
    (tmp_path / "blocker").write_text("x")
    run = cli(["diagnose", t, "--json", "ok.json", "--html", "blocker/r.html"], tmp_path)
    error(run, "blocker")
    assert not (tmp_path / "ok.json").exists()
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]


# === 6. options validated ======================================================================


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["--device", "nosuch"], "h100"),
        (["--peak-tflops", "0"], "peak-tflops"),
        (["--peak-tflops", "-1"], "peak-tflops"),
        (["--peak-tflops", "nan"], "peak-tflops"),
        (["--peak-tflops", "inf"], "peak-tflops"),
        (["--peak-bw", "nan"], "peak-bw"),
        (["--params", "-5"], "params"),
        (["--tokens-per-step", "-1"], "tokens-per-step"),
        (["--set", "gpu-idle.min_idle_pct=nan"], "nan"),
        (["--set", "gpu-idle.min_idle_pct=inf"], "inf"),
    ],
)
def test_diagnose_options(tmp_path: Path, t: Path, args: list, fragment: str) -> None:
    run = cli(["diagnose", t, *args], tmp_path)
    assert run.rc == 2, str(run)
    assert fragment in run.stderr, run.stderr
    assert "data-quality" not in run.stdout


def test_compare_fail_if_slower_nan(tmp_path: Path, t: Path) -> None:
    run = cli(["compare", t, t, "--fail-if-slower", "nan"], tmp_path)
    assert run.rc == 2 and "fail-if-slower" in run.stderr, str(run)


@pytest.mark.parametrize("command", [["summary", "-n", "-1"], ["top", "-n", "-1"]])
def test_negative_counts(tmp_path: Path, t: Path, command: list) -> None:
    run = cli([*command, t], tmp_path)
    assert run.rc == 2 and "-n" in run.stderr, str(run)


def test_no_secret_in_the_planted_list_is_a_real_word() -> None:
    assert all(len(s) > 6 for s in SECRETS)
