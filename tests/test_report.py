"""The HTML report and the Markdown ticket body (fast: no browser; see test_browser.py).

A synthetic trace with known hostile content (a kernel named ``</script><b>x</b>``, an op named
``<img src=x onerror=alert(1)>``, a token in the trace's free-form metadata) goes through
ingest -> diagnose -> render; the report must hold every section, load nothing from the
network, escape every name and never show the token.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import os
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from conftest import corpus_id, corpus_kineto_files, requires_corpus

from tracegen.synth import KinetoTraceBuilder
from traceinsight.diagnose import diagnose
from traceinsight.engine.evaluate import format_value
from traceinsight.ingest import ingest
from traceinsight.render.html import build_view, render_html
from traceinsight.render.markdown import render_markdown
from traceinsight.render.mdtext import esc
from traceinsight.render.terminal import render_table
from traceinsight.result import DiagnosisResult
from traceinsight.util import fmt
from traceinsight.util.redact import REDACTED

EVIL_KERNEL = "</script><b>x</b>"
EVIL_OP = "<img src=x onerror=alert(1)>"
TOKEN = "hf_FAKEFAKEFAKEFAKEFAKE1234"
SECTIONS = (
    "verdict",
    "findings",
    "steps",
    "breakdown",
    "timeline",
    "layers",
    "ops",
    "kernels",
    "roofline",
    "memory",
    "diagnostics",
    "metadata",
)
#: the charts drawn for the synthetic trace (svg class -> section)
CHARTS = (
    "steps-chart",
    "breakdown-chart",
    "class-chart",
    "timeline-chart",
    "roofline-chart",
    "memory-chart",
)
MAX_REPORT_BYTES = 5 * 1024 * 1024
MiB = 1 << 20


# --- the synthetic run ------------------------------------------------------------------------


def build_trace(path: Path) -> Path:
    """Five ProfilerSteps (step 12 stalls on the host: a slow step), nn.Module frames, shaped
    ops (roofline), a compute stream and an NCCL stream, a memcpy, [memory] events; plus the
    hostile names and a token in free-form top-level metadata."""
    b = KinetoTraceBuilder(metadata={"metadata": {"env": {"HF_TOKEN": TOKEN}}, "HF_TOKEN": TOKEN})
    mm_dims = [[2048, 2048], [2048, 2048]]
    allocated = 4 << 30
    t = 0
    for step in range(10, 15):
        stall = 1_200_000 if step == 12 else 0
        dur = 1_400_000 + stall
        with b.step(step, t, dur):
            s = t + stall
            with b.module("Model", s + 10_000, 1_300_000, instance=0):
                with b.module("Linear", s + 20_000, 300_000, instance=0):
                    b.op(
                        "aten::mm",
                        s + 30_000,
                        120_000,
                        input_dims=mm_dims,
                        input_types=["float", "float"],
                    )
                    b.launch(
                        "sm90_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x32",
                        cpu_start=s + 40_000,
                        gpu_start=s + 60_000,
                        gpu_dur=420_000,
                    )
                    b.memory(s + 45_000, 256 * MiB, allocated + 256 * MiB, 6 << 30)
                with b.module("Evil", s + 330_000, 400_000, instance=0):
                    b.op(
                        EVIL_OP,
                        s + 340_000,
                        60_000,
                        input_dims=[[4096, 1024]],
                        input_types=["float"],
                    )
                    b.launch(
                        EVIL_KERNEL, cpu_start=s + 350_000, gpu_start=s + 500_000, gpu_dur=60_000
                    )
                    b.op(
                        "aten::add",
                        s + 420_000,
                        60_000,
                        input_dims=[[4096, 1024], [4096, 1024]],
                        input_types=["float", "float"],
                    )
                    b.launch(
                        "void at::native::vectorized_elementwise_kernel<4, "
                        "at::native::CUDAFunctor_add<float>>(int, float*)",
                        cpu_start=s + 430_000,
                        gpu_start=s + 570_000,
                        gpu_dur=90_000,
                    )
                    b.memory(s + 700_000, -256 * MiB, allocated, 6 << 30)
                b.op("record_param_comms", s + 740_000, 40_000)
                b.launch(
                    "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long)",
                    cpu_start=s + 750_000,
                    gpu_start=s + 780_000,
                    gpu_dur=300_000,
                    stream=20,
                )
                b.op("aten::copy_", s + 800_000, 40_000)
                b.launch(
                    "Memcpy HtoD (Pinned -> Device)",
                    cpu_start=s + 810_000,
                    gpu_start=s + 1_100_000,
                    gpu_dur=50_000,
                    kind="memcpy",
                    bytes=32 * MiB,
                )
        t += dur + 20_000
    return b.write(path)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("report")
    trace = build_trace(tmp / "evil.pt.trace.json.gz")
    store = ingest([trace], tmp / "s.tistore", quiet=True)
    cmd = [
        "traceinsight",
        "report",
        str(trace),
        "--set",
        "launch-bound.min_idle_launch_pct=20",
        f"--hf-token={TOKEN}",
        TOKEN,
    ]
    result = diagnose(store, command=cmd)
    html = render_html(result)
    md = render_markdown(result)
    return {"result": result, "html": html, "md": md, "trace": trace}


class Tags(HTMLParser):
    """Every start tag with its attributes, and the text of each <script>."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: list[tuple[dict[str, str | None], str]] = []
        self._in_script: dict[str, str | None] | None = None
        self._buf: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        if tag == "script":
            self._in_script, self._buf = a, []

    def handle_data(self, data):
        if self._in_script is not None:
            self._buf.append(data)

    def handle_endtag(self, tag):
        if tag == "script" and self._in_script is not None:
            self.scripts.append((self._in_script, "".join(self._buf)))
            self._in_script = None


def parse(html: str) -> Tags:
    p = Tags()
    p.feed(html)
    p.close()
    return p


def strip_code_spans(md: str) -> str:
    return re.sub(r"(`+)(.+?)\1", "", md)


# --- HTML -------------------------------------------------------------------------------------


def test_every_section_is_present(run: dict) -> None:
    html = run["html"]
    for sid in SECTIONS:
        assert html.count(f'id="{sid}"') == 1, sid
    assert html.startswith("<!DOCTYPE html>")
    for chart in CHARTS:
        assert f'class="chart {chart}"' in html, chart


def test_charts_have_drawn_elements(run: dict) -> None:
    html = run["html"]
    for chart in CHARTS:
        m = re.search(rf'<svg class="chart {chart}".*?</svg>', html, re.S)
        assert m, chart
        assert len(re.findall(r"<(rect|circle|path)\b", m.group(0))) > 0, chart
    # the slow step (12: a 1.2 ms host stall) is marked, the others are not
    view = build_view(run["result"])
    assert [s["step"] for s in view["steps"]["slow"]] == ["12"]


def assert_self_contained(html: str) -> None:
    """Nothing loads from the network, no inline event handlers, a strict CSP."""
    tags = parse(html).tags
    for tag, attrs in tags:
        for k in ("src", "href", "action", "formaction", "poster", "data", "xlink:href"):
            v = (attrs.get(k) or "").strip().lower()
            assert not v.startswith(("http:", "https:", "//", "ftp:")), (tag, k, v)
            if k == "href" and k in attrs:
                assert v.startswith("#"), (tag, v)  # only in-page anchors
        assert tag not in ("link", "iframe", "object", "embed", "img", "base", "form"), tag
        assert not [k for k in attrs if k.startswith("on")], (tag, attrs)
    assert "http://" not in html and "https://" not in html
    assert "@import" not in html and "url(" not in html and "javascript:" not in html.lower()
    csp = next(a["content"] for t, a in tags if t == "meta" and a.get("http-equiv"))
    assert "default-src 'none'" in csp


def test_nothing_is_loaded_from_the_network(run: dict) -> None:
    assert_self_contained(run["html"])


def test_scripts_are_ours_and_the_data_is_embedded_once(run: dict) -> None:
    html = run["html"]
    p = parse(html)
    assert len(p.scripts) == 2
    (data_attrs, data_text), (js_attrs, js_text) = p.scripts
    assert data_attrs == {"type": "application/json", "id": "ti-data"}
    assert html.count('id="ti-data"') == 1
    payload = json.loads(data_text)
    assert payload["markdown"] == run["md"]
    assert js_attrs == {}
    # the CSP allows exactly this inline script, by hash
    digest = base64.b64encode(hashlib.sha256(js_text.encode()).digest()).decode()
    csp = next(a["content"] for t, a in p.tags if t == "meta" and a.get("http-equiv"))
    assert f"'sha256-{digest}'" in csp
    # no inline event handlers anywhere, no javascript: URLs
    for tag, attrs in p.tags:
        assert not [k for k in attrs if k.startswith("on")], (tag, attrs)
    assert "javascript:" not in html.lower()


def test_kernel_and_op_names_are_escaped(run: dict) -> None:
    html = run["html"]
    assert EVIL_KERNEL not in html
    assert EVIL_OP not in html
    assert "&lt;/script&gt;&lt;b&gt;x&lt;/b&gt;" in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html
    # and in the JSON payload (tojson escapes <, >, &)
    assert html.count("</script>") == 2
    tags = [t for t, _ in parse(html).tags]
    assert "img" not in tags
    # the names did reach the page (as text): kernel and op tables
    view = build_view(run["result"])
    kernels = [c[0]["t"] for c in view["kernels"]["table"]["rows"]]
    assert EVIL_KERNEL in kernels
    ops = [c[0]["t"] for c in view["ops"]["table"]["rows"]]
    assert EVIL_OP in ops


def test_the_token_in_trace_metadata_appears_nowhere(run: dict) -> None:
    raw = run["trace"].read_bytes()
    import gzip

    assert TOKEN.encode() in gzip.decompress(raw)  # it really is in the trace
    assert TOKEN not in run["html"]
    assert TOKEN not in run["md"]
    assert "FAKEFAKE" not in run["html"] + run["md"]
    assert "HF_TOKEN" not in run["html"]


def test_command_line_and_tool_version_are_shown_with_secrets_redacted(run: dict) -> None:
    html, r = run["html"], run["result"]
    assert r.tool["version"] in html
    assert "traceinsight report" in html
    assert "launch-bound.min_idle_launch_pct=20" in html
    assert f"--hf-token={REDACTED}" in html


def test_every_finding_is_shown_by_impact(run: dict) -> None:
    html, r = run["html"], run["result"]
    assert r.findings, "the synthetic run should trigger at least one rule"
    for f in r.findings:
        assert f'data-rule="{f.rule}"' in html
        assert f'<code class="rule">{f.rule}</code>' in html
    order = re.findall(r'data-rule="([^"]+)"', html)
    expected = [f.rule for f in sorted(r.findings, key=lambda f: -(f.impact_pct or 0.0))]
    assert order == expected
    assert r.headline.replace("'", "&#39;") in html or r.headline in html


def test_rules_not_evaluated_say_what_would_enable_them(run: dict) -> None:
    html, r = run["html"], run["result"]
    for x in r.rules:
        if x.get("status") == "not-evaluated":
            assert f"<code>{x['rule']}</code>" in html


def test_sections_without_data_say_so_in_one_line(run: dict) -> None:
    r = dataclasses.replace(
        run["result"],
        memory=None,
        roofline=None,
        timeline=None,
        rollups={**run["result"].rollups, "has_modules": False},
    )
    html = render_html(r)
    for sid in SECTIONS:
        assert f'id="{sid}"' in html
    assert "No [memory] events: record with profile_memory=True" in html
    assert "No nn.Module hierarchy" in html
    empties = re.findall(r'<p class="empty">([^<]*)</p>', html)
    assert len(empties) >= 3 and all("\n" not in e for e in empties)


#: the sections of a CPU-only run's report: the host view replaces the GPU sections
CPU_SECTIONS = ("verdict", "findings", "host", "memory", "diagnostics", "metadata")
GPU_ONLY_SECTIONS = ("steps", "breakdown", "timeline", "layers", "ops", "kernels", "roofline")


def test_cpu_only_trace_renders_the_host_view(tmp_path: Path) -> None:
    b = KinetoTraceBuilder(device=None)
    for i, step in enumerate(range(3)):
        with b.step(step, i * 1_000_000, 900_000):
            b.op("aten::mm", i * 1_000_000 + 10_000, 500_000)
    store = ingest([b.write(tmp_path / "cpu.json")], tmp_path / "s.tistore", quiet=True)
    r = diagnose(store)
    assert r.host and r.host["headline"].startswith("CPU-only run: a step takes")
    html = render_html(r)
    for sid in CPU_SECTIONS:
        assert f'id="{sid}"' in html
    for sid in GPU_ONLY_SECTIONS:  # no "GPU idle 100%" bars for a run without a GPU
        assert f'id="{sid}"' not in html
    assert "No GPU activity" in html and 'id="tbl-host-ops"' in html and "aten::mm" in html
    md = render_markdown(r)
    assert esc(r.headline) in md


def test_an_empty_or_old_result_still_renders() -> None:
    r = DiagnosisResult.from_dict({"schema": "traceinsight.diagnosis", "version": 1})
    html = render_html(r)
    for sid in SECTIONS:
        assert f'id="{sid}"' in html
    assert "No findings" in render_markdown(r)


def test_huge_inputs_stay_small_and_fast(run: dict) -> None:
    """A result with 200k timeline items, 5k steps, 64 ranks and 2k layers still renders a
    bounded page quickly (the drawing is capped and merged, not the tables)."""
    r0 = run["result"]
    tl = dict(r0.timeline)
    items = [
        [i * 500, 300, ("gemm", "elementwise", "communication")[i % 3], i % 50, 1]
        for i in range(200_000)
    ]
    tl.update(
        span_ns=100_000_000,
        names=[f"k{i}" for i in range(50)],
        lanes=[{"device": 0, "stream": s, "items": items[s::40]} for s in range(40)],
    )
    step = dict(r0.breakdown["steps"][0])
    steps = [
        {**step, "rank": rk, "step": k, "wall_ns": step["wall_ns"] + (k % 7) * 1000}
        for k in range(1250)
        for rk in range(4)
    ]
    ranks = [{**r0.breakdown["ranks"][0], "rank": k} for k in range(64)]
    layer = dict(r0.rollups["layers"][0])
    layers = [{**layer, "module": f"M_0/Block_{k}", "depth": 1} for k in range(2000)]
    r = dataclasses.replace(
        r0,
        timeline=tl,
        breakdown={**r0.breakdown, "steps": steps, "ranks": ranks},
        rollups={**r0.rollups, "layers": layers, "has_modules": True},
    )
    html = render_html(r)
    if os.environ.get("TI_KEEP_HUGE_REPORT"):  # to look at it
        Path(os.environ["TI_KEEP_HUGE_REPORT"]).write_text(html)
    assert len(html.encode()) < MAX_REPORT_BYTES
    tl_svg = re.search(r'<svg class="chart timeline-chart".*?</svg>', html, re.S).group(0)
    assert tl_svg.count("<rect") < 12_000
    st_svg = re.search(r'<svg class="chart steps-chart".*?</svg>', html, re.S).group(0)
    assert st_svg.count("<rect") < 1_500


# --- Markdown ---------------------------------------------------------------------------------


def test_markdown_is_a_compact_ticket_body(run: dict) -> None:
    md, r = run["md"], run["result"]
    assert esc(r.headline) in md
    for f in r.findings:
        assert f"`{f.rule}`" in md
        assert esc(f.title) in md
        if f.recommendations:
            assert esc(f.recommendations[0]) in md
    assert "| rank |" in md and "peak memory" in md
    assert "Top layers" in md
    assert len(md.splitlines()) < 80


def test_markdown_has_no_html_and_no_links(run: dict) -> None:
    md = run["md"]
    prose = strip_code_spans(md)
    assert not re.search(r"<\s*/?\s*[A-Za-z!]", prose), prose
    assert "<" not in prose.replace("\\<", "")
    assert not re.search(r"\]\(|https?://|www\.", md)
    # hostile names only ever appear inside code spans, where Markdown shows them as text
    for name in (EVIL_OP,):
        for line in md.splitlines():
            if name in line:
                assert f"`{name}`" in line


def test_one_formatter_for_cells_and_metric_values() -> None:
    """HTML cells, terminal evidence tables and the engine's values all read through fmt."""
    assert fmt.format_cell(-1500, "dns") == "−1.50 µs"
    assert fmt.format_cell(-2.5, "dpct") == "−2.5%"
    assert fmt.format_cell(float("nan"), "ns") == "–"
    assert fmt.format_cell("[[8, 512],\n [512, 512]]", "dims") == "[8, 512]×[512, 512]"
    ev = {
        "title": "t",
        "columns": [{"name": "op", "format": "op"}, {"name": "delta", "format": "dns"}],
        "rows": [["aten::mm", -1500]],
    }
    assert "−1.50 µs" in render_table(ev, width=100)
    assert format_value("gpu_idle_pct", 12.345) == fmt.format_cell(12.345, "pct") == "12.3%"
    assert format_value("step_time_p50_ns", 2.5e6) == fmt.format_cell(2.5e6, "ns") == "2.50 ms"


def test_markdown_escapes_prose() -> None:
    assert esc("a <b>x</b> *y* [z] | _q_") == r"a \<b\>x\</b\> \*y\* \[z\] \| \_q\_"
    assert esc("expandable_segments:True") == "expandable_segments:True"


# --- every trace of the shared corpus ---------------------------------------------------------

FILES = corpus_kineto_files()
SIZES: dict[str, int] = {}


@pytest.fixture(scope="module")
def size_report(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """Collects each report's size; at the end prints the list (past output capture) and
    writes it to report_sizes.json in pytest's base temp folder."""
    yield SIZES
    if not SIZES:
        return
    lines = ["", "HTML report size per shared Kineto trace:"]
    lines += [f"  {n / 1024:9.1f} KiB  {k}" for k, n in sorted(SIZES.items())]
    lines.append(f"  max {max(SIZES.values()) / 1024:.1f} KiB over {len(SIZES)} traces")
    out = tmp_path_factory.getbasetemp() / "report_sizes.json"
    out.write_text(json.dumps(dict(sorted(SIZES.items())), indent=1))
    lines.append(f"  (also in {out})")
    tr = request.config.pluginmanager.getplugin("terminalreporter")
    capman = request.config.pluginmanager.getplugin("capturemanager")
    if tr is None or capman is None:  # pragma: no cover
        print("\n".join(lines))
        return
    with capman.global_and_fixture_disabled():
        for line in lines:
            tr.write_line(line)


@requires_corpus
@pytest.mark.corpus
@pytest.mark.parametrize("path", FILES, ids=[corpus_id(p) for p in FILES])
def test_corpus_trace_report_renders_under_5mb(
    path: Path, size_report: dict, record_property
) -> None:
    store = ingest([path], quiet=True)
    result = diagnose(store)
    # the JSON round trip is what `report` reads
    result = DiagnosisResult.from_dict(json.loads(result.to_json()))
    html = render_html(result)
    md = render_markdown(result)
    n = len(html.encode("utf-8"))
    size_report[corpus_id(path)] = n
    record_property("report_bytes", n)
    print(f"report {corpus_id(path)}: {n} bytes")
    assert n < MAX_REPORT_BYTES
    for sid in CPU_SECTIONS if result.host else SECTIONS:
        assert f'id="{sid}"' in html, sid
    for tag, attrs in parse(html).tags:
        for k in ("src", "href"):
            v = (attrs.get(k) or "").lower()
            assert not v.startswith(("http:", "https:", "//")), (tag, v)
    for f in result.findings:
        assert f'data-rule="{f.rule}"' in html
    # no markup: a "<" in prose is escaped ("\<", a kernel's template arguments)
    assert not re.search(r"(?<!\\)<\s*/?\s*[A-Za-z!]", strip_code_spans(md))
