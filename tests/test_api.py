"""The Python API (traceinsight/api.py): tables as DataFrames equal to the store's, the same
diagnosis as the CLI, the inline HTML summaries (no scripts, no control characters), the
README example and the tutorial notebook run as written."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, SAMPLES, TRACES, invoke, requires_corpus
from hostile import events, trace, write

import traceinsight as ti
from traceinsight.api import Compare, Diagnosis, Trace

HEALTHY = SAMPLES / "synthetic_h100_healthy.json.gz"
LAUNCH = SAMPLES / "synthetic_h100_launch_bound.json.gz"
COMM = SAMPLES / "synthetic_comm_bound_4rank"
#: control characters (but tab and newline), DEL, C1, bidi controls
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_NASTY = "gemm\x1b[2J\x1b]8;;http://evil.example/\x07click\x1b]8;;\x07\r\u202eevil\u202c"


@pytest.fixture(scope="module")
def healthy() -> Trace:
    return ti.open(HEALTHY)


@pytest.fixture(scope="module")
def healthy_diagnosis(healthy: Trace) -> Diagnosis:
    return healthy.diagnose()


def test_import_stays_cheap() -> None:
    """`import traceinsight` loads no pandas, numpy, pyarrow, nor the API itself; the
    API's names are there on first access."""
    code = (
        "import sys, traceinsight as ti; "
        "heavy = {'pandas', 'numpy', 'pyarrow', 'traceinsight.api'} & set(sys.modules); "
        "assert not heavy, heavy; assert callable(ti.open) and callable(ti.compare); "
        "assert 'traceinsight.api' in sys.modules; assert {'open', 'compare', 'Trace'} <= set(dir(ti))"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


def test_tables_equal_the_store(healthy: Trace) -> None:
    counts = healthy.row_counts
    g = healthy.gpu_activities
    assert len(g) == counts["gpu_activities"] == 704
    assert len(healthy.ops) == counts["cpu_ops"] == 1756
    assert len(healthy.memory) == counts["memory_events"] == 632
    assert len(healthy.runtime) == counts["runtime_calls"] == 704
    assert len(healthy.ranges) == counts["ranges"]
    # the filtered views are the rows of their kind, nothing else
    kinds = g["kind"].astype(str).value_counts().to_dict()
    assert len(healthy.kernels) == kinds["kernel"] == 700
    assert set(healthy.kernels["kind"].astype(str)) == {"kernel"}
    assert len(healthy.memcpy) == kinds.get("memcpy", 0) + kinds.get("memset", 0) == 4
    assert healthy.collectives.empty  # one GPU, no communication kernels
    steps = healthy.steps
    assert len(steps) == 4 and sorted(steps["step"].tolist()) == sorted(set(steps["step"]))
    assert set(steps["kind"].astype(str)) == {"step"}
    # exact int64 nanoseconds, as stored
    for col in ("start_ns", "dur_ns"):
        assert str(healthy.kernels[col].dtype) == "int64"
    assert int(healthy.kernels["dur_ns"].sum()) == int(
        g[g["kind"].astype(str) == "kernel"]["dur_ns"].sum()
    )
    assert healthy.table("flows") is healthy.table("flows")  # read once, then kept
    assert set(healthy.tables) >= {"gpu_activities", "cpu_ops", "memory_events", "ranges"}
    with pytest.raises(KeyError, match="no table 'no_such_table' in a store: one of gpu_act"):
        healthy.table("no_such_table")


def test_repr_html_of_a_trace(healthy: Trace) -> None:
    h = healthy._repr_html_()
    assert "synthetic_h100_healthy.json.gz" in h and "1 rank(s), kineto, NVIDIA H100 80GB HBM3" in h
    assert ">gpu_activities</td>" in h and ">704</td>" in h and ">1756</td>" in h
    assert "<script" not in h.lower() and not CONTROL.search(h)


def test_collectives_of_a_multi_rank_run() -> None:
    t = ti.open(COMM)
    g = t.gpu_activities
    named = g[g["collective"].notna()]
    assert len(t.collectives) == len(named) > 0
    assert sorted(t.collectives["rank"].unique().tolist()) == [0, 1, 2, 3]
    assert len(t.ranks) == 4


def test_headline_and_findings_equal_the_cli_json(
    healthy_diagnosis: Diagnosis, tmp_path: Path
) -> None:
    out = tmp_path / "r.json"
    invoke(["diagnose", HEALTHY, "--json", out])
    cli = json.loads(out.read_text())
    d = healthy_diagnosis
    assert d.headline == cli["headline"]
    assert [f.rule for f in d.findings] == [f["rule"] for f in cli["findings"]]
    assert d.metrics == cli["metrics"]["values"]
    mine = json.loads(d.to_json())
    assert mine["headline"] == cli["headline"] and mine["schema"] == cli["schema"]
    assert d.step_stats["p50"] == cli["metrics"]["values"]["step_time_p50_ns"]


def test_stray_entries_of_a_folder_are_noted_as_the_cli_notes_them(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "rank-0.json.gz").write_bytes(HEALTHY.read_bytes())
    (run / "notes.txt").write_text("not a trace")
    d = ti.open(run).diagnose()
    skipped = [x for x in d.result.diagnostics if x.get("code") == "file-skipped"]
    assert [x.get("source") for x in skipped] == ["notes.txt"]
    cli = json.loads(invoke(["diagnose", run, "--json", "-"]).stdout)
    assert [x for x in cli["diagnostics"] if x.get("code") == "file-skipped"] == skipped


def test_diagnose_options_reach_the_analysis(healthy: Trace) -> None:
    """A rule threshold set from Python changes the result as `--set` does (86% of modelled
    time is compute-bound here: a 95% minimum keeps the rule from firing)."""
    base = healthy.diagnose()
    assert "compute-bound" in [f.rule for f in base.findings]
    off = healthy.diagnose(overrides=["compute-bound.min_compute_bound_pct=95"])
    assert "compute-bound" not in [f.rule for f in off.findings]


def test_repr_html_of_a_diagnosis(healthy_diagnosis: Diagnosis) -> None:
    h = healthy_diagnosis._repr_html_()
    assert "<script" not in h.lower() and "<style" not in h.lower()
    assert not CONTROL.search(h)
    for f in healthy_diagnosis.findings:
        assert f">{f.rule}<" in h  # every finding's rule, its severity and first fix
        assert f.severity in h
    first_fix = healthy_diagnosis.findings[0].recommendations[0]
    assert first_fix.split("(")[0].replace('"', "&quot;") in h
    assert "Step time" in h and "86.8 ms" in h  # the p50 of the 4 representative steps
    assert h.startswith("<div") and h.endswith("</div>")


def test_repr_html_neutralises_trace_text(healthy_diagnosis: Diagnosis) -> None:
    """Text from a trace (a kernel name in a finding) shows as visible escapes, HTML-escaped."""
    r = healthy_diagnosis.result
    f = dataclasses.replace(
        r.findings[0], title=f"slow {_NASTY} <script>alert(1)</script>", recommendations=[_NASTY]
    )
    h = Diagnosis(dataclasses.replace(r, findings=[f], headline=_NASTY))._repr_html_()
    assert not CONTROL.search(h)
    assert "<script" not in h.lower() and "&lt;script&gt;" in h
    assert "\\x1b[2J" in h and "\\u202e" in h


def test_compare_paths_traces_and_diagnoses(healthy: Trace, healthy_diagnosis: Diagnosis) -> None:
    by_path = ti.compare(HEALTHY, LAUNCH)
    assert isinstance(by_path, Compare)
    launch = ti.open(LAUNCH)
    by_obj = ti.compare(healthy_diagnosis, launch)
    assert by_obj.headline == by_path.headline
    assert by_obj.data["total_delta_ns"] == by_path.data["total_delta_ns"] < 0  # faster
    cli = json.loads(invoke(["compare", HEALTHY, LAUNCH, "--json", "-"]).stdout)
    assert by_path.data["total_delta_ns"] == cli["total_delta_ns"]
    assert by_path.data["step_time"] == cli["step_time"]
    h = by_path._repr_html_()
    assert "<script" not in h.lower() and not CONTROL.search(h)
    top = by_path.contributors[0]
    assert top["name"] in h and by_path.data["before"]["label"] in h


def test_compare_of_a_saved_result(tmp_path: Path) -> None:
    out = tmp_path / "healthy.json"
    invoke(["diagnose", HEALTHY, "--json", out])
    c = ti.compare(out, HEALTHY)
    assert c.data["total_delta_ns"] == 0
    assert c.data["before"]["label"] == "healthy.json"


def test_compare_is_callable_whatever_was_imported_first() -> None:
    """`traceinsight.compare` is the subpackage and the API's compare at once, so importing
    traceinsight.compare.explain first (as the CLI does) never hides the function."""
    code = (
        "import traceinsight.compare.explain as e, traceinsight as ti; "
        "assert ti.compare.explain is e; "
        f"c = ti.compare({str(HEALTHY)!r}, {str(HEALTHY)!r}); "
        "assert c.data['total_delta_ns'] == 0, c.data['total_delta_ns']"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


def test_control_characters_in_names_stay_out_of_the_compare_summary(tmp_path: Path) -> None:
    evs = events(2)
    for e in evs:
        if e.get("cat") == "kernel":
            e["name"] = _NASTY
    a = write(tmp_path / "a.json", trace(evs))
    b = write(tmp_path / "b.json", trace(events(3)))
    c = ti.compare(a, b)
    h = c._repr_html_()
    assert not CONTROL.search(h) and "<script" not in h.lower()
    assert not CONTROL.search(c.before._repr_html_())


@requires_corpus
def test_nsight_and_memory_inputs_open_the_same_way(tmp_path: Path) -> None:
    """An Nsight Systems export and a memory-timeline export: the same tables, the same
    diagnosis as the CLI."""
    nsys = TRACES / "nsys" / "GindaChen+nsys-ai" / "synthetic" / "healthy_1pct.sqlite"
    t = ti.open(nsys)
    assert len(t.kernels) == t.row_counts["gpu_activities"] == 400
    assert len(t.runtime) == t.row_counts["runtime_calls"] == 399
    assert t.ops.empty and t.steps.empty  # Nsight records no CPU ops; no NVTX steps here
    out = tmp_path / "n.json"
    invoke(["diagnose", nsys, "--json", out])
    assert t.diagnose().headline == json.loads(out.read_text())["headline"]
    mem = ti.open(TRACES / "memory" / "hta" / "memory_analysis" / "memory_timeline.raw.gz")
    assert len(mem.memory_timeline) == mem.row_counts["memory_categories"] == 16845
    assert mem.kernels.empty
    d = mem.diagnose()
    assert d.headline.startswith("Memory timeline: memory peaks at 2.87 GiB")
    assert "<script" not in d._repr_html_().lower()


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_readme_example_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's "From Python" example, as written, from the repository root."""
    readme = (REPO / "README.md").read_text()
    section = readme.split("## From Python", 1)[1].split("\n## ", 1)[0]
    blocks = _python_blocks(section)
    assert blocks, "no python example in the README's From Python section"
    monkeypatch.chdir(REPO)
    ns: dict = {}
    for block in blocks:
        exec(compile(block, "README.md", "exec"), ns)
    assert isinstance(ns["trace"], Trace) and isinstance(ns["d"], Diagnosis)
    assert len(ns["top"]) == 3 and ns["top"].iloc[0] == ns["top"].max()
    assert ns["c"].data["total_delta_ns"] < 0  # the launch-bound sample runs shorter steps


def test_tutorial_notebook_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/tutorial.ipynb: every code cell, in order, in one namespace; outputs kept empty."""
    import nbformat

    nb = nbformat.read(REPO / "docs" / "tutorial.ipynb", as_version=4)
    nbformat.validate(nb)
    cells = [c for c in nb.cells if c.cell_type == "code"]
    assert len(cells) >= 5
    for c in cells:
        assert not c.get("outputs") and c.get("execution_count") is None
    monkeypatch.chdir(REPO / "docs")
    ns: dict = {}
    for i, c in enumerate(cells):
        exec(compile(c.source, f"tutorial.ipynb cell {i}", "exec"), ns)
    assert isinstance(ns["trace"], Trace)
    assert isinstance(ns["d"], Diagnosis) and isinstance(ns["c"], Compare)
    assert len(ns["steps"]) == 4 and int(ns["by_kernel"]["count"].sum()) == 700
    assert sorted(ns["comm"]["rank"].unique().tolist()) == [0, 1, 2, 3]
