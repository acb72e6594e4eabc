"""The command line, consistent: a report's command line with its secrets redacted and its
paths kept; the cache commands; the exit status of a profiled script; a CPU-only trace listed
by op; a folder's stray non-Nsight ``.sqlite`` listed as skipped."""

from __future__ import annotations

from pathlib import Path

import pytest

from traceinsight.util.redact import REDACTED, redact_command

LONG_PATH = (
    "/work/shared/traces/kineto/tracelens/traces/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
)


@pytest.mark.parametrize(
    ("arg", "shown"),
    [
        (LONG_PATH, LONG_PATH),  # a long path is no base64 key
        ("runs/2024-12-10_6e7e79c7_report2.sqlite", "runs/2024-12-10_6e7e79c7_report2.sqlite"),
        ("--set", "--set"),
        ("launch-bound.min_idle_launch_pct=20", "launch-bound.min_idle_launch_pct=20"),
        ("--hf-token=hf_abcdefghijklmnop", f"--hf-token={REDACTED}"),
        ("--api-key=plainvalue", f"--api-key={REDACTED}"),
        ("API_KEY=abc", f"API_KEY={REDACTED}"),
        ("--key-file=/etc/ssl/x.pem", "--key-file=/etc/ssl/x.pem"),  # a path, not a key
        ("https://bob:pw@host.example.com/a", f"https://{REDACTED}@host.example.com/a"),
        ("ghp_" + "A1b2" * 6, REDACTED),
        ("a1b2c3d4" * 6, REDACTED),  # a long hex key
        ("AbCdEfGh12345678" * 3, REDACTED),  # a base64 key
        ("/home/alice/run/trace.json", "/home/~/run/trace.json"),
    ],
)
def test_command_line_redacts_secrets_not_paths(arg: str, shown: str) -> None:
    assert redact_command(["traceinsight", "diagnose", arg]) == ["traceinsight", "diagnose", shown]


def test_a_secret_option_redacts_its_next_argument() -> None:
    got = redact_command(["x", "--api-key", "sekrit", "--password", "pw", "--keys", "5", "t.json"])
    assert got == ["x", "--api-key", REDACTED, "--password", REDACTED, "--keys", "5", "t.json"]


def test_the_result_keeps_the_trace_path(tmp_path) -> None:
    from conftest import SAMPLES

    from traceinsight.diagnose import diagnose
    from traceinsight.ingest import load

    trace = SAMPLES / "synthetic_h100_launch_bound.json.gz"
    long_name = tmp_path / ("Qwen_Qwen1.5-0.5B-Chat__1016005" + "_x" * 20 + ".json.gz")
    long_name.write_bytes(trace.read_bytes())
    cmd = ["traceinsight", "diagnose", str(long_name), "--hf-token", "hf_abcdefghijklmnop"]
    result = diagnose(load([long_name], quiet=True), command=cmd)
    assert result.command == [*cmd[:3], "--hf-token", REDACTED]


# --- profile: a failing command says how it failed ------------------------------------------


def test_a_failing_command_reports_its_exit_status_and_last_stderr(tmp_path, capfd) -> None:
    from conftest import invoke

    script = tmp_path / "fails.sh"
    script.write_text(
        "echo 'Traceback: ValueError: bad config' >&2\n"
        "printf 'token hf_abcdefghijklmnop \\033[31mred\\033[0m\\n' >&2\nexit 3\n"
    )
    res = invoke(["profile", "-o", tmp_path / "x", "--", "sh", str(script)], exit_code=3)
    err = res.stderr
    assert "no trace written: the command exited with status 3" in err
    assert "never called optimizer.step()" not in err
    assert "  Traceback: ValueError: bad config" in err  # its last stderr lines, repeated
    assert "hf_abcdefghijklmnop" not in err.split("its last lines on stderr:")[1]
    assert "\x1b" not in err.split("its last lines on stderr:")[1]


def test_exit_texts() -> None:
    from pathlib import Path

    from traceinsight.capture.profile_run import Recording, Settings

    def text(rc: int) -> str:
        return Recording(rc, Path("o"), []).summary_lines(Settings(out="o"))[0]

    assert text(3).endswith("the command exited with status 3")
    assert text(-9).endswith("the command was killed by signal 9 (SIGKILL)")
    assert text(130).endswith("the command was interrupted (status 130)")
    assert (
        "never called optimizer.step()"
        in Recording(0, Path("o"), [], [{"steps": 0}]).summary_lines(Settings(out="o"))[0]
    )


# --- the cache: list, clear, bound ----------------------------------------------------------


def _fresh_cache(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("TRACEINSIGHT_CACHE_DIR", str(root))
    return root


def _ingest(name: str):
    from conftest import SAMPLES

    from traceinsight.ingest import load

    return load([SAMPLES / name], quiet=True)


def _age(path, days: float) -> None:
    import os
    import time

    t = time.time() - days * 86400
    os.utime(path, (t, t))


def test_cache_list_shows_entries_and_foreign_files(tmp_path, monkeypatch) -> None:
    import json

    from conftest import invoke

    root = _fresh_cache(tmp_path, monkeypatch)
    a = _ingest("synthetic_h100_healthy.json.gz")
    b = _ingest("synthetic_h100_launch_bound.json.gz")
    (root / "stores" / "notes").mkdir()
    (root / "stores" / "notes" / "mine.txt").write_text("keep me")
    _age(a.path, 40)
    data = json.loads(invoke(["cache", "list", "--json"]).stdout)
    got = {Path(e["path"]).name: e for e in data["entries"]}
    assert set(got) == {a.path.name, b.path.name, "notes"}
    assert got[a.path.name]["kind"] == "store" and got[a.path.name]["owned"]
    assert got["notes"]["owned"] is False and "not a cache store" in got["notes"]["foreign"]
    assert 39.9 < got[a.path.name]["age_days"] < 40.1
    assert data["total_bytes"] == sum(e["bytes"] for e in data["entries"])
    assert data["entries"][-1]["path"] == str(a.path)  # most recently used first
    text = invoke(["cache", "list"]).stdout
    assert "3 entries" in text and "40 days ago" in text and "foreign" in text


def test_cache_clear_older_than_then_all_keeps_foreign_files(tmp_path, monkeypatch) -> None:
    from conftest import invoke

    root = _fresh_cache(tmp_path, monkeypatch)
    a = _ingest("synthetic_h100_healthy.json.gz")
    b = _ingest("synthetic_h100_launch_bound.json.gz")
    stray = root / "stores" / "0123456789abcdef0123456789abcdef"  # a store's name, a user's file
    stray.mkdir()
    (stray / "meta.json").write_text('{"format": "traceinsight-store"}')
    (stray / "results.csv").write_text("mine")
    exports = root / "nsys-exports"
    exports.mkdir()
    export = exports / ("ab" * 16 + ".sqlite")
    export.write_bytes(b"SQLite format 3\x00")
    (exports / "report.sqlite").write_bytes(b"a user's database")
    _age(a.path, 40)
    _age(export, 40)
    res = invoke(["cache", "clear", "--older-than", "30"])
    assert "removed 2 entries" in res.stdout
    assert not export.exists() and (exports / "report.sqlite").is_file()
    assert not a.path.exists() and b.path.is_dir()
    res = invoke(["cache", "clear"])
    assert "removed 1 entry" in res.stdout and not b.path.exists()
    assert (exports / "report.sqlite").read_bytes() == b"a user's database"
    assert (stray / "results.csv").read_text() == "mine"  # never a foreign file
    assert "results.csv" in res.stderr


def test_a_new_entry_evicts_the_least_recently_used(tmp_path, monkeypatch) -> None:
    from traceinsight.ingest.cache_admin import entries

    _fresh_cache(tmp_path, monkeypatch)
    a = _ingest("synthetic_h100_healthy.json.gz")
    b = _ingest("synthetic_h100_launch_bound.json.gz")
    _age(a.path, 3)
    _age(b.path, 2)
    _ingest("synthetic_h100_healthy.json.gz")  # a cache hit: a is used now, b is the oldest
    import time

    assert {e.path: e for e in entries()}[a.path].used > time.time() - 60
    _age(a.path, 1)  # (as if that hit was a day ago: out of the in-use minute)
    sizes = {e.path: e.size for e in entries()}
    assert set(sizes) == {a.path, b.path}
    # a bound that holds two of the three stores
    bound = sizes[a.path] + max(sizes.values()) * 1.5
    monkeypatch.setenv("TRACEINSIGHT_CACHE_MAX_GB", str(bound / (1 << 30)))
    c = _ingest("synthetic_mi300x.json.gz")
    left = {e.path for e in entries()}
    assert left == {a.path, c.path}, left  # b, used longest ago, went
    monkeypatch.setenv("TRACEINSIGHT_CACHE_MAX_GB", "0")  # no bound
    _ingest("synthetic_h100_fp32_gemms.json.gz")
    assert len(entries()) == 3


# --- top --by op on a CPU-only trace ----------------------------------------------------------


def test_top_by_op_lists_cpu_ops_of_a_cpu_only_trace() -> None:
    import json

    from conftest import SAMPLES, invoke

    from traceinsight.diagnose import diagnose
    from traceinsight.ingest import load

    cpu = SAMPLES / "cpu_transformer_train.pt.trace.json.gz"
    rows = json.loads(invoke(["top", cpu, "--by", "op", "--json"]).stdout)["rows"]
    host = diagnose(load([cpu], quiet=True)).host
    assert rows[: len(host["ops"])] == host["ops"]  # the host view's figures, every op listed
    assert rows[0]["name"] == "aten::mm" and rows[0]["self_ns"] == 17_471_838
    assert sum(r["self_ns"] for r in rows) <= host["window_ns"]
    out = invoke(["top", cpu, "--by", "op", "-n", "5"]).stdout
    assert "Nothing to list" not in out and "CPU ops by host self time" in out
    assert "aten::mm" in out and "17.5 ms" in out
    # a GPU trace keeps its device view
    gpu = SAMPLES / "synthetic_h100_launch_bound.json.gz"
    assert "device self" in invoke(["top", gpu, "--by", "op"]).stdout


# --- a folder with one trace and a stray .sqlite -------------------------------------------


def test_a_stray_sqlite_beside_one_trace_is_skipped_not_an_error(tmp_path) -> None:
    import shutil
    import sqlite3

    from conftest import SAMPLES, invoke

    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(SAMPLES / "synthetic_h100_healthy.json.gz", run)
    db = sqlite3.connect(run / "notes.sqlite")
    db.execute("create table t(x)")
    db.commit()
    db.close()
    res = invoke(["diagnose", run])
    assert "notes.sqlite skipped: is an SQLite database without Nsight Systems tables" in res.stderr
    assert "cannot tell the rank" not in res.stderr
    single = invoke(["top", SAMPLES / "synthetic_h100_healthy.json.gz", "-n", "3"]).stdout
    assert invoke(["top", run, "-n", "3"]).stdout == single  # the same trace, the same table
    # two traces without a rank still need one
    shutil.copy(SAMPLES / "synthetic_h100_launch_bound.json.gz", run)
    res = invoke(["diagnose", run], exit_code=2)
    assert "cannot tell the rank of 2 of 2 files" in res.stderr
