"""The one settings module: every ``TRACEINSIGHT_*`` variable typed and validated, a bad value a
one-line error naming the variable (exit code 2), every module reading through it, and the
README's table in step with it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, invoke

from traceinsight import settings
from traceinsight.errors import ConfigError

PACKAGE = REPO / "traceinsight"


def test_defaults_when_unset_or_empty() -> None:
    assert settings.get("TRACEINSIGHT_GZIP_MAX_RATIO", {}) == 200
    assert settings.get("TRACEINSIGHT_GZIP_MAX_RATIO", {"TRACEINSIGHT_GZIP_MAX_RATIO": " "}) == 200
    assert settings.get("TRACEINSIGHT_MAX_MEMORY_MB", {}) == 4096.0
    assert settings.get("TRACEINSIGHT_STREAM", {}) is True
    assert settings.get("TRACEINSIGHT_DEBUG", {}) is False
    assert settings.get("TRACEINSIGHT_WORKERS", {}) is None  # computed where it is used
    assert settings.get("TRACEINSIGHT_SNAPSHOT_MAX_BYTES", {}) == 4 << 30


@pytest.mark.parametrize(
    ("name", "raw", "want"),
    [
        ("TRACEINSIGHT_GZIP_MAX_RATIO", "50", 50),
        ("TRACEINSIGHT_ROW_GROUP_ROWS", "1_000", 1000),
        ("TRACEINSIGHT_MAX_MEMORY_MB", " 12.5 ", 12.5),
        ("TRACEINSIGHT_SNAPSHOT_TIME_LIMIT_S", "3", 3.0),
        ("TRACEINSIGHT_STREAM", "0", False),
        ("TRACEINSIGHT_STREAM", "off", False),
        ("TRACEINSIGHT_DEBUG", "1", True),
        ("TRACEINSIGHT_DEBUG", "Yes", True),
        ("TRACEINSIGHT_SNAPSHOT_ISOLATE_BYTES", "0", 0),
        ("TRACEINSIGHT_CACHE_DIR", " /tmp/x ", "/tmp/x"),
        ("TRACEINSIGHT_PROFILE", '{"out": "a"}', '{"out": "a"}'),
    ],
)
def test_typed_values(name: str, raw: str, want: object) -> None:
    got = settings.get(name, {name: raw})
    assert got == want and type(got) is type(want)


@pytest.mark.parametrize(
    ("name", "raw", "why"),
    [
        ("TRACEINSIGHT_GZIP_MAX_RATIO", "abc", "is not an integer"),
        ("TRACEINSIGHT_GZIP_MAX_RATIO", "2.5", "is not an integer"),
        ("TRACEINSIGHT_GZIP_MAX_RATIO", "0", "is below the smallest valid value, 1"),
        ("TRACEINSIGHT_WORKERS", "-2", "is below the smallest valid value, 1"),
        ("TRACEINSIGHT_MAX_MEMORY_MB", "lots", "is not a number"),
        ("TRACEINSIGHT_MAX_MEMORY_MB", "nan", "is not a finite number"),
        ("TRACEINSIGHT_STREAM_CHUNK_BYTES", "10", "is below the smallest valid value, 1024"),
        ("TRACEINSIGHT_DEBUG", "maybe", "is not a boolean"),
    ],
)
def test_bad_values_are_one_line_errors_naming_the_variable(name: str, raw: str, why: str) -> None:
    with pytest.raises(ConfigError) as e:
        settings.get(name, {name: raw})
    line = e.value.one_line()
    assert f"environment variable {name}={raw!r} {why}" in line
    assert "\n" not in line and "unset it for the default" in line
    assert e.value.exit_code == 2


def test_control_characters_in_a_bad_value_are_not_echoed() -> None:
    with pytest.raises(ConfigError) as e:
        settings.get("TRACEINSIGHT_WORKERS", {"TRACEINSIGHT_WORKERS": "4\x1b[2J"})
    assert "\x1b" not in e.value.one_line()


def test_check_finds_the_first_bad_variable() -> None:
    settings.check({"TRACEINSIGHT_WORKERS": "3", "PATH": "x"})
    with pytest.raises(ConfigError, match="TRACEINSIGHT_PENDING_BYTES"):
        settings.check({"TRACEINSIGHT_WORKERS": "3", "TRACEINSIGHT_PENDING_BYTES": "x"})
    with pytest.raises(KeyError):
        settings.get("TRACEINSIGHT_NOT_A_SETTING")


def test_the_cli_refuses_a_bad_value_before_any_work(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACEINSIGHT_GZIP_MAX_RATIO", "abc")
    res = invoke(["devices"], exit_code=2)  # a command that never reads the variable
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith(
        "traceinsight: error: environment variable TRACEINSIGHT_GZIP_MAX_RATIO='abc' is not an "
        "integer"
    )
    assert res.stdout == ""


def test_a_real_process_exits_2_on_a_bad_value(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "TRACEINSIGHT_MAX_MEMORY_MB": "-5"}
    res = subprocess.run(
        [sys.executable, "-m", "traceinsight", "diagnose", str(tmp_path / "absent.json")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 2
    assert res.stderr.count("\n") == 1 and "TRACEINSIGHT_MAX_MEMORY_MB='-5'" in res.stderr


def test_the_modules_read_the_values_through_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    from traceinsight.ingest import cache, parallel
    from traceinsight.store import window
    from traceinsight.util.progress import Progress

    monkeypatch.setenv("TRACEINSIGHT_WORKERS", "3")
    assert parallel.workers(10) == 3  # the override wins over the small-file rule
    monkeypatch.setenv("TRACEINSIGHT_MAX_MEMORY_MB", "12.5")
    assert window.max_memory_mb() == 12.5
    assert window.max_memory_mb(7) == 7.0  # --max-memory wins
    monkeypatch.setenv("TRACEINSIGHT_MAX_MEMORY_MB", "many")
    with pytest.raises(ConfigError, match="TRACEINSIGHT_MAX_MEMORY_MB"):
        window.max_memory_mb()  # once silently 4096
    monkeypatch.setenv("TRACEINSIGHT_CACHE_DIR", "/tmp/ti-settings-test")
    assert cache.cache_root() == Path("/tmp/ti-settings-test")
    monkeypatch.setenv("TRACEINSIGHT_NO_PROGRESS", "yes")
    assert Progress("x").quiet is True
    monkeypatch.setenv("TRACEINSIGHT_NO_PROGRESS", "0")
    assert Progress("x").quiet is False


#: reads of the environment outside settings.py that are not TRACEINSIGHT_* settings (or the
#: one guard that runs before traceinsight may be importable)
ALLOWED_READS = {
    ("ingest/cache.py", '"XDG_CACHE_HOME"'),
    ("capture/profile_child.py", "var"),  # RANK, LOCAL_RANK, SLURM_PROCID
    ("capture/_profile_site/sitecustomize.py", '"TRACEINSIGHT_PROFILE"'),
}
READ = re.compile(
    r"(?:os\.environ\.get|os\.getenv|environ\.get)\(\s*([^,)]+)|os\.environ\[([^\]]+)\](?!\s*=)"
)


def test_every_module_reads_through_settings() -> None:
    reads = set()
    names = set()
    for p in PACKAGE.rglob("*.py"):
        rel = p.relative_to(PACKAGE).as_posix()
        if rel == "settings.py":
            continue
        text = p.read_text(encoding="utf-8")
        for m in READ.finditer(text):
            reads.add((rel, (m.group(1) or m.group(2)).strip()))
        names |= set(re.findall(r"TRACEINSIGHT_[A-Z0-9_]*[A-Z0-9]", text))
    assert reads == ALLOWED_READS
    assert names <= set(settings.VARS), names - set(settings.VARS)  # each one declared
    assert len(settings.VARS) == 21


def test_the_readme_table_is_the_settings_table() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert settings.markdown_table() in readme
    for name in settings.VARS:
        assert f"| `{name}` |" in readme
