"""What a compare says and how: labels that tell same-named inputs apart, one sentence per
comparability difference, numbered module instances grouped into one contributor, shares of
the change signed like their contributor, notes on the idle causes the trace cannot assign,
and no table of nothing but the ``[no module]`` bucket.

The real case is two Qwen1.5-0.5B traces of the shared corpus with the same file name, one
from an H100 and one from an MI300X (skipped without the corpus); the mechanisms also run on
hand-made contributors, with and without the corpus.
"""

from __future__ import annotations

import json
import re

import pytest
from conftest import KINETO, invoke, requires_corpus

from traceinsight.compare.explain import group_instances, module_type_path
from traceinsight.compare.notes import contributor_notes
from traceinsight.render.compare_markdown import render_compare_markdown
from traceinsight.render.html import render_compare_html
from traceinsight.render.html.compare_page import build_compare_view
from traceinsight.render.terminal import render_compare
from traceinsight.util.pathlabel import distinct_labels

QWEN = "tracelens/traces/{}/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"


def test_labels_are_the_shortest_distinguishing_suffix() -> None:
    assert distinct_labels(["/w/h100/q.json.gz", "/w/mi300/q.json.gz"]) == [
        "h100/q.json.gz",
        "mi300/q.json.gz",
    ]
    assert distinct_labels(["/a/x.json", "/b/y.json"]) == ["x.json", "y.json"]  # names differ
    assert distinct_labels(["/r/a/run/t.json", "/r/b/run/t.json"]) == [
        "a/run/t.json",
        "b/run/t.json",
    ]
    # per path: a name no other path has stays bare
    assert distinct_labels(["/a/rank-0.json", "/b/rank-0.json", "/b/rank-1.json"]) == [
        "a/rank-0.json",
        "b/rank-0.json",
        "rank-1.json",
    ]
    assert distinct_labels(["/a/t.json", "/a/t.json"]) == ["t.json", "t.json"]  # one file twice


def _c(name: str, a: int, b: int, kind: str = "layer", status: str = "paired") -> dict:
    return {
        "kind": kind,
        "name": name,
        "before_ns": a,
        "after_ns": b,
        "delta_ns": b - a,
        "status": status,
    }


def test_numbered_instances_are_one_contributor() -> None:
    rows = [
        *[_c(f"M_0/Block_{i}/Attention_{i}", 100, 80) for i in range(24)],
        *[_c(f"M_0/Block_{i}/Mlp_{i}/Linear_{2 * i}", 50, 60) for i in range(24)],
        *[_c(f"M_0/Block_{i}/Mlp_{i}/Linear_{2 * i + 1}", 40, 45) for i in range(24)],
        _c("M_0/Head_0/Linear_48", 30, 20),  # a Linear at another place: not in the group
        _c("M_0/Norm_0", 10, 12),  # a single instance keeps its path
        _c("[no module]", 7, 9),
        _c("GPU idle: launch", 5, 3, kind="idle"),
    ]
    out = group_instances(rows)
    by = {r["name"]: r for r in out}
    assert set(by) == {
        "Attention ×24",
        "Mlp/Linear ×48",
        "M_0/Head_0/Linear_48",
        "M_0/Norm_0",
        "[no module]",
        "GPU idle: launch",
    }
    att = by["Attention ×24"]
    assert (att["before_ns"], att["after_ns"], att["delta_ns"]) == (2400, 1920, -480)
    assert att["instances"] == 24 and att["module_type_path"] == "M/Block/Attention"
    assert att["paths"][0] == "M_0/Block_0/Attention_0" and len(att["paths"]) == 24
    assert by["Mlp/Linear ×48"]["delta_ns"] == 24 * 10 + 24 * 5
    assert sum(r["delta_ns"] for r in out) == sum(r["delta_ns"] for r in rows)  # still exact
    assert module_type_path("Qwen2Model_0/Qwen2DecoderLayer_3/Qwen2Attention_3") == (
        "Qwen2Model/Qwen2DecoderLayer/Qwen2Attention"
    )
    # added on one side only: the group keeps the status its instances share
    new = group_instances([_c(f"B_{i}/X_{i}", 0, 5, status="added") for i in range(3)])
    assert [(r["name"], r["status"]) for r in new] == [("X ×3", "added")]


def test_unknown_idle_gets_a_note_when_it_is_a_large_change() -> None:
    rows = [_c("A_0", 100, 50), _c("GPU idle: unknown", 0, 19_400_000, kind="idle")]
    (note,) = contributor_notes(rows)
    assert note["name"] == "GPU idle: unknown" and note["rank"] == 1
    assert note["text"].startswith("GPU idle: unknown (+19.4 ms, the 1st largest change) is")
    assert "no recorded launch" in note["text"] and "nsys profile -t cuda,nvtx" in note["text"]
    # unchanged, or beyond the largest changes: no note
    assert contributor_notes([_c("GPU idle: unknown", 5, 5, kind="idle")]) == []
    many = [_c(f"A_{i}", 0, 1000) for i in range(12)] + [_c("GPU idle: unknown", 0, 1, kind="idle")]
    assert contributor_notes(many) == []


@pytest.fixture(scope="module")
def qwen(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The compare JSON of the H100 and MI300X Qwen traces, through the CLI."""
    a, b = (KINETO / QWEN.format(gpu) for gpu in ("h100", "mi300"))
    if not a.is_file() or not b.is_file():
        pytest.skip("the shared corpus is absent")
    out = tmp_path_factory.mktemp("qwen") / "c.json"
    invoke(["compare", a, b, "--json", out])
    return json.loads(out.read_text())


@requires_corpus
def test_qwen_sides_are_told_apart(qwen: dict) -> None:
    assert qwen["before"]["label"] == "h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
    assert qwen["after"]["label"] == "mi300/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
    text = render_compare(qwen, width=120)
    assert text.splitlines()[0] == (
        "traceinsight compare — h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz  →  "
        "mi300/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
    )
    html = render_compare_html(qwen)
    assert re.search(r"<title>h100/Qwen\S+ → mi300/Qwen", html)


@requires_corpus
def test_qwen_caution_reads_as_one_sentence(qwen: dict) -> None:
    device = next(d for d in qwen["comparability"]["differences"] if d["what"] == "device")
    assert device["invalidated"] == ["absolute step time", "per-kernel names"]
    sentence = (
        "absolute step time and per-kernel names, because the step time then measures the "
        "systems, not the code, and each vendor's libraries name their kernels differently"
    )
    assert device["invalidates"] == sentence
    flat = " ".join(render_compare(qwen, width=400).split())
    assert f"invalidates {sentence}" in flat
    assert "compares the systems, not the code; per-kernel names" not in flat


@requires_corpus
def test_qwen_attention_instances_are_grouped(qwen: dict) -> None:
    rows = qwen["contributors"]
    names = [r["name"] for r in rows]
    assert not [n for n in names if re.search(r"Qwen2Attention_\d+$", n)]
    att = next(r for r in rows if r["name"] == "Qwen2Attention ×24")
    assert att["instances"] == 24 and att["delta_ns"] == -2_454_406  # 12.4 ms → 9.99 ms
    assert names[0] == "Qwen2Attention ×24"  # the largest change, not 24 small ones
    assert "Qwen2DecoderLayer/Qwen2RMSNorm ×48" in names  # apart from the model's final norm
    assert "Qwen2Model_0/Qwen2RMSNorm_48" in names
    assert sum(r["delta_ns"] for r in rows) == qwen["total_delta_ns"]
    assert "Qwen2Attention ×24" in qwen["headline"]
    assert "`Qwen2Attention ×24`" in render_compare_markdown(qwen)


@requires_corpus
def test_qwen_shares_take_the_sign_of_their_contributor(qwen: dict) -> None:
    total = qwen["total_delta_ns"]
    assert total < 0  # after is faster
    for r in qwen["contributors"]:
        assert r["share_pct"] == pytest.approx(100.0 * r["delta_ns"] / abs(total))
        assert (r["share_pct"] > 0) == (r["delta_ns"] > 0) or r["delta_ns"] == 0
    assert sum(r["share_pct"] for r in qwen["contributors"]) == pytest.approx(-100.0)
    sync = next(r for r in qwen["contributors"] if r["name"] == "GPU idle: sync")
    assert sync["delta_ns"] == -1_810_610 and round(sync["share_pct"], 1) == -72.8  # was +72.8%
    html = render_compare_html(qwen)
    row = re.search(
        r"<tr><td[^>]*><span[^>]*>idle</span></td><td[^>]*><code>GPU idle: sync"
        r"</code></td>(.*?)</tr>",
        html,
        re.S,
    )
    assert row and row.group(1).rstrip().endswith(">−72.8%</td>"), row and row.group(1)


@requires_corpus
def test_notes_are_rendered_everywhere(qwen: dict) -> None:
    c = dict(qwen)
    c["notes"] = contributor_notes(
        [*c["contributors"], _c("GPU idle: unknown", 0, 19_400_000, kind="idle")]
    )
    assert len(c["notes"]) == 1
    assert "Note: GPU idle: unknown (+19.4 ms, the 1st largest change)" in render_compare(c)
    assert "_Note_: GPU idle: unknown (+19.4 ms" in render_compare_markdown(c)
    html = render_compare_html(c)
    assert '<p class="note contributor-note">GPU idle: unknown (+19.4 ms' in html
    assert "contributor-note" not in render_compare_html(qwen)  # no unknown idle: no note


@requires_corpus
def test_a_table_of_nothing_but_the_bucket_is_not_shown(qwen: dict) -> None:
    c = dict(qwen)
    c["layers"] = [
        {"name": "[no module]", "before_ns": 10, "after_ns": 12, "delta_ns": 2, "status": "same"}
    ]
    view = build_compare_view(c)
    assert view["layers"]["empty"].startswith("No nn.Module hierarchy on either side")
    html = render_compare_html(c)
    assert 'id="tbl-cmp-layers"' not in html
    assert 'id="tbl-cmp-layers"' in render_compare_html(qwen)  # 300 module paths: shown
