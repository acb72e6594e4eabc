"""Guidance that fits the input: capture hints, rules not evaluated and advice in the input
tool's vocabulary.

An Nsight Systems export is told nsys options and NVTX ranges (never torch.profiler flags, a
Perfetto load or distributedInfo); a program without PyTorch (a C/CUDA program, JAX) gets no
PyTorch API in any hint or recommendation; a Kineto trace keeps the torch.profiler vocabulary.
"Rules not evaluated" gives one line per missing capture setting, only where it applies: the
memory rules of a trace with ``[memory]`` events are not told to record them, a CPU-only run
gets one GPU line, a memory file alone gets what it could be combined with.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from conftest import SAMPLES, TRACES, invoke

from tracegen.nsys import NsysExportBuilder
from tracegen.synth import KinetoTraceBuilder
from traceinsight.analysis import Analysis
from traceinsight.engine.evaluate import evaluate, load_rules
from traceinsight.ingest import ingest
from traceinsight.metrics import compute_metrics
from traceinsight.util import capture_hints
from traceinsight.util.capture_hints import Capture

MS = 1_000_000
US = 1_000
GiB = 1 << 30
NSYS = TRACES / "nsys"
NSYS_EXPORTS = sorted(NSYS.rglob("*.sqlite")) if NSYS.is_dir() else []
LLMC = NSYS / "Mlightsnow+DD2360-llm.c" / "report1.exported-nsys2023.4.sqlite"
H100 = NSYS / "GindaChen+nsys-ai" / "h100_2gpu_1s.sqlite"
TIMELINE = TRACES / "memory" / "hta" / "memory_analysis" / "memory_timeline.raw.gz"

#: words of PyTorch (its APIs, profiler options, trace fields, viewer of its traces): none of
#: them may reach a program that does not use PyTorch (independent of capture_hints' list)
PYTORCH = re.compile(
    r"torch|prof\.step|profile_memory|record_shapes|with_stack|ProfilerStep|ProfilerActivity|"
    r"activities=|DataLoader|pin_memory|non_blocking|distributedInfo|deviceProperties|"
    r"\.clone\(\)|\.item\(\)|perfetto|chrome://tracing",
    re.I,
)
#: the PyTorch profiler's own capture vocabulary: never told to an Nsight capture
KINETO_CAPTURE = re.compile(
    r"prof\.step|profile_memory|torch\.profiler\.schedule|ProfilerStep|ProfilerActivity|"
    r"activities=\[|distributedInfo|perfetto|chrome://tracing",
    re.I,
)


def _diagnose(path: Path, tmp: Path, *extra: str) -> tuple[str, str, dict[str, Any]]:
    """Terminal (verbose), Markdown and JSON of one diagnosis."""
    md, js = tmp / "d.md", tmp / "d.json"
    out = invoke(["diagnose", path, "--no-color", "-v", "--markdown", md, "--json", js, *extra])
    return out.stdout, md.read_text(), json.loads(js.read_text())


def _rules_block(text: str) -> str:
    """The rules not evaluated: the terminal's "Rules: ..." block, the Markdown's "Not
    evaluated: ..." line."""
    i = text.find("Rules:")
    if i < 0:
        return next((ln for ln in text.splitlines() if ln.startswith("Not evaluated:")), "")
    return text[i:].split("\n\n")[0]


def _guidance(term: str, md: str, d: dict[str, Any]) -> list[str]:
    """Every hint and piece of advice a diagnosis gives: the JSON's rule hints, data-quality
    hints, recommendations, headline, step hint and viewer, and the terminal and Markdown
    lines that carry them."""
    texts = [d.get("headline") or ""]
    texts += [str(r.get("hint") or "") for r in d["rules"]]
    texts += [str(x.get("hint") or "") for x in d["diagnostics"]]
    for f in d["findings"]:
        texts += list(f.get("recommendations") or [])
    texts.append(str(((d.get("rollups") or {}).get("slice") or {}).get("hint") or ""))
    for text in (term, md):
        texts.append(_rules_block(text))
        texts += [ln for ln in text.splitlines() if "→" in ln or "Open in" in ln]
        texts += [ln for ln in text.splitlines() if "mark the steps" in ln]
    return [t for t in texts if t]


def _hinted_lines(term: str) -> list[str]:
    """The "  - rules: reason (hint)" lines under "Rules:" (continuation lines joined)."""
    block = term[term.index("Rules:") :].split("\n\n")[0]
    items, cur = [], None
    for ln in block.splitlines()[1:]:
        if ln.startswith("  - "):
            cur = ln[4:]
            items.append(cur)
        elif ln.startswith("    ") and items:
            items[-1] += " " + ln.strip()
    return items


# --- the one place -----------------------------------------------------------------------------


def test_each_setting_is_phrased_for_the_tool_that_wrote_the_input() -> None:
    kineto, nsys_torch, nsys_c = Capture("kineto"), Capture("nsys", True), Capture("nsys", False)
    assert "profile_memory=True" in capture_hints.hint("memory", kineto)
    assert "--cuda-memory-usage=true" in capture_hints.hint("memory", nsys_torch)
    assert "prof.step()" in capture_hints.hint("steps", kineto)
    for cap in (nsys_torch, nsys_c):
        steps = capture_hints.hint("steps", cap)
        assert "NVTX range" in steps and "--capture-range=cudaProfilerApi" in steps
        assert "--capture-range=nvtx" in steps and "-t cuda,nvtx,osrt,cudnn,cublas" in steps
        assert not KINETO_CAPTURE.search(steps)
    assert "torch.cuda.nvtx.range_push" in capture_hints.hint("steps", nsys_torch)
    assert "nvtxRangePushA" in capture_hints.hint("steps", nsys_c)
    for s in set(capture_hints.SETTINGS) - {"trace"}:  # trace: a (PyTorch) memory file alone
        assert not PYTORCH.search(capture_hints.hint(s, nsys_c) or ""), s
    # Nsight records no tensor shapes: a C program is told nothing, a PyTorch one the profiler
    assert capture_hints.hint("shapes", nsys_c) is None
    assert "record_shapes=True" in capture_hints.hint("shapes", nsys_torch)
    # a memory file alone: what to combine it with, whatever the setting
    for s in ("gpu", "steps", "memory"):
        assert "--memory-snapshot" in capture_hints.hint(s, Capture("memory-timeline"))


def test_the_program_is_pytorch_only_with_pytorch_evidence() -> None:
    assert Capture.of("kineto", "unknown").torch
    assert Capture.of("nsys", "plain_pytorch").torch and Capture.of("nsys", "thunder").torch
    assert not Capture.of("nsys", "cuda_program").torch
    assert not Capture.of("nsys", "unknown").torch  # unknown: withhold PyTorch advice
    assert Capture.of("kineto, memory-timeline").tool == "kineto"
    assert Capture.of(["memory-timeline"]).memory_only


def test_the_viewer_is_the_input_tools() -> None:
    k = capture_hints.viewer_text("kineto", "rank-0.json.gz", 0, [1.0, 2.0], "ProfilerStep#3")
    assert "ui.perfetto.dev" in k and "ProfilerStep#3" in k
    n = capture_hints.viewer_text("nsys", "report1.exported-nsys2023.4.sqlite", 0, [1e6, 2.5e6])
    assert "report1.nsys-rep" in n and "Nsight Systems" in n and "1.000000 – 2.500000 s" in n
    assert not KINETO_CAPTURE.search(n)
    assert capture_hints.viewer_title("nsys") == "Open in Nsight Systems"


# --- Nsight exports ----------------------------------------------------------------------------


def _c_program(tmp: Path) -> Path:
    """A CUDA program without PyTorch and without step markers: host copies (pageable and
    pinned) that run alone on the GPU, a few kernels, no NVTX."""
    b = NsysExportBuilder()
    b.gpu()
    b.process(200, "saxpy")
    b.thread(200, 200, "saxpy")
    t = 1 * MS
    for _ in range(20):
        b.memcpy(200, t + 10 * US, 2 * MS, 8 << 20, src=1)  # pinned host to device
        b.launch(
            200,
            200,
            "saxpy_kernel",
            cpu_start=t + 2100 * US,
            gpu_start=t + 2200 * US,
            gpu_dur=200 * US,
        )
        t += 3 * MS
    return b.write(tmp / "saxpy.sqlite")


def _check_nsys(term: str, md: str, d: dict[str, Any], torch: bool) -> None:
    texts = _guidance(term, md, d)
    bad = PYTORCH if not torch else KINETO_CAPTURE
    hits = sorted({m.group(0) for t in texts for m in bad.finditer(t)})
    assert not hits, (hits, [t for t in texts if bad.search(t)][:3])
    for r in d["rules"]:
        if r.get("status") != "not-evaluated":
            continue
        s, h = r.get("setting"), r.get("hint") or ""
        if s == "memory":
            assert "--cuda-memory-usage=true" in h, r
        if s == "steps":
            assert "NVTX range" in h and "--capture-range=cudaProfilerApi" in h, r
        if s == "gpu":
            assert "nsys profile -t cuda" in h, r


@pytest.mark.skipif(not NSYS_EXPORTS, reason="the shared corpus has no Nsight exports")
@pytest.mark.parametrize("path", NSYS_EXPORTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_nsight_exports_get_nsight_guidance(path: Path, tmp_path: Path) -> None:
    term, md, d = _diagnose(path, tmp_path)
    cap = d["extra"]["capture"]
    assert cap["tool"] == "nsys"
    engine = (d.get("run") or {}).get("engine", {}).get("value")
    assert cap["torch"] == (engine not in ("cuda_program", "unknown")), engine
    _check_nsys(term, md, d, cap["torch"])
    assert "Open in Perfetto" not in term and "Open in Perfetto" not in md
    if d["extra"].get("open_in_viewer"):
        assert "Open in Nsight Systems: open " in term and ".nsys-rep" in term


@pytest.mark.skipif(not LLMC.is_file(), reason="the llm.c Nsight export is absent")
def test_a_c_cuda_program_gets_no_pytorch_advice(tmp_path: Path) -> None:
    _, _, d = _diagnose(LLMC, tmp_path)
    assert d["extra"]["capture"] == {"tool": "nsys", "torch": False}
    given = [r for f in d["findings"] for r in f["recommendations"]]
    assert given and not any(PYTORCH.search(r) for r in given)
    memcpy = next(f for f in d["findings"] if f["rule"] == "exposed-memcpy")
    assert any("cudaMemcpyAsync" in r for r in memcpy["recommendations"])
    # the PyTorch advice is withheld, with the reason, never silently lost
    assert any("non_blocking" in w["text"] and "PyTorch" in w["reason"] for w in memcpy["withheld"])
    assert "cudaProfilerStart()" in d["headline"] and "torch" not in d["headline"]


@pytest.mark.skipif(not H100.is_file(), reason="the h100_2gpu_1s Nsight export is absent")
def test_a_pytorch_program_under_nsight_gets_nsight_capture_advice(tmp_path: Path) -> None:
    term, _md, d = _diagnose(H100, tmp_path)
    assert d["extra"]["capture"] == {"tool": "nsys", "torch": True}
    lines = _hinted_lines(term)
    settings = {r["setting"] for r in d["rules"] if r.get("status") == "not-evaluated"}
    assert settings == {"device", "memory", "steps"}
    assert len(lines) == 3, lines  # one line per missing setting
    mem = next(x for x in lines if "memory-leak" in x)
    assert "out-of-memory" in mem and "--cuda-memory-usage=true" in mem
    steps = next(x for x in lines if "host-sync" in x)
    assert "straggler" in steps and "torch.cuda.nvtx.range_push" in steps
    warn = [x["message"] for x in d["diagnostics"] if x["code"] == "no-communication-found"]
    assert warn and all(m.startswith("the capture holds 2 GPU processes") for m in warn)
    assert "distributedInfo" not in term


def test_a_synthetic_c_program_is_told_nsys_options_only(tmp_path: Path) -> None:
    term, md, d = _diagnose(_c_program(tmp_path), tmp_path)
    assert d["extra"]["capture"] == {"tool": "nsys", "torch": False}
    _check_nsys(term, md, d, torch=False)
    steps = [r for r in d["rules"] if r.get("setting") == "steps"]
    assert steps and all("nvtxRangePushA" in r["hint"] for r in steps)
    memcpy = next(f for f in d["findings"] if f["rule"] == "exposed-memcpy")
    assert memcpy["recommendations"] and all(
        "cudaMemcpyAsync" in r or "cudaHostAlloc" in r for r in memcpy["recommendations"][:1]
    )


# --- Kineto traces keep the PyTorch profiler's vocabulary ---------------------------------------


def _kineto(tmp: Path, *, steps: int, memory: bool) -> Path:
    flags = {"record_shapes": 1, "profile_memory": int(memory), "with_stack": 0}
    b = KinetoTraceBuilder(rank=0, device="h100", capture=flags)
    for k in range(steps):
        t = k * 10 * MS
        with b.step(k + 1, t, 10 * MS):
            with b.cpu_op("aten::mm", t + 100 * US, 2 * MS):
                b.launch(
                    "nvjet_tst_128x256",
                    cpu_start=t + 200 * US,
                    gpu_start=t + 300 * US,
                    gpu_dur=4 * MS,
                )
            if memory:
                b.memory(t + 150 * US, 1 * GiB, (k + 1) * GiB, 8 * GiB)
    return b.write(tmp / "t.json")


def test_kineto_hints_keep_the_torch_profiler_vocabulary(tmp_path: Path) -> None:
    term, _md, d = _diagnose(SAMPLES / "synthetic_h100_healthy.json.gz", tmp_path)
    assert d["extra"]["capture"] == {"tool": "kineto", "torch": True}
    assert "Open in Perfetto: load" in " ".join(term.split())
    an = Analysis(ingest([_kineto(tmp_path, steps=3, memory=False)], tmp_path / "s", quiet=True))
    ev = evaluate(load_rules(), compute_metrics(an), an)
    by = {s.rule: s for s in ev.statuses}
    assert by["memory-leak"].setting == "memory"
    assert by["memory-leak"].hint == "record with profile_memory=True"


def test_memory_rules_are_not_told_to_record_memory_events_the_trace_has(tmp_path: Path) -> None:
    # [memory] events, but only 2 steps: what the leak rule lacks is steps, not profile_memory
    an = Analysis(ingest([_kineto(tmp_path, steps=2, memory=True)], tmp_path / "s", quiet=True))
    ms = compute_metrics(an)
    assert ms.values["peak_allocated_bytes"] == 2 * GiB
    ev = evaluate(load_rules(), ms, an)
    leak = next(s for s in ev.statuses if s.rule == "memory-leak")
    assert leak.status == "not-evaluated" and leak.setting == "steps"
    assert "profile_memory" not in (leak.hint or "") and "prof.step()" in leak.hint
    for s in ev.statuses:
        assert "profile_memory" not in (s.hint or ""), s


# --- rules not evaluated: one line per setting, only where it applies --------------------------


def test_a_cpu_only_run_gets_one_gpu_line() -> None:
    out = invoke(["diagnose", SAMPLES / "cpu_transformer_train.pt.trace.json.gz"]).stdout
    lines = _hinted_lines(out)
    gpu = [x for x in lines if "no GPU activity" in x]
    assert len(gpu) == 1 and "memory-leak" in gpu[0] and "compute-bound" in gpu[0]
    text = " ".join(out[out.index("Rules:") :].split())
    for word in ("--device NAME", "profile_memory", "record_shapes", "(pass --device"):
        assert word not in text, word
    assert len(lines) == 2  # GPU activity, and the other ranks (straggler)


@pytest.mark.skipif(not TIMELINE.is_file(), reason="the memory timeline is absent")
def test_a_memory_timeline_alone_is_told_what_to_combine_it_with(tmp_path: Path) -> None:
    term, _md, d = _diagnose(TIMELINE, tmp_path)
    lines = _hinted_lines(term)
    assert len(lines) == 1, lines
    assert "--memory-snapshot" in lines[0] and "straggler" in lines[0]
    assert "ProfilerActivity" not in term and "--device NAME" not in _rules_block(term)
    skipped = [r for r in d["rules"] if r["status"] == "not-evaluated"]
    assert len(skipped) >= 10 and {r["setting"] for r in skipped} == {"trace"}


def test_not_evaluated_lines_are_the_distinct_missing_settings(tmp_path: Path) -> None:
    term, md, d = _diagnose(_c_program(tmp_path), tmp_path)
    skipped = [r for r in d["rules"] if r["status"] == "not-evaluated"]
    keys = {r.get("setting") or (r.get("reason"), r.get("hint")) for r in skipped}
    lines = _hinted_lines(term)
    assert len(lines) == len(keys), (lines, keys)
    for ln in lines:  # a hint is never repeated inside its own line
        assert ln.count("--cuda-memory-usage") <= 1 and ln.count("(pass --device") <= 1
    md_line = _rules_block(md)
    assert md_line.count("--cuda-memory-usage=true") == 1 and md_line.count("nvtxRangePushA") == 1
    for r in skipped:  # every rule is named once, in its setting's group
        assert md_line.count(r["rule"] + ",") + md_line.count(r["rule"] + " (") == 1, r["rule"]
