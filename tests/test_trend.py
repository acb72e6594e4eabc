"""``traceinsight trend``: the key figures of saved results across runs, the configuration
changes marked, the HTML charts and the step-time regression gate."""

from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path

import pytest
from conftest import REPO, SAMPLES, invoke
from markupsafe import escape

from tracegen.synth import KinetoTraceBuilder
from traceinsight.compare.trend import build_trend, regression_gate, unique_labels
from traceinsight.render.html.environment import csp
from traceinsight.result import DiagnosisResult

US = 1_000
STEPS = 4


def steps_trace(
    tmp: Path, name: str, kernels_us: list[int], *, device: str = "H100", dtype: str = "bf16"
) -> Path:
    """STEPS steps of back-to-back GEMM kernels (``kernels_us`` each) on one rank. The host runs
    ahead, so each GPU-aware step is exactly the kernels' time: step p50 = sum(kernels_us) µs.
    The aten::mm shapes are recorded with ``dtype`` (the matrix dtype the result names)."""
    types = {"bf16": "c10::BFloat16", "fp32": "float"}[dtype]
    b = KinetoTraceBuilder(rank=0, device=device, vendor="nvidia")
    gpu_t, host_t = 6 * US, 0
    for step in range(STEPS):
        host_len = 10 * US * (len(kernels_us) + 2)
        with b.step(step, host_t, host_len):
            t = host_t + 2 * US
            for i, d in enumerate(kernels_us):
                dims = [[1024, 1024], [1024, 1024]]
                with b.cpu_op("aten::mm", t + US, 6 * US, input_dims=dims, input_types=[types] * 2):
                    b.launch(
                        f"gemm_{i}",
                        cpu_start=t + 2 * US,
                        cpu_dur=2 * US,
                        gpu_start=gpu_t,
                        gpu_dur=d * US,
                    )
                gpu_t += d * US
                t += 10 * US
        host_t += host_len
    return b.write(tmp / f"{name}.json")


def saved(tmp: Path, name: str, kernels_us: list[int], **kw: str) -> Path:
    """The ``diagnose --json`` result of a :func:`steps_trace`."""
    trace = steps_trace(tmp, name, kernels_us, **kw)
    out = tmp / f"{name}.result.json"
    invoke(["diagnose", trace, "--json", out])
    return out


@pytest.fixture
def three_runs(tmp_path: Path) -> list[Path]:
    """Two H100 runs of 1.0 ms steps, then an A100 run of 1.3 ms steps."""
    return [
        saved(tmp_path, "mon", [400, 600]),
        saved(tmp_path, "tue", [400, 600]),
        saved(tmp_path, "wed", [500, 800], device="A100"),
    ]


def test_table_values_and_the_marked_change(three_runs: list[Path], tmp_path: Path) -> None:
    out = tmp_path / "trend.json"
    res = invoke(["trend", *three_runs, "--json", out])
    t = json.loads(out.read_text())
    assert t["schema"] == "traceinsight.trend" and t["order"] == "arguments"
    assert [r["values"]["step_time"] for r in t["runs"]] == [1_000_000, 1_000_000, 1_300_000]
    assert [bool(r["changes"]) for r in t["runs"]] == [False, False, True]
    (change,) = [c for c in t["runs"][2]["changes"] if c.startswith("device:")]
    assert "H100" in change.split("→")[0] and "A100" in change.split("→")[1]
    assert all(r["values"]["exposed_comm"] == 0.0 for r in t["runs"])
    # the terminal table: the step times, the mark on the third row only, within 100 columns
    lines = res.stdout.splitlines()
    rows = [ln for ln in lines if re.match(r"^[123]  ", ln)]
    assert len(rows) == 3
    assert "1.00 ms" in rows[0] and "1.30 ms" in rows[2]
    assert [r.rstrip().endswith("*") for r in rows] == [False, False, True]
    assert "* configuration changed from the run before:" in res.stdout
    assert any(ln.strip().startswith("device:") and "A100" in ln for ln in lines)
    assert max(len(ln) for ln in lines) <= 100


def test_the_regression_gate_exit_codes(three_runs: list[Path], tmp_path: Path) -> None:
    # 1.3 ms against the median 1.0 ms of the runs before: +30%
    invoke(["trend", *three_runs, "--fail-if-regressed", "50"], stderr_contains="+30.0%")
    invoke(
        ["trend", *three_runs, "--fail-if-regressed", "10"],
        exit_code=1,
        stderr_contains="regressed: step time 1.30 ms vs the median 1.00 ms of 2 earlier runs",
    )
    # faster is never a failure
    invoke(["trend", three_runs[2], three_runs[0], "--fail-if-regressed", "0"])
    # no baseline: one result
    invoke(
        ["trend", three_runs[0], "--fail-if-regressed", "5"],
        exit_code=2,
        stderr_contains="no baseline",
    )
    # the last run has no step time (a result without step statistics)
    d = json.loads(three_runs[2].read_text())
    for r in d["summary"]["ranks"]:
        r["step_time_ns"] = r["step_time_representative_ns"] = None
    d["metrics"]["values"]["step_time_p50_ns"] = None
    nostep = tmp_path / "nostep.json"
    nostep.write_text(json.dumps(d))
    res = invoke(
        ["trend", three_runs[0], nostep, "--fail-if-regressed", "5"],
        exit_code=2,
        stderr_contains="no step time in the last run",
    )
    assert len(res.stderr.strip().splitlines()) == 1
    assert "–" in res.stdout  # the missing figure reads as a dash, not 0


def test_gate_uses_the_median_of_the_earlier_runs() -> None:
    runs = [{"label": str(i), "values": {"step_time": v}} for i, v in enumerate([10, 30, 11, 12])]
    code, _, facts = regression_gate({"runs": runs}, 5)
    assert facts["baseline_ns"] == 11 and facts["baseline_runs"] == 3
    assert code == 1 and round(facts["change_pct"], 3) == round(100 / 11, 3)
    runs[-1]["values"]["step_time"] = 11.5
    assert regression_gate({"runs": runs}, 5)[0] == 0


def test_html_has_one_chart_per_figure_and_nothing_from_outside(
    three_runs: list[Path], tmp_path: Path
) -> None:
    html = tmp_path / "trend.html"
    invoke(["trend", *three_runs, "--html", html])
    page = html.read_text()
    assert page.count('<figure class="trend-chart"') == 5
    for name in ("step_time", "mfu", "peak_memory", "exposed_comm", "gpu_idle"):
        assert f'id="chart-{name}"' in page
    assert page.count('class="trend-change"') == 5  # the one change, marked on every chart
    # the reports' CSP (no network, only the report's own script), and no script from outside
    assert f'http-equiv="Content-Security-Policy" content="{escape(csp())}"' in page
    assert "default-src 'none'" in csp()
    assert page.count("<script") == 2  # the embedded JSON and the report's own inline script
    assert not re.search(r"<script[^>]*\bsrc=", page)
    assert not re.search(r"(href|src)=\"(https?:)?//", page)
    # --metric picks the figures (a key figure or any metric by name)
    invoke(["trend", *three_runs, "--html", html, "--metric", "step_time", "-m", "x"], exit_code=2)
    invoke(
        [
            "trend",
            *three_runs,
            "--html",
            html,
            "--metric",
            "step_time",
            "--metric",
            "kernels_per_step",
        ]
    )
    page = html.read_text()
    assert page.count('<figure class="trend-chart"') == 2
    assert 'id="chart-kernels_per_step"' in page


def test_unknown_metric_is_one_line_exit_2(three_runs: list[Path]) -> None:
    res = invoke(["trend", *three_runs, "--metric", "no_such_metric"], exit_code=2)
    assert "no figure or metric named 'no_such_metric'" in res.stderr


def test_bundled_samples_dtype_and_device_changes(tmp_path: Path) -> None:
    names = ["synthetic_h100_healthy", "synthetic_h100_fp32_gemms", "synthetic_mi300x"]
    results = []
    for n in names:
        out = tmp_path / f"{n}.result.json"
        invoke(["diagnose", SAMPLES / f"{n}.json.gz", "--json", out])
        results.append(DiagnosisResult.load(str(out)))
    t = build_trend(results, names)
    runs = t["runs"]
    for r, res in zip(runs, results, strict=True):
        assert r["values"]["mfu"] == res.metrics["values"]["mfu_pct"]
        rep = res.summary["ranks"][0]["step_time_representative_ns"]
        assert r["values"]["step_time"] == rep["p50"]
        assert r["values"]["peak_memory"] == res.summary["ranks"][0]["peak_allocated_bytes"]
    assert "dtypes: bf16 → fp32" in runs[1]["changes"]
    assert not any(c.startswith("device:") for c in runs[1]["changes"])
    assert any(c.startswith("device:") and "MI300X" in c for c in runs[2]["changes"])
    assert "dtypes: fp32 → bf16" in runs[2]["changes"]


def test_same_file_name_in_two_folders_gets_two_labels() -> None:
    assert unique_labels(["a/run/r.json", "b/run/r.json", "c/x.json"]) == [
        "a/run/r.json",
        "b/run/r.json",
        "x.json",
    ]
    assert unique_labels(["r.json", "r.json"]) == ["r.json", "r.json #2"]


def test_readme_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = (REPO / "README.md").read_text()
    block = text.split("<!-- trend-example:", 1)[1].split("```", 2)[1]
    commands = [shlex.split(ln)[1:] for ln in block.splitlines() if ln.startswith("traceinsight")]
    assert len(commands) == 4
    (tmp_path / "sample_traces").symlink_to(SAMPLES)
    monkeypatch.chdir(tmp_path)
    for args in commands[:-1]:
        invoke(args)
    assert (tmp_path / "trend.html").read_text().count('<figure class="trend-chart"') == 5
    invoke(commands[-1], exit_code=1, stderr_contains="regressed: step time 138 ms")


def test_many_figures_split_into_tables_that_fit(three_runs: list[Path]) -> None:
    names = ["step_time", "mfu", "peak_memory", "exposed_comm", "gpu_idle", "kernels_per_step"]
    names += ["gemm_time_pct", "median_kernel_ns", "small_kernel_pct"]
    res = invoke(["trend", *three_runs, *(a for n in names for a in ("-m", n))])
    lines = res.stdout.splitlines()
    assert max(len(ln) for ln in lines) <= 100
    headers = [ln for ln in lines if ln.startswith("#  run")]
    assert len(headers) >= 2  # the nine figures do not fit one table
    assert sum(len(re.split(r"\s{2,}", h.strip())) - 3 for h in headers) == len(
        names
    )  # each figure once
    assert "1.30 ms" in res.stdout and "100.0%" in res.stdout  # gemm_time_pct


def test_trace_metadata_is_filtered(three_runs: list[Path], tmp_path: Path) -> None:
    d = json.loads(three_runs[2].read_text())
    d["trace"]["device"] = "A100\x1b[2J\u202eevil<script>"
    d["trace"]["versions"] = {"driver\x07": "535\r\n.1"}
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(d))
    html = tmp_path / "t.html"
    res = invoke(["trend", three_runs[0], bad, "--html", html])
    for text in (res.stdout, html.read_text()):
        assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f\u202e]", text)
    assert "<script>" not in html.read_text().split("<script", 1)[0]
    assert "evil&lt;script&gt;" in html.read_text()


@pytest.mark.browser
def test_page_in_chromium_draws_every_chart_and_fits(
    three_runs: list[Path], tmp_path: Path
) -> None:
    """Headless Chromium: no console error (a blocked inline script would log a CSP error), no
    request leaves the file, each chart has one point per run, nothing wider than its box."""
    pw = pytest.importorskip("playwright.sync_api")
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(chromium).is_file():
        pytest.skip("no Chromium found (apt-get install chromium)")
    html = tmp_path / "trend.html"
    invoke(["trend", *three_runs, "--html", html])
    with pw.sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=chromium, args=["--no-sandbox", "--disable-gpu"], headless=True
        )
        page = b.new_page(viewport={"width": 1000, "height": 900})
        console: list[tuple[str, str]] = []
        requests: list[str] = []
        page.on("console", lambda m: console.append((m.type, m.text)))
        page.on("request", lambda r: requests.append(r.url))
        page.goto(html.as_uri(), wait_until="load", timeout=15_000)
        points = page.eval_on_selector_all(
            "figure.trend-chart", "els => els.map(e => e.querySelectorAll('circle').length)"
        )
        overflow = page.evaluate(
            """() => [...document.querySelectorAll('figure.trend-chart, table.trend-runs')]
                .filter(e => e.getBoundingClientRect().right
                             > e.closest('section').getBoundingClientRect().right + 0.5)
                .map(e => e.id || e.className)"""
        )
        b.close()
    assert [m for m in console if m[0] in ("error", "warning")] == []
    assert [u for u in requests if not u.startswith("file:")] == []
    # the synthetic traces record no memory events: that chart says so and draws no point
    assert points == [3, 3, 0, 3, 3]
    assert "not recorded in these runs" in html.read_text().split('id="chart-peak_memory"')[1]
    assert overflow == []
