"""``top --by api`` / ``--by memcpy`` and the per-kernel statistics against ``nsys stats``
(NVIDIA Nsight Systems 2023.4.4 on the same databases, ``reference/nsys/``) and against counts
taken independently from a raw Kineto JSON; ``--format csv`` on ``top``, ``summary``, ``compare``.

API names are compared after the store's documented normalisation: one ``_vNNNN`` suffix is
dropped, so nsys rows that differ only by it are summed into one (``cuGetProcAddress`` and
``cuGetProcAddress_v2``)."""

from __future__ import annotations

import csv
import gzip
import io
import json
import math
import re
from collections import defaultdict

import pytest
from conftest import KINETO, REFERENCE, TRACES, invoke, requires_corpus

NSYS = {
    "v2026.2_nsysai_h100_2gpu_1s": "nsys/GindaChen+nsys-ai/h100_2gpu_1s.sqlite",
    "v2023.4exp_llmc_report1": "nsys/Mlightsnow+DD2360-llm.c/report1.exported-nsys2023.4.sqlite",
    "v2024.6_nvfuser_report3": "nsys/NVIDIA+Fuser/report3.sqlite",
    "v2023.4exp_alpa_jax_profile_mem": (
        "nsys/Yu-gyoung-Yun+alpa/jax_profile_mem.exported-nsys2023.4.sqlite"
    ),
}
OPS = {
    "[CUDA memcpy Host-to-Device]": "HtoD",
    "[CUDA memcpy Device-to-Host]": "DtoH",
    "[CUDA memcpy Device-to-Device]": "DtoD",
    "[CUDA memset]": None,
}


def _ref(name: str, report: str) -> list[dict[str, str]]:
    with open(REFERENCE / "nsys" / name / f"stats_{report}.csv", newline="") as f:
        return list(csv.DictReader(f))


def _rows(path, by: str) -> list[dict]:
    return json.loads(invoke(["top", path, "--by", by, "--json"]).stdout)["rows"]


def _close(mine: float, ref: str) -> bool:
    """nsys prints averages to 0.1 ns (and MB to 3 decimals)."""
    dec = len(ref.split(".")[1]) if "." in ref else 0
    return abs(mine - float(ref)) <= 0.5 * 10**-dec + 1e-9


@requires_corpus
@pytest.mark.parametrize("ref", sorted(NSYS))
def test_api_summary_equals_nsys_cuda_api_sum(ref: str) -> None:
    want: dict[str, dict] = {}
    for r in _ref(ref, "cuda_api_sum"):
        w = want.setdefault(
            re.sub(r"_v\d+$", "", r["Name"]), {"calls": 0, "total": 0, "min": [], "max": []}
        )
        w["calls"] += int(r["Num Calls"])
        w["total"] += int(r["Total Time (ns)"])
        w["min"].append(int(r["Min (ns)"]))
        w["max"].append(int(r["Max (ns)"]))
        w["row"] = r
        w["n"] = w.get("n", 0) + 1
    rows = {r["name"]: r for r in _rows(TRACES / NSYS[ref], "api")}
    assert set(rows) == set(want)
    grand = sum(w["total"] for w in want.values())
    for name, w in want.items():
        r = rows[name]
        assert (r["calls"], r["total_ns"]) == (w["calls"], w["total"]), name
        assert (r["min_ns"], r["max_ns"]) == (min(w["min"]), max(w["max"])), name
        assert math.isclose(r["share_pct"], 100 * w["total"] / grand)
        if w["n"] == 1:  # one nsys row: its median and stddev too
            assert _close(r["median_ns"], w["row"]["Med (ns)"]), name
            assert _close(r["stddev_ns"], w["row"]["StdDev (ns)"]), name
            assert _close(r["mean_ns"], w["row"]["Avg (ns)"]), name


@requires_corpus
@pytest.mark.parametrize("ref", sorted(NSYS))
def test_kernel_statistics_equal_nsys_cuda_gpu_kern_sum(ref: str) -> None:
    want = _ref(ref, "cuda_gpu_kern_sum")
    rows = {r["name"]: r for r in _rows(TRACES / NSYS[ref], "kernel") if r["kind"] == "kernel"}
    assert len(rows) == len(want)
    for w in want:
        r = rows[w["Name"]]
        assert (r["calls"], r["total_ns"]) == (int(w["Instances"]), int(w["Total Time (ns)"]))
        assert (r["min_ns"], r["max_ns"]) == (int(w["Min (ns)"]), int(w["Max (ns)"]))
        assert _close(r["median_ns"], w["Med (ns)"]), w["Name"]
        assert _close(r["stddev_ns"], w["StdDev (ns)"]), w["Name"]


@requires_corpus
@pytest.mark.parametrize("ref", sorted(NSYS))
def test_memcpy_summary_equals_nsys_mem_time_and_size_sums(ref: str) -> None:
    rows = {(r["kind"], r["copy_kind"]): r for r in _rows(TRACES / NSYS[ref], "memcpy")}
    times = _ref(ref, "cuda_gpu_mem_time_sum")
    sizes = {w["Operation"]: w for w in _ref(ref, "cuda_gpu_mem_size_sum")}
    assert len(rows) == len(times)
    for w in times:
        ck = OPS[w["Operation"]]
        r = rows[("memset" if ck is None else "memcpy", ck)]
        assert (r["count"], r["total_ns"]) == (int(w["Count"]), int(w["Total Time (ns)"]))
        assert (r["min_ns"], r["max_ns"]) == (int(w["Min (ns)"]), int(w["Max (ns)"]))
        assert _close(r["median_ns"], w["Med (ns)"]) and _close(r["stddev_ns"], w["StdDev (ns)"])
        s = sizes[w["Operation"]]
        assert _close(r["total_bytes"] / 1e6, s["Total (MB)"])
        assert _close(r["stddev_bytes"] / 1e6, s["StdDev (MB)"])
        assert _close(r["max_bytes"] / 1e6, s["Max (MB)"])


KINETO_TRACE = "hta/trace_compare/base/base.json.gz"


def _raw_kineto() -> tuple[dict, dict]:
    """Runtime calls and copies counted straight from the JSON, without the reader."""
    with gzip.open(KINETO / KINETO_TRACE, "rt") as f:
        events = json.load(f)["traceEvents"]
    api: dict[str, list[int]] = defaultdict(list)
    mem: dict[tuple, list[tuple[int, int]]] = defaultdict(list)
    for e in events:
        if e.get("ph") != "X":
            continue
        dur = round(float(e["dur"]) * 1000)
        cat = str(e.get("cat", "")).lower()
        if cat in ("cuda_runtime", "cuda_driver"):
            api[e["name"]].append(dur)
        elif cat == "gpu_memcpy":
            kind = re.search(r"Memcpy (\w+)", e["name"]).group(1)
            mem[("memcpy", kind)].append((dur, int(e["args"]["bytes"])))
        elif cat == "gpu_memset":
            mem[("memset", None)].append((dur, int(e["args"]["bytes"])))
    return api, mem


@requires_corpus
def test_kineto_api_and_memcpy_summaries_equal_raw_counts() -> None:
    api, mem = _raw_kineto()
    assert api and mem
    rows = {r["name"]: r for r in _rows(KINETO / KINETO_TRACE, "api")}
    assert set(rows) == set(api)
    for name, d in api.items():
        r = rows[name]
        assert (r["calls"], r["total_ns"], r["min_ns"], r["max_ns"]) == (
            len(d),
            sum(d),
            min(d),
            max(d),
        )
    got = {(r["kind"], r["copy_kind"]): r for r in _rows(KINETO / KINETO_TRACE, "memcpy")}
    assert set(got) == set(mem)
    for key, d in mem.items():
        r = got[key]
        durs, sizes = [x[0] for x in d], [x[1] for x in d]
        assert (r["count"], r["total_ns"], r["total_bytes"]) == (len(d), sum(durs), sum(sizes))
        assert (r["min_bytes"], r["max_bytes"]) == (min(sizes), max(sizes))


@requires_corpus
def test_csv_output_of_top_summary_compare(tmp_path) -> None:
    trace = TRACES / NSYS["v2026.2_nsysai_h100_2gpu_1s"]
    out = invoke(["top", trace, "--by", "memcpy", "--format", "csv"]).stdout
    rows = list(csv.DictReader(io.StringIO(out)))
    htod = next(r for r in rows if r["copy_kind"] == "HtoD")
    assert (htod["count"], htod["total_ns"], htod["total_bytes"]) == (
        "450",
        "1841630798",
        "50950507584",
    )
    # every row, not just -n; to a file with -o
    dest = tmp_path / "api.csv"
    res = invoke(["top", trace, "--by", "api", "-n", "1", "--format", "csv", "-o", dest])
    assert res.stdout == "" and "wrote" in res.stderr
    api = list(csv.DictReader(dest.open()))
    assert len(api) == 10 and api[0]["name"] == "cudaStreamSynchronize"
    assert api[0]["total_ns"] == "856929451" and api[0]["median_ns"] == "6412.5"
    s = list(csv.DictReader(io.StringIO(invoke(["summary", trace, "--format", "csv"]).stdout)))
    assert [r["rank"] for r in s] == ["0", "1"]
    assert sum(int(r["memcpy_count"]) for r in s) == 450 + 450 + 4
    base, test = (
        KINETO / "hta/trace_compare/base/base.json.gz",
        KINETO / "hta/trace_compare/test/test.json.gz",
    )
    c = json.loads(invoke(["compare", base, test, "--format", "json", "-q"]).stdout)
    rows = list(
        csv.DictReader(io.StringIO(invoke(["compare", base, test, "--format", "csv", "-q"]).stdout))
    )
    assert len(rows) == len(c["contributors"])
    assert sum(int(r["delta_ns"]) for r in rows) == c["total_delta_ns"]


def test_csv_cells_are_safe() -> None:
    from traceinsight.render.csvout import to_csv

    text = to_csv([{"name": "=HYPERLINK(1)\x1b[2J", "n": 3, "x": None, "f": 2.0}])
    assert text == "name,n,x,f\n'=HYPERLINK(1)\\x1b[2J,3,,2\n"


@requires_corpus
def test_two_formats_at_once_are_a_usage_error() -> None:
    trace = TRACES / NSYS["v2024.6_nvfuser_report3"]
    invoke(["top", trace, "--json", "--format", "csv"], exit_code=2, stderr_contains="pick one")
    invoke(["summary", trace, "--json", "--format", "csv"], exit_code=2)
    # --json stays a flag that means --format json
    a = invoke(["top", trace, "--by", "api", "--json"]).stdout
    assert a == invoke(["top", trace, "--by", "api", "--format", "json"]).stdout


@requires_corpus
def test_terminal_tables_of_api_memcpy_and_kernel_statistics() -> None:
    trace = TRACES / NSYS["v2026.2_nsysai_h100_2gpu_1s"]
    api = invoke(["top", trace, "--by", "api", "-n", "3"]).stdout
    # the header's count is the sum of all rows (nsys: 5,796 calls over the 10 names)
    assert api.startswith("CUDA/HIP API time 1.80 s in 5,796 calls (host side) (all 2 ranks)")
    assert "cudaStreamSynchronize" in api and "… 7 more (use -n)" in api
    mem = invoke(["top", trace, "--by", "memcpy"]).stdout
    assert "in 926 operations" in mem
    line = next(x for x in mem.splitlines() if x.startswith("memcpy HtoD"))
    assert line.split()[2:4] == ["450", "1.84"] and "47.45 GiB" in line
    kern = invoke(["top", trace, "-n", "3"]).stdout
    assert all(h in kern for h in ("median", "min", "max", "stddev"))


def test_memcpy_rollup_sizes_unknown_not_zero() -> None:
    import pandas as pd

    from traceinsight.analysis.rollups import by_api, by_memcpy

    gpu = pd.DataFrame(
        {
            "rank": [0, 0, 0, 1, 0],
            "kind": ["memcpy", "memcpy", "memset", "memcpy", "kernel"],
            "dur_ns": [100, 300, 50, 7, 1000],
            "bytes": [None, None, 64, 8, None],
            "copy_kind": ["HtoD", "HtoD", None, "DtoH", None],
        }
    )
    out = by_memcpy(gpu, rank=0).set_index("operation")
    assert list(out.index) == ["[memcpy Host-to-Device]", "[memset]"]
    h = out.loc["[memcpy Host-to-Device]"]
    assert (h["count"], h["total_ns"], h["median_ns"], h["min_ns"], h["max_ns"]) == (
        2,
        400,
        200.0,
        100,
        300,
    )
    assert math.isclose(h["stddev_ns"], 141.4213562373095) and math.isnan(h["total_bytes"])
    assert out.loc["[memset]", "total_bytes"] == 64 and out.loc["[memset]", "stddev_ns"] == 0
    assert math.isclose(h["share_pct"], 100 * 400 / 450)
    rt = pd.DataFrame(
        {"rank": [0, 0, 0], "kind": ["runtime"] * 3, "name": ["a", "a", "b"], "dur_ns": [1, 3, 4]}
    )
    a = by_api(rt).set_index("name")
    assert a.loc["a", "calls"] == 2 and a.loc["a", "share_pct"] == 50.0
    assert by_api(rt.iloc[:0]).empty and by_memcpy(gpu[gpu["kind"] == "kernel"]).empty


@requires_corpus
def test_readme_csv_examples_run(tmp_path) -> None:
    """The README's block of nsys-stats-like and CSV examples, each run on corpus traces."""
    import shlex

    from conftest import REPO

    text = (REPO / "README.md").read_text()
    block = text.split("`nsys stats`-like tables and CSV", 1)[1].split("```", 2)[1]
    kineto = KINETO / "hta/trace_compare"
    stand_in = {
        "report.sqlite": TRACES / NSYS["v2024.6_nvfuser_report3"],
        "trace.json.gz": kineto / "base/base.json.gz",
        "traces/": kineto / "base/base.json.gz",
        "base/": kineto / "base/base.json.gz",
        "new/": kineto / "test/test.json.gz",
    }
    lines = [x.split("#")[0].split(">")[0].strip() for x in block.splitlines()]
    cmds = [shlex.split(x)[1:] for x in lines if x.startswith("traceinsight ")]
    assert len(cmds) == 4
    for args in cmds:
        args = [str(stand_in.get(a, a)) for a in args]
        if "-o" in args:
            args[args.index("-o") + 1] = str(tmp_path / "out.csv")
        res = invoke([*args, "-q"])
        text = (tmp_path / "out.csv").read_text() if "-o" in args else res.stdout
        if "csv" in args:
            rows = list(csv.DictReader(io.StringIO(text)))
            assert rows and all(len(r) == len(rows[0]) for r in rows), args
        else:
            assert "median" in text and "stddev" in text, args
