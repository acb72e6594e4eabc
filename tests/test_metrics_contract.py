"""Metric conformance: every declared metric has a unit and a description, is declared by a
module of one of the ``GROUPS``, and is computed (not missing) on at least one sample run.

A metric declared but never computed on any of :data:`RUNS` fails
:func:`test_every_metric_is_computed_on_a_sample` (add it to a group's ``compute``, or a sample
run that has what it needs); a module that declares metrics outside every group fails
:func:`test_every_metric_belongs_to_a_group`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tracegen.serving import build_serving
from tracegen.snapshot import fragmented_oom, leaky_loop
from traceinsight.diagnose import diagnose
from traceinsight.ingest import ingest
from traceinsight.metrics import GROUPS, REGISTRY
from traceinsight.options import RooflineOptions

SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces"

#: unit words a metric may have (the result's ``metrics.units``)
UNITS = {"%", "bytes", "count", "ns", "ratio", "TFLOP/s", "GB/s", "bool", "rank"}

#: the sample runs: name -> (inputs in a folder, options)
RUNS = {
    **{
        p.name.split(".")[0]: (lambda d, p=p: [p], None)
        for p in sorted(SAMPLES.iterdir())
        if p.name.startswith(("synthetic_", "cpu_"))
    },
    # the MFU estimate needs the model size and the tokens per step (--params, --tokens-per-step)
    "mfu": (
        lambda d: [SAMPLES / "synthetic_h100_healthy.json.gz"],
        RooflineOptions(params=7e9, tokens_per_step=4096),
    ),
    "snapshot_oom": (lambda d: [fragmented_oom().write(d / "oom.pickle")], None),
    "snapshot_leak": (lambda d: [leaky_loop().write(d / "leak.pickle")], None),
    # an LLM serving trace (engine steps, prefill and decode): the serving group's metrics
    "serving": (lambda d: [_serving(d / "serving.json")], None),
}


def _serving(path: Path) -> Path:
    build_serving(path)
    return path


@pytest.fixture(scope="module")
def computed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, set[str]]:
    """Per run, the metrics with a value (run level or on some rank)."""
    out = {}
    for name, (inputs, options) in RUNS.items():
        d = tmp_path_factory.mktemp(name)
        r = diagnose(ingest(inputs(d), d / "s.tistore", quiet=True), options=options, cache=False)
        m = r.metrics
        got = {k for k, v in m["values"].items() if v is not None}
        for vals in (m.get("per_rank") or {}).values():
            got |= {k for k, v in vals.items() if v is not None}
        assert not r.extra or not (r.extra.get("metric_errors") or []), name
        out[name] = got
    return out


def test_every_metric_has_a_unit_and_a_description() -> None:
    assert REGISTRY
    for name, info in REGISTRY.items():
        assert info.name == name
        assert info.unit in UNITS, (name, info.unit)
        assert info.doc.strip() and len(info.doc.split()) >= 2, (name, info.doc)
        if info.coverage:
            assert info.coverage in REGISTRY, (name, info.coverage)


def test_every_metric_belongs_to_a_group() -> None:
    names = [g.name for g in GROUPS]
    assert len(names) == len(set(names))
    modules = {m.__name__ for g in GROUPS for m in g.modules}
    outside = {n: i.module for n, i in REGISTRY.items() if i.module not in modules}
    assert outside == {}, "metrics declared by a module of no group in metrics.GROUPS"


def test_every_metric_is_computed_on_a_sample(computed: dict[str, set[str]]) -> None:
    seen = set().union(*computed.values())
    never = sorted(set(REGISTRY) - seen)
    assert never == [], f"declared metrics no sample run computes: {never}"
    assert computed["mfu"] - computed["synthetic_h100_healthy"] == {"mfu_estimate_pct"}
