"""The first ten minutes on the command line, and what the terminal says about a run.

Help that starts at ``diagnose`` and shows examples for every command; global options before
or after the command; progress through the analysis phases; a folder's other files listed as
skipped; ``top --by module-type``; ``rules`` prose never cut; one device line; ``4 steps × 4
ranks``; not-evaluated rules without repeated reasons; distinct idle-gap rows; the host view of
a CPU-only trace; compared runs named by their folders; one unit rule for durations.
"""

from __future__ import annotations

import dataclasses
import io
import json
import re
import shutil
import time
from pathlib import Path

import pytest
from conftest import SAMPLES, invoke

from traceinsight.cli import main
from traceinsight.render import describe
from traceinsight.util import fmt
from traceinsight.util.progress import Progress

STRAGGLER = SAMPLES / "synthetic_straggler_4rank"
LAUNCH = SAMPLES / "synthetic_h100_launch_bound.json.gz"
CPU = SAMPLES / "cpu_transformer_train.pt.trace.json.gz"


@pytest.fixture(scope="module")
def straggler_result():
    from traceinsight.diagnose import diagnose
    from traceinsight.ingest import load

    return diagnose(load([STRAGGLER], quiet=True))


# --- help, options, progress -------------------------------------------------------------------


def test_top_level_help_starts_at_diagnose() -> None:
    out = invoke(["--help"]).stdout
    start = out[out.index("Start here:") :]
    first = [ln.split()[1] for ln in start.splitlines()[1:4] if ln.strip()]
    assert first[0] == "diagnose" and "profile" in start
    assert "work before or after the command" in " ".join(out.split())


@pytest.mark.parametrize("command", sorted(main.commands))
def test_every_command_help_has_examples(command: str) -> None:
    out = invoke([command, "--help"]).stdout
    assert "Examples:" in out
    ex = out[out.index("Examples:") :].splitlines()[1]
    assert ex.strip().startswith(("traceinsight", "TRACEINSIGHT_")), ex
    assert "--quiet" in out and "--debug" in out  # the global options are listed here too


@pytest.mark.parametrize(
    "args",
    [
        ["-q", "diagnose", STRAGGLER],
        ["diagnose", STRAGGLER, "-q"],
        ["diagnose", "--quiet", STRAGGLER, "--debug"],
        ["--debug", "top", STRAGGLER, "--quiet"],
    ],
)
def test_global_options_go_before_or_after_the_command(args: list) -> None:
    invoke(args)


def test_debug_after_the_command_shows_the_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    plain = invoke(["diagnose", bad], exit_code=2)
    assert plain.stderr.startswith("traceinsight: error:")
    res = invoke(["diagnose", bad, "--debug"], exit_code=None)
    assert res.exit_code != 0 and res.exception is not None and not res.stderr


def test_diagnose_reports_each_analysis_phase() -> None:
    from traceinsight.diagnose import diagnose
    from traceinsight.ingest import load

    class Seen:
        def __init__(self) -> None:
            self.stages: list[str] = []

        def stage(self, name: str, fraction: float) -> None:
            self.stages.append(name)

    seen = Seen()
    diagnose(load([STRAGGLER], quiet=True), progress=seen, cache=False)  # type: ignore[arg-type]
    assert seen.stages == ["attribution", "metrics", "rules", "sections"]


def test_a_silent_phase_shows_while_it_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """A phase longer than the threshold prints while it runs, with no update of its own."""
    monkeypatch.delenv("TRACEINSIGHT_NO_PROGRESS", raising=False)
    stream = io.StringIO()
    p = Progress("analyse", stream=stream, show_after_s=0.2)
    p.stage("attribution", 0.0)
    time.sleep(0.6)  # no update from the work: the heartbeat draws the line
    assert "analyse: attribution" in stream.getvalue()
    p.stage("rendering", 0.95)
    p.done()
    assert stream.getvalue().splitlines()[-1].startswith("analyse: done in")
    quiet = io.StringIO()
    q = Progress("analyse", stream=quiet, quiet=True, show_after_s=0.0)
    q.stage("metrics", 0.5)
    q.done()
    assert quiet.getvalue() == ""


# --- inputs ----------------------------------------------------------------------------------


def test_a_folder_with_other_files_lists_what_was_skipped(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(STRAGGLER, run)
    (run / "notes.txt").write_text("what I changed")
    (run / "train.py").write_text("print()")
    (run / "old").mkdir()
    (run / ".DS_Store").write_bytes(b"")
    res = invoke(["diagnose", run, "--html", tmp_path / "r.html"])
    err = res.stderr
    assert "notes.txt skipped: not a trace file name (.json" in err
    assert "train.py skipped" in err and "old skipped: a folder" in err
    assert ".DS_Store" not in err and "rank-0.json.gz skipped" not in err
    html = (tmp_path / "r.html").read_text()
    assert "notes.txt skipped" in html and "old skipped: a folder" in html


def test_the_folder_is_listed_once_by_ingest_not_again_after_the_diagnosis(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import traceinsight.diagnose as dg

    run = tmp_path / "run"
    shutil.copytree(STRAGGLER, run)
    (run / "notes.txt").write_text("there when the run was read")
    real = dg.diagnose

    def diagnose_then_add_a_file(*args, **kwargs):
        result = real(*args, **kwargs)
        (run / "late.txt").write_text("added after ingest listed the folder")
        (run / "later").mkdir()
        return result

    monkeypatch.setattr(dg, "diagnose", diagnose_then_add_a_file)
    res = invoke(["diagnose", run, "--json", tmp_path / "r.json"])
    assert "notes.txt skipped: not a trace file name" in res.stderr
    assert "late.txt" not in res.stderr and "later" not in res.stderr
    data = json.loads((tmp_path / "r.json").read_text())
    skipped = [d["source"] for d in data["diagnostics"] if d["code"] == "file-skipped"]
    assert skipped == ["notes.txt"]


def test_top_by_module_type_aggregates_instances() -> None:
    out = invoke(["top", STRAGGLER, "--by", "module-type"]).stdout
    assert re.search(r"TransformerBlock ×4\s", out) and re.search(r"Linear ×16\s", out)
    assert "shares overlap" in out


# --- what the terminal says --------------------------------------------------------------------


def test_rules_never_cut_prose() -> None:
    from traceinsight.engine.evaluate import load_rules

    out = invoke(["rules"], exit_code=0).stdout
    assert "…" not in out
    joined = " ".join(" ".join(out.split()).split())
    for r in load_rules([], []):
        assert " ".join(r.summary.split()) in joined, r.id


def test_terminal_says_steps_by_ranks_and_one_device_line() -> None:
    out = invoke(["diagnose", STRAGGLER]).stdout
    assert "4 steps × 4 ranks" in out and "steps: 16" not in out
    assert re.search(r"4 ranks · NVIDIA H100 80GB HBM3 \(named in the trace's device", out)
    assert "Open in Perfetto: load rank-0.json.gz" in " ".join(out.split())


def test_device_line_says_how_the_device_was_known(straggler_result) -> None:
    from traceinsight.devices.table import resolve

    r = straggler_result
    unknown = dataclasses.replace(r, extra={**r.extra, "device": {"how": "unknown"}})
    line = describe.device_line(unknown)
    assert line.startswith("GPU not named in the trace (2,352 kernels recorded")
    assert "--device" in line and "not recorded" not in line
    props = {
        "name": "AMD Radeon Graphics",
        "computeMajor": 9,
        "computeMinor": 4,
        "totalGlobalMem": 192 * 2**30,
    }
    res = resolve(props)
    guessed = dataclasses.replace(
        r,
        extra={
            **r.extra,
            "device": {
                "how": res.how,
                "resolved": res.spec.name,
                "name": props["name"],
                "message": res.message,
            },
        },
    )
    line = describe.device_line(guessed)
    assert "AMD Instinct MI300X" in line and "identified from its architecture, gfx942" in line
    assert "generic name" not in line and "generic name" not in res.message


def test_not_evaluated_reasons_do_not_repeat() -> None:
    out = invoke(["diagnose", CPU]).stdout
    block = out[out.index("Rules:") :]
    items = [ln for ln in block.splitlines() if ln.startswith("  - ")]
    assert 1 < len(items) < 14  # grouped by reason, not one line per rule
    text = " ".join(block.split())
    assert text.count("record with activities=[CPU, CUDA]") == 1
    assert "needed) (record" not in text
    assert describe.reason_and_hint(
        "flops_modelled_pct: no op could be modelled (record_shapes=True needed)",
        "record with record_shapes=True; for an unknown GPU pass --device NAME",
    ) == (
        "no op could be modelled",
        "record with record_shapes=True; for an unknown GPU pass --device NAME",
    )


def test_launch_bound_gap_rows_are_distinct() -> None:
    out = invoke(["diagnose", LAUNCH, "-v"]).stdout
    block = out[out.index("Largest GPU idle gaps") :].splitlines()[3:8]
    rows = [ln.strip() for ln in block if re.match(r"\s+\d", ln)]
    assert len(rows) >= 4 and len(set(rows)) == len(rows), rows
    assert "into step" in out


def test_cpu_only_trace_gets_a_host_view() -> None:
    out = invoke(["diagnose", CPU]).stdout
    assert "CPU-only run: a step takes" in out and "no GPU (CPU-only trace)" in out
    assert "Top CPU ops by self time" in out and "aten::mm" in out
    assert re.search(r"TransformerEncoderLayer ×2", out)
    assert "data loading" in out and "synchronisation" in out
    assert "GPU time (step windows" not in out and "idle 100" not in out


def test_compare_names_the_runs_by_their_folders(tmp_path: Path) -> None:
    before, after = tmp_path / "baseline_run", tmp_path / "candidate_run"
    shutil.copytree(STRAGGLER, before)
    shutil.copytree(STRAGGLER, after)
    out = invoke(["compare", before, after, "--markdown", tmp_path / "c.md"]).stdout
    assert out.splitlines()[0] == (
        "traceinsight compare — baseline_run (4 files)  →  candidate_run (4 files)"
    )
    md = (tmp_path / "c.md").read_text()
    assert "`baseline_run (4 files)`" in md and "`candidate_run (4 files)`" in md


@pytest.mark.parametrize(
    ("ns", "text"),
    [
        (812, "812 ns"),
        (999.6, "1.00 µs"),
        (14_200, "14.2 µs"),
        (2_151_900, "2.15 ms"),
        (999_960, "1.00 ms"),
        (999_999_000, "1.00 s"),
        (59.5e9, "59.5 s"),
        (-2_151_900, "-2.15 ms"),
        (0, "0"),
        (None, "–"),
    ],
)
def test_one_unit_rule_for_durations(ns, text) -> None:
    assert fmt.fmt_ns(ns) == text


def test_the_command_ends_fast_with_its_exit_code_and_whole_outputs(tmp_path: Path) -> None:
    """``traceinsight`` (and ``python -m traceinsight``) end without the interpreter's teardown
    once a command has finished: the exit code, the printed text and the files written must
    be exactly those of a normal exit."""
    import json
    import subprocess
    import sys

    import tomllib

    root = Path(__file__).resolve().parent.parent
    scripts = tomllib.loads((root / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["traceinsight"] == "traceinsight.__main__:run"
    py = [sys.executable, "-m", "traceinsight"]
    out = tmp_path / "r.json"
    sample = SAMPLES / "synthetic_h100_healthy.json.gz"
    ok = subprocess.run(
        [*py, "--quiet", "diagnose", str(sample), "--json", str(out), "--no-color"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=root,
    )
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith("traceinsight diagnose — synthetic_h100_healthy.json.gz")
    assert "Rules:" in ok.stdout and ok.stdout.endswith("\n")
    assert json.loads(out.read_text())["headline"]
    bad = subprocess.run(
        [*py, "diagnose", str(tmp_path / "missing.json")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=root,
    )
    assert bad.returncode == 2 and "missing.json" in bad.stderr
