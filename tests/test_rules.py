"""Rules against synthetic traces with known bottlenecks (tests/rules/cases/<rule>.yaml).

Each case names a trace (a `tracegen.workloads` preset with knob overrides, or a builder
below), optional `set:` threshold overrides, and what must happen: whether the rule fires, its
severity, its status when it does not fire, and measured metric values. Traces are built,
ingested and measured once per session; each case re-evaluates the rules only.
"""

from __future__ import annotations

import dataclasses
import json
import operator
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import REPO

from tracegen import workloads
from tracegen.serving import serving_builder
from tracegen.synth import KinetoTraceBuilder
from traceinsight.analysis import Analysis
from traceinsight.engine.evaluate import evaluate, load_rules
from traceinsight.ingest import ingest
from traceinsight.metrics import compute_metrics
from traceinsight.result import SEVERITY_RANK

CASES_DIR = Path(__file__).parent / "rules" / "cases"
OPS = {">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt, "==": operator.eq}


def copy_heavy() -> list[KinetoTraceBuilder]:
    """Steps dominated by pageable host-to-device copies with nothing else running."""
    b = KinetoTraceBuilder(rank=0)
    t = 0
    for step in range(4):
        with b.step(step + 1, t, 1_000_000):
            with b.cpu_op("aten::to", t + 10_000, 400_000):
                b.launch(
                    "Memcpy HtoD (Pageable -> Device)",
                    kind="memcpy",
                    cpu_start=t + 20_000,
                    cpu_dur=380_000,
                    gpu_start=t + 30_000,
                    gpu_dur=370_000,
                    bytes=256 << 20,
                )
            with b.cpu_op("aten::mm", t + 420_000, 50_000):
                b.launch(
                    "nvjet_tst_128x256",
                    cpu_start=t + 430_000,
                    gpu_start=t + 440_000,
                    gpu_dur=500_000,
                )
        t += 1_000_000
    return [b]


def cpu_run(
    *, python_us: int = 100, input_us: int = 0, sync_us: int = 0, mm_us: int = 0
) -> list[KinetoTraceBuilder]:
    """A CPU-only run (no GPU activity): four 1 ms steps, each with ``input_us`` in the data
    loader, ``sync_us`` in aten::item, ``mm_us`` in aten::mm, ``python_us`` in no op and the
    rest in aten::relu."""
    b = KinetoTraceBuilder(rank=0)
    us, t = 1_000, 0
    for step in range(4):
        with b.step(step + 1, t, 1_000 * us):
            at = t
            if input_us:
                loader = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
                with b.annotation(loader, at, input_us * us):
                    pass
                at += input_us * us
            for name, n in (("aten::item", sync_us), ("aten::mm", mm_us)):
                if n:
                    b.op(name, at, n * us)
                    at += n * us
            b.op("aten::relu", at, 1_000 * us - (at - t) - python_us * us)
        t += 1_000 * us
    return [b]


CPU_RUNS = {
    "cpu_healthy": {},
    "cpu_python_bound": {"python_us": 600},
    "cpu_python_some": {"python_us": 300},
    "cpu_input_bound": {"input_us": 300},
    "cpu_sync_some": {"sync_us": 80},
    "cpu_matmul_bound": {"mm_us": 500},
}


def _serving(**kw: Any):
    return lambda: [serving_builder(**kw)[0]]


BUILDERS = {
    "copy_heavy": copy_heavy,
    **{k: (lambda kw=kw: cpu_run(**kw)) for k, kw in CPU_RUNS.items()},
    # LLM serving: decode at 85% of the H100 roof, prefill at ~75% MFU, 0.2 ms between steps
    "serving_at_roof": _serving(decode_kernel_ns=25_000),
    "serving_tight": _serving(decode_kernel_ns=25_000, gap_ns=20_000, prefill_kernel_ns=2_000_000),
    "serving_latency": _serving(decode_kernel_ns=200_000),
    "serving_jitter": _serving(decode_kernel_ns=25_000, slow_every=4, slow_factor=3),
    "serving_gaps": _serving(decode_kernel_ns=50_000, gap_ns=1_500_000),
}
_MEASURED: dict[str, tuple[Analysis, Any]] = {}


def measured(spec: dict[str, Any], tmp_root: Path) -> tuple[Analysis, Any]:
    key = json.dumps(spec, sort_keys=True)
    if key not in _MEASURED:
        spec = dict(spec)
        if "builder" in spec:
            builders = BUILDERS[spec.pop("builder")]()
        else:
            w = dataclasses.replace(workloads.PRESETS[spec.pop("preset")], **spec)
            builders = workloads.build_ranks(w)
        d = tmp_root / f"t{len(_MEASURED)}"
        d.mkdir(parents=True)
        paths = [b.write(d / f"rank-{i}.json") for i, b in enumerate(builders)]
        an = Analysis(ingest(paths, d / "store", quiet=True))
        _MEASURED[key] = (an, compute_metrics(an))
    return _MEASURED[key]


def load_cases() -> list[tuple[str, str, dict[str, Any]]]:
    out = []
    for f in sorted(CASES_DIR.glob("*.yaml")):
        doc = yaml.safe_load(f.read_text())
        for name, case in doc["cases"].items():
            out.append((doc["rule"], name, case))
    return out


CASES = load_cases()


@pytest.mark.parametrize("rule_id,name,case", CASES, ids=[f"{r}_{n}" for r, n, _ in CASES])
def test_rule_case(
    rule_id: str, name: str, case: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> None:
    an, ms = measured(case["trace"], _root(tmp_path_factory))
    rules = load_rules(overrides=case.get("set", []))
    rule = [r for r in rules if r.id == rule_id]
    assert rule, f"no rule {rule_id}"
    ev = evaluate(rule, ms, an)
    exp = case["expect"]
    for metric, (op, value) in (exp.get("metrics") or {}).items():
        got = ms.values.get(metric)
        assert got is not None and OPS[op](got, value), f"{metric} = {got}, expected {op} {value}"
    assert not ev.errors, ev.errors
    if exp.get("listed") is False:  # out of the rule's scope: neither evaluated nor listed
        assert not exp["fires"] and not ev.findings and not ev.statuses, ev.statuses
        return
    if exp["fires"]:
        assert len(ev.findings) == 1, ev.statuses
        f = ev.findings[0]
        if "severity" in exp:
            assert f.severity == exp["severity"], f.message
        # every finding explains itself: message, evidence with thresholds, recommendations
        assert f.message and f.recommendations
        m = f.evidence[0]
        assert m["kind"] == "measurements" and all(r["value"] is not None for r in m["rows"])
        assert f.impact_pct is None or 0 <= f.impact_pct <= 100
    else:
        assert not ev.findings, [f.message for f in ev.findings]
        (status,) = ev.statuses
        if "status" in exp:
            assert status.status == exp["status"], status
        if "hint_contains" in exp:
            assert exp["hint_contains"] in (status.hint or "") + (status.reason or ""), status


_ROOT: list[Path] = []


def _root(factory: pytest.TempPathFactory) -> Path:
    if not _ROOT:
        _ROOT.append(factory.mktemp("rule-traces"))
    return _ROOT[0]


def test_every_rule_has_cases_and_docs() -> None:
    rules = load_rules()
    ids = {r.id for r in rules}
    required = {
        "memory-bound",
        "compute-bound",
        "comm-bound",
        "fragmentation",
        "jitter",
        "launch-bound",
        "input-bound",
        "host-sync",
        "memory-pressure",
        "low-precision-unused",
        "straggler",
    }
    assert required <= ids
    by_rule: dict[str, set[str]] = {}
    for rule_id, _name, case in CASES:
        by_rule.setdefault(rule_id, set()).add("fail" if case["expect"]["fires"] else "pass")
    for r in rules:
        assert by_rule.get(r.id) == {"pass", "fail"}, f"{r.id} needs a pass and a fail case"
        assert all(r.doc.get(k) for k in ("symptom", "why", "fix"))
        assert r.recommendations and all(t.help for t in r.thresholds.values())


@pytest.mark.parametrize("preset", ["healthy", "mi300x", "compute_bound"])
def test_healthy_baselines_trigger_nothing_above_low(
    preset: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    an, ms = measured({"preset": preset}, _root(tmp_path_factory))
    ev = evaluate(load_rules(), ms, an)
    assert not ev.errors
    loud = [
        f"{f.rule} ({f.severity})"
        for f in ev.findings
        if SEVERITY_RANK[f.severity] < SEVERITY_RANK["low"]
    ]
    assert not loud


def test_findings_are_ordered_by_impact(tmp_path_factory: pytest.TempPathFactory) -> None:
    an, ms = measured({"preset": "straggler"}, _root(tmp_path_factory))
    ev = evaluate(load_rules(), ms, an)
    impacts = [f.impact_pct or 0.0 for f in ev.findings]
    assert impacts == sorted(impacts, reverse=True) and len(impacts) >= 2


def test_user_rules_and_bad_rule_files(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    from traceinsight.errors import ConfigError

    # GIVEN a user rule that replaces a shipped one and adds a new one
    shipped = yaml.safe_load((REPO / "rules" / "launch-bound.yaml").read_text())
    shipped["thresholds"]["min_idle_launch_pct"]["default"] = 99.0
    (tmp_path / "launch-bound.yaml").write_text(yaml.safe_dump(shipped))
    mine = dict(
        shipped,
        id="many-kernels",
        title="Many kernels per step",
        fires_if=[{"metric": "kernels_per_step", "op": ">=", "value": 100}],
        severity=[],
        impact=None,
        headline=None,
        message="{kernels_per_step} kernels per step",
        evidence=[],
    )
    (tmp_path / "many-kernels.yaml").write_text(yaml.safe_dump(mine))
    rules = {r.id: r for r in load_rules([tmp_path])}
    assert rules["launch-bound"].threshold_values()["min_idle_launch_pct"] == 99.0
    an, ms = measured({"preset": "launch_bound"}, _root(tmp_path_factory))
    ev = evaluate([rules["launch-bound"], rules["many-kernels"]], ms, an)
    assert [f.rule for f in ev.findings] == ["many-kernels"]
    # AND invalid files are refused with the file named
    bad = dict(mine, id="bad-one", fires_if=[{"metric": "no_such_metric", "op": ">=", "value": 1}])
    (tmp_path / "bad-one.yaml").write_text(yaml.safe_dump(bad))
    with pytest.raises(ConfigError, match="unknown metric 'no_such_metric'") as e:
        load_rules([tmp_path])
    assert "bad-one.yaml" in e.value.one_line()
    (tmp_path / "bad-one.yaml").write_text(yaml.safe_dump(dict(mine, id="bad-one", colour="red")))
    with pytest.raises(ConfigError, match="unknown keys"):
        load_rules([tmp_path])
    (tmp_path / "bad-one.yaml").unlink()
    with pytest.raises(ConfigError, match="no threshold"):
        load_rules(overrides=["launch-bound.nope=3"])
    with pytest.raises(ConfigError, match=r"RULE\.THRESHOLD=NUMBER"):
        load_rules(overrides=["launch-bound"])


def test_a_crashing_rule_is_recorded_and_others_still_run(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch
) -> None:
    an, ms = measured({"preset": "launch_bound"}, _root(tmp_path_factory))
    rules = load_rules()
    broken = next(r for r in rules if r.id == "gpu-idle")
    monkeypatch.setattr(broken, "message", "{gpu_idle_pct:.1q}")  # an invalid format spec
    ev = evaluate(rules, ms, an)
    assert [e["rule"] for e in ev.errors] == ["gpu-idle"]
    assert "launch-bound" in [f.rule for f in ev.findings]


def test_rules_doc_is_current() -> None:
    from traceinsight.engine.evaluate import rules_markdown

    assert (REPO / "docs" / "RULES.md").read_text() == rules_markdown(load_rules()) + "\n"
