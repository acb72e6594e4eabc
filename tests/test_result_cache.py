"""A diagnosis is cached in the store's ``derived/`` folder and read back only when nothing it
depends on changed (the store's sources, the code, the rules and thresholds, the options)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import SAMPLES, invoke

import traceinsight.diagnose as dg
from traceinsight.ingest import ingest
from traceinsight.metrics.options import RooflineOptions


@pytest.fixture()
def store(tmp_path: Path):
    return ingest(
        [SAMPLES / "synthetic_h100_launch_bound.json.gz"], tmp_path / "s.tistore", quiet=True
    )


def _no_compute(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*a, **k):
        raise AssertionError("the analysis ran again")

    monkeypatch.setattr(dg, "compute_metrics", boom)


def test_second_diagnosis_is_read_back(store, monkeypatch: pytest.MonkeyPatch) -> None:
    first = dg.diagnose(store, command=["traceinsight", "diagnose", "a"])
    files = list((store.path / "derived").iterdir())
    key = dg.result_key(store)
    assert [f.name for f in files] == [f"diagnosis-{key}.json"]
    _no_compute(monkeypatch)
    again = dg.diagnose(store, command=["traceinsight", "diagnose", "b"])
    assert again.command == ["traceinsight", "diagnose", "b"]
    a, b = first.to_dict(), again.to_dict()
    a.pop("command"), b.pop("command")
    assert a == b
    assert again.findings[0].rule == "launch-bound"


@pytest.mark.parametrize("change", ["threshold", "options", "no-cache"])
def test_a_change_recomputes(store, change: str, monkeypatch: pytest.MonkeyPatch) -> None:
    dg.diagnose(store)
    calls = []
    real = dg.compute_metrics
    monkeypatch.setattr(dg, "compute_metrics", lambda *a, **k: calls.append(1) or real(*a, **k))
    if change == "threshold":
        r = dg.diagnose(store, overrides=["launch-bound.min_idle_launch_pct=99.5"])
        assert "launch-bound" not in [f.rule for f in r.findings]
    elif change == "options":
        dg.diagnose(store, options=RooflineOptions(device="h100-sxm"))
    else:
        dg.diagnose(store, cache=False)
    assert calls == [1]


def test_a_damaged_cache_file_is_recomputed_and_replaced(store) -> None:
    dg.diagnose(store)
    (f,) = (store.path / "derived").iterdir()
    f.write_text('{"schema": "traceinsight.result", "trunc')
    r = dg.diagnose(store)
    assert r.findings[0].rule == "launch-bound"
    head, body = f.read_text().split("\n", 1)
    assert head.startswith("traceinsight-derived sha256=")
    assert json.loads(body)["headline"] == r.headline


def test_an_edited_cache_file_is_never_shown(store) -> None:
    """A cached result edited by hand (valid JSON, a verdict of someone's choosing) no longer
    matches the digest it was saved with: it is recomputed, never shown as the diagnosis."""
    first = dg.diagnose(store)
    (f,) = (store.path / "derived").iterdir()
    head, body = f.read_text().split("\n", 1)
    doc = json.loads(body)
    doc["headline"] = "All is well: nothing to fix"
    f.write_text(head + "\n" + json.dumps(doc))
    r = dg.diagnose(store)
    assert r.headline == first.headline != "All is well: nothing to fix"


def test_at_most_a_few_results_are_kept(store) -> None:
    for k in range(dg_keep() + 3):
        dg.diagnose(store, overrides=[f"jitter.min_cv_pct={10 + k}"])
    assert len(list((store.path / "derived").iterdir())) == dg_keep()


def dg_keep() -> int:
    from traceinsight.store.core import DERIVED_KEEP

    return DERIVED_KEEP


def test_cli_recompute_flag(store, monkeypatch: pytest.MonkeyPatch) -> None:
    invoke(["diagnose", store.path])
    _no_compute(monkeypatch)
    invoke(["diagnose", store.path])  # read back
    res = invoke(["diagnose", store.path, "--recompute"], exit_code=None)
    assert res.exit_code != 0 and "the analysis ran again" in res.stderr, res.stderr
