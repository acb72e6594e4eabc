"""Copy advice by copy kind (class 5 of the "trustworthy diagnoses" issue).

Pinned-memory advice is for pageable host copies only; device-to-device copies (often the
majority) get their own evidence and advice; pinned copies that still run alone get prefetch
advice; copies that kernels overlap are not a finding.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import KINETO, requires_corpus

from tracegen.synth import KinetoTraceBuilder
from traceinsight.analysis import Analysis
from traceinsight.diagnose import diagnose
from traceinsight.engine.evaluate import evaluate, load_rules
from traceinsight.ingest import ingest
from traceinsight.metrics import compute_metrics
from traceinsight.metrics.copies import classify

PIN_ADVICE = "pin the host memory"
D2D_ADVICE = "Device-to-device copies"
PREFETCH_ADVICE = "side stream"
BUCKET_ADVICE = "gradient_as_bucket_view=True"


@pytest.mark.parametrize(
    "name,direction,kind,want_dir",
    [
        ("Memcpy HtoD (Pageable -> Device)", "HtoD", "pageable", "HtoD"),
        ("Memcpy DtoH (Device -> Pageable)", None, "pageable", "DtoH"),
        ("Memcpy HtoD (Pinned -> Device)", "HtoD", "pinned", "HtoD"),
        ("Memcpy DtoH (Device -> Pinned)", "DtoH", "pinned", "DtoH"),
        ("Memcpy DtoD (Device -> Device)", "DtoD", "d2d", "DtoD"),
        ("Memcpy PtoP (Device -> Device)", "PtoP", "peer", "PtoP"),
        ("Memcpy HtoD (Host -> Device)", "HtoD", "host", "HtoD"),  # ROCm: pinned or not unknown
        ("Memcpy DtoH (Device -> Host)", None, "host", "DtoH"),
        ("Memcpy", None, "other", None),
    ],
)
def test_copy_kinds_from_real_names(
    name: str, direction: str | None, kind: str, want_dir: str | None
) -> None:
    kinds, dirs = classify(np.array([name], dtype=object), np.array([direction], dtype=object))
    assert (kinds[0], dirs[0]) == (kind, want_dir)


def _copies(
    copy: str, *, overlapped: bool = False, training: bool = False, steps: int = 4
) -> KinetoTraceBuilder:
    """Steps of 1 ms: a 370 µs copy of kind ``copy`` then a 500 µs GEMM; with ``overlapped`` a
    long kernel on another stream runs under the copy."""
    b = KinetoTraceBuilder(rank=0)
    t = 0
    for step in range(steps):
        with b.step(step + 1, t, 1_000_000):
            with b.cpu_op("aten::copy_", t + 10_000, 400_000):
                b.launch(
                    copy,
                    kind="memcpy",
                    cpu_start=t + 20_000,
                    cpu_dur=380_000,
                    gpu_start=t + 30_000,
                    gpu_dur=370_000,
                    bytes=256 << 20,
                )
            if overlapped:
                with b.cpu_op("aten::mul", t + 12_000, 10_000):
                    b.launch(
                        "elementwise_kernel",
                        cpu_start=t + 14_000,
                        gpu_start=t + 25_000,
                        gpu_dur=390_000,
                        stream=8,
                    )
            with b.cpu_op("aten::mm", t + 420_000, 50_000):
                b.launch(
                    "nvjet_tst_128x256",
                    cpu_start=t + 430_000,
                    gpu_start=t + 440_000,
                    gpu_dur=500_000,
                )
            if training:
                with b.cpu_op(
                    "autograd::engine::evaluate_function: MmBackward0", t + 500_000, 20_000
                ):
                    pass
        t += 1_000_000
    return b


def _finding(builder: KinetoTraceBuilder, tmp: Path, overrides: list[str] | None = None):
    an = Analysis(ingest([builder.write(tmp / "t.json")], tmp / "store", quiet=True))
    ms = compute_metrics(an)
    rules = [r for r in load_rules(overrides=overrides) if r.id == "exposed-memcpy"]
    ev = evaluate(rules, ms, an)
    assert not ev.errors, ev.errors
    return ms, ev


def _advice(f) -> str:
    return " | ".join(f.recommendations)


def test_pageable_copies_get_pinned_memory_advice(tmp_path: Path) -> None:
    ms, ev = _finding(_copies("Memcpy HtoD (Pageable -> Device)"), tmp_path)
    (f,) = ev.findings
    assert ms.get("memcpy_exposed_pageable_pct") == pytest.approx(37.0, abs=0.5)
    assert ms.get("memcpy_exposed_d2d_pct") == 0.0 and ms.get("memcpy_pageable_copies") == 4
    assert PIN_ADVICE in _advice(f) and D2D_ADVICE not in _advice(f)
    assert "host copies from or to pageable memory 37.0%" in f.message
    table = next(e for e in f.evidence if e.get("title") == "Copies by kind")
    assert table["rows"][0][:4] == ["host copies, pageable memory", "HtoD", 4, 4 * 370_000]


@pytest.mark.parametrize("training", [True, False])
def test_device_to_device_copies_get_their_own_advice_not_pinned_memory(
    tmp_path: Path, training: bool
) -> None:
    ms, ev = _finding(_copies("Memcpy DtoD (Device -> Device)", training=training), tmp_path)
    (f,) = ev.findings
    assert ms.get("memcpy_exposed_d2d_pct") == pytest.approx(37.0, abs=0.5)
    assert ms.get("memcpy_exposed_pageable_pct") == 0.0
    advice = _advice(f)
    assert D2D_ADVICE in advice and PIN_ADVICE not in advice and "pin_memory" not in advice
    # DDP bucket views: only for a training run the trace shows to be DDP; this one records no
    # DDP wrapper, so the advice is withheld and says why
    assert BUCKET_ADVICE not in advice
    held = [w for w in f.withheld if BUCKET_ADVICE in w["text"]]
    assert held and ("parallelism" in held[0]["reason"] or "mode" in held[0]["reason"])
    assert "device-to-device copies 37.0%" in f.message


def test_exposed_pinned_copies_get_prefetch_advice(tmp_path: Path) -> None:
    ms, ev = _finding(_copies("Memcpy HtoD (Pinned -> Device)"), tmp_path)
    (f,) = ev.findings
    assert ms.get("memcpy_exposed_pinned_pct") == pytest.approx(37.0, abs=0.5)
    assert PREFETCH_ADVICE in _advice(f) and PIN_ADVICE not in _advice(f)


def test_rocm_host_copies_say_the_memory_kind_is_unknown(tmp_path: Path) -> None:
    ms, ev = _finding(_copies("Memcpy HtoD (Host -> Device)"), tmp_path)
    (f,) = ev.findings
    assert ms.get("memcpy_exposed_host_pct") == pytest.approx(37.0, abs=0.5)
    assert "does not record whether the host buffers are pinned" in _advice(f)
    assert PIN_ADVICE not in _advice(f)


def test_overlapped_copies_are_not_a_finding(tmp_path: Path) -> None:
    """Near miss: the same pageable copies with a kernel running under each of them."""
    ms, ev = _finding(_copies("Memcpy HtoD (Pageable -> Device)", overlapped=True), tmp_path)
    assert ms.get("memcpy_exposed_pageable_pct") == 0.0 and ms.get("memcpy_pageable_copies") == 4
    assert not ev.findings and ev.statuses[0].status == "passed"


@requires_corpus
@pytest.mark.corpus
def test_real_ddp_trace_copies_are_device_to_device() -> None:
    """V100 DDP rank (df_index_resolver): 2,040 DtoD copies (gradients into DDP buckets), no host
    copies at all. With the threshold lowered to its 1.3% exposed copy time the finding names
    device-to-device copies and gives no pinned-memory advice."""
    rel = "hta/df_index_resolver/df_index_resolver.json.gz"
    store = ingest([KINETO / rel], quiet=True)
    res = json.loads(
        diagnose(store, overrides=["exposed-memcpy.min_memcpy_pct=1"], cache=False).to_json()
    )
    v = res["metrics"]["values"]
    assert v["memcpy_exposed_pageable_pct"] == 0.0 and v["memcpy_pageable_copies"] == 0
    assert v["memcpy_exposed_d2d_pct"] == pytest.approx(v["memcpy_exposed_pct"], rel=1e-6)
    (f,) = [f for f in res["findings"] if f["rule"] == "exposed-memcpy"]
    advice = " | ".join(f["recommendations"])
    assert D2D_ADVICE in advice and PIN_ADVICE not in advice
    # all-reduce on 2 ranks but no DistributedDataParallel marker: parallelism unknown (the
    # expert's run facts say so too), so the DDP bucket-view advice is withheld with the reason
    assert BUCKET_ADVICE not in advice
    (held,) = [w for w in f["withheld"] if BUCKET_ADVICE in w["text"]]
    assert "parallelism is unknown" in held["reason"]
    table = next(e for e in f["evidence"] if e.get("title") == "Copies by kind")
    assert [r[:3] for r in table["rows"]] == [["device to device (same GPU)", "DtoD", 2040]]


@requires_corpus
@pytest.mark.corpus
def test_real_pageable_copies_get_pinned_advice() -> None:
    """ResNet50 on V100 (num_workers=4): the batch arrives in 12 pageable HtoD copies."""
    rel = "tb_plugin/samples/resnet50_num_workers_4/worker0.1623213129365.pt.trace.json.gz"
    res = json.loads(
        diagnose(
            ingest([KINETO / rel], quiet=True),
            overrides=["exposed-memcpy.min_memcpy_pct=1"],
            cache=False,
        ).to_json()
    )
    v = res["metrics"]["values"]
    assert v["memcpy_pageable_copies"] == 12 and v["memcpy_exposed_d2d_pct"] == 0.0
    (f,) = [f for f in res["findings"] if f["rule"] == "exposed-memcpy"]
    advice = " | ".join(f["recommendations"])
    assert PIN_ADVICE in advice and D2D_ADVICE not in advice
