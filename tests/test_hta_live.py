"""Live parity: run the installed Holistic Trace Analysis on the project's own samples.

``test_parity_hta.py`` checks against stored HTA results for the shared corpus; this file runs
HTA itself (the ``hta`` extra) on the bundled synthetic samples, single- and multi-rank, and
requires traceinsight's HTA-definition breakdown (``hta_breakdown``) to give the same temporal
breakdown, kernel-type sums and communication/computation overlap, rank by rank. It skips when
HTA is not installed.
"""

from __future__ import annotations

import logging
import math
import shutil
import warnings
from pathlib import Path

import pytest
from conftest import SAMPLES

from traceinsight.analysis.hta_compat import hta_breakdown
from traceinsight.ingest import load

SAMPLE_NAMES = [
    "synthetic_h100_healthy.json.gz",
    "synthetic_h100_launch_bound.json.gz",
    "synthetic_mi300x.json.gz",
    "synthetic_h100_fp32_gemms.json.gz",
    "synthetic_comm_bound_4rank",
    "synthetic_straggler_4rank",
]


def _files(name: str) -> list[Path]:
    p = SAMPLES / name
    return sorted(p.iterdir()) if p.is_dir() else [p]


@pytest.mark.parametrize("name", SAMPLE_NAMES)
def test_live_hta_agrees_on_samples(name: str, tmp_path: Path) -> None:
    trace_analysis = pytest.importorskip(
        "hta.trace_analysis", reason="HTA (the 'hta' extra) is not installed"
    )
    files = _files(name)
    for f in files:  # HTA reads a whole folder
        shutil.copy(f, tmp_path / f.name)
    logging.getLogger("hta").setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ta = trace_analysis.TraceAnalysis(trace_dir=str(tmp_path))
        tb = ta.get_temporal_breakdown(visualize=False)
        kt, _ = ta.get_gpu_kernel_breakdown(
            visualize=False, num_kernels=5, duration_ratio=1.0, include_memory_kernels=True
        )
        ov = ta.get_comm_comp_overlap(visualize=False)
    ours = hta_breakdown(load(files, quiet=True))
    assert [o.rank for o in ours] == [int(r) for r in tb["rank"]] == list(range(len(files)))
    for o, (_, r) in zip(ours, tb.iterrows()):
        assert o.idle_pct == pytest.approx(float(r["idle_time_pctg"]), abs=0.006)
        assert o.compute_pct == pytest.approx(float(r["compute_time_pctg"]), abs=0.006)
        assert o.non_compute_pct == pytest.approx(float(r["non_compute_time_pctg"]), abs=0.006)
    got: dict[str, float] = {}
    for o in ours:
        for k, v in o.kernel_types_us.items():
            got[k] = got.get(k, 0) + v
    want = {str(k): float(v) for k, v in zip(kt["kernel_type"], kt["sum"])}
    assert {k: v for k, v in got.items() if v} == {k: v for k, v in want.items() if v}
    theirs = [None if math.isnan(x) else float(x) for x in ov["comp_comm_overlap_pctg"]]
    assert [o.comm_comp_overlap_pct for o in ours] == theirs
