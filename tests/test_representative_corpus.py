"""One definition of the representative steps on every shared trace: the diagnosis' step
statistics, the per-rank summary and a compare of the trace with itself are over the same
steps; the mean is never above the max; the steps listed as left out are not in them."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import TRACES, corpus_id, corpus_kineto_files, requires_corpus
from test_slices import check_one_definition

from traceinsight.diagnose import diagnose
from traceinsight.ingest import ingest

NSYS = sorted((TRACES / "nsys").rglob("*.sqlite")) if (TRACES / "nsys").is_dir() else []
FILES = corpus_kineto_files() + NSYS


def _id(p: Path) -> str:
    return corpus_id(p) if "kineto" in p.parts else "nsys:" + p.name


@requires_corpus
@pytest.mark.corpus
@pytest.mark.parametrize("path", FILES, ids=[_id(p) for p in FILES])
def test_the_same_representative_steps_everywhere(path: Path) -> None:
    r = diagnose(ingest([path], quiet=True))
    check_one_definition(r)
    v = r.metrics["values"]
    if r.trace.get("has_step_markers") is False and v.get("has_gpu"):
        sl = r.rollups.get("slice")
        assert sl, "a capture without step markers has its slice rates"
        assert v.get("step_time_p50_ns") is None
        assert sl["kernel_ns_per_s"] == pytest.approx(1e9 * sl["kernel_ns"] / sl["span_ns"])
        # the advice in the input's own vocabulary
        want = "--capture-range=cudaProfilerApi" if path.suffix == ".sqlite" else "prof.step()"
        assert want in sl["hint"]
        hints = [d["hint"] for d in r.diagnostics if d["code"] == "no-step-markers"]
        assert hints and all(want in h for h in hints)
