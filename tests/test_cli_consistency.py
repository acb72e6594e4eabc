"""The command line, consistent: a report's command line with its secrets redacted and its
paths kept; the cache commands; the exit status of a profiled script; a CPU-only trace listed
by op; a folder's stray non-Nsight ``.sqlite`` listed as skipped."""

from __future__ import annotations

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
