"""Hostile and careless inputs, third round: control characters in every document, names of
megabytes, rule files with non-finite numbers, byte-order marks, one-line usage errors."""

from __future__ import annotations

import gzip
import json
import time
from pathlib import Path

import pytest
from hostile import CONTROL_RE, bounded, cli, error, events, ok, trace, write

from traceinsight.util.safetext import NAME_CAP

NASTY = "gemm\x1b[2J\x07\x00\u202eevil\u202c\x9b"


def _nasty_trace(tmp_path: Path, name: str = "t.json") -> Path:
    evs = events(3)
    for e in evs:
        if e.get("cat") in ("kernel", "cpu_op"):
            e["name"] = NASTY
    return write(tmp_path / name, trace(evs))


def test_markdown_and_html_hold_no_control_character(tmp_path: Path) -> None:
    p = _nasty_trace(tmp_path, "x\x1b[31m\u202e.json")
    md, html, js = tmp_path / "r.md", tmp_path / "r.html", tmp_path / "r.json"
    ok(
        cli(
            ["diagnose", p, "--markdown", md, "--html", html, "--json", js, "--device", "h100-sxm"],
            tmp_path,
        )
    )
    for out in (md, html):
        text = out.read_text()
        assert not CONTROL_RE.search(text), (out.name, CONTROL_RE.findall(text)[:5])
        assert "\\x1b" in text  # the name is there, its escape visible
    ok(cli(["report", js, "-o", tmp_path / "r2.html", "--markdown", tmp_path / "r2.md"], tmp_path))
    for out in (tmp_path / "r2.html", tmp_path / "r2.md"):
        assert not CONTROL_RE.search(out.read_text())


def test_compare_documents_hold_no_control_character(tmp_path: Path) -> None:
    a = _nasty_trace(tmp_path, "a.json")
    b = write(tmp_path / "b.json", trace(events(4)))
    md, html = tmp_path / "c.md", tmp_path / "c.html"
    ok(cli(["compare", a, b, "--markdown", md, "--html", html], tmp_path))
    for out in (md, html):
        assert not CONTROL_RE.search(out.read_text())


def test_rules_explain_escapes_a_rule_file(tmp_path: Path) -> None:
    run = ok(cli(["rules", "--explain", "gpu-idle"], tmp_path))
    assert not CONTROL_RE.search(run.stdout)


def test_a_64_mb_kernel_name_is_capped(tmp_path: Path) -> None:
    evs = events(3)
    long = "void k<" + "x" * (64 * 2**20) + ">()"
    for e in evs:
        if e.get("cat") == "kernel":
            e["name"] = long
    p = write(tmp_path / "t.json", trace(evs))
    t0 = time.monotonic()
    js = tmp_path / "r.json"
    run = ok(cli(["diagnose", p, "--json", js], tmp_path, timeout=240))
    assert time.monotonic() - t0 < 120, run
    bounded(run, 1200)
    text = js.read_text()
    assert js.stat().st_size < 2 * 2**20
    assert "characters, sha256:" in text and "x" * (NAME_CAP + 1) not in text


@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf", ".NaN"])
def test_non_finite_numbers_in_a_rule_file(tmp_path: Path, value: str) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    src = (Path(__file__).resolve().parent.parent / "rules" / "gpu-idle.yaml").read_text()
    import re

    edited, n = re.subn(r"(default:\s*)[0-9.]+", rf"\g<1>{value}", src, count=1)
    assert n == 1
    (rules / "gpu-idle.yaml").write_text(edited)
    p = write(tmp_path / "t.json", trace(events(2)))
    error(cli(["diagnose", p, "--rules", rules], tmp_path), "gpu-idle.yaml", "finite")


def test_utf8_byte_order_mark(tmp_path: Path) -> None:
    body = json.dumps(trace(events(3))).encode()
    p = tmp_path / "bom.json"
    p.write_bytes(b"\xef\xbb\xbf" + body)
    ok(cli(["diagnose", p], tmp_path))
    g = tmp_path / "bom.json.gz"
    g.write_bytes(gzip.compress(b"\xef\xbb\xbf" + body))
    ok(cli(["diagnose", g], tmp_path))


@pytest.mark.parametrize(
    "args",
    [
        ["diagnose", "x.json", "--fail-on", "sometimes"],
        ["top", "x.json", "--by", "nothing"],
        ["diagnose", "x.json", "--max-memory", "abc"],
        ["diagnose", "--no-such-option"],
    ],
)
def test_usage_errors_are_one_line(tmp_path: Path, args: list) -> None:
    write(tmp_path / "x.json", trace(events(2)))
    run = cli(args, tmp_path)
    assert run.rc == 2, run
    lines = [ln for ln in run.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith("traceinsight:") and "--help" in lines[0], lines[0]


def test_a_non_trace_file_is_described_never_quoted(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    write(folder / "rank0.json", trace(events(2)))
    (folder / "notes.json").write_bytes(b"password=hunter2 and more text here")
    run = cli(["diagnose", folder, "--json", tmp_path / "r.json"], tmp_path)
    assert "hunter2" not in run.stderr + run.stdout + (tmp_path / "r.json").read_text()
    single = cli(["diagnose", folder / "notes.json"], tmp_path)
    assert single.rc == 2 and "hunter2" not in single.stderr, single


def test_force_keeps_a_users_file_saved_inside_a_store(tmp_path: Path) -> None:
    t = write(tmp_path / "t.json", trace(events(2)))
    ok(cli(["ingest", t, "-o", tmp_path / "s.tistore"], tmp_path))
    notes = tmp_path / "s.tistore" / "notes.txt"
    notes.write_text("my notes")
    t2 = write(tmp_path / "t2.json", trace(events(3)))
    run = cli(["ingest", t2, "-o", tmp_path / "s.tistore", "--force"], tmp_path)
    error(run, "s.tistore", "did not write", "notes.txt")
    assert notes.read_text() == "my notes"


def test_a_forged_store_meta_does_not_make_a_folder_the_tools(tmp_path: Path) -> None:
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "meta.json").write_text(json.dumps({"format": "traceinsight-store"}))
    (folder / "thesis.tex").write_text("years of work")
    t = write(tmp_path / "t.json", trace(events(2)))
    cli(["ingest", t, "-o", folder, "--force"], tmp_path)
    assert (folder / "thesis.tex").read_text() == "years of work"


def test_stale_cleanup_keeps_user_files_named_like_temporaries(tmp_path: Path) -> None:
    import subprocess
    import sys

    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    ).stdout.strip()
    mine = tmp_path / f".s.tistore.old-{dead}"
    mine.write_text("a user's file")
    mine_dir = tmp_path / f".s.tistore.tmp-{dead}-keep"
    mine_dir.mkdir()
    (mine_dir / "draft.md").write_text("draft")
    t = write(tmp_path / "t.json", trace(events(2)))
    ok(cli(["ingest", t, "-o", tmp_path / "s.tistore"], tmp_path))
    assert mine.read_text() == "a user's file"
    assert (mine_dir / "draft.md").read_text() == "draft"


def test_process_group_settings_and_trace_id_keep_no_host_or_secret(tmp_path: Path) -> None:
    t = trace(
        events(2),
        trace_id="db-prod-7.corp.example.com;pass=hunter2",
        distributedInfo={
            "backend": "nccl",
            "rank": 0,
            "world_size": 1,
            "pg_config": [
                {
                    "pg_name": "alice.admin@db-prod-7.corp.example.com",
                    "pg_desc": "password=s3cr3t-pa55",
                    "backend_config": "cuda:nccl,host=db-prod-7.corp.example.com",
                    "pg_size": 1,
                    "ranks": [0],
                },
                {"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl"},
            ],
        },
    )
    p = write(tmp_path / "t.json", t)
    ok(cli(["ingest", p, "-o", tmp_path / "s"], tmp_path))
    meta = (tmp_path / "s" / "meta.json").read_text()
    from hostile import SECRETS

    for s in SECRETS:
        assert s not in meta, s
    pgs = json.loads(meta)["ranks"][0]["distributed"]["pg_config"]
    assert pgs[1] == {"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl"}


def test_thousands_of_empty_rank_files_give_a_few_lines(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    for i in range(2000):
        (folder / f"rank{i}.json").write_bytes(b"")
    run = cli(["diagnose", folder], tmp_path, env={"TRACEINSIGHT_NO_PROGRESS": "0"})
    assert run.rc == 2, run
    last = run.stderr.splitlines()[-1]
    assert "2,000 skipped: file is empty" in last and "and 1,997 more" in last, last
    assert len(run.stderr.splitlines()) <= 8, run.stderr  # progress: a line per 5 s at most
    assert max(len(ln) for ln in run.stderr.splitlines()) < 2000


def test_an_error_line_is_bounded() -> None:
    from traceinsight.errors import TraceFormatError

    e = TraceFormatError("bad value " + "v" * 900_000, path="x" * 5000, hint="h" * 10_000)
    line = e.one_line()
    assert len(line) < 1500 and "more characters]" in line and "\n" not in line


def test_concurrent_diagnoses_of_one_trace_all_succeed(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    from hostile import REPO

    p = write(tmp_path / "t.json", trace(events(40)))
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "TRACEINSIGHT_NO_PROGRESS": "1",
        "TRACEINSIGHT_CACHE_DIR": str(tmp_path / "cache"),
    }
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "traceinsight", "diagnose", str(p), "--no-color"],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for _ in range(8)
    ]
    errs = [(q.wait(timeout=300), q.stderr.read().decode()) for q in procs]  # type: ignore[union-attr]
    assert all(rc == 0 for rc, _ in errs), [e for rc, e in errs if rc]


def test_a_negative_base_time_is_ignored_with_a_diagnostic(tmp_path: Path) -> None:
    p = write(tmp_path / "t.json", trace(events(3), baseTimeNanoseconds=-5_000_000_000))
    js = tmp_path / "r.json"
    ok(cli(["diagnose", p, "--json", js], tmp_path))
    doc = json.loads(js.read_text())
    assert any(d.get("code") == "bad-base-time" for d in doc["diagnostics"])
    assert doc["trace"]["span_ns"] == 2_990_000  # the file's own times, no negative offset


def test_kernels_before_their_launch_give_no_negative_latency(tmp_path: Path) -> None:
    evs = events(4)
    for e in evs:
        if e.get("cat") == "kernel":
            e["ts"] -= 90  # starts before its cudaLaunchKernel (at +20 µs) ends
    p = write(tmp_path / "t.json", trace(evs))
    js = tmp_path / "r.json"
    ok(cli(["diagnose", p, "--json", js], tmp_path))
    m = json.loads(js.read_text())["metrics"]
    v = m.get("launch_latency_p50_ns")
    value = v.get("value") if isinstance(v, dict) else v
    assert value is None or value >= 0, v


def test_a_million_thread_names_keep_meta_json_small(tmp_path: Path) -> None:
    evs = events(2)
    evs += [
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1000 + i, "args": {"name": f"t{i}"}}
        for i in range(20_000)
    ]
    p = write(tmp_path / "t.json", trace(evs))
    ok(cli(["ingest", p, "-o", tmp_path / "s"], tmp_path))
    meta = json.loads((tmp_path / "s" / "meta.json").read_text())
    assert len(meta["ranks"][0]["thread_names"]) == 4096
    ok(cli(["summary", tmp_path / "s"], tmp_path))


def test_an_oversized_store_meta_is_named_as_such(tmp_path: Path) -> None:
    p = write(tmp_path / "t.json", trace(events(2)))
    ok(cli(["ingest", p, "-o", tmp_path / "s"], tmp_path))
    f = tmp_path / "s" / "meta.json"
    meta = json.loads(f.read_text())
    meta["ranks"] = meta["ranks"] * 200_000
    f.write_text(json.dumps(meta))
    assert f.stat().st_size > 64 << 20
    run = cli(["summary", tmp_path / "s"], tmp_path)
    assert run.rc == 2 and "meta.json is" in run.stderr and "more than a store's" in run.stderr, run
    bounded(run)


def test_modules_nested_twenty_thousand_deep(tmp_path: Path) -> None:
    depth = 20_000
    evs = events(1, step_us=100_000.0)
    for i in range(depth):
        evs.append(
            {
                "ph": "X",
                "cat": "python_function",
                "name": f"nn.Module: Block_{i}",
                "pid": 1,
                "tid": 1,
                "ts": 1.0 + i * 0.001,
                "dur": 99_000.0 - i * 0.002,
            }
        )
    p = write(tmp_path / "t.json", trace(evs))
    t0 = time.monotonic()
    run = ok(cli(["diagnose", p, "--json", tmp_path / "r.json"], tmp_path, timeout=240))
    assert time.monotonic() - t0 < 120
    bounded(run, 1000)
    text = json.dumps(json.loads((tmp_path / "r.json").read_text()), ensure_ascii=False)
    assert "Block_64/…/Block_9000" in text  # 65 levels spelled out, then the innermost


def test_a_result_with_an_edited_schema_is_named_a_result(tmp_path: Path) -> None:
    p = write(tmp_path / "t.json", trace(events(2)))
    js = tmp_path / "r.json"
    ok(cli(["diagnose", p, "--json", js], tmp_path))
    doc = json.loads(js.read_text())
    doc["schema"] = "traceinsight.diagnosis-v9"
    js.write_text(json.dumps(doc))
    run = cli(["report", js, "-o", tmp_path / "r.html"], tmp_path)
    error(run, "r.json", "traceinsight result")
    assert "Execution Trace" not in run.stderr


@pytest.mark.parametrize("stray", [b" oops ", b" ,, "])
def test_a_stray_token_in_a_complete_file_is_located(tmp_path: Path, stray: bytes) -> None:
    body = json.dumps(trace(events(3))).encode()
    at = body.find(b"},", 400) + 2
    p = tmp_path / "t.json"
    p.write_bytes(body[:at] + stray + body[at:])
    run = cli(["diagnose", p], tmp_path)
    line = error(run, "t.json", "invalid JSON at byte")
    assert "truncated" not in line and "--salvage" not in line
    assert f"byte {at + 1:,}" in line or f"byte {at + 2:,}" in line, line


def test_a_bad_device_file_stops_diagnose_as_it_stops_devices(tmp_path: Path) -> None:
    bad = tmp_path / "devices.yaml"
    bad.write_text("devices: [1, 2\n")
    p = write(tmp_path / "t.json", trace(events(2)))
    env = {"TRACEINSIGHT_DEVICES": str(bad)}
    error(cli(["devices"], tmp_path, env=env), "devices.yaml", "not valid YAML")
    error(cli(["diagnose", p], tmp_path, env=env), "devices.yaml", "not valid YAML")


def test_a_file_rewritten_while_it_is_read_is_refused(tmp_path: Path, monkeypatch) -> None:
    import traceinsight.ingest as ing
    from traceinsight.errors import InputError

    p = write(tmp_path / "t.json", trace(events(3)))
    real = ing.streamed.read_streamed

    def rewriting(path, *a, **kw):
        out = real(path, *a, **kw)
        with open(path, "ab") as f:  # the profiler, still writing
            f.write(b" " * 100)
        return out

    monkeypatch.setattr(ing.streamed, "read_streamed", rewriting)
    monkeypatch.setenv("TRACEINSIGHT_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(InputError, match="changed while it was read"):
        ing.ingest([p], tmp_path / "s", quiet=True)
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("big", [False, True], ids=["whole", "streamed"])
def test_two_trace_event_lists_are_refused(tmp_path: Path, big: bool) -> None:
    a = trace(events(200 if big else 2))
    if big:  # past the size read whole: the streaming reader's path
        for e in a["traceEvents"]:
            e.setdefault("args", {})["pad"] = "x" * 2000
    text = json.dumps(a)
    text = text[:-1] + ', "traceEvents": ' + json.dumps(trace(events(4))["traceEvents"]) + "}"
    p = tmp_path / "t.json"
    p.write_text(text)
    error(cli(["ingest", p, "-o", tmp_path / "s"], tmp_path), "t.json", "two 'traceEvents' lists")


def test_a_non_ascii_file_name_under_a_c_locale(tmp_path: Path) -> None:
    p = write(tmp_path / "trace_é中.json", trace(events(2)))
    env = {"PYTHONUTF8": "0", "LC_ALL": "C", "LANG": "C"}
    md = tmp_path / "r.md"
    ok(cli(["diagnose", p, "--markdown", md, "--html", tmp_path / "r.html"], tmp_path, env=env))
    assert "trace_é中.json" in md.read_text(encoding="utf-8")


@pytest.mark.parametrize(
    "where, fragment",
    [
        ("missing.json", "does not exist"),
        ("sched.json", "cannot use the Dask scheduler file"),
        ("tcp://no-port", "cannot use the Dask scheduler address"),
    ],
)
def test_bad_scheduler_values_are_one_line_errors(
    tmp_path: Path, where: str, fragment: str
) -> None:
    (tmp_path / "sched.json").write_text("{}")
    folder = tmp_path / "run"
    folder.mkdir()
    for r in range(2):
        write(
            folder / f"rank{r}.json", trace(events(2), distributedInfo={"rank": r, "world_size": 2})
        )
    arg = str(tmp_path / where) if where.endswith(".json") else where
    error(cli(["diagnose", folder, "--scheduler", arg], tmp_path, timeout=120), fragment)
