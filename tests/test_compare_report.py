"""The compare report: HTML (``render_compare_html``) and Markdown (``render_compare_markdown``).

Two synthetic runs with a known change (back-to-back kernels per layer, as in test_compare.py;
one layer's kernel twice as slow, a hostile kernel name and a hostile module name) go through
ingest -> diagnose -> compare -> render. The page must hold every section, draw a waterfall with
one bar per contributor shown plus start / end / others that add up to the change, load nothing
from the network and escape every name; the Markdown is a plain ticket body.

Run as a script to render and screenshot a real pair::

    python tests/test_compare_report.py BEFORE AFTER docs/compare-screenshot.png [HEIGHT]
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from markupsafe import escape

for _p in (Path(__file__).resolve().parent, Path(__file__).resolve().parent.parent):
    if str(_p) not in sys.path:  # also when run as a script
        sys.path.insert(0, str(_p))

from conftest import invoke  # noqa: E402
from test_compare import US, layered, result  # noqa: E402
from test_report import assert_self_contained, parse, strip_code_spans  # noqa: E402

from traceinsight.compare.explain import compare  # noqa: E402
from traceinsight.diagnose import diagnose  # noqa: E402
from traceinsight.render.compare_markdown import render_compare_markdown  # noqa: E402
from traceinsight.render.html import (  # noqa: E402
    WATERFALL_TOP,
    build_compare_view,
    render_compare_html,
    waterfall_rows,
)
from traceinsight.render.mdtext import esc  # noqa: E402
from traceinsight.render.terminal import render_compare  # noqa: E402

EVIL_KERNEL = "</script><b>x</b>"
EVIL_LAYER = "<img src=x onerror=alert(1)>"
SECTIONS = (
    "verdict",
    "step-time",
    "breakdown",
    "waterfall",
    "contributors",
    "layers",
    "ops",
    "classes",
    "kernels",
    "findings",
    "diagnostics",
    "metadata",
)
CHARTS = ("cmp-breakdown-chart", "waterfall-chart")


BASE = {
    "Embed": 100 * US,
    "Block1": 400 * US,
    "Block2": 300 * US,
    EVIL_LAYER: 50 * US,
    "Head": 200 * US,
}
#: after: Block2's kernel twice as slow, the evil layer 30 µs slower, Head's kernel renamed
SLOW = dict(BASE, Block2=600 * US, **{EVIL_LAYER: 80 * US})


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("cmp")
    a = layered(tmp, "before", BASE)
    b = layered(tmp, "after", SLOW, kernels={"Head": EVIL_KERNEL})
    c = compare(result(a, tmp), result(b, tmp), labels=(a.name, b.name))
    return {
        "c": c,
        "html": render_compare_html(c),
        "md": render_compare_markdown(c),
        "a": a,
        "b": b,
        "tmp": tmp,
    }


def svg_of(html: str, chart: str) -> str:
    m = re.search(rf'<svg class="chart {chart}".*?</svg>', html, re.S)
    assert m, chart
    return m.group(0)


# --- the known change -------------------------------------------------------------------------


def test_the_synthetic_change_is_what_we_built(run: dict) -> None:
    c = run["c"]
    assert c["explained_by"] == "layer"
    assert c["total_delta_ns"] == 330 * US
    changed = {x["name"]: x["delta_ns"] for x in c["contributors"] if x["delta_ns"]}
    assert changed == {"Model_0/Block2_0": 300 * US, f"Model_0/{EVIL_LAYER}_0": 30 * US}
    assert EVIL_KERNEL in c["new_kernels"] and "gemm_Head" in c["gone_kernels"]


# --- HTML -------------------------------------------------------------------------------------


def test_every_section_is_present(run: dict) -> None:
    html = run["html"]
    assert html.startswith("<!DOCTYPE html>")
    for sid in SECTIONS:
        assert html.count(f'id="{sid}"') == 1, sid
    for chart in CHARTS:
        assert len(re.findall(r"<(rect|path)\b", svg_of(html, chart))) > 0, chart


def test_verdict_shows_the_change_in_big_numbers(run: dict) -> None:
    html, c = run["html"], run["c"]
    head = re.search(r'<header id="verdict".*?</header>', html, re.S).group(0)
    assert "SLOWER" in head
    assert "1.05 ms" in head and "1.38 ms" in head and "+330 µs" in head and "+31.4%" in head
    assert "before.json" in head and "after.json" in head
    assert str(escape(c["headline"])) in head  # the headline quotes the hostile layer name
    assert 'class="verdict-high"' in html  # a 31% regression


def test_waterfall_has_one_bar_per_contributor_plus_start_and_end(run: dict) -> None:
    svg = svg_of(run["html"], "waterfall-chart")
    roles = re.findall(r'<rect [^>]*data-role="(\w+)"', svg)
    assert roles == ["start", "contrib", "contrib", "end"]  # two changed, no others
    deltas = [int(d) for d in re.findall(r'data-role="contrib"[^>]*data-delta="(-?\d+)"', svg)]
    assert deltas == [300 * US, 30 * US] and sum(deltas) == run["c"]["total_delta_ns"]
    # increases and decreases are coloured differently; tooltips are <title>s
    assert svg.count("wf-bar wf-up") == 2 and "wf-bar wf-down" not in svg
    assert "<title>layer: Model_0/Block2_0" in svg
    assert "+300 µs" in svg and "+30.0 µs" in svg


def test_waterfall_aggregates_the_rest_as_others_and_adds_up(run: dict) -> None:
    """30 changed contributors, mixed signs: the top 15 by |delta|, one "others", start, end."""
    c = json.loads(json.dumps(run["c"]))
    base = c["before_step_ns"]
    contrib = [
        {
            "kind": "layer",
            "name": f"M_0/L_{i}",
            "before_ns": 100_000,
            "after_ns": 100_000 + (i + 1) * 1_000 * (1 if i % 3 else -1),
            "delta_ns": (i + 1) * 1_000 * (1 if i % 3 else -1),
        }
        for i in range(30)
    ]
    contrib.append(
        {"kind": "idle", "name": "GPU idle: launch", "before_ns": 0, "after_ns": 0, "delta_ns": 0}
    )
    contrib.sort(key=lambda x: -abs(x["delta_ns"]))
    total = sum(x["delta_ns"] for x in contrib)
    c.update(
        contributors=contrib, total_delta_ns=total, after_step_ns=base + total, before_step_ns=base
    )
    rows = waterfall_rows(c)
    assert [r["role"] for r in rows] == ["start"] + ["contrib"] * WATERFALL_TOP + ["others", "end"]
    assert sum(r["delta"] for r in rows[1:-1]) == total
    assert rows[-2]["to"] == rows[-1]["to"] == base + total
    assert rows[-2]["count"] == 30 - WATERFALL_TOP
    svg = svg_of(render_compare_html(c), "waterfall-chart")
    roles = re.findall(r'data-role="(\w+)"', svg)
    assert roles.count("contrib") == WATERFALL_TOP and roles.count("others") == 1
    assert roles[0] == "start" and roles[-1] == "end"
    drawn = [
        int(d) for d in re.findall(r'data-role="(?:contrib|others)"[^>]*data-delta="(-?\d+)"', svg)
    ]
    assert sum(drawn) == total
    assert "wf-bar wf-up" in svg and "wf-bar wf-down" in svg  # both colours
    assert f"[{30 - WATERFALL_TOP} others]" in svg
    # a single leftover is drawn as itself, never as "1 others"
    c1 = dict(c, contributors=contrib[: WATERFALL_TOP + 1])
    assert "others" not in [r["role"] for r in waterfall_rows(c1)]


def test_contributors_and_aligned_tables(run: dict) -> None:
    html, c = run["html"], run["c"]
    view = build_compare_view(c)
    t = view["contributors"]["table"]
    assert len(t["rows"]) == len(c["contributors"]) and t["sortable"]
    assert 'id="tbl-contributors" class="data sortable"' in html
    for tid in ("tbl-cmp-layers", "tbl-cmp-ops", "tbl-cmp-classes"):
        assert f'id="{tid}"' in html, tid
    layers = {cells[0]["title"]: cells for cells in view["layers"]["table"]["rows"]}
    row = layers["Model_0/Block2_0"]
    assert [x["t"] for x in row[2:]] == ["300 µs", "600 µs", "+300 µs", "+100.0%"]
    assert row[4]["cls"] == "d-worse"
    # Head's kernel was renamed, but the layer lines up: same time on both sides
    assert layers["Model_0/Head_0"][4]["t"] == "0"


def test_status_badges_for_new_and_gone_rows(tmp_path: Path) -> None:
    a = result(layered(tmp_path, "a", BASE), tmp_path)
    more = dict(BASE, Block3=250 * US)
    del more["Embed"]
    b = result(layered(tmp_path, "b", more), tmp_path)
    html = render_compare_html(compare(a, b))
    layers = re.search(r'<section id="layers">.*?</section>', html, re.S).group(0)
    assert '<span class="status st-new">new</span>' in layers
    assert '<span class="status st-gone">gone</span>' in layers
    kernels = re.search(r'<section id="kernels">.*?</section>', html, re.S).group(0)
    assert "<code>gemm_Block3</code>" in kernels and "<code>gemm_Embed</code>" in kernels


def test_nothing_is_loaded_from_the_network(run: dict) -> None:
    assert_self_contained(run["html"])


def test_script_is_ours_and_the_markdown_is_embedded(run: dict) -> None:
    p = parse(run["html"])
    assert len(p.scripts) == 2
    (data_attrs, data_text), (js_attrs, js_text) = p.scripts
    assert data_attrs == {"type": "application/json", "id": "ti-data"} and js_attrs == {}
    assert json.loads(data_text)["markdown"] == run["md"]
    digest = base64.b64encode(hashlib.sha256(js_text.encode()).digest()).decode()
    csp = next(a["content"] for t, a in p.tags if t == "meta" and a.get("http-equiv"))
    assert f"'sha256-{digest}'" in csp


def test_hostile_names_are_escaped(run: dict) -> None:
    html = run["html"]
    assert EVIL_KERNEL not in html
    assert EVIL_LAYER not in html
    assert "&lt;/script&gt;&lt;b&gt;x&lt;/b&gt;" in html  # the new kernel, as text
    assert "&lt;img src=x onerror=alert(1)&gt;" in html  # the layer: tables, waterfall, headline
    assert html.count("</script>") == 2
    assert "img" not in [t for t, _ in parse(html).tags]
    svg = svg_of(html, "waterfall-chart")
    assert "&lt;img src=x onerror=alert(1)&gt;_0" in svg


def test_sections_without_data_say_why_in_one_line(run: dict) -> None:
    c = json.loads(json.dumps(run["c"]))
    empty = dict(
        c,
        contributors=[],
        breakdown=[],
        layers=[],
        ops=[],
        kernel_classes=[],
        new_kernels=[],
        gone_kernels=[],
        new_ops=[],
        gone_ops=[],
        before_step_ns=0,
        after_step_ns=0,
        total_delta_ns=0,
        throughput=None,
        findings={"appeared": [], "disappeared": [], "changed": [], "unchanged": []},
        step_time={
            "before": {},
            "after": {},
            "p50_delta_ns": None,
            "p50_delta_pct": None,
            "mean_delta_ns": None,
            "mean_delta_pct": None,
        },
        diagnostics=[
            {"severity": "warning", "message": "after: no GPU step windows, nothing to decompose"}
        ],
    )
    html = render_compare_html(empty)
    for sid in SECTIONS:
        assert html.count(f'id="{sid}"') == 1, sid
    empties = re.findall(r'<p class="empty">([^<]*)</p>', html)
    assert len(empties) >= 9 and all("\n" not in e for e in empties), empties
    assert "NOT COMPARABLE" in html and "no GPU step windows, nothing to decompose" in html
    # a self-compare: nothing changed, the waterfall says so
    same = dict(
        c,
        contributors=[dict(x, after_ns=x["before_ns"], delta_ns=0) for x in c["contributors"]],
        total_delta_ns=0,
        after_step_ns=c["before_step_ns"],
    )
    assert "Nothing to explain" in render_compare_html(same)
    # an old or partial dict still renders
    assert 'id="waterfall"' in render_compare_html({"schema": "traceinsight.compare"})


# --- Markdown ---------------------------------------------------------------------------------


def test_markdown_is_a_compact_ticket_body(run: dict) -> None:
    md, c = run["md"], run["c"]
    assert md.startswith("### ")
    assert esc(c["headline"]) in md
    assert "| step time p50 | 1.05 ms | 1.38 ms | +330 µs | +31.4% |" in md
    assert "| layer | `Model_0/Block2_0` | 300 µs | 600 µs | +300 µs |" in md
    assert "new kernels 1" in md and "gone kernels 1" in md
    assert len(md.splitlines()) < 60


def test_markdown_has_no_html_and_no_links(run: dict) -> None:
    md = run["md"]
    prose = strip_code_spans(md).replace("\\<", "").replace("\\>", "")  # escaped: shown as text
    assert not re.search(r"<\s*/?\s*[A-Za-z!]", prose), prose
    assert "<" not in prose and ">" not in prose
    assert not re.search(r"\]\(|https?://|www\.", md)
    for line in md.splitlines():  # the hostile layer only ever inside a code span
        if EVIL_LAYER in line and not line.startswith("### "):
            assert f"`Model_0/{EVIL_LAYER}_0`" in line
    assert EVIL_LAYER not in strip_code_spans(md).replace(esc(EVIL_LAYER), "")


def test_markdown_lists_top_10_and_the_rest_as_others(run: dict) -> None:
    c = json.loads(json.dumps(run["c"]))
    contrib = [
        {
            "kind": "op",
            "name": f"aten::op{i}",
            "before_ns": 1000,
            "after_ns": 1000 + i + 1,
            "delta_ns": i + 1,
        }
        for i in range(14)
    ][::-1]
    c.update(contributors=contrib, total_delta_ns=sum(x["delta_ns"] for x in contrib))
    md = render_compare_markdown(c)
    assert md.count("| op | `aten::op") == 10
    assert "| | 4 others | | | +10 ns |" in md.replace("|  |", "| |").replace("|  |", "| |")
    assert "+14 ns" in md


# --- CLI --------------------------------------------------------------------------------------

# --- one formatter ----------------------------------------------------------------------------


def test_every_view_signs_a_faster_change_with_the_true_minus(run: dict) -> None:
    """Terminal, Markdown and HTML format a change through traceinsight.util.fmt: − (U+2212), never -."""
    tmp = run["tmp"]
    c = compare(result(run["b"], tmp), result(run["a"], tmp))
    assert c["total_delta_ns"] == -330 * US
    views = {
        "terminal": render_compare(c, width=160),
        "markdown": render_compare_markdown(c),
        "html": render_compare_html(c),
    }
    for name, text in views.items():
        assert "−300 µs" in text, name
        assert "-300 µs" not in text and "-330 µs" not in text, name


def test_rendering_a_saved_result_needs_no_analysis_stack() -> None:
    """The report, the ticket body and the terminal views load without pandas, numpy, pyarrow."""
    code = (
        "import sys; import traceinsight.render.html, traceinsight.render.markdown, "
        "traceinsight.render.terminal; "
        "heavy = {'pandas', 'numpy', 'pyarrow'} & set(sys.modules); assert not heavy, heavy"
    )
    subprocess.run(
        [sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parent.parent
    )


def test_cli_writes_html_and_markdown(run: dict) -> None:
    tmp = run["tmp"]
    html, md = tmp / "x.html", tmp / "x.md"
    res = invoke(["compare", run["a"], run["b"], "--html", html, "--markdown", md])
    assert html.is_file() and md.is_file()
    assert f"wrote {html}" in res.stderr and f"wrote {md}" in res.stderr
    text = html.read_text(encoding="utf-8")
    for sid in SECTIONS:
        assert f'id="{sid}"' in text, sid
    assert md.read_text(encoding="utf-8").startswith("### After is 31.4% slower")


# --- in a browser -----------------------------------------------------------------------------


@pytest.mark.browser
def test_page_in_chromium(run: dict) -> None:
    from test_browser import CHROMIUM, CHROMIUM_ARGS, sync_playwright

    if CHROMIUM is None:
        pytest.skip("no Chromium found (apt-get install chromium, or `make browser`)")
    if sync_playwright is None:
        pytest.skip("the playwright package is not installed (pip install playwright)")
    f = run["tmp"] / "page.html"
    f.write_text(run["html"], encoding="utf-8")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            pg = browser.new_page(viewport={"width": 1400, "height": 1000})
            log: dict[str, list] = {"console": [], "errors": [], "requests": []}
            pg.on("console", lambda m: log["console"].append((m.type, m.text)))
            pg.on("pageerror", lambda e: log["errors"].append(str(e)))
            pg.on("request", lambda r: log["requests"].append(r.url))
            pg.goto(f.as_uri(), wait_until="load", timeout=15_000)
            assert not log["errors"], log["errors"]
            assert not [m for m in log["console"] if m[0] in ("error", "warning")], log["console"]
            assert [u for u in log["requests"] if not u.startswith("file:")] == []
            for chart in CHARTS:
                n = pg.evaluate(
                    "c => document.querySelectorAll('svg.' + c + ' rect').length", chart
                )
                assert n > 0, chart
                box = pg.locator(f"svg.{chart}").first.bounding_box()
                assert box and box["width"] > 300 and box["height"] > 40, (chart, box)
            bars = pg.locator("svg.waterfall-chart rect.wf-bar")
            assert bars.count() == 4 and all(
                bars.nth(i).bounding_box()["width"] >= 1 for i in range(4)
            )
            # the script ran (CSP hash accepted): the Markdown block is filled, sorting works
            assert pg.locator("#ticket-md").text_content() == run["md"]
            pg.locator("#tbl-contributors thead button", has_text="delta").first.click()
            vals = pg.evaluate(
                "Array.from(document.querySelectorAll('#tbl-contributors tbody tr'))"
                ".map(r => parseFloat(r.cells[4].getAttribute('data-v')))"
            )
            assert vals == sorted(vals, reverse=True)
            assert EVIL_KERNEL in pg.evaluate("document.body.innerText")
        finally:
            browser.close()


# --- a screenshot of a real pair --------------------------------------------------------------


def screenshot(before: str, after: str, out: str, height: int = 1800) -> None:
    """Compare two traces, render the report, save a 1400-px-wide PNG of its top ``height`` px."""
    from test_browser import screenshot_html

    from traceinsight.ingest import load

    def res(p: str):
        return diagnose(load([p], quiet=True), command=["traceinsight", "diagnose", p])

    c = compare(res(before), res(after), labels=(Path(before).name, Path(after).name))
    html = render_compare_html(c)
    screenshot_html(html, out, height)
    print(f"wrote {out} (report {len(html.encode()):,} bytes)")


if __name__ == "__main__":
    if len(sys.argv) < 4:
        sys.exit("usage: python tests/test_compare_report.py BEFORE AFTER OUT.png [HEIGHT]")
    screenshot(
        sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]) if len(sys.argv) > 4 else 1800
    )
