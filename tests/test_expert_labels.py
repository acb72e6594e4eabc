"""The diagnosis of every labelled shared trace against the expert's labels.

``traces/expected/diagnoses.yaml`` records, per real Kineto trace, what a senior GPU
performance engineer concluded from the raw events: the primary verdict, the rules that must
and must not be reported at medium/high, advice that must not be given, and exact facts. Each
part of each label is its own test (``test_primary[trace]``, ``test_must_report[trace]``,
``test_must_report_one_of[trace]``, ``test_must_not_report[trace]``,
``test_must_not_recommend[trace]``, ``test_facts[trace]``), so the progress of the diagnosis
towards the labels is visible part by part. Facts the tool has no figure for at all are listed
by ``test_facts_not_yet_stated[trace]`` (an xfail naming them) rather than ignored.

Each trace is ingested and diagnosed once per module (library API), whatever the number of
checks on it. Without the corpus every test is skipped with the reason.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from conftest import REPO
from expert_label_checks import (
    CHECKS,
    FACTS,
    HELPER_FACTS,
    NO_LABELS,
    RUNTIME_FACT,
    SPECIAL_PRIMARY,
    Diagnosed,
    applies,
    check_facts,
    diagnose_trace,
    label_id,
    load_labels,
)

LABELS = load_labels()


def _params(
    check: str | None = None, when: Callable[[dict[str, Any]], bool] | None = None
) -> list[Any]:
    """The labelled traces that have something for ``check`` (all of them for None)."""
    if not LABELS:
        return [pytest.param(None, marks=pytest.mark.skip(reason=NO_LABELS), id="no-corpus")]
    keys = [
        k
        for k, v in LABELS.items()
        if (check is None or applies(check, v)) and (when is None or when(v))
    ]
    return [pytest.param(k, id=label_id(k)) for k in keys]


def _unmapped(label: dict[str, Any]) -> bool:
    return any(
        k not in FACTS and k not in HELPER_FACTS and not RUNTIME_FACT.match(k)
        for k in label.get("facts") or {}
    )


@pytest.fixture(scope="module")
def diagnosed() -> Callable[[str], Diagnosed]:
    """Diagnose a labelled trace on first use; every later check of it reuses the result."""
    cache: dict[str, Diagnosed] = {}

    def get(key: str) -> Diagnosed:
        if key not in cache:
            cache[key] = diagnose_trace(key)
        return cache[key]

    return get


def _assert_agrees(check: str, key: str, diagnosed: Callable[[str], Diagnosed]) -> None:
    bad = CHECKS[check](LABELS[key], diagnosed(key))
    if bad:
        pytest.fail(f"{label_id(key)}: {check}:\n  " + "\n  ".join(bad), pytrace=False)


pytestmark = [pytest.mark.corpus]


@pytest.mark.parametrize("key", _params())
def test_primary(key: str, diagnosed: Callable[[str], Diagnosed]) -> None:
    _assert_agrees("primary", key, diagnosed)


@pytest.mark.parametrize("key", _params("must_report"))
def test_must_report(key: str, diagnosed: Callable[[str], Diagnosed]) -> None:
    _assert_agrees("must_report", key, diagnosed)


@pytest.mark.parametrize("key", _params("must_report_one_of"))
def test_must_report_one_of(key: str, diagnosed: Callable[[str], Diagnosed]) -> None:
    _assert_agrees("must_report_one_of", key, diagnosed)


@pytest.mark.parametrize("key", _params("must_not_report"))
def test_must_not_report(key: str, diagnosed: Callable[[str], Diagnosed]) -> None:
    _assert_agrees("must_not_report", key, diagnosed)


@pytest.mark.parametrize("key", _params("must_not_recommend"))
def test_must_not_recommend(key: str, diagnosed: Callable[[str], Diagnosed]) -> None:
    _assert_agrees("must_not_recommend", key, diagnosed)


@pytest.mark.parametrize("key", _params("facts"))
def test_facts(key: str, diagnosed: Callable[[str], Diagnosed]) -> None:
    _assert_agrees("facts", key, diagnosed)


@pytest.mark.skipif(not LABELS, reason=NO_LABELS)
def test_every_labelled_fact_is_stated() -> None:
    """Every fact of every label maps to a figure the tool states (a result field or a metric
    of that name): a fact added to the labels without one fails here, not silently."""
    assert _params("facts", _unmapped) == []


# --- the labels themselves ---------------------------------------------------------------------


def _rule_ids() -> set[str]:
    import yaml

    ids = set()
    for f in (REPO / "rules").glob("*.yaml"):
        ids.add(str((yaml.safe_load(f.read_text(encoding="utf-8")) or {}).get("id")))
    return ids


@pytest.mark.skipif(not LABELS, reason=NO_LABELS)
def test_labels_name_known_rules_and_valid_patterns() -> None:
    """A typo in a label would make its must_not_* check pass vacuously."""
    known = _rule_ids() | set(SPECIAL_PRIMARY)
    unknown = []
    for key, v in LABELS.items():
        names = (
            [v["primary"]]
            + list(v.get("also_acceptable_primary") or [])
            + list(v.get("must_report") or [])
            + list(v.get("must_report_one_of") or [])
            + list(v.get("may_report") or [])
            + [x["rule"] for x in v.get("must_not_report") or []]
        )
        unknown += [f"{label_id(key)}: {n}" for n in names if n not in known]
        for item in v.get("must_not_recommend") or []:
            re.compile(item["pattern"])
            assert item.get("reason"), f"{label_id(key)}: a must_not_recommend without reason"
        for item in v.get("must_not_report") or []:
            assert item.get("reason"), f"{label_id(key)}: must_not_report {item['rule']}: no reason"
    assert not unknown, "labels name rules that do not exist:\n  " + "\n  ".join(unknown)


# --- the checks themselves (no corpus needed) --------------------------------------------------


def _fake(findings: list[tuple[str, str, list[str]]], **extra: Any) -> Diagnosed:
    return Diagnosed(
        {
            "headline": "h",
            "findings": [
                {"rule": r, "severity": s, "title": r, "recommendations": recs}
                for r, s, recs in findings
            ],
            **extra,
        }
    )


def test_checks_primary_and_reporting() -> None:
    d = _fake(
        [
            ("gpu-idle", "low", []),
            ("launch-bound", "medium", []),
            ("low-precision-unused", "high", []),
        ]
    )
    label = {
        "primary": "launch-bound",
        "must_report": ["low-precision-unused", "gpu-idle"],
        "must_report_one_of": ["host-stall", "launch-bound"],
        "must_not_report": [
            {"rule": "gpu-idle", "reason": "r"},
            {"rule": "launch-bound", "reason": "queued"},
        ],
    }
    assert CHECKS["primary"](label, d) == []  # first medium/high finding in result order
    assert CHECKS["primary"]({"primary": "healthy"}, _fake([("jitter", "low", [])])) == []
    assert CHECKS["primary"]({"primary": "healthy"}, _fake([], primary="not-representative"))
    miss = CHECKS["must_report"](label, d)
    assert len(miss) == 1 and miss[0].startswith("gpu-idle") and "low" in miss[0]
    assert CHECKS["must_report_one_of"](label, d) == []
    assert CHECKS["must_report_one_of"]({"must_report_one_of": ["host-stall"]}, d)
    bad = CHECKS["must_not_report"](label, d)
    assert len(bad) == 1 and "launch-bound reported at medium" in bad[0] and "queued" in bad[0]


def test_checks_advice_matches_any_severity() -> None:
    label = {
        "must_not_recommend": [
            {"text": "TF32", "reason": "V100", "pattern": r"(?i)allow_tf32\s*=\s*True"}
        ]
    }
    assert CHECKS["must_not_recommend"](label, _fake([("x", "info", ["set ALLOW_TF32 = True"])]))
    assert not CHECKS["must_not_recommend"](label, _fake([("x", "high", ["use fp16 AMP"])]))


def test_checks_facts_tolerances_and_unstated() -> None:
    d = Diagnosed(
        {
            "summary": {
                "ranks": [
                    {
                        "kernels": 10,
                        "kernel_time_ns": 1000,
                        "step_time_ns": {"p50": 1030.0},
                        "steps": 1,
                    }
                ]
            },
            "metrics": {"values": {"gpu_busy_pct": 51.4}, "missing": {}},
            "trace": {"devices": ["Tesla V100-SXM2-32GB"]},
        },
        runtime={"cudaFree": (2, 1_500_000, 1_000_600)},
    )
    facts = {
        "n_kernels": 10,
        "kernel_time_ns": 1001,
        "gpu_busy_pct": 50.0,
        "step_time_ns_p50": 1000,
        "steps": 1,
        "device": "Tesla V100-SXM2-32GB",
        "cudaFree_calls": 2,
        "cudaFree_total_ms": 1.5,
        "cudaFree_max_ms": 1.0,
        "cudaMalloc_calls": 0,
        "some_new_fact_ns": 5,
    }
    bad, unstated = check_facts({"facts": facts}, d)
    assert bad == [
        "kernel_time_ns: got 1000, expected 1001 (exact)",
        "cudaFree_max_ms: got 1.0006, expected 1 (±0.0005 ms)",
    ]
    assert unstated == ["some_new_fact_ns"]
    # one step: the window may run to the end of the step's GPU work
    bad, _ = check_facts(
        {"facts": {"steps": 1, "step_time_ns_p50": 900, "last_step_gpu_tail_ns": 130}}, d
    )
    assert bad == []
    bad, _ = check_facts({"facts": {"steps": 1, "step_time_ns_p50": 900}}, d)
    assert bad and bad[0].startswith("step_time_ns_p50")
