"""Nsight Systems exports of the shared corpus: parity with ``nsys stats`` / ``nsys analyze``
(NVIDIA Nsight Systems 2023.4.4 on the same databases, ``reference/nsys/``), and every shared
nsys file either diagnoses or gets its documented error.

Definitions that differ from nsys's are compared after the documented normalisation
(docs/NSYS.md): API names lose one ``_vNNNN`` suffix; CUDA-backtrace rows (event class 67) are
not calls; NVTX sums are per operator (the text before ``, op_id = ``).
"""

from __future__ import annotations

import csv
import json
import math
import sqlite3
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from conftest import REFERENCE, TRACES, invoke, requires_corpus

from traceinsight.diagnose import diagnose
from traceinsight.ingest import ingest
from traceinsight.ingest.readers.nsys.cuda import api_name
from traceinsight.ingest.readers.nsys.nvtx import parse
from traceinsight.store.core import TraceStore

NSYS = TRACES / "nsys"
REF = REFERENCE / "nsys"
#: nsys stats operation labels of our copy kinds
COPY_LABELS = {
    "HtoD": "Host-to-Device",
    "DtoH": "Device-to-Host",
    "DtoD": "Device-to-Device",
    "HtoH": "Host-to-Host",
    "PtoP": "Peer-to-Peer",
}
#: PROFILER_OVERHEAD rows nsys counts as GPU use (gpustats.py)
CUDA_OVERHEAD = {
    "CUDA profiling data flush overhead",
    "CUDA profiling stop overhead",
    "CUDA profiling overhead",
}
GAP_THRESHOLD_NS = 500_000_000  #: nsys analyze gpu_gaps default (500 ms)


def reference_dirs() -> list[Path]:
    return sorted(p for p in REF.iterdir() if p.is_dir()) if REF.is_dir() else []


def source_of(ref: Path) -> Path:
    line = (ref / "SOURCE.txt").read_text().splitlines()[0]
    return TRACES / line.split(": ", 1)[1].strip()


def rows(path: Path) -> list[dict[str, str]]:
    if not path.exists() or not path.stat().st_size:
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def processed(ref: Path, rule: str) -> bool:
    """Whether ``nsys analyze --rule RULE`` analysed the database (an empty CSV then means no
    row passed the rule's threshold; a skipped database says SKIPPED in the log)."""
    log = ref / f"analyze_{rule}.log"
    return log.exists() and "SKIPPED" not in log.read_text()


_STORES: dict[Path, TraceStore] = {}


def store_of(ref: Path) -> TraceStore:
    src = source_of(ref)
    if src not in _STORES:
        _STORES[src] = ingest([src], None, quiet=True)
    return _STORES[src]


def gpu(store: TraceStore) -> pd.DataFrame:
    g = store.table("gpu_activities").to_pandas()
    for c in ("kind", "name", "copy_kind"):
        g[c] = g[c].astype(object)
    return g


REFS = reference_dirs()
IDS = [p.name for p in REFS]


# --- nsys stats ----------------------------------------------------------------------------


@requires_corpus
@pytest.mark.parametrize("ref", REFS, ids=IDS)
def test_kernel_sums_equal_cuda_gpu_kern_sum(ref: Path) -> None:
    expected = rows(ref / "stats_cuda_gpu_kern_sum.csv")
    g = gpu(store_of(ref))
    k = g[g["kind"] == "kernel"]
    ours = k.groupby("name")["dur_ns"].agg(["sum", "count", "min", "max", "median"])
    assert len(ours) == len(expected)
    for r in expected:
        o = ours.loc[r["Name"]]
        assert (int(o["sum"]), int(o["count"]), int(o["min"]), int(o["max"])) == (
            int(r["Total Time (ns)"]),
            int(r["Instances"]),
            int(r["Min (ns)"]),
            int(r["Max (ns)"]),
        ), r["Name"][:80]
        assert float(o["median"]) == float(r["Med (ns)"])
        assert round(float(o["sum"]) / o["count"], 1) == pytest.approx(
            float(r["Avg (ns)"]), abs=0.051
        )


def _backtrace_rows(db: Path) -> dict[str, tuple[int, int]]:
    """Per API name: total ns and count of the event-class-67 rows (CUDA backtrace copies)."""
    con = sqlite3.connect(f"file:{db}?mode=ro&immutable=1", uri=True)
    try:
        q = (
            "SELECT s.value, sum(r.end - r.start), count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r "
            "JOIN StringIds s ON s.id = r.nameId WHERE r.eventClass = 67 GROUP BY 1"
        )
        out: dict[str, tuple[int, int]] = {}
        for name, total, n in con.execute(q):
            t, c = out.get(api_name(name), (0, 0))
            out[api_name(name)] = (t + total, c + n)
        return out
    except sqlite3.Error:
        return {}
    finally:
        con.close()


@requires_corpus
@pytest.mark.parametrize("ref", REFS, ids=IDS)
def test_api_sums_equal_cuda_api_sum(ref: Path) -> None:
    expected: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for r in rows(ref / "stats_cuda_api_sum.csv"):
        e = expected[api_name(r["Name"])]
        e[0] += int(r["Total Time (ns)"])
        e[1] += int(r["Num Calls"])
    rt = store_of(ref).table("runtime_calls").to_pandas()
    rt["name"] = rt["name"].astype(object)
    ours = rt.groupby("name")["dur_ns"].agg(["sum", "count"])
    backtrace = _backtrace_rows(source_of(ref))
    assert set(ours.index) == set(expected)
    for name, (total, calls) in expected.items():
        bt_total, bt_calls = backtrace.get(name, (0, 0))
        assert (int(ours.loc[name, "sum"]) + bt_total, int(ours.loc[name, "count"]) + bt_calls) == (
            total,
            calls,
        ), name


@requires_corpus
@pytest.mark.parametrize("ref", REFS, ids=IDS)
def test_copy_and_memset_sums_equal_cuda_gpu_mem_sums(ref: Path) -> None:
    g = gpu(store_of(ref))
    m = g[g["kind"].isin(["memcpy", "memset"])].copy()
    m["op"] = [
        "[CUDA memset]" if kind == "memset" else f"[CUDA memcpy {COPY_LABELS[ck]}]"
        for kind, ck in zip(m["kind"], m["copy_kind"])
    ]
    ours = m.groupby("op").agg(
        t=("dur_ns", "sum"),
        n=("dur_ns", "size"),
        lo=("dur_ns", "min"),
        hi=("dur_ns", "max"),
        b=("bytes", "sum"),
        bmax=("bytes", "max"),
    )
    times = rows(ref / "stats_cuda_gpu_mem_time_sum.csv")
    sizes = rows(ref / "stats_cuda_gpu_mem_size_sum.csv")
    if times:  # (nsys 2023.4 skips these reports on 2.x exports: no ENUM tables)
        assert set(ours.index) == {r["Operation"] for r in times}
    for r in times:
        o = ours.loc[r["Operation"]]
        assert (int(o.t), int(o.n), int(o.lo), int(o.hi)) == (
            int(r["Total Time (ns)"]),
            int(r["Count"]),
            int(r["Min (ns)"]),
            int(r["Max (ns)"]),
        )
    for r in sizes:  # MB = 10^6 bytes, printed to 3 decimals
        o = ours.loc[r["Operation"]]
        assert (f"{o.b / 1e6:.3f}", int(o.n), f"{o.bmax / 1e6:.3f}") == (
            r["Total (MB)"],
            int(r["Count"]),
            r["Max (MB)"],
        )


@requires_corpus
@pytest.mark.parametrize("ref", REFS, ids=IDS)
def test_nvtx_sums_equal_nvtx_sum_per_operator(ref: Path) -> None:
    expected: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for r in rows(ref / "stats_nvtx_sum.csv"):
        domain, text = None, r["Range"]
        head, sep, tail = text.partition(":")
        if sep and not tail.startswith(":") and head in ("MPI", "NCCL"):
            domain, text = head, tail
        e = expected[parse(text, domain, r["Style"] == "PushPop").name]
        e[0] += int(r["Total Time (ns)"])
        e[1] += int(r["Instances"])
    store = store_of(ref)
    parts = []
    for table in ("cpu_ops", "ranges"):
        t = store.table(table, ["name", "dur_ns", "cat_raw"]).to_pandas()
        parts.append(t[t["cat_raw"].astype(object) == "NVTX_EVENTS"])
    ours = pd.concat(parts).astype({"name": object}).groupby("name")["dur_ns"].agg(["sum", "count"])
    if not expected:
        return
    assert set(ours.index) == set(expected)
    for name, (total, n) in expected.items():
        assert (int(ours.loc[name, "sum"]), int(ours.loc[name, "count"])) == (total, n), name


def _base(store: TraceStore) -> int:
    return int(store.ranks[0].get("base_time_ns") or 0)


@requires_corpus
@pytest.mark.parametrize("ref", REFS, ids=IDS)
def test_every_gpu_row_equals_cuda_gpu_trace(ref: Path) -> None:
    expected = rows(ref / "stats_cuda_gpu_trace.csv")
    store = store_of(ref)
    g = gpu(store)
    g = g[g["kind"] != "sync"]
    base = _base(store)

    def label(kind: str, name: str, ck: Any) -> str:
        if kind == "memset":
            return "[CUDA memset]"
        return f"[CUDA memcpy {COPY_LABELS[ck]}]" if kind == "memcpy" else name

    def num(v: Any) -> int | None:
        return None if v is None or pd.isna(v) or v == "" else int(v)

    ours = sorted(
        (int(s) - base, int(d), num(c), num(st), label(k, n, ck), num(gx), num(r))
        for s, d, c, st, k, n, ck, gx, r in zip(
            g["start_ns"],
            g["dur_ns"],
            g["correlation"],
            g["stream"],
            g["kind"],
            g["name"],
            g["copy_kind"],
            g["grid_x"],
            g["registers_per_thread"],
        )
    )
    theirs = sorted(
        (
            int(r["Start (ns)"]),
            int(r["Duration (ns)"]),
            num(r["CorrId"]),
            num(r["Strm"]),
            r["Name"],
            num(r["GrdX"]),
            num(r["Reg/Trd"]),
        )
        for r in expected
    )
    if expected:
        assert ours == theirs


@requires_corpus
@pytest.mark.parametrize("ref", REFS, ids=IDS)
def test_every_api_call_equals_cuda_api_trace(ref: Path) -> None:
    expected = rows(ref / "stats_cuda_api_trace.csv")
    if not expected:
        return
    store = store_of(ref)
    rt = store.table("runtime_calls").to_pandas()
    base = _base(store)
    ours = sorted(
        (int(s) - base, int(d), str(n), int(c), str(p), str(t))
        for s, d, n, c, p, t in zip(
            rt["start_ns"], rt["dur_ns"], rt["name"], rt["correlation"], rt["process"], rt["thread"]
        )
    )
    theirs = sorted(
        (
            int(r["Start (ns)"]),
            int(r["Duration (ns)"]),
            api_name(r["Name"]),
            int(r["CorrID"]),
            r["Pid"],
            r["Tid"],
        )
        for r in expected
    )
    assert ours == theirs


# --- nsys analyze: GPU time utilisation and gaps ---------------------------------------------


def _ops(store: TraceStore, rank: int) -> tuple[int | None, dict[int, tuple[np.ndarray, ...]]]:
    """The pid of ``rank`` and, per device, the starts and ends (capture clock) of the GPU
    operations nsys counts: kernels, copies, memsets (start > 0) and the CUDA profiling
    overhead of the process inside each device's range."""
    meta = next(r for r in store.ranks if r["rank"] == rank)
    base = meta.get("base_time_ns") or 0
    rt = store.table("runtime_calls", ["rank", "process"]).to_pandas()
    procs = rt.loc[rt["rank"] == rank, "process"].astype(object).unique()
    pid = int(procs[0]) if len(procs) else None
    g = gpu(store)
    g = g[(g["rank"] == rank) & (g["kind"] != "sync") & (g["start_ns"] - base > 0)]
    oth = store.table("other_events").to_pandas()
    ov = oth[
        (oth["rank"] == rank)
        & (oth["cat_raw"].astype(object) == "PROFILER_OVERHEAD")
        & oth["name"].astype(object).isin(CUDA_OVERHEAD)
    ]
    out = {}
    for dev, ops in g.groupby("device"):
        s = ops["start_ns"].to_numpy(np.int64) - base
        e = s + ops["dur_ns"].to_numpy(np.int64)
        os_ = ov["start_ns"].to_numpy(np.int64) - base
        oe = os_ + ov["dur_ns"].to_numpy(np.int64)
        inside = (os_ > s.min()) & (oe < e.max())
        out[int(dev)] = (np.concatenate([s, os_[inside]]), np.concatenate([e, oe[inside]]))
    return pid, out


def time_util(store: TraceStore, chunks: int = 30, threshold: float = 50.0) -> list[tuple]:
    """``nsys analyze --rule gpu_time_util`` from the store: each device's range (first start
    to last end) in ``chunks`` equal chunks; chunks used less than ``threshold`` %, merged
    when consecutive, with their time-weighted utilisation."""
    out = []
    for r in store.ranks:
        pid, devices = _ops(store, r["rank"])
        for dev, (s, e) in devices.items():
            lo, hi = int(s.min()), int(e.max())
            size = math.ceil((hi - lo) / chunks)
            low = []
            for i in range(chunks):
                cs, ce = lo + i * size, min(lo + (i + 1) * size, hi)
                if cs >= ce:
                    continue
                hit = (s < ce) & (e > cs)
                pct = 100 * (np.minimum(e[hit], ce) - np.maximum(s[hit], cs)).sum() / (ce - cs)
                if pct < threshold:
                    low.append((i, cs, ce, pct))
            groups: list[list[tuple]] = []
            for c in low:
                if groups and groups[-1][-1][0] == c[0] - 1:
                    groups[-1].append(c)
                else:
                    groups.append([c])
            for grp in groups:
                start = grp[0][1]
                weight = sum(c[2] - c[1] for c in grp)
                avg = sum((c[2] - c[1]) * c[3] for c in grp) / weight
                out.append((round(avg, 1), grp[-1][2] - start, start, pid, dev))
    return sorted(out)


def gaps(store: TraceStore) -> list[tuple[int, int, int]]:
    """``nsys analyze --rule gpu_gaps`` from the store: (duration, start, rank) of every gap
    between GPU operations of a device (gaps of 0 ns excluded)."""
    out = []
    for r in store.ranks:
        _, devices = _ops(store, r["rank"])
        for s, e in devices.values():
            s, e = np.sort(s), np.sort(e)
            hole = s[1:] > e[:-1]
            out += [(int(b - a), int(a), r["rank"]) for a, b in zip(e[:-1][hole], s[1:][hole])]
    return out


@requires_corpus
@pytest.mark.parametrize(
    "ref",
    [r for r in REFS if processed(r, "gpu_time_util")],
    ids=[r.name for r in REFS if processed(r, "gpu_time_util")],
)
def test_gpu_time_utilisation_equals_gpu_time_util(ref: Path) -> None:
    expected = sorted(
        (
            float(r["In-Use (%)"]),
            int(r["Duration (ns)"]),
            int(r["Start (ns)"]),
            int(r["PID"]),
            int(r["Device ID"]),
        )
        for r in rows(ref / "analyze_gpu_time_util.csv")
    )
    store = store_of(ref)
    assert time_util(store) == expected
    # the diagnosis's window is nsys's range, and its busy share nsys's in-use share
    res = diagnose(store)
    for summ in res.summary["ranks"]:
        _, devices = _ops(store, summ["rank"])
        ((s, e),) = devices.values()
        assert summ["window_ns"] == int(e.max() - s.min())
        whole = [x for x in expected if x[1] == summ["window_ns"]]
        if whole:  # every chunk under the threshold: one row over the whole range
            assert 100 * summ["gpu_busy_ns"] / summ["window_ns"] == pytest.approx(
                whole[0][0], abs=0.06
            )


@requires_corpus
@pytest.mark.parametrize(
    "ref",
    [r for r in REFS if processed(r, "gpu_gaps")],
    ids=[r.name for r in REFS if processed(r, "gpu_gaps")],
)
def test_gpu_gaps_agree_with_gpu_gaps(ref: Path) -> None:
    expected = rows(ref / "analyze_gpu_gaps.csv")
    store = store_of(ref)
    found = gaps(store)
    assert sorted(g for g in found if g[0] > GAP_THRESHOLD_NS) == sorted(
        (int(r["Duration (ns)"]), int(r["Start (ns)"]), 0) for r in expected
    )
    # the diagnosis's idle time is the sum of those gaps (one device per rank)
    res = diagnose(store)
    for summ in res.summary["ranks"]:
        if summ["gpu_idle_ns"] is not None:
            assert summ["gpu_idle_ns"] == sum(g[0] for g in found if g[2] == summ["rank"])


# --- every shared nsys file -------------------------------------------------------------------


def nsys_files(*suffixes: str) -> list[Path]:
    return (
        sorted(p for p in NSYS.rglob("*") if p.is_file() and p.name.endswith(suffixes))
        if NSYS.is_dir()
        else []
    )


def _nsys_id(p: Path) -> str:
    return str(p.relative_to(NSYS)).replace("/", ":")


@requires_corpus
@pytest.mark.parametrize("path", nsys_files(".sqlite"), ids=_nsys_id)
def test_every_shared_export_diagnoses(path: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    res = invoke(["diagnose", path, "--json", out], exit_code=None)
    assert res.exit_code in (0, 1), res.stderr
    data = json.loads(out.read_text())
    assert data["trace"]["format"] == "nsys"


@requires_corpus
@pytest.mark.parametrize("path", nsys_files(".nsys-rep", ".qdrep"), ids=_nsys_id)
def test_every_shared_report_gets_the_export_command_without_nsys(
    path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no nsys
    res = invoke(["diagnose", path], exit_code=2)
    line = res.stderr.strip()
    assert "\n" not in line
    stem = path.name.rsplit(".", 1)[0]
    assert path.name in line
    assert f"nsys export --type sqlite --output {stem}.sqlite {path.name}" in line


@requires_corpus
def test_the_2gpu_capture_has_one_rank_per_process() -> None:
    store = ingest([NSYS / "GindaChen+nsys-ai/h100_2gpu_1s.sqlite"], None, quiet=True)
    assert [(r["rank"], r["devices_used"], r["rank_source"]) for r in store.ranks] == [
        (0, [0], "process order"),
        (1, [1], "process order"),
    ]
    names = [s["name"] for s in store.meta["sources"]]
    assert names == [
        "h100_2gpu_1s.sqlite (pid 111 python3, GPU 0)",
        "h100_2gpu_1s.sqlite (pid 112 python3, GPU 1)",
    ]
    g = gpu(store)
    assert g[g["kind"] == "kernel"].groupby("rank").size().to_dict() == {0: 1721, 1: 1721}
    res = diagnose(store)
    assert res.trace["ranks"] == [0, 1]
    assert res.headline.startswith("Copy-bound")
    codes = {d["code"] for d in res.to_dict()["diagnostics"]}
    assert {"nsys-time-sliced", "nsys-gpu-unknown", "nsys-no-shapes"} <= codes
