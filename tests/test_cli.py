"""The command line as a user meets it: what the terminal view of ``diagnose`` lists, the
``--fail-on`` exit codes, ``report`` of a saved result, and ``devices``.

Each test runs the CLI in-process on a bundled sample (its findings are known by construction,
see sample_traces/README.md) and checks what a user or a CI job relies on, so that emptying the
findings of a view, flipping a gate or rendering something other than the saved result fails.
"""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import REPO, SAMPLES, invoke

LAUNCH_BOUND = SAMPLES / "synthetic_h100_launch_bound.json.gz"
HEALTHY = SAMPLES / "synthetic_h100_healthy.json.gz"
CPU_ONLY = SAMPLES / "cpu_transformer_train.pt.trace.json.gz"
#: launch-bound cannot fire: only the MEDIUM gpu-idle finding is left
ONLY_MEDIUM = ["--set", "launch-bound.min_idle_launch_pct=100"]

#: what the terminal view shows for each sample: (severity label, rule id) in impact order
EXPECTED = {
    "synthetic_h100_launch_bound.json.gz": [("HIGH", "launch-bound"), ("MED", "gpu-idle")],
    # by impact: the straggler's what-if, compute-bound's estimate, then what overlapping the
    # collectives still wins once the straggler is fixed
    "synthetic_straggler_4rank": [
        ("HIGH", "straggler"),
        ("LOW", "compute-bound"),
        ("LOW", "comm-bound"),
    ],
    "synthetic_h100_fp32_gemms.json.gz": [
        ("HIGH", "low-precision-unused"),
        ("INFO", "compute-bound"),
    ],
    "synthetic_h100_healthy.json.gz": [("LOW", "compute-bound")],
    # a CPU-only run: the cpu-* rules (LOW; no GPU rule is evaluated)
    "cpu_transformer_train.pt.trace.json.gz": [("LOW", "cpu-python-overhead")],
}
LABEL = {"high": "HIGH", "medium": "MED", "low": "LOW", "info": "INFO"}
FINDING_LINE = re.compile(r"^\[(HIGH|MED |LOW |INFO)\] (\S+) — (.+?)\s+impact")


def terminal_findings(text: str) -> list[tuple[str, str, str]]:
    """(severity label, rule id, title) of each finding line of the terminal view."""
    out = []
    for line in text.splitlines():
        m = FINDING_LINE.match(line)
        if m:
            out.append((m.group(1).strip(), m.group(2), m.group(3)))
    return out


# --- diagnose: the terminal view ------------------------------------------------------------------


@pytest.mark.parametrize("sample", sorted(EXPECTED))
def test_terminal_view_lists_every_finding_with_its_severity(sample: str) -> None:
    # GIVEN a bundled sample whose bottlenecks are known
    path = SAMPLES / sample
    # WHEN it is diagnosed with the default terminal view (and, separately, as JSON)
    text = invoke(["diagnose", path, "--no-color"]).stdout
    saved = json.loads(invoke(["diagnose", path, "--json", "-"]).stdout)
    # THEN the view lists exactly the expected rules, severities and order ...
    shown = terminal_findings(text)
    assert [(sev, rule) for sev, rule, _ in shown] == EXPECTED[sample], text
    # ... which is what the result holds, titles included
    assert [(LABEL[f["severity"]], f["rule"], f["title"]) for f in saved["findings"]] == shown
    if shown:
        assert f"Findings ({len(shown)})" in text
    else:
        assert "No findings." in text
    assert saved["headline"][:40] in text


# --- diagnose --fail-on: the CI gate --------------------------------------------------------------


@pytest.mark.parametrize(
    "path,extra,level,code",
    [
        # HIGH launch-bound + MEDIUM gpu-idle
        (LAUNCH_BOUND, [], "high", 1),
        (LAUNCH_BOUND, [], "medium", 1),
        (LAUNCH_BOUND, [], "low", 1),
        (LAUNCH_BOUND, [], "info", 1),
        (LAUNCH_BOUND, [], "never", 0),
        # only a MEDIUM finding: "at or above" the level
        (LAUNCH_BOUND, ONLY_MEDIUM, "high", 0),
        (LAUNCH_BOUND, ONLY_MEDIUM, "medium", 1),
        (LAUNCH_BOUND, ONLY_MEDIUM, "low", 1),
        # only a LOW finding
        (HEALTHY, [], "high", 0),
        (HEALTHY, [], "medium", 0),
        (HEALTHY, [], "low", 1),
        # a CPU-only run: its only finding is the LOW cpu-python-overhead
        (CPU_ONLY, [], "medium", 0),
        (CPU_ONLY, [], "low", 1),
    ],
    ids=lambda v: v.name if isinstance(v, Path) else ("only-medium" if v == ONLY_MEDIUM else None),
)
def test_fail_on_exits_1_when_a_finding_reaches_the_level(
    path: Path, extra: list[str], level: str, code: int
) -> None:
    res = invoke(["diagnose", path, *extra, "--fail-on", level], exit_code=code)
    shown = terminal_findings(res.stdout)  # the view is printed either way
    if code:
        hit = [
            rule
            for sev, rule, _ in shown
            if ["HIGH", "MED", "LOW", "INFO"].index(sev)
            <= ["high", "medium", "low", "info"].index(level)
        ]
        assert hit and f"{len(hit)} finding(s) at or above {level}: {', '.join(hit)}" in res.stderr
    else:
        assert "at or above" not in res.stderr


def test_fail_on_also_gates_json_output(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    invoke(["diagnose", LAUNCH_BOUND, "--json", out, "--fail-on", "high"], exit_code=1)
    assert [f["rule"] for f in json.loads(out.read_text())["findings"]] == [
        "launch-bound",
        "gpu-idle",
    ]
    invoke(["diagnose", LAUNCH_BOUND, *ONLY_MEDIUM, "--json", "-", "--fail-on", "high"])


# --- report: a saved result rendered as it is -----------------------------------------------------


class _Report(HTMLParser):
    """The finding articles of a report and its visible text (scripts and styles left out)."""

    def __init__(self) -> None:
        super().__init__()
        self.findings: list[dict[str, Any]] = []
        self.text: list[str] = []
        self._skip = 0
        self._article = False
        self._h3 = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag in ("script", "style"):
            self._skip += 1
        classes = (a.get("class") or "").split()
        if tag == "article" and "finding" in classes:
            sev = next(c[4:] for c in classes if c.startswith("sev-"))
            self.findings.append({"rule": a.get("data-rule"), "severity": sev, "title": ""})
            self._article = True
        if tag == "h3" and self._article:
            self._h3 = True

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style"):
            self._skip -= 1
        if tag == "h3":
            self._h3 = False
        if tag == "article":
            self._article = False

    def handle_data(self, data: str) -> None:
        if self._skip:
            return
        self.text.append(data)
        if self._h3:
            self.findings[-1]["title"] += data


def parse_report(path: Path) -> _Report:
    p = _Report()
    p.feed(path.read_text(encoding="utf-8"))
    return p


def test_report_renders_what_the_saved_result_holds(tmp_path: Path) -> None:
    # GIVEN a saved result, edited so that only it (not a new diagnosis) holds these words
    saved = tmp_path / "result.json"
    invoke(["diagnose", LAUNCH_BOUND, "--json", saved])
    d = json.loads(saved.read_text())
    assert [f["rule"] for f in d["findings"]] == ["launch-bound", "gpu-idle"]
    d["headline"] = "A headline that only the saved result has"
    d["findings"] = d["findings"][:1]
    d["findings"][0]["title"] = "A title that only the saved result has"
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(d))
    # WHEN the report is written from it
    html, md = tmp_path / "r.html", tmp_path / "r.md"
    res = invoke(["report", edited, "-o", html, "--markdown", md])
    # THEN the HTML shows that result: its headline, its one finding, its title and severity
    assert f"wrote {html}" in res.stdout and f"wrote {md}" in res.stdout
    page = parse_report(html)
    assert page.findings == [
        {
            "rule": "launch-bound",
            "severity": "high",
            "title": "A title that only the saved result has",
        }
    ]
    assert "A headline that only the saved result has" in " ".join(page.text)
    # AND the Markdown too
    text = md.read_text()
    assert "A headline that only the saved result has" in text
    assert re.findall(r"^\d+\. \*\*(\w+)\*\* `([\w-]+)`", text, re.M) == [("HIGH", "launch-bound")]


def test_report_of_a_trace_diagnoses_it(tmp_path: Path) -> None:
    html = tmp_path / "r.html"
    invoke(["report", SAMPLES / "synthetic_straggler_4rank", "-o", html])
    assert [(f["severity"], f["rule"]) for f in parse_report(html).findings] == [
        ("high", "straggler"),
        ("low", "compute-bound"),
        ("low", "comm-bound"),
    ]


# --- devices: the peak table --------------------------------------------------------------------


def _table() -> list[dict[str, Any]]:
    doc = yaml.safe_load((REPO / "traceinsight" / "devices" / "devices.yaml").read_text())
    return doc["devices"]


def test_devices_json_lists_every_device_with_its_peaks() -> None:
    listed = json.loads(invoke(["devices", "--json"]).stdout)
    table = _table()
    assert [d["key"] for d in listed] == [e["key"] for e in table]
    for d, e in zip(listed, table):
        assert (d["name"], d["vendor"]) == (e["name"], e["vendor"])
        for dtype, tflops in e["tflops"].items():
            want = None if tflops is None else tflops * 1e12
            assert d["peak_flops"][dtype] == pytest.approx(want), (e["key"], dtype)
        assert d["mem_bw"] == pytest.approx(e["mem_bw_gbs"] * 1e9)
        assert d["mem_bytes"] == round(e["mem_gib"] * 2**30)


@pytest.mark.parametrize(
    "key,cells",
    [
        ("h100-sxm", ["989 TFLOP/s", "67 TFLOP/s", "1.98 PFLOP/s", "3.35 TB/s", "80.00 GiB"]),
        ("a100-sxm4-80gb", ["312 TFLOP/s", "19.5 TFLOP/s", "–", "2.04 TB/s", "80.00 GiB"]),
        ("v100-sxm2-32gb", ["125 TFLOP/s", "15.7 TFLOP/s", "–", "900 GB/s", "32.00 GiB"]),
        ("mi300x", ["1.31 PFLOP/s", "163 TFLOP/s", "2.61 PFLOP/s", "5.3 TB/s", "192.00 GiB"]),
    ],
)
def test_devices_table_shows_the_peaks(key: str, cells: list[str]) -> None:
    out = invoke(["devices"]).stdout
    assert out.splitlines()[0].split() == [
        "key",
        "name",
        "bf16/fp16",
        "fp32",
        "fp8",
        "bandwidth",
        "memory",
    ]
    rows = [ln for ln in out.splitlines() if ln.split()[:1] == [key]]
    assert len(rows) == 1
    # bf16/fp16, fp32, fp8, bandwidth, memory: the last five cells, in order
    assert re.split(r"\s{2,}", rows[0].strip())[-5:] == cells
    keys = [ln.split()[0] for ln in out.splitlines()[2:]]
    assert keys == [e["key"] for e in _table()]


def test_devices_lists_a_user_device(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    user = tmp_path / "devices.yaml"
    user.write_text(
        yaml.safe_dump(
            {
                "devices": [
                    {
                        "key": "lab-gpu",
                        "name": "Lab GPU 9000",
                        "vendor": "other",
                        "match": ["Lab GPU"],
                        "tflops": {"bf16": 123, "fp32": 45},
                        "mem_bw_gbs": 1500,
                        "mem_gib": 48,
                    }
                ]
            }
        )
    )
    monkeypatch.setenv("TRACEINSIGHT_DEVICES", str(user))
    listed = {d["key"]: d for d in json.loads(invoke(["devices", "--json"]).stdout)}
    assert listed["lab-gpu"]["peak_flops"]["bf16"] == pytest.approx(123e12)
    assert "h100-sxm" in listed
    row = next(ln for ln in invoke(["devices"]).stdout.splitlines() if ln.startswith("lab-gpu"))
    assert "123 TFLOP/s" in row and "45 TFLOP/s" in row and "1.5 TB/s" in row
