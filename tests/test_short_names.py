"""Short kernel names, tables that fit the terminal, and --json FILE on top and summary.

The simplifier (``util/kernelname.py``) turns demangled template names into readable short
names that stay distinct; ``top`` balances its name columns to the terminal width, drops the
optional statistics before cutting names under a readable width, and ``--wide`` shows the full
names; the header's counts add up to the rows'.
"""

from __future__ import annotations

import json

import pytest
from conftest import KINETO, SAMPLES, invoke, requires_corpus

from traceinsight.util import fmt
from traceinsight.util.kernelname import short_names, simplify

MUL_BF16 = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<c10::BFloat16, "
    "c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> >, "
    "std::array<char*, 3ul> >(int, at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, "
    "c10::BFloat16, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul>)"
)
COPY_BF16 = (
    "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<"
    "at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() "
    "const::{lambda()#12}::operator()() const::{lambda(c10::BFloat16)#1}>(at::TensorIteratorBase&, "
    "at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() "
    "const::{lambda()#12}::operator()() const::{lambda(c10::BFloat16)#1} const&)::{lambda(int)#1}>"
    "(int, at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda(at::Tensor"
)  # cut short, as traces cut long names
FLASH = (
    "void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128, 4, "
    "false, false, cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<64, 128, 128, 4, "
    "cutlass::bfloat16_t> >, false, true, false, false, false, true, false>"
    "(pytorch_flash::Flash_fwd_params)"
)


@pytest.mark.parametrize(
    ("name", "short"),
    [
        (MUL_BF16, "vectorized_elementwise<MulFunctor<bf16>>"),
        (
            MUL_BF16.replace("c10::BFloat16", "c10::Half"),
            "vectorized_elementwise<MulFunctor<fp16>>",
        ),
        (COPY_BF16, "elementwise<direct_copy<bf16>>"),
        (FLASH, "flash_fwd_kernel<Flash_fwd_kernel_traits<bf16, Flash_kernel_traits<bf16>>>"),
        (
            "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<c10::BFloat16, "
            "at::native::MeanOps<c10::BFloat16, float, float, c10::BFloat16>, unsigned int, "
            "c10::BFloat16, 4, 8> >(at::native::ReduceOp<c10::BFloat16, at::native::MeanOps<"
            "c10::BFloat16, float, float, c10::BFloat16>, unsigned int, c10::BFloat16, 4, 8>)",
            "reduce<MeanOps<bf16>>",
        ),
        (
            "void (anonymous namespace)::clamp_position_kernel<long>(long*, long const*, "
            "unsigned long)",
            "clamp_position<i64>",
        ),
        (
            "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
            "ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
        ),
        ("triton_red_fused_add_mean_mul_pow_rsqrt_0", "triton_red_fused_add_mean_mul_pow_rsqrt_0"),
        (
            "_ZN5aiter24add_rmsnorm_quant_kernelIDF16bDF16bLi256ELi16ELb0EEEvPT0_PT_Pf",
            "add_rmsnorm_quant_kernel<…>",
        ),
        ("Memcpy DtoH (Device -> Pinned)", "Memcpy DtoH (Device -> Pinned)"),
    ],
)
def test_simplify(name: str, short: str) -> None:
    assert simplify(name, limit=200) == short


def test_long_names_collapse_their_deepest_arguments() -> None:
    assert simplify(FLASH) == "flash_fwd_kernel<Flash_fwd_kernel_traits<…>>"
    assert len(simplify(FLASH)) <= 48


def test_short_names_stay_distinct() -> None:
    vec4 = MUL_BF16
    vec8 = MUL_BF16.replace("kernel<4,", "kernel<8,")
    got = short_names([vec4, vec8, vec4])
    assert len(got) == 2
    # the integer arguments come back to tell the two apart
    assert got[vec4] == "vectorized_elementwise<4, MulFunctor<bf16>>"
    assert got[vec8] == "vectorized_elementwise<8, MulFunctor<bf16>>"
    mangled = [f"_ZN5aiter3addIDF16bLi{i}EEEvPT_" for i in (64, 128, 256)]
    assert list(short_names(mangled).values()) == ["add<…> #1", "add<…> #2", "add<…> #3"]


def test_middle_cut_keeps_both_ends() -> None:
    assert fmt.shorten_middle("abcdefghijklmnopqrstuvwxyz", 11) == "abcde…vwxyz"
    assert fmt.shorten_middle("short", 11) == "short"


def test_one_shape_format() -> None:
    assert fmt.shapes_text("[[8, 1024], [1024, 4096]]") == "[8, 1024]×[1024, 4096]"
    assert fmt.compact_dims("[[8,\n 1024], [], [1024, 4096]]") == "[8, 1024]×[1024, 4096]"


# --- top on real traces ---------------------------------------------------------------------

QWEN = KINETO / "tracelens/traces/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
SGLANG = KINETO / "tracelens/traces/inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz"
RESNET = KINETO / "tracelens/traces/mi300/ddp_resnet18_no_pool/train_resnet18.json.gz"


@requires_corpus
@pytest.mark.parametrize(("trace", "kernels"), [(QWEN, 28), (SGLANG, 29), (RESNET, 52)])
def test_distinct_kernels_get_distinct_short_names(trace, kernels) -> None:
    rows = json.loads(invoke(["top", trace, "--json"]).stdout)["rows"]
    names = [r["name"] for r in rows]
    assert len(set(names)) == kernels
    short = short_names(names)
    assert len(set(short.values())) == kernels
    # no namespace or argument list is left in a C++ template name
    assert not [s for s in short.values() if "at::native" in s or "(anonymous" in s]


@requires_corpus
@pytest.mark.parametrize("columns", [100, 160])
def test_top_fits_the_terminal(columns: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", str(columns))
    for by in ("kernel", "op"):
        out = invoke(["top", QWEN, "--by", by, "-n", "30"]).stdout
        lines = out.splitlines()
        assert max(len(line) for line in lines) <= columns, out
    out = invoke(["top", QWEN, "-n", "30"]).stdout
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("─"))
    table = lines[at - 1 :]
    rule = table[1].split("  ")
    kernel_w, launch_w = len(rule[0]), len(rule[-1])
    assert kernel_w >= 32  # the statistics give way before the names get unreadable
    assert kernel_w >= launch_w / 2
    assert "elementwise<MulFunctor<bf16>>" in out
    if columns == 100:
        assert "not shown, to fit the terminal: stddev" in out
    else:
        assert "stddev" in table[0]


@requires_corpus
def test_top_wide_shows_full_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    rows = json.loads(invoke(["top", QWEN, "--json"]).stdout)["rows"]
    out = invoke(["top", QWEN, "--wide", "-n", "100"]).stdout
    for r in rows:
        assert " ".join(r["name"].split()) in out
    assert any(line.startswith("kernel") and "stddev" in line for line in out.splitlines())


@requires_corpus
def test_top_header_counts_are_the_rows_sum(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "160")
    rows = json.loads(invoke(["top", QWEN, "--json"]).stdout)["rows"]
    kernels = sum(r["calls"] for r in rows if r["kind"] == "kernel")
    other = sum(r["calls"] for r in rows if r["kind"] != "kernel")
    assert (kernels, other) == (1465, 242)
    head = invoke(["top", QWEN]).stdout.splitlines()[0]
    assert f"{kernels:,} kernels" in head and f"{other:,} copies and memsets" in head


def test_json_takes_a_path_on_top_and_summary(tmp_path) -> None:
    trace = SAMPLES / "synthetic_h100_launch_bound.json.gz"
    for command in ("top", "summary"):
        out = tmp_path / f"{command}.json"
        res = invoke([command, trace, "--json", out, "--no-cache"])
        assert res.stdout == ""
        data = json.loads(out.read_text())
        assert data
        printed = json.loads(invoke([command, trace, "--json"]).stdout)  # the older flag form
        assert printed == data
        assert json.loads(invoke([command, trace, "--json", "-"]).stdout) == data
    invoke(["top", trace, "--json", tmp_path / "a.json", "--format", "csv"], exit_code=2)


def test_every_name_of_the_kernel_table_gets_its_own_short_name() -> None:
    from pathlib import Path

    table = Path(__file__).parent / "data" / "kernel_names.tsv"
    names = [
        line.split("\t")[3]
        for line in table.read_text(encoding="utf-8").splitlines()
        if line and not line.startswith(("#", "class\t"))
    ]
    short = short_names(names)
    assert len(set(names)) == len(set(short.values())) == 116
    templated = [n for n in names if "<" in n and not n.startswith("_Z")]
    assert all(len(short[n]) < len(n) for n in templated)


def test_json_never_takes_an_input_for_its_file(tmp_path) -> None:
    import shutil

    trace = SAMPLES / "synthetic_h100_launch_bound.json.gz"
    mine = tmp_path / "mine.json.gz"
    shutil.copy(trace, mine)
    before = mine.read_bytes()
    plain = tmp_path / "plain.json"  # an uncompressed Kineto trace
    plain.write_text('{"traceEvents": []}')
    alone = json.loads(invoke(["top", trace, "--json"]).stdout)
    # the older flag form before the inputs: the "FILE" is read as the first input, JSON printed
    assert json.loads(invoke(["top", "--json", trace]).stdout) == alone
    assert json.loads(invoke(["top", "--json", mine, "-n", "3"]).stdout) == alone
    assert mine.read_bytes() == before
    assert json.loads(invoke(["summary", "--json", tmp_path / "mine.json.gz"]).stdout)
    # where --json FILE takes no input (diagnose), a trace or folder for FILE is refused
    for target in (mine, plain, tmp_path):
        res = invoke(["diagnose", "--json", target, trace], exit_code=2)
        assert "is a trace or a folder" in res.stderr
    assert mine.read_bytes() == before
    assert plain.read_text() == '{"traceEvents": []}'
    # an earlier result that quotes the key in a message is a file to write, not a trace
    result = tmp_path / "result.json"
    result.write_text(json.dumps({"message": 'no "traceEvents": key'}))
    invoke(["diagnose", trace, "--json", result])
    assert json.loads(result.read_text())["schema"] == "traceinsight.diagnosis"
    invoke(["top", "--json", tmp_path / "out.json"], exit_code=2)  # no input: nothing to read
    assert "Missing argument 'INPUTS...'" in invoke(["top"], exit_code=2).stderr
    assert not (tmp_path / "out.json").exists()


def test_json_file_on_ingest_and_devices(tmp_path) -> None:
    trace = SAMPLES / "synthetic_h100_launch_bound.json.gz"
    invoke(["ingest", trace, "--json", tmp_path / "i.json"])
    assert json.loads((tmp_path / "i.json").read_text())["ranks"] == [0]
    invoke(["devices", "--json", tmp_path / "d.json"])
    assert json.loads((tmp_path / "d.json").read_text()) == json.loads(
        invoke(["devices", "--json"]).stdout
    )


@requires_corpus
@pytest.mark.parametrize("columns", [100, 160])
@pytest.mark.parametrize(("trace", "kernels"), [(QWEN, 28), (SGLANG, 29), (RESNET, 52)])
def test_shown_kernel_names_stay_distinct_when_cut(trace, kernels, columns, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", str(columns))
    lines = invoke(["top", trace, "-n", "100"]).stdout.splitlines()
    assert max(len(line) for line in lines) <= columns
    at = next(i for i, line in enumerate(lines) if line.startswith("─"))
    width = len(lines[at].split("  ")[0])
    rows = [line for line in lines[at + 1 :] if line and not line.startswith(("…", "("))]
    assert len(rows) == kernels
    assert len({line[:width] for line in rows}) == kernels


def test_distinct_cuts() -> None:
    a = "igemm_wrw_gtcx3_nhwc_bf16_bx0_ex1_bt128x256x32_wt32x32x8_ws1x2_tb1x4x1x8_gkgs"
    b = a.replace("bt128x256x32", "bt256x128x32")
    c = a.replace("_gkgs", "_vs1_gkgs")
    cut = fmt.distinct_cuts([a, b, c], 30)
    assert len(set(cut.values())) == 3 and all(len(x) <= 30 for x in cut.values())
    assert fmt.distinct_cuts(["short", "short"], 30) == {"short": "short"}


@requires_corpus
@pytest.mark.parametrize(
    ("by", "time_key"),
    [("op", "device_self_ns"), ("layer", "total_ns"), ("annotation", "device_ns")],
)
def test_views_header_counts_are_their_rows_sum(by: str, time_key: str, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "160")
    rows = json.loads(invoke(["top", QWEN, "--by", by, "--json"]).stdout)["rows"]
    count = sum(r["kernels"] for r in rows)
    assert count == 1465 + 242  # every kernel, copy and memset, once
    head = invoke(["top", QWEN, "--by", by]).stdout.splitlines()[0]
    assert head.startswith(f"GPU time {fmt.fmt_ns(sum(r[time_key] for r in rows))}: 1,465 kernels")
    assert "242 copies and memsets" in head


@requires_corpus
@pytest.mark.parametrize("columns", [100, 160])
def test_summary_fits_the_terminal(columns: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", str(columns))
    out = invoke(["summary", RESNET]).stdout
    assert max(len(line) for line in out.splitlines()) <= columns, out
    assert "batch_norm_backward<bf16, fp32, i32>" in out  # short kernel names
    assert "memory 210" in out  # a kind and its count on one line
