"""Shared fixtures: the real-trace corpus, an isolated cache, a CLI runner."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("TRACEINSIGHT_SHARED", REPO.parent / "shared"))
TRACES = SHARED / "traces"
KINETO = TRACES / "kineto"
REFERENCE = TRACES / "reference"
SAMPLES = REPO / "sample_traces"

NO_CORPUS = (
    f"{TRACES} is absent (the shared real-trace corpus; CI always has it): set "
    "TRACEINSIGHT_SHARED=DIR to the folder holding traces/"
)

#: JSON files in the corpus that are not Kineto traces (format-detection fixtures)
NOT_TRACES = {
    "benchmark_simple_add_et.json.gz",  # PyTorch Execution Trace
    "execution_details.json",  # TraceLens sidecar
}


def corpus_kineto_files() -> list[Path]:
    if not KINETO.is_dir():
        return []
    return sorted(
        p
        for p in KINETO.rglob("*")
        if p.is_file() and p.name.endswith((".json", ".json.gz")) and p.name not in NOT_TRACES
    )


def corpus_id(p: Path) -> str:
    return str(p.relative_to(KINETO)).replace("/", ":")


requires_corpus = pytest.mark.skipif(not KINETO.is_dir(), reason=NO_CORPUS)


@pytest.fixture(autouse=True)
def _isolated_cache(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every test session gets its own store cache; progress bars stay off."""
    cache = tmp_path_factory.getbasetemp() / "ti-cache"
    monkeypatch.setenv("TRACEINSIGHT_CACHE_DIR", str(cache))
    monkeypatch.setenv("TRACEINSIGHT_NO_PROGRESS", "1")


class CliResult:
    def __init__(self, result) -> None:  # click.testing.Result
        self.exit_code = result.exit_code
        self.stdout = result.stdout
        self.stderr = result.stderr
        self.exception = result.exception


def invoke(
    args: list[str], *, exit_code: int | None = 0, stderr_contains: str | None = None
) -> CliResult:
    """Run the CLI in-process; assert the exit code and (optionally) the stderr text."""
    from traceinsight.cli import main

    runner = CliRunner()
    res = runner.invoke(main, [str(a) for a in args], catch_exceptions=True)
    out = CliResult(res)
    if exit_code is not None:
        assert out.exit_code == exit_code, (
            f"exit {out.exit_code} != {exit_code}\nstdout:\n{out.stdout}\nstderr:\n{out.stderr}\n"
            f"exception: {out.exception!r}"
        )
    if stderr_contains is not None:
        assert stderr_contains in out.stderr, out.stderr
    return out


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        default=False,
        help="rewrite tests/golden/*.json from the current diagnoses",
    )
