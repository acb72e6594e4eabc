"""Fragmentation from the allocator's history, not only its end state: a request that failed
with enough memory free in pieces, the cache flush and retry after it, a segment reserved while
enough sat free; and the free cache after a compact peak is cache, not fragmentation."""

from __future__ import annotations

from pathlib import Path

from tracegen.snapshot import (
    FRAGMENTED_HISTORY,
    GiB,
    MiB,
    cache_after_peak,
    fragmented_history,
)
from traceinsight.diagnose import diagnose
from traceinsight.ingest import ingest


def _diagnose(b, tmp: Path):
    p = b.write(tmp / "snap.pickle")
    return diagnose(ingest([p], tmp / "s", quiet=True), cache=False)


def test_a_failed_request_flush_and_retry_are_fragmentation(tmp_path: Path) -> None:
    # GIVEN a run whose end state is 4 GiB of wholly free cache and 1.5 GiB live
    result = _diagnose(fragmented_history(), tmp_path)
    v = result.metrics["values"]
    h = FRAGMENTED_HISTORY
    assert v["snapshot_reserved_bytes"] == h["reserved"]
    assert v["snapshot_releasable_bytes"] == h["releasable"] and v["snapshot_stranded_bytes"] == 0
    # THEN the history is measured exactly
    assert v["snapshot_oom_request_bytes"] == h["oom_request"]
    assert v["snapshot_oom_free_cached_bytes"] == h["oom_free_cached"]
    assert v["snapshot_oom_largest_free_block_bytes"] == h["oom_largest_free"]
    assert v["snapshot_oom_fragmented_events"] == 1
    assert v["snapshot_cache_flushes"] == 1 and v["snapshot_cache_flushed_bytes"] == h["flushed"]
    assert v["snapshot_oom_retries"] == 1
    assert v["snapshot_segments_despite_free"] == 1
    assert v["snapshot_segment_despite_free_bytes"] == h["segment_despite_free"]
    assert v["snapshot_free_at_segment_bytes"] == h["free_at_segment"]
    assert v["snapshot_history_peak_reserved_bytes"] == h["peak_reserved"]
    assert v["snapshot_peak_allocated_bytes"] == h["peak_allocated"]
    assert v["snapshot_later_request_max_bytes"] == h["later_request_max"]
    # and the verdict is fragmentation from the history, not "cache"
    frag = next(f for f in result.findings if f.rule == "fragmentation")
    assert frag.severity == "high"
    assert frag.title == "The caching allocator holds much more memory than tensors use"
    assert "history shows fragmentation" in frag.message
    assert "a request of 1.50 GiB failed although 3.00 GiB sat free" in frag.message
    assert "no free block was larger than 1.00 GiB" in frag.message
    assert "flushed its cache 1 time(s), returning 1.00 GiB" in frag.message
    assert "1 failed request(s) were retried" in frag.message
    assert "new segment of 1.50 GiB while 2.00 GiB sat free" in frag.message
    assert any("expandable_segments:True" in r for r in frag.recommendations)
    assert "memory fragmentation" in result.headline


def test_free_cache_after_a_compact_peak_is_cache(tmp_path: Path) -> None:
    # GIVEN a step whose activations were freed between live weights and an output
    result = _diagnose(cache_after_peak(), tmp_path)
    v = result.metrics["values"]
    # the end state alone looks fragmented: 2.75 GiB free in the segment of the live blocks
    assert v["snapshot_stranded_bytes"] == 4 * GiB - GiB - 256 * MiB
    assert v["snapshot_stranded_pct"] >= 25
    # but at the history's peak reserved was only 4 GiB for 3.75 GiB allocated
    assert v["snapshot_history_peak_reserved_bytes"] == 4 * GiB
    assert v["snapshot_peak_allocated_bytes"] == GiB + 4 * 640 * MiB + 256 * MiB
    assert v["snapshot_history_peak_ratio"] == 4 * GiB / (GiB + 4 * 640 * MiB + 256 * MiB)
    assert v["snapshot_oom_events"] == 0 and v["snapshot_segments_despite_free"] == 0
    frag = [f for f in result.findings if f.rule == "fragmentation"]
    assert len(frag) == 1 and frag[0].severity == "info"
    assert "is that peak's cache" in frag[0].message and "not fragmentation" in frag[0].message
    assert "memory fragmentation" not in result.headline
