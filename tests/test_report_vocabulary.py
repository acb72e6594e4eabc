"""The HTML report speaks the input tool's vocabulary and the terminal's kernel names.

* The Run section of an Nsight Systems capture lists the ``nsys profile`` options that record
  what it holds (``-t cuda``, ``-t nvtx``, ``--cuda-memory-usage=true``, call stacks), never
  the PyTorch profiler's flags (``record_shapes``, ``with_stack``, ``profile_memory`` …); the
  empty-section texts say how to record layers in nsys terms. A Kineto trace keeps its flags.
* Compare: a side's missing module tree or op shapes is told in that side's tool's terms.
* Kernel cells show the short distinct name of :mod:`traceinsight.util.kernelname` (the full
  name on hover), as the terminal does; the critical-path text names kernels the same way.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from conftest import TRACES

from tracegen.nsys import NsysExportBuilder
from tracegen.synth import KinetoTraceBuilder
from traceinsight.compare.explain import compare
from traceinsight.diagnose import diagnose
from traceinsight.ingest import ingest
from traceinsight.render.html import build_view, render_html
from traceinsight.render.html.compare_page import build_compare_view
from traceinsight.util import capture_hints
from traceinsight.util.capture_hints import Capture
from traceinsight.util.kernelname import short_names

MS = 1_000_000
US = 1_000
#: the PyTorch profiler's capture flags (emit_nvtx(record_shapes=True) is the Nsight way)
KINETO_FLAG = re.compile(
    r"(?<!emit_nvtx\()\b(record_shapes|with_stack|profile_memory|with_modules|with_flops)\b"
)
GEMM = "void gemm_kernel<float, 128, true>(float const*, float*, int)"
ADD = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
    "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)"
)


def _nsys(tmp: Path, name: str, *, torch: bool, memory: bool) -> Path:
    """A capture of 6 iterations: (torch) one emit_nvtx op range each, a GEMM kernel each,
    (memory) one allocation each."""
    b = NsysExportBuilder()
    b.gpu()
    b.process(200, "python3" if torch else "saxpy")
    b.thread(200, 200, "main")
    t = 1 * MS
    for i in range(6):
        if torch:
            b.nvtx(200, 200, f"aten::mm, seq = {i}, op_id = {i}", t, t + 400 * US)
        b.launch(200, 200, GEMM, cpu_start=t + 10 * US, gpu_start=t + 100 * US, gpu_dur=200 * US)
        if memory:
            b.memory(200, t + 5 * US, 1 << 20, address=0x7F0000000000 + (i << 21))
        t += 1 * MS
    return b.write(tmp / f"{name}.sqlite")


def _result(tmp: Path, trace: Path) -> Any:
    return diagnose(ingest([trace], tmp / f"{trace.stem}.tistore", quiet=True))


def _visible(html: str) -> str:
    """The page without its scripts (the embedded Markdown and data)."""
    return re.sub(r"<script\b.*?</script>", "", html, flags=re.S)


def _run_flags(html: str) -> str:
    m = re.search(r"<dt>(Capture (?:flags|options))</dt><dd>(.*?)</dd>", html, re.S)
    assert m, "no capture row in the Run section"
    return m.group(1) + ": " + re.sub(r"<[^>]+>", "|", m.group(2))


# --- capture settings in the input tool's vocabulary --------------------------------------------


def test_recorded_settings_are_phrased_per_tool() -> None:
    flags = {"record_shapes": True, "profile_memory": None, "with_stack": False}
    kin = capture_hints.recorded_settings(Capture("kineto"), flags)
    assert [k for k, _ in kin] == list(capture_hints.KINETO_FLAGS)
    assert dict(kin)["record_shapes"] is True and dict(kin)["with_stack"] is False
    ns = dict(
        capture_hints.recorded_settings(
            Capture("nsys", True), {"profile_memory": True}, {"gpu": True, "nvtx": None}
        )
    )
    assert ns == {
        "-t cuda (kernels, copies)": True,
        "-t nvtx (ranges)": False,
        "emit_nvtx(record_shapes=True) (op shapes)": False,
        "--cuda-memory-usage=true": True,
        "--python-backtrace / --sample (call stacks)": None,  # not read from an export
    }
    c = capture_hints.recorded_settings(Capture("nsys", False), {}, {"gpu": True})
    assert not any("emit_nvtx" in k for k, _ in c)  # no PyTorch call for a C program
    for cap in (Capture("nsys", True), Capture("nsys", False)):
        assert "nsys profile -t cuda,nvtx" in capture_hints.hint("modules", cap)
        assert not KINETO_FLAG.search(capture_hints.hint("modules", cap))
        assert capture_hints.hint("stack", cap) is None
    assert "with_modules=True" in capture_hints.hint("modules", Capture("kineto"))


def test_nsight_c_program_report_names_no_kineto_flag(tmp_path: Path) -> None:
    r = _result(tmp_path, _nsys(tmp_path, "saxpy", torch=False, memory=True))
    assert r.extra["capture"] == {"tool": "nsys", "torch": False}
    html = render_html(r)
    hits = sorted({m.group(0) for m in KINETO_FLAG.finditer(html)})
    assert not hits, hits
    flags = _run_flags(html)
    assert flags.startswith("Capture options: ")
    view = build_view(r)["metadata"]
    assert view["flags"] == [
        ("-t cuda (kernels, copies)", "on", ""),
        ("-t nvtx (ranges)", "off", ""),
        ("--cuda-memory-usage=true", "on", ""),
        ("--python-backtrace / --sample (call stacks)", "not recorded", ""),
    ]
    mem = build_view(r)["memory"]["empty"]
    assert mem.startswith("6 memory usage events (--cuda-memory-usage=true)"), mem
    layers = build_view(r)["layers"]["empty"]
    assert layers.startswith("No NVTX layer ranges in this capture")
    assert 'nvtxRangePushA("layer")' in layers and "nn.Module" not in layers


def test_nsight_pytorch_report_lists_nsys_options(tmp_path: Path) -> None:
    r = _result(tmp_path, _nsys(tmp_path, "torchrun", torch=True, memory=False))
    assert r.extra["capture"] == {"tool": "nsys", "torch": True}  # emit_nvtx op ranges
    html = render_html(r)
    assert not KINETO_FLAG.search(_visible(html)), KINETO_FLAG.findall(_visible(html))
    assert build_view(r)["metadata"]["flags"] == [
        ("-t cuda (kernels, copies)", "on", ""),
        ("-t nvtx (ranges)", "on", ""),  # the emit_nvtx op ranges
        ("emit_nvtx(record_shapes=True) (op shapes)", "off", ""),  # ranges without sizes
        ("--cuda-memory-usage=true", "off", ""),
        ("--python-backtrace / --sample (call stacks)", "not recorded", ""),
    ]
    layers = build_view(r)["layers"]["empty"]
    assert "torch.cuda.nvtx.range_push(name)" in layers and "nsys profile -t cuda" in layers


def test_kineto_report_keeps_the_profiler_flags(tmp_path: Path) -> None:
    b = KinetoTraceBuilder(
        capture={"record_shapes": 1, "profile_memory": 0, "with_stack": 0, "with_modules": 0}
    )
    t = 0
    for i in range(4):
        with b.step(i, t, 2 * MS):
            b.op("aten::add", t + 10 * US, 300 * US)
            b.launch(ADD, cpu_start=t + 20 * US, gpu_start=t + 100 * US, gpu_dur=400 * US)
        t += 2 * MS
    trace = b.write(tmp_path / "k.pt.trace.json")
    r = _result(tmp_path, trace)
    flags = _run_flags(render_html(r))
    assert flags.startswith("Capture flags: ")
    rows = build_view(r)["metadata"]["flags"]
    assert [k for k, _, _ in rows] == list(capture_hints.KINETO_FLAGS)
    assert dict((k, s) for k, s, _ in rows)["record_shapes"] == "on"
    assert build_view(r)["layers"]["empty"].startswith("No nn.Module hierarchy in this trace")


# --- compare -------------------------------------------------------------------------------------


def test_compare_hints_use_each_sides_tool(tmp_path: Path) -> None:
    a = _result(tmp_path, _nsys(tmp_path, "a", torch=False, memory=False))
    b = _result(tmp_path, _nsys(tmp_path, "b", torch=False, memory=False))
    c = compare(a, b)
    comp = c["comparability"]
    assert comp["before"]["capture"] == {"tool": "nsys", "torch": False}
    unchecked = {u["what"]: u["why"] for u in comp.get("unchecked") or []}
    assert "module tree" in unchecked, unchecked
    why = unchecked["module tree"]
    assert "no NVTX layer ranges" in why and "nvtxRangePushA" in why, why
    assert not KINETO_FLAG.search(why) and "nn.Module" not in why
    assert unchecked["op shapes"].endswith("no input shapes"), unchecked  # no hint for C
    view = build_compare_view(c)
    assert view["layers"]["empty"].startswith("No NVTX layer ranges on either side: push")
    assert not KINETO_FLAG.search(view["layers"]["empty"])


# --- kernel names --------------------------------------------------------------------------------


def test_html_kernel_cells_are_the_short_names(tmp_path: Path) -> None:
    r = _result(tmp_path, _nsys(tmp_path, "k", torch=False, memory=False))
    t = build_view(r)["kernels"]["table"]
    cell = t["rows"][0][0]
    assert cell["t"] == short_names([GEMM])[GEMM] == "gemm_kernel<fp32>"
    assert cell["title"] == GEMM  # the full name on hover
    assert f"<code>{cell['t']}</code>" in render_html(r).replace("&lt;", "<").replace("&gt;", ">")


def test_kernel_cells_are_distinct_and_ops_keep_their_namespace() -> None:
    from traceinsight.render.html.cells import table

    k2 = GEMM.replace("128", "256")
    t = table("t", [("kernel", "kernel")], [[GEMM], [k2], ["aten::mm"], ["ampere_sgemm_128x64_tn"]])
    texts = [row[0]["t"] for row in t["rows"]]
    assert texts[0] != texts[1] and texts[:2] == [short_names([GEMM, k2])[n] for n in (GEMM, k2)]
    assert texts[2:] == ["aten::mm", "ampere_sgemm_128x64_tn"]
    assert [row[0]["title"] for row in t["rows"]] == [GEMM, k2, "", ""]


ADD_TRACE = TRACES / "kineto" / "hta" / "execution_trace" / "benchmark_simple_add_trace.json.gz"


@pytest.mark.skipif(not ADD_TRACE.is_file(), reason="the HTA execution-trace sample is absent")
def test_critical_path_text_uses_the_short_name(tmp_path: Path) -> None:
    r = _result(tmp_path, ADD_TRACE)
    text = " ".join(str(d.get("message") or "") for d in r.diagnostics)
    assert "vectorized_elementwise<CUDAFunctor_add<fp32>> on stream 7 started" in text, text
    assert "at::native::vectorized_elementwise_kernel on stream" not in text
