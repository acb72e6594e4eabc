"""Synthetic CUDA caching-allocator snapshots (``torch.cuda.memory._dump_snapshot`` pickles).

A :class:`SnapshotBuilder` keeps segments and their blocks the way the allocator does (a segment
is covered by address-ordered blocks; an allocation splits an inactive block; a free merges it
with inactive neighbours) and records each step in ``device_traces``, so a snapshot's state and
its trace always agree. Sizes are exact: tests compare what traceinsight measures with sums they
compute themselves. Nothing is random.

::

    b = SnapshotBuilder()
    seg = b.segment(1 * GiB)                         # segment_alloc
    a = b.alloc(256 * MiB, segment=seg, frames=[("train.py", 10, "step")])
    b.free(a)                                        # free_requested + free_completed
    b.oom(768 * MiB, device_free=200 * MiB)
    b.write("snap.pickle")

``write(..., layout="2.0")`` writes the PyTorch 2.0 layout (blocks with ``history`` instead of
``address``/``requested_size``/``frames``, no ``time_us``); ``layout="1.13"`` a bare list of
segments. :func:`fragmented_oom` and :func:`leaky_loop` are the scenarios the tests measure.
"""

from __future__ import annotations

import gzip
import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
SMALL_SEGMENT = 2 * MiB  #: a small-pool segment (requests up to 1 MiB)
BASE_ADDRESS = 0x7F00_0000_0000
START_US = 1_790_000_000_000_000  #: late 2026, as epoch microseconds

Frame = tuple[str, int, str]  #: (filename, line, function)


def round_size(n: int) -> int:
    """The allocator's block size for a request of ``n`` bytes (multiples of 512)."""
    return max(512, -(-n // 512) * 512)


@dataclass
class _Block:
    address: int
    size: int
    state: str = "inactive"  #: active_allocated | active_pending_free | inactive
    requested: int = 0
    frames: list[Frame] = field(default_factory=list)


@dataclass
class _Segment:
    address: int
    size: int
    pool: str  #: small | large
    stream: int
    frames: list[Frame]
    blocks: list[_Block] = field(default_factory=list)


class SnapshotBuilder:
    """Segments, blocks and the allocator's trace of one device."""

    def __init__(
        self,
        device: int = 0,
        *,
        start_us: int = START_US,
        step_us: int = 10,
        allocator_settings: dict[str, Any] | None = None,
    ) -> None:
        self.device = device
        self.now_us = start_us
        self.step_us = step_us
        self.segments: list[_Segment] = []
        self.trace: list[dict[str, Any]] = []
        self.allocator_settings = allocator_settings
        self._next_address = BASE_ADDRESS

    # --- the allocator ---------------------------------------------------------------------
    def segment(
        self,
        size: int,
        *,
        pool: str | None = None,
        stream: int = 0,
        frames: list[Frame] | None = None,
        at_us: int | None = None,
    ) -> int:
        """cudaMalloc a segment of ``size`` bytes (``segment_alloc``); its address."""
        pool = pool or ("small" if size <= SMALL_SEGMENT else "large")
        addr = self._next_address
        self._next_address += -(-size // SMALL_SEGMENT) * SMALL_SEGMENT + SMALL_SEGMENT
        seg = _Segment(addr, size, pool, stream, list(frames or []), [_Block(addr, size)])
        self.segments.append(seg)
        self._record("segment_alloc", addr, size, stream, frames, at_us)
        return addr

    def alloc(
        self,
        size: int | None = None,
        *,
        requested: int | None = None,
        segment: int | None = None,
        pool: str | None = None,
        stream: int = 0,
        frames: list[Frame] | None = None,
        at_us: int | None = None,
    ) -> int:
        """Allocate a block (``alloc``); its address.

        ``size`` is the block size (default: ``requested`` rounded to 512 B); ``requested``
        what the caller asked for (default: ``size``). With ``segment`` the first inactive
        block of that segment large enough is split; else the smallest fitting inactive block
        of the pool, or a new segment (2 MiB small pool; 20 MiB up to 10 MiB; else the size
        rounded to 2 MiB)."""
        if size is None:
            if requested is None:
                raise ValueError("give size or requested")
            size = round_size(requested)
        requested = size if requested is None else requested
        pool = pool or ("small" if size <= MiB else "large")
        seg, i = self._fit(size, segment, pool, stream)
        blk = seg.blocks[i]
        if blk.size > size:
            seg.blocks.insert(i + 1, _Block(blk.address + size, blk.size - size))
            blk.size = size
        blk.state, blk.requested, blk.frames = "active_allocated", requested, list(frames or [])
        self._record("alloc", blk.address, size, stream, frames, at_us)
        return blk.address

    def free(
        self,
        addr: int,
        *,
        pending: bool = False,
        frames: list[Frame] | None = None,
        at_us: int | None = None,
    ) -> None:
        """Free the block at ``addr``: ``free_requested``, then (unless ``pending``: another
        stream still uses it) ``free_completed``."""
        seg, blk = self._block(addr)
        if blk.state != "active_allocated":
            raise ValueError(f"block {addr:#x} is not allocated")
        self._record("free_requested", addr, blk.size, seg.stream, frames or blk.frames, at_us)
        blk.state = "active_pending_free"
        if not pending:
            self.complete(addr)

    def complete(self, addr: int, *, at_us: int | None = None) -> None:
        """``free_completed`` of a block freed with ``pending=True``."""
        seg, blk = self._block(addr)
        if blk.state != "active_pending_free":
            raise ValueError(f"block {addr:#x} has no pending free")
        self._record("free_completed", addr, blk.size, seg.stream, blk.frames, at_us)
        blk.state, blk.requested, blk.frames = "inactive", 0, []
        self._merge(seg)

    def release(self, addr: int, *, at_us: int | None = None) -> None:
        """cudaFree a fully inactive segment (``segment_free``)."""
        seg = next(s for s in self.segments if s.address == addr)
        if any(b.state != "inactive" for b in seg.blocks):
            raise ValueError(f"segment {addr:#x} still holds blocks")
        self.segments.remove(seg)
        self._record("segment_free", addr, seg.size, seg.stream, seg.frames, at_us)

    def empty_cache(self, *, at_us: int | None = None) -> int:
        """Release every fully inactive segment; the bytes returned."""
        freed = 0
        for seg in [s for s in self.segments if all(b.state == "inactive" for b in s.blocks)]:
            freed += seg.size
            self.release(seg.address, at_us=at_us)
        return freed

    def oom(
        self,
        size: int,
        *,
        device_free: int,
        frames: list[Frame] | None = None,
        at_us: int | None = None,
    ) -> None:
        """An allocation of ``size`` bytes that failed (``oom``; ``device_free``: what the
        driver still reported free)."""
        self._record("oom", None, size, 0, frames, at_us, device_free=device_free)

    def wait(self, us: int) -> None:
        self.now_us += us

    # --- output ----------------------------------------------------------------------------
    def snapshot(self, layout: str = "current") -> Any:
        """The snapshot as ``_snapshot()`` returns it (``layout``: current | 2.0 | 1.13)."""
        if layout not in ("current", "2.0", "1.13"):
            raise ValueError(f"unknown layout {layout!r}")
        segs = [
            self._segment_dict(s, layout) for s in sorted(self.segments, key=lambda s: s.address)
        ]
        if layout == "1.13":
            return segs
        trace = [dict(e) for e in self.trace]
        if layout == "2.0":
            for e in trace:
                e.pop("time_us", None)
        out: dict[str, Any] = {
            "segments": segs,
            "device_traces": [[] for _ in range(self.device)] + [trace],
        }
        if layout == "current" and self.allocator_settings is not None:
            out["allocator_settings"] = dict(self.allocator_settings)
        return out

    def write(
        self,
        path: str | Path,
        *,
        layout: str = "current",
        protocol: int = 4,
        compress: bool = False,
    ) -> Path:
        """Pickle the snapshot to ``path`` (as ``_dump_snapshot`` does; gzip if asked)."""
        p = Path(path)
        data = pickle.dumps(self.snapshot(layout), protocol=protocol)
        p.write_bytes(gzip.compress(data, mtime=0) if compress else data)
        return p

    # --- internals -------------------------------------------------------------------------
    def _record(
        self,
        action: str,
        addr: int | None,
        size: int,
        stream: int,
        frames: list[Frame] | None,
        at_us: int | None,
        **extra: Any,
    ) -> None:
        self.now_us = at_us if at_us is not None else self.now_us + self.step_us
        e: dict[str, Any] = {"action": action}
        if addr is not None:
            e["addr"] = addr
        e.update(
            size=size,
            stream=stream,
            time_us=self.now_us,
            frames=[_frame(f) for f in frames or []],
            **extra,
        )
        self.trace.append(e)

    def _fit(self, size: int, segment: int | None, pool: str, stream: int) -> tuple[_Segment, int]:
        if segment is not None:
            seg = next(s for s in self.segments if s.address == segment)
            for i, b in enumerate(seg.blocks):
                if b.state == "inactive" and b.size >= size:
                    return seg, i
            raise ValueError(f"no inactive block of {size} bytes in segment {segment:#x}")
        best: tuple[int, _Segment, int] | None = None
        for seg in self.segments:
            if seg.pool != pool or seg.stream != stream:
                continue
            for i, b in enumerate(seg.blocks):
                if b.state == "inactive" and b.size >= size and (best is None or b.size < best[0]):
                    best = (b.size, seg, i)
        if best is not None:
            return best[1], best[2]
        if pool == "small":
            seg_size = SMALL_SEGMENT
        elif size < 10 * MiB:
            seg_size = 20 * MiB
        else:
            seg_size = -(-size // SMALL_SEGMENT) * SMALL_SEGMENT
        addr = self.segment(seg_size, pool=pool, stream=stream)
        return next(s for s in self.segments if s.address == addr), 0

    def _block(self, addr: int) -> tuple[_Segment, _Block]:
        for seg in self.segments:
            for b in seg.blocks:
                if b.address == addr:
                    return seg, b
        raise ValueError(f"no block at {addr:#x}")

    @staticmethod
    def _merge(seg: _Segment) -> None:
        out: list[_Block] = []
        for b in seg.blocks:
            if out and b.state == "inactive" and out[-1].state == "inactive":
                out[-1].size += b.size
            else:
                out.append(b)
        seg.blocks = out

    def _segment_dict(self, s: _Segment, layout: str) -> dict[str, Any]:
        live = [b for b in s.blocks if b.state != "inactive"]
        d: dict[str, Any] = {
            "device": self.device,
            "address": s.address,
            "total_size": s.size,
            "allocated_size": sum(b.size for b in s.blocks if b.state == "active_allocated"),
            "active_size": sum(b.size for b in live),
            "stream": s.stream,
            "segment_type": s.pool,
            "blocks": [],
        }
        if layout == "current":
            d.update(
                requested_size=sum(b.requested for b in live),
                segment_pool_id=(0, 0),
                is_expandable=False,
                frames=[_frame(f) for f in s.frames],
            )
        for b in s.blocks:
            if layout == "current":
                d["blocks"].append(
                    {
                        "address": b.address,
                        "size": b.size,
                        "requested_size": b.requested if b.state != "inactive" else 0,
                        "state": b.state,
                        "frames": [_frame(f) for f in b.frames],
                    }
                )
            else:
                blk: dict[str, Any] = {"size": b.size, "state": b.state}
                if b.state != "inactive":
                    blk["history"] = [
                        {
                            "addr": b.address,
                            "real_size": b.requested,
                            "frames": [_frame(f) for f in b.frames],
                        }
                    ]
                d["blocks"].append(blk)
        return d


def _frame(f: Frame) -> dict[str, Any]:
    return {"filename": f[0], "line": f[1], "name": f[2]}


# --- the scenarios the tests measure ----------------------------------------------------------

#: call sites of the scenarios (innermost frame first, as PyTorch lists them)
ATTN = [
    ("/home/alice/proj/model.py", 88, "attention"),
    ("/home/alice/proj/model.py", 140, "forward"),
]
MLP = [("/home/alice/proj/model.py", 61, "mlp"), ("/home/alice/proj/model.py", 141, "forward")]
EMBED = [("/home/alice/proj/model.py", 30, "embed"), ("/home/alice/proj/model.py", 139, "forward")]
LOGITS = [
    ("/home/alice/proj/train.py", 52, "loss_fn"),
    ("/home/alice/proj/train.py", 77, "train_step"),
]
HISTORY = [("/home/alice/proj/train.py", 80, "train_step")]


def fragmented_oom() -> SnapshotBuilder:
    """A device whose free memory is stranded between live blocks, then an OOM.

    Large pool: segment A (1 GiB) holds ATTN 256 MiB, a 384 MiB hole, MLP 128 MiB and a
    256 MiB hole; segment B (512 MiB) is full (EMBED 512 MiB, requested 500 MiB); segment C
    (1 GiB) holds MLP 64 MiB, a 448 MiB hole and a block of 512 MiB whose free is pending on
    another stream. Small pool: two 2 MiB segments, each 1 MiB live (512 KiB blocks, 500 KiB
    requested) and 1 MiB free. Then a request of 768 MiB fails with 200 MiB free on the device:
    1090 MiB are cached free in total, but the largest free block holds 448 MiB. The figures
    are in :data:`FRAGMENTED_FIGURES`.
    """
    b = SnapshotBuilder(allocator_settings={"expandable_segments": False})
    a = b.segment(GiB, frames=ATTN)
    seg_b = b.segment(512 * MiB, frames=EMBED)
    c = b.segment(GiB, frames=MLP)
    b.alloc(256 * MiB, segment=a, frames=ATTN)
    hole1 = b.alloc(384 * MiB, segment=a, frames=ATTN)
    b.alloc(128 * MiB, segment=a, frames=MLP)
    hole2 = b.alloc(256 * MiB, segment=a, frames=MLP)
    b.alloc(512 * MiB, requested=500 * MiB, segment=seg_b, frames=EMBED)
    b.alloc(64 * MiB, segment=c, frames=MLP)
    hole3 = b.alloc(448 * MiB, segment=c, frames=ATTN)
    pend = b.alloc(512 * MiB, segment=c, frames=LOGITS)
    for _ in range(2):
        s = b.segment(SMALL_SEGMENT, frames=EMBED)
        keep = b.alloc(512 * KiB, requested=500 * KiB, segment=s, frames=EMBED)
        tmp = b.alloc(512 * KiB, requested=500 * KiB, segment=s, frames=EMBED)
        b.alloc(512 * KiB, requested=500 * KiB, segment=s, frames=EMBED)
        b.free(tmp)
        del keep
    for h in (hole1, hole2, hole3):
        b.free(h)
    b.free(pend, pending=True)
    b.oom(768 * MiB, device_free=200 * MiB, frames=ATTN)
    return b


#: what :func:`fragmented_oom` holds, computed by hand
FRAGMENTED_FIGURES = {
    "reserved": 2 * GiB + 512 * MiB + 2 * SMALL_SEGMENT,
    "allocated": (256 + 128 + 512 + 64) * MiB + 4 * 512 * KiB,
    "requested": (256 + 128 + 500 + 64) * MiB + 4 * 500 * KiB,
    "pending": 512 * MiB,
    "free": (384 + 256 + 448) * MiB + 2 * MiB,
    "stranded": (384 + 256 + 448) * MiB + 2 * MiB,
    "releasable": 0,
    "largest_free": 448 * MiB,
    "small_reserved": 2 * SMALL_SEGMENT,
    "large_reserved": 2 * GiB + 512 * MiB,
    "oom_request": 768 * MiB,
    "oom_device_free": 200 * MiB,
}


def leaky_loop(iterations: int = 6, leak: int = 320 * MiB) -> SnapshotBuilder:
    """A training loop that keeps ``leak`` bytes per iteration alive (HISTORY) and sizes its
    activations by sequence length (churn): per iteration EMBED 256 MiB, ATTN 512 MiB, MLP
    768 MiB and LOGITS 128 MiB live at the iteration's peak, all freed at its end except the
    HISTORY allocation. Weights (1 GiB) live throughout.

    Allocated at the end of iteration ``k``: 1 GiB + (k + 1) x ``leak``; the peak is in the last
    iteration: 1 GiB + ``iterations`` x ``leak`` + 1674 MiB (+ 2 MiB per earlier iteration of
    ATTN's growing size: 522 MiB in the sixth)."""
    b = SnapshotBuilder()
    b.alloc(GiB, frames=[("/home/alice/proj/train.py", 20, "load_model")])
    for i in range(iterations):
        live = [
            b.alloc(256 * MiB, frames=EMBED),
            b.alloc(512 * MiB + i * 2 * MiB, frames=ATTN),
            b.alloc(768 * MiB, frames=MLP),
            b.alloc(128 * MiB, frames=LOGITS),
        ]
        b.alloc(leak, frames=HISTORY)
        b.wait(1000)
        for addr in reversed(live):
            b.free(addr)
        b.wait(1000)
    return b


def fragmented_history() -> SnapshotBuilder:
    """A run whose end state looks like plain cache but whose history shows fragmentation.

    Segment A (4 GiB) is filled with eight 512 MiB blocks; segment B (1 GiB) gets one 1 GiB
    block that is freed (B wholly free). Every other block of A is freed: 2 GiB free in
    512 MiB pieces. A request of 1.5 GiB then fails (OOM, 768 MiB free on the device) although
    2 GiB + 1 GiB sit free in the cache, none of it in a block over 1 GiB; ``empty_cache()``
    returns B (a flush of 1 GiB) and the retry reserves a new 1.5 GiB segment C while A's
    2 GiB sit free, and succeeds. At the end A's last blocks are freed too: the snapshot shows
    4 GiB of wholly free cache and 1.5 GiB live. The figures are in
    :data:`FRAGMENTED_HISTORY`."""
    b = SnapshotBuilder(allocator_settings={"expandable_segments": False})
    a = b.segment(4 * GiB, frames=ATTN)
    blocks = [b.alloc(512 * MiB, segment=a, frames=ATTN) for _ in range(8)]
    seg_b = b.segment(GiB, frames=MLP)
    b.free(b.alloc(GiB, segment=seg_b, frames=MLP))
    for x in blocks[1::2]:
        b.free(x)
    b.oom(3 * GiB // 2, device_free=768 * MiB, frames=LOGITS)
    b.empty_cache()
    c = b.segment(3 * GiB // 2, frames=LOGITS)
    b.alloc(3 * GiB // 2, segment=c, frames=LOGITS)
    for x in blocks[0::2]:
        b.free(x)
    return b


#: what :func:`fragmented_history` holds, computed by hand
FRAGMENTED_HISTORY = {
    "oom_request": 3 * GiB // 2,
    "oom_free_cached": 3 * GiB,  # A's four holes and B, before the flush
    "oom_largest_free": GiB,  # B
    "flushed": GiB,
    "segment_despite_free": 3 * GiB // 2,
    "free_at_segment": 2 * GiB,  # A's four holes
    "peak_reserved": 5 * GiB,  # A full and B's block: the history's peak
    "peak_allocated": 5 * GiB,
    "later_request_max": 3 * GiB // 2,
    "reserved": 4 * GiB + 3 * GiB // 2,
    "releasable": 4 * GiB,
}


def cache_after_peak() -> SnapshotBuilder:
    """A training step: one 4 GiB segment holds weights (1 GiB), activations (2.5 GiB) and an
    output (256 MiB) at its peak (reserved only 1.07x allocated); the activations are freed
    at the end, leaving 2.75 GiB free between the weights and the output: the peak's cache,
    not fragmentation."""
    b = SnapshotBuilder(allocator_settings={"expandable_segments": False})
    s = b.segment(4 * GiB, frames=EMBED)
    b.alloc(GiB, segment=s, frames=EMBED)
    acts = [b.alloc(640 * MiB, segment=s, frames=ATTN) for _ in range(4)]
    b.alloc(256 * MiB, segment=s, frames=LOGITS)
    for x in acts:
        b.free(x)
    return b
