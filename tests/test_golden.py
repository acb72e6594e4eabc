"""Golden diagnoses of the real shared traces.

Each Kineto trace of the corpus is diagnosed and the result is reduced to a normalized form:
the primary verdict and the headline, the exact integer per-rank sums, the steps left out of
the step statistics, each finding (rule, severity, title, impact, measured values to four
significant digits, the names leading its evidence tables), every rule's status and the
diagnostic codes. The form is compared with ``tests/golden/<id>.json``.

A deliberate change of a rule, a threshold or a definition shows up here as a readable JSON
diff; accept it with::

    .venv/bin/python -m pytest tests/test_golden.py --update-golden

and review the changed golden files in the commit.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from conftest import corpus_id, corpus_kineto_files, requires_corpus

from traceinsight.diagnose import diagnose
from traceinsight.ingest import ingest

GOLDEN = Path(__file__).resolve().parent / "golden"
FILES = corpus_kineto_files()

#: per-rank sums that are exact integers (nanoseconds, counts, bytes)
EXACT_RANK_KEYS = (
    "rank",
    "kernel_time_ns",
    "comm_kernel_time_ns",
    "memcpy_time_ns",
    "memset_time_ns",
    "kernels",
    "window_ns",
    "gpu_busy_ns",
    "gpu_idle_ns",
    "steps",
    "peak_allocated_bytes",
    "peak_reserved_bytes",
)
#: evidence rows kept per table (their leading names)
TOP_NAMES = 3
NAME_LIMIT = 120


def sig(x: Any, digits: int = 4) -> Any:
    """Round floats to ``digits`` significant digits (summation order may differ by machine)."""
    if isinstance(x, bool) or not isinstance(x, float):
        return x
    if x == 0 or not math.isfinite(x):
        return x
    return round(x, digits - 1 - math.floor(math.log10(abs(x))))


def _names(ev: dict[str, Any]) -> list[str]:
    cols = ev.get("columns") or []
    if not cols or (cols[0].get("format") not in ("kernel", "op", "layer", "text", "class")):
        return []
    out = []
    for row in (ev.get("rows") or [])[:TOP_NAMES]:
        v = row[0] if isinstance(row, list) and row else None
        if isinstance(v, str):
            out.append(v[:NAME_LIMIT])
        elif v is not None:
            out.append(str(v))
    return out


def normalize(d: dict[str, Any]) -> dict[str, Any]:
    ranks = []
    for r in d["summary"]["ranks"]:
        row = {k: r.get(k) for k in EXACT_RANK_KEYS}
        st = r.get("step_time_ns") or {}
        row["step_time_ns"] = {
            k: (None if st.get(k) is None else round(st[k])) for k in ("p50", "max")
        }
        row["steps_excluded"] = [[x["step"], x["reason"]] for x in r.get("steps_excluded") or []]
        ranks.append(row)
    findings = []
    for f in d["findings"]:
        item: dict[str, Any] = {
            "rule": f["rule"],
            "severity": f["severity"],
            "title": f["title"],
            "impact_pct": None if f.get("impact_pct") is None else round(f["impact_pct"], 1),
        }
        measured = {}
        evidence = {}
        for ev in f.get("evidence") or []:
            if ev.get("kind") == "measurements":
                for row in ev.get("rows") or []:
                    measured[row["metric"]] = sig(row.get("value"))
            elif ev.get("kind") == "table":
                names = _names(ev)
                if names:
                    evidence[ev.get("title", "")] = names
        item["measured"] = measured
        item["evidence"] = evidence
        item["recommendations"] = len(f.get("recommendations") or [])
        findings.append(item)
    return {
        "headline": d["headline"],
        "primary": d.get("primary"),
        "ranks": ranks,
        "findings": findings,
        "rules": {r["rule"]: r["status"] for r in d["rules"]},
        "rule_errors": sorted(e.get("rule", "?") for e in d.get("rule_errors") or []),
        "diagnostics": sorted({x["code"] for x in d.get("diagnostics") or []}),
    }


def golden_path(path: Path) -> Path:
    return GOLDEN / (
        corpus_id(path).replace(":", "__").removesuffix(".gz").removesuffix(".json") + ".json"
    )


@requires_corpus
@pytest.mark.corpus
@pytest.mark.parametrize("path", FILES, ids=[corpus_id(p) for p in FILES])
def test_corpus_diagnosis_matches_golden(path: Path, request: pytest.FixtureRequest) -> None:
    result = diagnose(ingest([path], quiet=True))
    # one story per cause: the impacts of a diagnosis never add up to more than the step
    assert sum(f.impact_pct or 0.0 for f in result.findings) <= 100.0 + 1e-9
    got = normalize(json.loads(result.to_json()))
    target = golden_path(path)
    text = json.dumps(got, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    if request.config.getoption("--update-golden"):
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        return
    assert target.is_file(), f"no golden file {target.name}: run pytest --update-golden"
    want = json.loads(target.read_text(encoding="utf-8"))
    # compare piecewise first so that a failure names the part that moved
    for key in ("primary", "headline", "ranks", "rules", "diagnostics", "rule_errors"):
        assert got.get(key) == want.get(key), key
    assert [f["rule"] for f in got["findings"]] == [f["rule"] for f in want["findings"]]
    assert got["findings"] == want["findings"]


def test_normalize_rounds_and_keeps_names() -> None:
    assert sig(91.8979608795694) == 91.9
    assert sig(0.000123456) == 0.0001235
    assert sig(7) == 7 and sig(0.0) == 0.0
    d = {
        "headline": "h",
        "summary": {
            "ranks": [
                {"rank": 0, "kernel_time_ns": 5, "step_time_ns": {"p50": 9097800.4, "max": 9.0}}
            ]
        },
        "findings": [
            {
                "rule": "r",
                "severity": "high",
                "title": "t",
                "impact_pct": 73.517,
                "evidence": [
                    {"kind": "measurements", "rows": [{"metric": "m", "value": 1.23456}]},
                    {
                        "kind": "table",
                        "title": "Top",
                        "columns": [{"format": "kernel"}],
                        "rows": [["a"], ["b"], ["c"], ["d"]],
                    },
                ],
                "recommendations": ["x", "y"],
            }
        ],
        "rules": [{"rule": "r", "status": "fired"}],
        "diagnostics": [{"code": "z"}, {"code": "a"}],
    }
    n = normalize(d)
    assert n["ranks"][0]["step_time_ns"] == {"p50": 9097800, "max": 9}
    assert n["findings"][0] == {
        "rule": "r",
        "severity": "high",
        "title": "t",
        "impact_pct": 73.5,
        "measured": {"m": 1.235},
        "evidence": {"Top": ["a", "b", "c"]},
        "recommendations": 2,
    }
    assert n["diagnostics"] == ["a", "z"]
