"""CUDA memory snapshots: reading them without trusting them, the allocator's figures against
independent sums over segments and blocks, the OOM post-mortem, leaks across iterations, the
memory-timeline export, and snapshots beside a trace (``--memory-snapshot``)."""

from __future__ import annotations

import gzip
import json
import os
import pickle
from pathlib import Path

import pytest
from conftest import TRACES, invoke

from tracegen.snapshot import (
    FRAGMENTED_FIGURES,
    GiB,
    MiB,
    SnapshotBuilder,
    fragmented_oom,
    leaky_loop,
)
from tracegen.synth import KinetoTraceBuilder
from traceinsight.diagnose import diagnose
from traceinsight.ingest import ingest, load
from traceinsight.ingest.readers.snapshot import unpickle

TIMELINE = TRACES / "memory" / "hta" / "memory_analysis" / "memory_timeline.raw.gz"


@pytest.fixture(params=["in-process", "isolated"])
def path_kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways a snapshot is unpickled: the pure-Python unpickler here, and the C unpickler
    in a capped child process (large files on Linux)."""
    if request.param == "isolated":
        if not unpickle.sys.platform.startswith("linux"):
            pytest.skip("the isolated path forks (Linux)")
        monkeypatch.setattr(unpickle, "ISOLATE_MIN_BYTES", 0)
    return request.param


def independent_sums(snap: dict) -> dict[str, int]:
    """Reserved, allocated, requested, pending and free bytes summed straight from the pickle's
    plain data (not through traceinsight)."""
    out = {
        "reserved": 0,
        "allocated": 0,
        "requested": 0,
        "pending": 0,
        "free": 0,
        "stranded": 0,
        "largest_free": 0,
    }
    for seg in snap["segments"]:
        out["reserved"] += seg["total_size"]
        live = any(b["state"] != "inactive" for b in seg["blocks"])
        for b in seg["blocks"]:
            if b["state"] == "active_allocated":
                out["allocated"] += b["size"]
                out["requested"] += b["requested_size"]
            elif b["state"] == "active_pending_free":
                out["pending"] += b["size"]
            else:
                out["free"] += b["size"]
                out["stranded"] += b["size"] if live else 0
                out["largest_free"] = max(out["largest_free"], b["size"])
    return out


def test_fragmented_snapshot_figures(tmp_path: Path, path_kind: str) -> None:
    # GIVEN the fragmented synthetic snapshot (known segments, blocks, an OOM)
    b = fragmented_oom()
    p = b.write(tmp_path / "snap.pickle")
    snap = pickle.loads(p.read_bytes())  # our own file: the independent reference
    want = independent_sums(snap)
    # WHEN it is read and diagnosed
    store = ingest([p], tmp_path / "s", quiet=True)
    result = diagnose(store, cache=False)
    v = result.metrics["values"]
    # THEN the totals equal the independent sums and the hand-computed figures
    assert store.row_counts["memory_segments"] == 5
    assert store.row_counts["memory_blocks"] == sum(len(s["blocks"]) for s in snap["segments"])
    assert store.row_counts["memory_actions"] == len(snap["device_traces"][0])
    for key, metric in (
        ("reserved", "snapshot_reserved_bytes"),
        ("allocated", "snapshot_allocated_bytes"),
        ("requested", "snapshot_requested_bytes"),
        ("pending", "snapshot_pending_free_bytes"),
        ("free", "snapshot_free_bytes"),
        ("stranded", "snapshot_stranded_bytes"),
        ("largest_free", "snapshot_largest_free_block_bytes"),
    ):
        assert v[metric] == want[key] == FRAGMENTED_FIGURES[key], metric
    assert v["snapshot_releasable_bytes"] == FRAGMENTED_FIGURES["releasable"] == 0
    # the allocator's invariant: (A - Q) + F + P + Q = R
    assert (want["allocated"] - want["requested"]) + want["free"] + want["pending"] + want[
        "requested"
    ] == want["reserved"]
    assert v["snapshot_stranded_pct"] == pytest.approx(100 * 1090 / 2564)
    snap_sec = result.memory["snapshot"]
    assert snap_sec["totals"]["small"]["reserved"] == FRAGMENTED_FIGURES["small_reserved"]
    assert snap_sec["totals"]["large"]["reserved"] == FRAGMENTED_FIGURES["large_reserved"]
    # the OOM: 768 MiB failed with 1090 MiB cached free and 200 MiB on the device, but the
    # largest free block held 448 MiB
    assert v["snapshot_oom_events"] == 1 and v["snapshot_oom_fragmented_events"] == 1
    assert v["snapshot_oom_request_bytes"] == FRAGMENTED_FIGURES["oom_request"]
    assert v["snapshot_oom_device_free_bytes"] == FRAGMENTED_FIGURES["oom_device_free"]
    assert v["snapshot_oom_free_cached_bytes"] == FRAGMENTED_FIGURES["free"]
    assert v["snapshot_oom_largest_free_block_bytes"] == FRAGMENTED_FIGURES["largest_free"]
    # the findings say so, with evidence-matched advice naming the call site
    by_rule = {f.rule: f for f in result.findings}
    frag, oom = by_rule["fragmentation"], by_rule["out-of-memory"]
    assert frag.severity == "high" and oom.severity == "high"
    assert "fragmentation, not capacity" in oom.message
    assert "proj/model.py:88 attention" in frag.message
    assert any("expandable_segments:True" in r for r in frag.recommendations + oom.recommendations)
    assert result.headline.startswith("Memory snapshot: memory fragmentation")
    assert result.trace["memory_only"] is True
    assert not result.host  # a memory-only run is not a CPU run


def test_leaky_loop_growth_and_survivors(tmp_path: Path) -> None:
    p = leaky_loop(iterations=6, leak=320 * MiB).write(tmp_path / "leak.pickle")
    result = diagnose(ingest([p], tmp_path / "s", quiet=True), cache=False)
    v = result.metrics["values"]
    assert v["snapshot_iterations"] == 6
    assert v["snapshot_growth_bytes_per_iteration"] == pytest.approx(320 * MiB)
    assert v["snapshot_growth_iterations_pct"] == 100.0
    # the peak: weights, six leaks and the last iteration's activations
    assert v["snapshot_peak_allocated_bytes"] == GiB + 6 * 320 * MiB + (256 + 522 + 768 + 128) * MiB
    # the leak of every iteration after the first is still live at the end
    assert v["snapshot_surviving_bytes"] == 5 * 320 * MiB
    leak = next(f for f in result.findings if f.rule == "memory-leak")
    assert "proj/train.py:80 train_step" in leak.message
    assert any("references held across steps" in r for r in leak.recommendations)
    live = result.memory["snapshot"]["peak"]["live"]
    assert live[0]["call_site"].endswith("train.py:80 train_step")


@pytest.mark.parametrize("layout", ["2.0", "1.13"])
def test_older_layouts_give_the_same_totals(tmp_path: Path, layout: str) -> None:
    b = fragmented_oom()
    current = diagnose(
        ingest([b.write(tmp_path / "new.pickle")], tmp_path / "a", quiet=True), cache=False
    ).metrics["values"]
    old = diagnose(
        ingest([b.write(tmp_path / "old.pickle", layout=layout)], tmp_path / "b", quiet=True),
        cache=False,
    ).metrics["values"]
    for m in (
        "snapshot_reserved_bytes",
        "snapshot_allocated_bytes",
        "snapshot_free_bytes",
        "snapshot_stranded_bytes",
        "snapshot_largest_free_block_bytes",
        "snapshot_pending_free_bytes",
        "snapshot_requested_bytes",
    ):
        assert old[m] == current[m], m
    assert old["snapshot_oom_events"] == (0 if layout == "1.13" else 1)


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_pickle_protocols_and_gzip(tmp_path: Path, protocol: int) -> None:
    p = fragmented_oom().write(tmp_path / "s.pickle.gz", protocol=protocol, compress=True)
    v = diagnose(ingest([p], tmp_path / "s", quiet=True), cache=False).metrics["values"]
    assert v["snapshot_reserved_bytes"] == FRAGMENTED_FIGURES["reserved"]


# --- files that must not be trusted ------------------------------------------------------------


class _RunsACommand:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # what a malicious pickle does: call os.system on load
        return (os.system, (f"touch {self.marker}",))


def assert_refused(res, *fragments: str) -> None:
    err = res.stderr.strip()
    assert res.exit_code == 2, (res.exit_code, res.stdout, err)
    assert err.count("\n") == 0, f"not one line: {err!r}"
    assert "Traceback" not in err and "hint:" in err
    for f in fragments:
        assert f in err, err


def test_malicious_pickle_runs_nothing(tmp_path: Path, path_kind: str) -> None:
    marker = tmp_path / "pwned"
    snap = fragmented_oom().snapshot()
    snap["segments"][0]["blocks"][0]["frames"] = [_RunsACommand(marker)]
    p = tmp_path / "evil.pickle"
    p.write_bytes(pickle.dumps(snap, protocol=4))
    res = invoke(["diagnose", p], exit_code=None)
    assert_refused(res, "evil.pickle", "refused", "system", "nothing was loaded or run")
    assert not marker.exists()
    # the same through --memory-snapshot beside a trace
    trace = small_trace(tmp_path / "t.json.gz")
    res = invoke(["diagnose", trace, "--memory-snapshot", p], exit_code=None)
    assert_refused(res, "evil.pickle", "refused")
    assert not marker.exists()


def test_truncated_pickle(tmp_path: Path, path_kind: str) -> None:
    data = pickle.dumps(fragmented_oom().snapshot(), protocol=4)
    p = tmp_path / "cut.pickle"
    p.write_bytes(data[: len(data) // 2])
    assert_refused(invoke(["diagnose", p], exit_code=None), "cut.pickle", "truncated")


@pytest.mark.parametrize(
    "obj, what",
    [
        ({"model": [1, 2]}, "without 'segments'"),
        ([1, 2, 3], "not a CUDA memory snapshot"),
        ("text", "not a CUDA memory snapshot"),
        ({"segments": [{"total_size": 5}]}, "no blocks"),
    ],
)
def test_pickle_of_another_shape(tmp_path: Path, obj: object, what: str, path_kind: str) -> None:
    p = tmp_path / "other.pickle"
    p.write_bytes(pickle.dumps(obj, protocol=4))
    assert_refused(invoke(["diagnose", p], exit_code=None), "other.pickle", what)


def test_memory_and_expansion_bombs_are_bounded(tmp_path: Path, path_kind: str) -> None:
    # a 10-byte pickle whose memo index asks the C unpickler for 32 GiB
    p = tmp_path / "memo.pickle"
    p.write_bytes(b"\x80\x04]r\xff\xff\xff\x7f.")
    assert_refused(invoke(["diagnose", p], exit_code=None), "memo.pickle")
    # shared references: a few KB that would expand into a million blocks
    blk = {
        "address": 0,
        "size": 512,
        "requested_size": 512,
        "state": "active_allocated",
        "frames": [],
    }
    seg = {
        "device": 0,
        "address": 0,
        "total_size": 512 * 1000,
        "segment_type": "large",
        "blocks": [blk] * 1000,
    }
    p = tmp_path / "fan.pickle"
    p.write_bytes(pickle.dumps({"segments": [seg] * 1000, "device_traces": []}, protocol=4))
    assert p.stat().st_size < 10_000
    assert_refused(invoke(["diagnose", p], exit_code=None), "fan.pickle", "repeats shared data")


# --- beside a trace ------------------------------------------------------------------------------


def small_trace(path: Path, rank: int = 0) -> Path:
    b = KinetoTraceBuilder(rank=rank, world_size=1)
    with b.step(1, 0, 500_000), b.cpu_op("aten::add", 10_000, 50_000):
        b.launch("add_kernel", cpu_start=20_000, gpu_start=40_000, gpu_dur=30_000)
    return b.write(path)


def test_memory_snapshot_beside_a_trace(tmp_path: Path) -> None:
    trace = small_trace(tmp_path / "rank-3.json.gz", rank=3)
    snap = fragmented_oom().write(tmp_path / "snap.pickle")
    store = load([trace], memory=[snap])
    # the snapshot joins the trace's rank: one rank, its memory input listed
    assert [r["rank"] for r in store.ranks] == [3]
    assert store.ranks[0]["memory"]["inputs"][0]["name"] == "snap.pickle"
    assert set(store.table("memory_segments")["rank"].to_pylist()) == {3}
    result = diagnose(store, cache=False)
    assert result.metrics["values"]["snapshot_reserved_bytes"] == FRAGMENTED_FIGURES["reserved"]
    assert result.metrics["values"]["has_gpu"]
    assert not result.trace.get("memory_only")
    assert {"fragmentation", "out-of-memory"} <= {f.rule for f in result.findings}
    # the command line, thin over the library
    res = invoke(["diagnose", trace, "--memory-snapshot", snap, "--json", "-"])
    d = json.loads(res.stdout)
    assert d["memory"]["snapshot"]["totals"]["reserved"] == FRAGMENTED_FIGURES["reserved"]
    # a trace given as the memory snapshot is refused in one line
    res = invoke(["diagnose", trace, "--memory-snapshot", trace], exit_code=None)
    assert_refused(res, "not a memory snapshot")


def test_no_snapshot_no_snapshot_metrics(tmp_path: Path) -> None:
    # a trace alone: nothing about snapshots is set or reported missing
    result = diagnose(
        ingest([small_trace(tmp_path / "t.json.gz")], tmp_path / "s", quiet=True), cache=False
    )
    assert not [k for k in result.metrics["values"] if k.startswith("snapshot_")]
    assert not [k for k in result.metrics["missing"] if k.startswith("snapshot_")]
    assert "snapshot" not in (result.memory or {})


def test_empty_snapshot(tmp_path: Path) -> None:
    p = SnapshotBuilder().write(tmp_path / "empty.pickle")
    assert_refused(invoke(["diagnose", p], exit_code=None), "empty.pickle", "no segments")


# --- the memory-timeline export ------------------------------------------------------------------


@pytest.mark.skipif(not TIMELINE.is_file(), reason="the shared memory-timeline export is absent")
def test_shared_memory_timeline_export(tmp_path: Path) -> None:
    raw = json.loads(gzip.decompress(TIMELINE.read_bytes()))
    store = ingest([TIMELINE], tmp_path / "s", quiet=True)
    assert store.row_counts["memory_categories"] == len(raw) == 16845
    result = diagnose(store, cache=False)
    cats = result.memory["categories"][0]
    # the level at the end equals the sum of every row, per category
    for i, name in enumerate(
        (
            "parameter",
            "optimizer_state",
            "input",
            "temporary",
            "activation",
            "gradient",
            "autograd_detail",
            "unknown",
        )
    ):
        total = sum(r[2] for r in raw if r[3] == i)
        if name in cats["series"]:
            assert cats["series"][name][-1] == total, name
    assert cats["peak"]["bytes"] == max(
        sum(cats["series"][c][k] for c in cats["categories"]) for k in range(len(cats["x"]))
    )
    assert result.headline.startswith("Memory timeline: memory peaks at")
    # beside a snapshot of the same run it joins the same rank
    snap = fragmented_oom().write(tmp_path / "snap.pickle")
    both = load([snap, TIMELINE])
    assert both.row_counts["memory_categories"] == 16845
    assert len(both.ranks) == 1
