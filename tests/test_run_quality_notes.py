"""What the Run, Memory and Data-quality parts say about the capture: flags the header does not
record are "not recorded" (never struck through as off), [memory] events without totals are
counted where the memory rules say so, and every data-quality count says what it counts and
whether it affects the figures."""

from __future__ import annotations

import json
import re
from pathlib import Path

from conftest import KINETO, requires_corpus

from tracegen.synth import KinetoTraceBuilder
from traceinsight.diagnose import diagnose
from traceinsight.diagnose.quality import explain
from traceinsight.ingest import ingest
from traceinsight.render.diagnosis_markdown import render_markdown
from traceinsight.render.html import render_html
from traceinsight.render.run_notes import capture_flags, diagnostic_text
from traceinsight.render.terminal import render as render_diagnosis


def trace(tmp_path: Path, capture: dict[str, int], *, old_memory: bool = False):
    """Two steps of one kernel, the header flags ``capture`` (0 written as 0); ``old_memory``:
    PyTorch 1.9 [memory] events (no totals)."""
    b = KinetoTraceBuilder(
        rank=0,
        capture={k: v for k, v in capture.items() if v},
        metadata={k: v for k, v in capture.items() if not v},
    )
    t = 0
    for step in range(2):
        with b.step(step + 1, t, 1_000_000):
            with b.cpu_op("aten::mm", t + 10_000, 20_000):
                b.launch(
                    "ampere_bf16_s16816gemm",
                    cpu_start=t + 15_000,
                    gpu_start=t + 50_000,
                    gpu_dur=500_000,
                )
            if old_memory:
                for k, nbytes in enumerate((4096, -4096, 8192)):
                    b.events.append(
                        {
                            "ph": "i",
                            "cat": "cpu_instant_event",
                            "s": "t",
                            "name": "[memory]",
                            "pid": b.pid,
                            "tid": b.tid,
                            "ts": (t + 20_000 + k * 1000) / 1000,
                            "args": {
                                "Bytes": nbytes,
                                "Addr": 0x7F00 + k,
                                "Device Id": 0,
                                "Device Type": 1,
                            },
                        }
                    )
        t += 1_000_000
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = b.write(tmp_path / "rank-0.json")
    return diagnose(ingest([path], tmp_path / "s.tistore", quiet=True))


def test_flags_the_header_does_not_record_are_not_recorded(tmp_path: Path) -> None:
    r = trace(tmp_path, {})
    assert r.trace["capture_flags"] == {}
    states = {k: s for k, s, _ in capture_flags(r)}
    assert set(states.values()) == {"not recorded"}
    html = render_html(r)
    assert 'class="flag off"' not in html and "with_stack not recorded" in html
    term = render_diagnosis(r, width=200)
    assert "with_stack, with_modules, with_flops not recorded" in term
    assert "with_stack, with_modules, with_flops not recorded" in render_markdown(r)


def test_flags_recorded_off_are_off(tmp_path: Path) -> None:
    r = trace(
        tmp_path,
        {
            "record_shapes": 1,
            "profile_memory": 0,
            "with_stack": 0,
            "with_flops": 0,
            "with_modules": 1,
        },
    )
    states = {k: s for k, s, _ in capture_flags(r)}
    assert states == {
        "record_shapes": "on",
        "profile_memory": "off",
        "with_stack": "off",
        "with_modules": "on",
        "with_flops": "off",
    }
    html = render_html(r)
    assert re.search(r'class="flag off"[^>]*>with_stack</span>', html)
    assert "not recorded" not in render_diagnosis(r, width=200).split("\n\n")[0]
    # the profiler writes only the flags that were on: absent beside a recorded one is off
    r = trace(tmp_path / "on-only", {"record_shapes": 1})
    states = {k: s for k, s, _ in capture_flags(r)}
    assert states["record_shapes"] == "on" and states["with_stack"] == "off"
    assert "not recorded" not in states.values()


def test_memory_events_without_totals_are_counted(tmp_path: Path) -> None:
    r = trace(tmp_path, {"profile_memory": 1}, old_memory=True)
    assert r.memory == {
        "recorded": {
            "events": 6,
            "gpu_events": 6,
            "why": "[memory] events without Total Allocated/Reserved (PyTorch < 1.10)",
        }
    }
    html = render_html(r)
    assert "No [memory] events" not in html
    assert "6 [memory] events (6 on a GPU), without Total Allocated/Reserved" in html
    # the rules say the same
    ne = next(x for x in r.rules if x["rule"] == "memory-leak")
    assert "without Total Allocated/Reserved" in ne["reason"]
    # without any [memory] event the section says there are none
    r2 = trace(tmp_path / "none", {"profile_memory": 1})
    assert r2.memory is None and "No [memory] events" in render_html(r2)


def test_record_counts_say_what_they_are_and_whether_they_matter() -> None:
    raw = {
        "code": "profiler-log",
        "severity": "warning",
        "source": "rank-0.json",
        "message": "profiler info: Record counts: Out-of-range = 4181, Blocklisted runtime = "
        "56517, Invalid ext correlations = 0",
    }
    (d,) = explain([raw])
    assert d["code"] == "profiler-record-counts" and d["severity"] == "warning"
    assert d["message"] == (
        "the profiler reports 4,181 records outside the profiling window, left out "
        "(Out-of-range); 56,517 runtime calls on the profiler's blocklist (cudaGetDevice, "
        "cudaEventQuery and the like), not recorded by design (Blocklisted runtime)"
    )
    assert d["impact"].startswith("Out-of-range: the figures cover the window only")
    assert d["impact"].endswith("Blocklisted runtime: does not affect the figures")
    # only blocklisted calls: information, not a warning
    (b,) = explain([{**raw, "message": "profiler info: Record counts: Blocklisted runtime = 9"}])
    assert b["severity"] == "info" and b["impact"] == "does not affect the figures"


def test_counts_say_what_they_count() -> None:
    (d,) = explain(
        [
            {
                "code": "json-repaired",
                "severity": "warning",
                "message": "raw control characters escaped",
                "count": 436,
            }
        ]
    )
    assert diagnostic_text(d) == (
        "raw control characters escaped — 436 values — does not affect the figures"
    )
    # a count the message already says is not repeated
    (u,) = explain(
        [
            {
                "code": "unattributed-kernels",
                "severity": "warning",
                "count": 736,
                "message": "736 kernels (6.2% of kernel time) could not be linked",
            }
        ]
    )
    assert diagnostic_text(u).startswith(
        "736 kernels (6.2% of kernel time) could not be linked — their time is in every total"
    )
    # an unknown code: the count is 'affected', never a bare [n]
    (x,) = explain([{"code": "new-code", "message": "something", "count": 3}])
    assert diagnostic_text(x) == "something — 3 affected"


@requires_corpus
def test_v100_2021_trace_memory_and_flags_agree_with_the_rules() -> None:
    rel = "tb_plugin/samples/resnet50_num_workers_0/worker0.1623143566756.pt.trace.json.gz"
    r = diagnose(ingest([KINETO / rel], quiet=True))
    assert r.memory["recorded"]["events"] == 12838 and r.memory["recorded"]["gpu_events"] == 8220
    html = render_html(r)
    assert "No [memory] events" not in html and "12,838 [memory] events" in html
    assert "profile_memory not recorded (the trace has [memory] events)" in html
    assert "record_shapes not recorded (the trace has op shapes)" in html
    assert 'class="flag off"' not in html


@requires_corpus
def test_hta_record_counts_in_every_renderer() -> None:
    rel = "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
    r = diagnose(ingest([KINETO / rel], quiet=True))
    (d,) = [d for d in r.diagnostics if d["code"] == "profiler-record-counts"]
    assert "3,829 records outside the profiling window" in d["message"]
    res = json.loads(r.to_json())
    assert any(x.get("impact") for x in res["diagnostics"])
    for text in (render_diagnosis(r, width=400), render_markdown(r), render_html(r)):
        assert "Record counts:" not in text and "3,829 records outside" in text
        assert "does not affect the figures" in text
    assert not re.search(r"\[\d[\d,]*\]", render_diagnosis(r, width=400).split("Data quality")[1])
