"""The report in a real browser: headless Chromium (the Debian package; `make browser`).

Loads the report of the synthetic trace of test_report.py from a file:// URL and checks: no
console errors (a blocked inline script would log a CSP error), no request leaves the file,
every section is there, the charts drew shapes, a click on a header sorts the table, the row
limit and the filter work, and the hostile names stay text. Uses Playwright's Python package
with the system Chromium (``executable_path``; never ``playwright install``); without it,
falls back to ``chromium --headless --dump-dom`` for the load checks.

Run as a script to save a screenshot of a real trace's report::

    python tests/test_browser.py TRACE docs/report-screenshot.png
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

for _p in (Path(__file__).resolve().parent, Path(__file__).resolve().parent.parent):
    if str(_p) not in sys.path:  # also when run as a script
        sys.path.insert(0, str(_p))

from test_charts import SHOWN_IN, reports  # noqa: E402, F401 (reports: a fixture)
from test_report import CHARTS, EVIL_KERNEL, EVIL_OP, SECTIONS, TOKEN, build_trace  # noqa: E402

from traceinsight.render.html.charts import CHARTS as REGISTRY  # noqa: E402

pytestmark = pytest.mark.browser

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
]


def find_chromium() -> str | None:
    env = os.environ.get("TRACEINSIGHT_CHROMIUM")
    if env and Path(env).is_file():
        return env
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        p = shutil.which(name)
        if p:
            return p
    return "/usr/bin/chromium" if Path("/usr/bin/chromium").is_file() else None


CHROMIUM = find_chromium()
try:
    from playwright.sync_api import sync_playwright
except ImportError:  # pragma: no cover - the dev extra installs it
    sync_playwright = None

requires_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="no Chromium found (apt-get install chromium, or `make browser`)"
)


def _result_with_big_tables(result):
    """The synthetic result plus 60 extra kernel rows, so the row limit and filter have work."""
    extra = [
        {
            "name": f"void fake_kernel_{i:02d}<float>(float*)",
            "kind": "kernel",
            "cls": "elementwise",
            "calls": i + 1,
            "total_ns": 1000 * (60 - i),
            "mean_ns": 1000.0,
            "min_ns": 900,
            "max_ns": 1100,
            "share_pct": 0.01 * (60 - i),
            "top_op": "aten::fake",
        }
        for i in range(60)
    ]
    rollups = {**result.rollups, "kernels": list(result.rollups["kernels"]) + extra}
    return dataclasses.replace(result, rollups=rollups)


@pytest.fixture(scope="module")
def report_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from traceinsight.diagnose import diagnose
    from traceinsight.ingest import ingest
    from traceinsight.render.html import render_html

    tmp = tmp_path_factory.mktemp("browser")
    trace = build_trace(tmp / "evil.pt.trace.json.gz")
    result = diagnose(
        ingest([trace], tmp / "s.tistore", quiet=True),
        command=["traceinsight", "report", str(trace)],
    )
    out = tmp / "report.html"
    out.write_text(render_html(_result_with_big_tables(result)), encoding="utf-8")
    return out


@pytest.fixture(scope="module")
def browser():
    """One headless Chromium for the module (Playwright's sync API allows one at a time)."""
    if sync_playwright is None:
        pytest.skip(
            "the playwright package is not installed (pip install playwright); "
            "test_loads_with_chromium_cli covers loading"
        )
    if CHROMIUM is None:
        pytest.skip("no Chromium found (apt-get install chromium, or `make browser`)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


@pytest.fixture(scope="module")
def page(report_file: Path, browser):
    pg = browser.new_page(viewport={"width": 1400, "height": 1000})
    log: dict[str, list] = {"console": [], "errors": [], "requests": [], "dialogs": []}
    pg.on("console", lambda m: log["console"].append((m.type, m.text)))
    pg.on("pageerror", lambda e: log["errors"].append(str(e)))
    pg.on("request", lambda r: log["requests"].append(r.url))
    pg.on("dialog", lambda d: (log["dialogs"].append(d.message), d.dismiss()))
    pg.goto(report_file.as_uri(), wait_until="load", timeout=15_000)
    pg.log = log  # type: ignore[attr-defined]
    yield pg
    pg.close()


@requires_chromium
def test_page_loads_without_errors_or_requests(page) -> None:
    log = page.log
    assert not log["errors"], log["errors"]
    bad = [m for m in log["console"] if m[0] in ("error", "warning")]
    assert not bad, bad
    assert [u for u in log["requests"] if not u.startswith("file:")] == []
    assert not log["dialogs"]
    # the inline script ran (CSP hash accepted): it filled the Markdown block
    assert page.locator("#ticket-md").text_content().startswith("### ")
    assert page.locator("#copy-md").is_visible()


@requires_chromium
def test_every_section_and_chart_is_drawn(page) -> None:
    for sid in SECTIONS:
        assert page.locator(f"#{sid}").count() == 1, sid
    # every registered chart the page holds is drawn (and it holds at least CHARTS)
    held = [c for c in REGISTRY.values() if c.page == "diagnose"]
    held = [c for c in held if page.locator("svg." + ".".join(c.css.split())).count()]
    assert set(CHARTS) <= {c.css for c in held}
    for c in held:
        selector = f"#{c.section} svg." + ".".join(c.css.split())
        assert _shapes(page, selector) > 0, c.name
        box = page.locator(selector).first.bounding_box()
        assert box and box["width"] > 300 and box["height"] > 20, (c.name, box)


def _shapes(page, selector: str) -> int:
    return page.evaluate(
        "s => document.querySelectorAll(s + ' rect, ' + s + ' circle, ' + s + ' path, ' + s"
        " + ' polyline').length",
        selector,
    )


@pytest.fixture(scope="module")
def chart_pages(browser, reports, tmp_path_factory):  # noqa: F811 (the imported fixture)
    """One open page per report of ``test_charts.SHOWN_IN`` (opened when first asked for)."""
    tmp = tmp_path_factory.mktemp("chart-pages")
    pages: dict = {}

    def get(key: str):
        if key not in pages:
            pages[key] = _open(browser, reports[key], tmp, key)
        return pages[key]

    yield get
    for pg in pages.values():
        pg.close()


@requires_chromium
@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_every_registered_chart_is_drawn(chart_pages, name: str) -> None:
    # the registry is walked: a chart added to CHARTS is drawn here on the report it is shown in
    c = REGISTRY[name]
    pg = chart_pages(SHOWN_IN[name])
    selector = f"#{c.section} svg." + ".".join(c.css.split())
    assert _shapes(pg, selector) > 0, name
    box = pg.locator(selector).first.bounding_box()
    assert box and box["width"] > 300 and box["height"] > 20, (name, box)
    assert not pg.errors


@requires_chromium
def test_clicking_a_header_sorts_the_rows(page) -> None:
    table = "#tbl-kernels"

    def column(i: int) -> list[str]:
        return page.evaluate(
            "([t, i]) => Array.from(document.querySelectorAll(t + ' tbody tr'))"
            ".map(r => r.cells[i].getAttribute('data-v') || r.cells[i].textContent)",
            [table, i],
        )

    first_before = page.locator(f"{table} tbody tr").first.text_content()
    calls = page.locator(f"{table} thead button", has_text="calls")
    calls.click()
    vals = [float(v) for v in column(2)]
    assert vals == sorted(vals, reverse=True)
    assert page.locator(f"{table} thead th").nth(2).get_attribute("aria-sort") == "descending"
    first_desc = page.locator(f"{table} tbody tr").first.text_content()
    calls.click()
    vals = [float(v) for v in column(2)]
    assert vals == sorted(vals)
    first_asc = page.locator(f"{table} tbody tr").first.text_content()
    assert first_asc != first_desc
    assert first_before != first_asc or first_before != first_desc
    page.locator(f"{table} thead button", has_text="kernel").click()
    names = [v.lower() for v in column(0)]
    assert names == sorted(names)


@requires_chromium
def test_row_limit_expand_and_filter(page) -> None:
    table = page.locator("#tbl-kernels")
    total = page.locator("#tbl-kernels tbody tr").count()
    visible = lambda: page.locator("#tbl-kernels tbody tr:not(.hid)").count()  # noqa: E731
    limit = int(table.get_attribute("data-limit"))
    assert total > limit and visible() == limit
    page.locator('button[data-expand="tbl-kernels"]').click()
    assert visible() == total
    page.locator('button[data-expand="tbl-kernels"]').click()
    assert visible() == limit
    page.locator('input[data-filter="tbl-kernels"]').fill("fake_kernel_0")
    assert visible() == 10
    page.locator('input[data-filter="tbl-kernels"]').fill("")
    assert visible() == limit


@requires_chromium
def test_hostile_names_are_text(page) -> None:
    assert page.evaluate("document.querySelectorAll('img').length") == 0
    assert page.evaluate("document.querySelectorAll('script').length") == 2
    text = page.evaluate("document.body.innerText")
    assert EVIL_KERNEL in text
    assert EVIL_OP in text
    assert TOKEN not in page.content()


@requires_chromium
def test_loads_with_chromium_cli(report_file: Path, tmp_path: Path) -> None:
    """Without Playwright: chromium's own --dump-dom shows the DOM after the script ran, and
    --enable-logging reports console errors (CSP violations among them)."""
    cmd = [
        CHROMIUM,
        "--headless",
        *CHROMIUM_ARGS,
        "--enable-logging=stderr",
        "--v=0",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--virtual-time-budget=3000",
        "--dump-dom",
        report_file.as_uri(),
    ]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr[-2000:]
    dom = p.stdout
    for sid in SECTIONS:
        assert f'id="{sid}"' in dom, sid
    m = re.search(r'<pre id="ticket-md" class="md">(.*?)</pre>', dom, re.S)
    assert m and m.group(1).startswith("### "), "the report script did not run"
    console = [
        ln
        for ln in p.stderr.splitlines()
        if "CONSOLE" in ln or "Content Security Policy" in ln or "Uncaught" in ln
    ]
    assert not console, console


# --- the report items of the UX review, measured in Chromium ----------------------------------
# Each bundled sample is diagnosed once; its report is opened at 1400 x 1000 px, the width the
# review measured (the Kernels table was 1,266 px of content in a 1,216 px box).

SAMPLE_DIR = Path(__file__).resolve().parent.parent / "sample_traces"


@pytest.fixture(scope="module")
def sample_results(tmp_path_factory: pytest.TempPathFactory) -> dict:
    from traceinsight.diagnose import diagnose
    from traceinsight.ingest import ingest

    tmp = tmp_path_factory.mktemp("samples")
    out = {}
    for key, name in (
        ("straggler", "synthetic_straggler_4rank"),
        ("launch", "synthetic_h100_launch_bound.json.gz"),
        ("cpu", "cpu_transformer_train.pt.trace.json.gz"),
    ):
        out[key] = diagnose(
            ingest([SAMPLE_DIR / name], tmp / f"{key}.tistore", quiet=True),
            command=["traceinsight", "diagnose", name],
        )
    return out


def _open(browser, html: str, tmp: Path, name: str):
    f = tmp / f"{name}.html"
    f.write_text(html, encoding="utf-8")
    pg = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.goto(f.as_uri(), wait_until="load", timeout=15_000)
    pg.errors = errors  # type: ignore[attr-defined]
    return pg


@pytest.fixture(scope="module")
def straggler_page(browser, sample_results, tmp_path_factory):
    from traceinsight.render.html import render_html

    pg = _open(
        browser,
        render_html(sample_results["straggler"]),
        tmp_path_factory.mktemp("ux"),
        "straggler",
    )
    yield pg
    pg.close()


def _expand(page, table: str) -> None:
    btn = page.locator(f'button[data-expand="{table}"]')
    if btn.count() and btn.is_visible():
        btn.click()


@requires_chromium
def test_layer_paths_keep_their_leaf_visible(straggler_page) -> None:
    page = straggler_page
    assert not page.errors
    _expand(page, "tbl-layers")
    cells = page.evaluate("""() => Array.from(document.querySelectorAll('#tbl-layers td.mod'))
      .map(td => { const b = td.querySelector('b'), p = td.querySelector('.parent');
        const tb = td.getBoundingClientRect(), bb = b.getBoundingClientRect();
        return {leaf: b.textContent, path: td.title, left: bb.left - tb.left,
                right: tb.right - bb.right, leafClipped: b.scrollWidth > b.clientWidth + 1,
                parentClipped: p ? p.scrollWidth > p.clientWidth + 1 : false,
                parentEnd: p ? p.getBoundingClientRect().right : 0, leafStart: bb.left}; })""")
    assert len(cells) >= 30
    for c in cells:
        assert c["path"].endswith(c["leaf"]), c
        # the leaf is whole and inside the cell, right after the (possibly cut) parent path
        assert c["left"] >= 0 and c["right"] >= 0 and not c["leafClipped"], c
        assert c["parentEnd"] <= c["leafStart"] + 1, c
    assert any(c["parentClipped"] for c in cells)  # long paths are cut, on the left
    # the filter still matches the full path (the cut is layout only)
    page.locator('input[data-filter="tbl-layers"]').fill("TransformerBlock_1/MLP_1/Linear_6")
    shown = page.locator("#tbl-layers tbody tr:not(.hid)")
    assert shown.count() == 1 and "Linear_6" in shown.first.text_content()
    page.locator('input[data-filter="tbl-layers"]').fill("")


@requires_chromium
def test_module_types_aggregate_the_instances(straggler_page) -> None:
    rows = straggler_page.evaluate("""() => Array.from(
      document.querySelectorAll('#tbl-module-types tbody tr')).map(r => r.cells[0].textContent)""")
    assert "TransformerBlock ×4" in rows and "Linear ×16" in rows and "LayerNorm ×9" in rows
    box = straggler_page.locator("#tbl-module-types").bounding_box()
    assert box and box["height"] > 100


@requires_chromium
def test_kernels_launched_by_column_is_not_clipped(straggler_page) -> None:
    page = straggler_page
    _expand(page, "tbl-kernels")
    m = page.evaluate("""() => { const t = document.querySelector('#tbl-kernels');
      const box = t.closest('.tbl-scroll');
      const cells = Array.from(t.querySelectorAll('tbody td.op'));
      return {boxScroll: box.scrollWidth, boxClient: box.clientWidth, n: cells.length,
              clipped: cells.filter(c => c.scrollWidth > c.clientWidth + 1)
                            .map(c => c.textContent),
              right: Math.max(...cells.map(c => c.getBoundingClientRect().right)),
              boxRight: box.getBoundingClientRect().right}; }""")
    assert m["n"] >= 20
    assert m["clipped"] == [], m["clipped"]
    assert m["boxScroll"] <= m["boxClient"], m  # the table fits: no hidden column
    assert m["right"] <= m["boxRight"] + 1, m


@requires_chromium
def test_kernel_cells_show_the_short_names_with_the_full_name_on_hover(
    straggler_page, sample_results
) -> None:
    from traceinsight.util.kernelname import short_names

    page = straggler_page
    _expand(page, "tbl-kernels")
    cells = page.evaluate("""() => Array.from(document.querySelectorAll(
      '#tbl-kernels tbody td.name')).map(c => [c.textContent.trim(), c.title])""")
    full = [str(k["name"]) for k in sample_results["straggler"].rollups["kernels"]]
    full = [n for n in full if not n.startswith("[")]
    short = short_names(n for n in full if re.search(r"[<(]|^_Z", n))
    assert len(cells) == len(full) and any(n in short for n in full)
    for (text, title), name in zip(cells, full):
        want = short.get(name, " ".join(name.split()))
        assert text == want, (text, name)
        assert title == (name if want != " ".join(name.split()) else ""), (title, name)
    assert len({t for t, _ in cells}) == len(cells)  # distinct


@requires_chromium
def test_step_chart_draws_one_line_per_rank_over_all_steps(straggler_page, sample_results) -> None:
    r = sample_results["straggler"]
    ranks = len(r.trace["ranks"])
    steps = len({s["step"] for s in r.breakdown["steps"] if s.get("step") is not None})
    lines = straggler_page.evaluate("""() => Array.from(
      document.querySelectorAll('svg.steps-chart polyline.rank-line')).map(p => ({
        rank: p.getAttribute('data-rank'), n: p.points.numberOfItems,
        width: p.getBBox().width, ys: Array.from(p.points).map(q => q.y)}))""")
    assert sorted(x["rank"] for x in lines) == [str(i) for i in range(ranks)]
    bars = straggler_page.evaluate("""() => { const xs = Array.from(document.querySelectorAll(
      'svg.steps-chart rect.seg-compute')).map(r => r.x.baseVal.value + r.width.baseVal.value / 2);
      return Math.max(...xs) - Math.min(...xs); }""")
    for line in lines:
        assert line["n"] == steps  # a point in every step, not only where the rank was slowest
        assert abs(line["width"] - bars) < 2  # from the first step's bar to the last one's
    # the straggler is a line apart in every step (it computes 50% longer than the others)
    slow = next(x for x in lines if x["rank"] == "2")
    fast = next(x for x in lines if x["rank"] == "0")
    assert all(ys < yf for ys, yf in zip(slow["ys"], fast["ys"]))  # higher = longer


@requires_chromium
def test_gpu_busy_tile_is_not_green_when_communication_fills_it(straggler_page) -> None:
    tile = straggler_page.locator(".kpi", has_text="GPU busy")
    assert "tone-good" not in (tile.get_attribute("class") or "")
    colour = tile.locator("dd").first.evaluate("e => getComputedStyle(e).color")
    assert colour != "rgb(143, 227, 160)"  # the green of a healthy tile
    assert "exposed comm" in tile.text_content()


@requires_chromium
def test_durations_follow_one_unit_rule(straggler_page) -> None:
    page = straggler_page
    page.locator("details.evidence").first.evaluate("d => d.open = true")
    # every duration; the Perfetto hint's file timestamps (µs, the file's unit) are not durations
    text = page.evaluate("""() => { const b = document.body.cloneNode(true);
      b.querySelector('#open-in-viewer')?.remove(); document.body.appendChild(b);
      const t = b.innerText; b.remove(); return t; }""")
    assert re.search(r"median start spread \d\.\d\d ms", text), "spread in ms"
    assert not re.search(r"\b\d{4,}(\.\d+)? µs", text)  # never 2151.9 µs
    assert not re.search(r"\b1000 (ns|µs|ms)\b", text)


@requires_chromium
def test_device_line_and_open_in_perfetto(straggler_page) -> None:
    page = straggler_page
    dev = page.locator("#diagnostics .device-line").text_content()
    assert "NVIDIA H100 80GB HBM3" in dev and "named in the trace" in dev
    text = page.evaluate("document.body.innerText")
    assert "GPU not recorded" not in text and "generic name" not in text
    hint = page.locator("#open-in-viewer")
    assert hint.is_visible()
    t = hint.text_content()
    assert "rank-0.json.gz" in t and "ProfilerStep#" in t and "ui.perfetto.dev" in t
    assert re.search(r"ts \d+\.\d{3} – \d+\.\d{3} µs", t)
    box = hint.bounding_box()
    assert box and box["width"] > 300


@requires_chromium
def test_headline_badge_is_the_most_severe_finding(browser, sample_results, tmp_path) -> None:
    from traceinsight.render.html import render_html

    r = sample_results["straggler"]
    fs = sorted(r.findings, key=lambda f: -(f.impact_pct or 0))
    # the finding first by impact is LOW, a MEDIUM comes after it: the badge says MEDIUM
    fs = [
        dataclasses.replace(fs[0], severity="low"),
        *[dataclasses.replace(f, severity="medium") for f in fs[1:2]],
        *[dataclasses.replace(f, severity="low") for f in fs[2:]],
    ]
    pg = _open(browser, render_html(dataclasses.replace(r, findings=fs)), tmp_path, "badge")
    try:
        assert pg.locator(".headline .badge").text_content().strip() == "MEDIUM"
        first = pg.locator("article.finding").first.locator(".badge").text_content()
        assert first.strip() == "LOW"  # still ordered by impact
        colour = pg.locator(".headline .badge").evaluate("e => getComputedStyle(e).backgroundColor")
        assert colour == "rgb(224, 112, 0)"  # --medium
    finally:
        pg.close()


@requires_chromium
def test_launch_bound_gap_rows_are_distinct(browser, sample_results, tmp_path) -> None:
    from traceinsight.render.html import render_html

    pg = _open(browser, render_html(sample_results["launch"]), tmp_path, "launch")
    try:
        art = pg.locator('article[data-rule="launch-bound"]')
        art.locator("details.evidence").evaluate("d => d.open = true")
        rows = art.evaluate("""a => { const t = Array.from(a.querySelectorAll('table')).find(
          x => x.closest('.tbl').textContent.includes('Largest GPU idle gaps'));
          return Array.from(t.querySelectorAll('tbody tr')).map(r => r.innerText); }""")
        assert len(rows) >= 3 and len(set(rows)) == len(rows), rows
        visible = art.locator("table", has_text="into step").first
        assert visible.is_visible()
    finally:
        pg.close()


@requires_chromium
def test_not_evaluated_reasons_do_not_repeat(browser, sample_results, tmp_path) -> None:
    from traceinsight.render.html import render_html

    pg = _open(browser, render_html(sample_results["cpu"]), tmp_path, "cpu-rules")
    try:
        rows = pg.evaluate("""() => Array.from(document.querySelectorAll('#diagnostics table'))
          .filter(t => t.textContent.includes('to enable them'))
          .flatMap(t => Array.from(t.querySelectorAll('tbody tr')).map(r => ({
            rules: r.cells[0].innerText, why: r.cells[1].innerText,
            hint: r.cells[2].innerText})))""")
        assert rows and len({r["why"] + r["hint"] for r in rows}) == len(rows)  # grouped
        for r in rows:
            assert "needed)" not in r["why"] or r["hint"] == "–", r
            assert r["why"] not in r["hint"] and r["hint"] not in r["why"], r
    finally:
        pg.close()


@requires_chromium
def test_cpu_only_report_is_a_host_view(browser, sample_results, tmp_path) -> None:
    from traceinsight.render.html import render_html

    pg = _open(browser, render_html(sample_results["cpu"]), tmp_path, "cpu")
    try:
        assert not pg.errors
        assert pg.locator("h1").text_content().startswith("CPU-only run: a step takes")
        for sid in ("steps", "breakdown", "timeline", "kernels", "roofline"):
            assert pg.locator(f"#{sid}").count() == 0, sid
        assert "GPU busy" not in pg.locator(".kpis").text_content()
        assert "Framework ops" in pg.locator(".kpis").text_content()
        segs = pg.evaluate("""() => Array.from(document.querySelectorAll(
          'svg.host-chart rect')).map(r => [r.getAttribute('class'), r.width.baseVal.value])""")
        assert {c for c, _ in segs} >= {"host-ops", "host-py"}
        assert abs(sum(w for _, w in segs) - 960) < 2  # the parts add up to the step
        ops = pg.locator("#tbl-host-ops tbody tr")
        assert ops.count() >= 8 and ops.first.is_visible()
        assert "aten::mm" in ops.first.text_content()
        mods = pg.locator("#tbl-host-modules").text_content()
        assert "TransformerEncoderLayer" in mods
        assert "idle 100" not in pg.evaluate("document.body.innerText")
        assert "no GPU (CPU-only trace)" in pg.locator("#diagnostics .device-line").text_content()
    finally:
        pg.close()


# --- layout, measured: nothing wider than its box, nothing drawn over its neighbour ---------

#: every folded table opened; then each table box whose content is wider than the box (a
#: scroll bar that neither a screenshot nor print shows), each table or chart that runs past
#: its section, and each shape or label of a chart drawn outside the chart (into the next
#: heading)
LAYOUT_JS = """() => { document.querySelectorAll('details').forEach(d => d.open = true);
  document.querySelectorAll('button[data-expand]').forEach(b => b.click());
  const bad = [];
  for (const box of document.querySelectorAll('.tbl-scroll'))
    if (box.scrollWidth > box.clientWidth + 1)
      bad.push({table: box.querySelector('table')?.id, content: box.scrollWidth,
                box: box.clientWidth});
  for (const sec of document.querySelectorAll('section')) {
    const s = sec.getBoundingClientRect();
    for (const el of sec.querySelectorAll('table, svg.chart'))
      if (el.getBoundingClientRect().right > s.right + 1)
        bad.push({past: el.id || el.getAttribute('class'), section: sec.id});
  }
  for (const svg of document.querySelectorAll('svg.chart')) {
    const o = svg.getBoundingClientRect();
    for (const el of svg.querySelectorAll('text, rect, circle')) {
      const r = el.getBoundingClientRect();
      if (!r.width && !r.height) continue;
      if (r.left < o.left - 1 || r.top < o.top - 1 || r.right > o.right + 1
          || r.bottom > o.bottom + 1)
        bad.push({outside: svg.getAttribute('class'), el: el.getAttribute('class'),
                  text: el.textContent.slice(0, 60)});
    }
  }
  return bad; }"""

#: the tallest body row of a table (px)
ROW_HEIGHT_JS = """t => Math.max(...Array.from(document.querySelectorAll(t + ' tbody tr'))
  .map(r => r.getBoundingClientRect().height))"""


@pytest.fixture(scope="module")
def multirank_page(browser, tmp_path_factory):
    """The report of a real two-rank trace folder (long fbgemm op names, 29-argument input
    dims); skipped without the shared corpus."""
    from conftest import KINETO, NO_CORPUS

    from traceinsight.diagnose import diagnose
    from traceinsight.ingest import ingest
    from traceinsight.render.html import render_html

    folder = KINETO / "hta" / "trace_filter"
    if not folder.is_dir():
        pytest.skip(NO_CORPUS)
    tmp = tmp_path_factory.mktemp("multirank")
    r = diagnose(ingest([folder], tmp / "s.tistore", quiet=True), command=["traceinsight"])
    pg = _open(browser, render_html(r), tmp, "multirank")
    pg.result = r  # type: ignore[attr-defined]
    yield pg
    pg.close()


@requires_chromium
def test_multirank_operators_fit_their_box(multirank_page) -> None:
    page = multirank_page
    _expand(page, "tbl-ops")
    m = page.evaluate("""() => { const t = document.querySelector('#tbl-ops');
      const box = t.closest('.tbl-scroll'), br = box.getBoundingClientRect();
      const heads = Array.from(t.querySelectorAll('thead th')).map(h => h.textContent);
      const share = heads.indexOf('share'), dims = heads.indexOf('input dims');
      const cells = i => Array.from(t.querySelectorAll('tbody tr')).map(r => r.cells[i]);
      return {content: box.scrollWidth, box: box.clientWidth, rows: cells(0).length,
        shareRight: Math.max(...cells(share).map(c => c.getBoundingClientRect().right)),
        dimsRight: Math.max(...cells(dims).map(c => c.getBoundingClientRect().right)),
        boxRight: br.right,
        longest: Math.max(...cells(0).map(c => c.textContent.length)),
        dimsLong: cells(dims).filter(c => c.textContent.length > 100).length,
        dimsTitled: cells(dims).filter(c => c.title && c.title.length > 100).length}; }""")
    assert m["rows"] > 100 and m["longest"] > 120  # a 155-character autograd op name
    assert m["content"] <= m["box"], m  # no hidden columns behind a scroll bar
    assert m["shareRight"] <= m["boxRight"] and m["dimsRight"] <= m["boxRight"], m
    # dims longer than the three lines they may take carry the whole text in their tooltip (in the
    # one shape format empty arguments are left out, so the 29-argument op's dims are short now)
    assert m["dimsTitled"] == m["dimsLong"], m
    assert page.evaluate(ROW_HEIGHT_JS, "#tbl-ops") <= 80  # was 223 px


@requires_chromium
def test_nothing_is_wider_than_its_box_or_drawn_outside_its_chart(
    multirank_page, straggler_page, browser, sample_results, tmp_path
) -> None:
    from traceinsight.compare.explain import compare
    from traceinsight.render.html import render_compare_html, render_html

    launch = _open(browser, render_html(sample_results["launch"]), tmp_path, "launch-layout")
    both = compare(sample_results["launch"], sample_results["straggler"])
    cmp = _open(browser, render_compare_html(both), tmp_path, "compare-layout")
    try:
        for name, page in (
            ("multirank", multirank_page),
            ("straggler", straggler_page),
            ("launch", launch),
            ("compare", cmp),
        ):
            assert page.evaluate(LAYOUT_JS) == [], name
        # the slowest and fastest ranks are whole tables, every column in view
        for tid in ("tbl-ranks-top", "tbl-ranks-bottom"):
            cols = multirank_page.evaluate(
                "t => document.querySelectorAll(t + ' thead th').length", f"#{tid}"
            )
            assert cols == 9, tid
    finally:
        launch.close()
        cmp.close()


@requires_chromium
def test_rank_heatmaps_start_at_zero_and_state_the_spread(multirank_page) -> None:
    page = multirank_page
    heat = page.result.extra["cross_rank"]["heatmaps"]
    maps = page.evaluate("""() => Array.from(document.querySelectorAll('svg.heat-chart')).map(
      s => ({lo: s.querySelector('text.heat-key-lo').textContent,
             spread: s.querySelector('text.heat-spread').textContent,
             fills: Array.from(new Set(Array.from(s.querySelectorAll('rect.heat'))
               .map(r => r.getAttribute('fill')))),
             bottom: s.getBoundingClientRect().bottom,
             next: s.closest('figure').nextElementSibling?.getBoundingClientRect().top}))""")
    assert len(maps) == 3
    vals = [v for row in heat["wall_ns"] for v in row if v is not None]
    lo, hi = min(vals), max(vals)
    assert 0 < (hi - lo) / hi < 0.05  # two ranks a few per cent apart
    step = maps[0]
    assert step["lo"] == "0"
    assert step["spread"] == spread_line(lo, hi)
    assert f"{100 * (hi - lo) / hi:.1f}% of the largest" in step["spread"]
    assert len(step["fills"]) == 1  # on a scale from 0 they are one colour, not light vs dark
    for m in maps:
        assert m["next"] is None or m["bottom"] <= m["next"] + 1, m  # key clear of the heading


def spread_line(lo: int, hi: int) -> str:
    from traceinsight.render.html.charts.ranks import spread_line as line

    return line(lo, hi)


def _lab(rgb: str) -> tuple[float, float, float]:
    """CIE L*a*b* (D65) of a computed ``rgb(r, g, b)`` colour."""
    r, g, b = (int(x) / 255 for x in re.findall(r"\d+", rgb)[:3])

    def lin(c: float) -> float:
        return ((c + 0.055) / 1.055) ** 2.4 if c > 0.04045 else c / 12.92

    r, g, b = lin(r), lin(g), lin(b)
    x = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047
    y = 0.2126 * r + 0.7152 * g + 0.0722 * b
    z = (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883

    def f(t: float) -> float:
        return t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116

    return 116 * f(y) - 16, 500 * (f(x) - f(y)), 200 * (f(y) - f(z))


#: the smallest CIE76 distance between two category colours (about 2.3 is barely visible)
MIN_COLOUR_DISTANCE = 20.0


@requires_chromium
def test_category_colours_are_distinct(straggler_page) -> None:
    from itertools import combinations

    from traceinsight.util.vocab import CLASSES

    def colours(prefix: str, names) -> dict[str, str]:
        return straggler_page.evaluate(
            """([p, ns]) => Object.fromEntries(ns.map(n => { const e = document.createElement(
              'span'); e.className = p + n; document.body.appendChild(e);
              const c = getComputedStyle(e).backgroundColor; e.remove(); return [n, c]; }))""",
            [prefix, list(names)],
        )

    for prefix, names in (
        ("cls-", CLASSES),
        ("seg-", ("compute", "comm", "memcpy", "memset", "idle", "hidden")),
    ):
        got = colours(prefix, names)
        assert len(set(got.values())) == len(got), got
        for a, b in combinations(got, 2):
            d = math.dist(_lab(got[a]), _lab(got[b]))
            assert d >= MIN_COLOUR_DISTANCE, (a, b, got[a], got[b], round(d, 1))


@requires_chromium
def test_capacity_label_is_clear_of_the_memory_lines(browser, tmp_path) -> None:
    """Reserved memory that climbs to 98% of the capacity: the capacity label is above the
    capacity line, and no point of the reserved or allocated line is under the label."""
    from traceinsight.render.html.charts.memory import memory_chart
    from traceinsight.render.html.environment import asset, env

    gib = 1 << 30
    n = 200
    series = {
        "rank": 0,
        "device": 0,
        "ts_ns": [i * 1_000_000 for i in range(n)],
        "allocated": [int((20 + 58 * i / n) * gib) for i in range(n)],
        "reserved": [int((30 + 48.5 * i / n) * gib) for i in range(n)],
    }
    chart = memory_chart(series, 80 * gib)["chart"]
    svg = env().from_string('{% import "_macros.html" as m %}{{ m.svg(c, "memory-chart") }}')
    html = f"<!doctype html><style>{asset('report.css')}</style><body>{svg.render(c=chart)}</body>"
    pg = _open(browser, html, tmp_path, "memory")
    try:
        m = pg.evaluate("""() => { const svg = document.querySelector('svg.memory-chart');
          const lbl = svg.querySelector('text.cap-lbl').getBBox();
          const cap = svg.querySelector('line.mem-cap').y1.baseVal.value;
          const hits = [];
          for (const cls of ['mem-reserved', 'mem-alloc']) {
            const p = svg.querySelector('path.' + cls), len = p.getTotalLength();
            for (let s = 0; s <= len; s += 1) { const q = p.getPointAtLength(s);
              if (q.x >= lbl.x - 2 && q.x <= lbl.x + lbl.width + 2 && q.y >= lbl.y - 1
                  && q.y <= lbl.y + lbl.height + 1) { hits.push([cls, q.x, q.y]); break; } }
          }
          return {hits, labelBottom: lbl.y + lbl.height, cap}; }""")
        assert m["hits"] == [], m
        assert m["labelBottom"] <= m["cap"] + 1, m  # above the line: the data is below it
    finally:
        pg.close()


@requires_chromium
def test_ranks_traced_reads_as_a_count_and_ids(straggler_page, browser, sample_results, tmp_path):
    from traceinsight.render.html import render_html

    def row(page) -> str:
        return page.evaluate("""() => { const th = Array.from(document.querySelectorAll(
          '#metadata dt')).find(c => c.textContent.trim() === 'Ranks traced');
          return th ? th.nextElementSibling.textContent.trim() : null; }""")

    assert row(straggler_page) == "4 (ranks 0–3)"
    pg = _open(browser, render_html(sample_results["launch"]), tmp_path, "one-rank")
    try:
        assert row(pg) == "1 (rank 0)"  # never a bare "Ranks 0"
    finally:
        pg.close()


def screenshot(trace: str, out: str, height: int = 2000) -> None:
    """Render TRACE's report and save a 1400-px-wide PNG of its top ``height`` px."""
    from traceinsight.diagnose import diagnose
    from traceinsight.ingest import load
    from traceinsight.render.html import render_html

    result = diagnose(load([trace], quiet=True), command=["traceinsight", "report", trace])
    screenshot_html(render_html(result), out, height)
    print(f"wrote {out}")


def screenshot_html(html: str, out: str, height: int) -> None:
    """Save a 1400-px-wide PNG of the top ``height`` px of an HTML page."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "page.html"
        f.write_text(html, encoding="utf-8")
        with sync_playwright() as p:
            b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            pg = b.new_page(viewport={"width": 1400, "height": height})
            pg.goto(f.as_uri())
            pg.screenshot(path=out, full_page=False)
            b.close()


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit("usage: python tests/test_browser.py TRACE OUT.png [HEIGHT]")
    screenshot(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 2000)
