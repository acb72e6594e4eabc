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

from test_report import CHARTS, EVIL_KERNEL, EVIL_OP, SECTIONS, TOKEN, build_trace  # noqa: E402

pytestmark = pytest.mark.browser

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run",
                 "--disable-dev-shm-usage"]


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
    CHROMIUM is None, reason="no Chromium found (apt-get install chromium, or `make browser`)")


def _result_with_big_tables(result):
    """The synthetic result plus 60 extra kernel rows, so the row limit and filter have work."""
    extra = [{"name": f"void fake_kernel_{i:02d}<float>(float*)", "kind": "kernel",
              "cls": "elementwise", "calls": i + 1, "total_ns": 1000 * (60 - i),
              "mean_ns": 1000.0, "min_ns": 900, "max_ns": 1100, "share_pct": 0.01 * (60 - i),
              "top_op": "aten::fake"} for i in range(60)]
    rollups = {**result.rollups, "kernels": list(result.rollups["kernels"]) + extra}
    return dataclasses.replace(result, rollups=rollups)


@pytest.fixture(scope="module")
def report_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from traceinsight.diagnose import diagnose
    from traceinsight.ingest import ingest
    from traceinsight.render.html import render_html

    tmp = tmp_path_factory.mktemp("browser")
    trace = build_trace(tmp / "evil.pt.trace.json.gz")
    result = diagnose(ingest([trace], tmp / "s.tistore", quiet=True),
                      command=["traceinsight", "report", str(trace)])
    out = tmp / "report.html"
    out.write_text(render_html(_result_with_big_tables(result)), encoding="utf-8")
    return out


@pytest.fixture(scope="module")
def page(report_file: Path):
    if sync_playwright is None:
        pytest.skip("the playwright package is not installed (pip install playwright); "
                    "test_loads_with_chromium_cli covers loading")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        pg = browser.new_page(viewport={"width": 1400, "height": 1000})
        log: dict[str, list] = {"console": [], "errors": [], "requests": [], "dialogs": []}
        pg.on("console", lambda m: log["console"].append((m.type, m.text)))
        pg.on("pageerror", lambda e: log["errors"].append(str(e)))
        pg.on("request", lambda r: log["requests"].append(r.url))
        pg.on("dialog", lambda d: (log["dialogs"].append(d.message), d.dismiss()))
        pg.goto(report_file.as_uri(), wait_until="load", timeout=15_000)
        pg.log = log  # type: ignore[attr-defined]
        yield pg
        browser.close()


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
    for chart in CHARTS:
        n = page.evaluate(
            "c => document.querySelectorAll('svg.' + c + ' rect, svg.' + c + ' circle, svg.' + c"
            " + ' path').length", chart)
        assert n > 0, chart
        box = page.locator(f"svg.{chart}").first.bounding_box()
        assert box and box["width"] > 300 and box["height"] > 20, (chart, box)


@requires_chromium
def test_clicking_a_header_sorts_the_rows(page) -> None:
    table = "#tbl-kernels"

    def column(i: int) -> list[str]:
        return page.evaluate(
            "([t, i]) => Array.from(document.querySelectorAll(t + ' tbody tr'))"
            ".map(r => r.cells[i].getAttribute('data-v') || r.cells[i].textContent)", [table, i])

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
    cmd = [CHROMIUM, "--headless", *CHROMIUM_ARGS, "--enable-logging=stderr", "--v=0",
           f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=3000",
           "--dump-dom", report_file.as_uri()]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr[-2000:]
    dom = p.stdout
    for sid in SECTIONS:
        assert f'id="{sid}"' in dom, sid
    m = re.search(r'<pre id="ticket-md" class="md">(.*?)</pre>', dom, re.S)
    assert m and m.group(1).startswith("### "), "the report script did not run"
    console = [ln for ln in p.stderr.splitlines() if "CONSOLE" in ln or "Content Security Policy"
               in ln or "Uncaught" in ln]
    assert not console, console


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
