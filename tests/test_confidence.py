"""Every finding says what it rests on and how far to trust it, in every output; compare makes
a per-FLOP statement only where the FLOPs stand for most of the work on both sides."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_compare import BASE, layered, result
from test_compare_comparability import mm_shapes
from test_steps import MS, Steps

from traceinsight.compare.comparability import MIN_MODELLED_PCT
from traceinsight.compare.explain import compare
from traceinsight.diagnose import diagnose
from traceinsight.engine.confidence import assess
from traceinsight.ingest import ingest
from traceinsight.render.html import render_html
from traceinsight.render.markdown import render_markdown
from traceinsight.render.terminal import render


def test_levels_follow_steps_coverage_and_caps() -> None:
    v = {"steps": 8.0, "steps_representative": 8.0, "ranks_analysed": 2.0}
    c = assess(["step_time_cv_pct"], v, None)
    assert c["level"] == "high" and c["rests_on"] == {"steps": 8, "ranks": 2}
    assert assess(["step_time_cv_pct"], {**v, "steps_representative": 4.0}, None)["level"] == (
        "medium"
    )
    low = assess(["step_time_cv_pct"], {**v, "steps_representative": 2.0}, None)
    assert low["level"] == "low" and low["reasons"] == ["fewer than 3 representative steps"]
    mfu = assess(["mfu_pct"], {**v, "flops_modelled_pct": 37.0}, None)
    assert mfu["rests_on"]["modelled_pct"] == 37.0 and mfu["level"] == "low"
    assert assess(["step_time_cv_pct"], v, "Severity capped at medium")["level"] == "low"


@pytest.fixture(scope="module")
def jitter(tmp_path_factory):
    d = tmp_path_factory.mktemp("conf")
    store = ingest([Steps(n=8, stall={4: 6 * MS}).build().write(d / "t.json")], d / "s", quiet=True)
    return diagnose(store, cache=False)


def test_every_finding_has_a_confidence_shown_everywhere(jitter) -> None:
    assert jitter.findings
    for f in jitter.findings:
        assert f.confidence and f.confidence["level"] in ("high", "medium", "low")
        assert f.confidence["rests_on"]["steps"] == 8
    j = next(f for f in jitter.findings if f.rule == "jitter")
    line = "confidence high: rests on 8 steps, 1 rank"
    assert j.confidence["level"] == "high"
    assert line in render(jitter, width=200)
    assert line in render_markdown(jitter)
    assert line in render_html(jitter)


def test_per_flop_statements_need_half_the_time_modelled(tmp_path: Path) -> None:
    # the same work both sides, different shapes: modelled on every layer -> per FLOP
    a = result(layered(tmp_path, "a", BASE, shapes=mm_shapes(512)), tmp_path)
    b = result(
        layered(tmp_path, "b", {k: 2 * v for k, v in BASE.items()}, shapes=mm_shapes(1024)),
        tmp_path,
    )
    assert compare(a, b)["comparability"]["normalised_by"] == "flop"
    # only the embedding (10% of the kernel time) has shapes: no per-FLOP statement
    few = {"Embed": mm_shapes(512)["Embed"]}
    few2 = {"Embed": mm_shapes(1024)["Embed"]}
    a = result(layered(tmp_path, "a2", BASE, shapes=few), tmp_path)
    b = result(layered(tmp_path, "b2", {k: 2 * v for k, v in BASE.items()}, shapes=few2), tmp_path)
    assert a.metrics["values"]["flops_modelled_pct"] < MIN_MODELLED_PCT
    c = compare(a, b)
    assert c["comparability"]["normalised"] is None
    assert "per modelled FLOP" not in c["headline"]
