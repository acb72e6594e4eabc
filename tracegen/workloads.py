"""Scenario generator: GPU-shaped training traces whose bottleneck is known by construction.

A :class:`Workload` describes a transformer training loop (model size, dtype, device, host
behaviour, communication, memory); :func:`build` simulates it and writes the Kineto events a
profiler would have recorded, through :class:`~tracegen.synth.KinetoTraceBuilder`.
Nothing is drawn from the clock or an unseeded generator: the same ``Workload`` always gives the
same bytes.

The simulation, in brief:

* **Host threads.** The main thread runs, per ``ProfilerStep#N``: an optional host stall (slow
  steps), ``Optimizer.zero_grad``, the ``DataLoader`` ``__next__`` annotation, the H2D copy of the
  batch, the forward pass (``nn.Module`` frames, ``aten::`` ops with shapes, one launch per
  kernel), the loss, ``loss.backward()``, ``Optimizer.step#AdamW.step`` and optional
  ``aten::item`` host syncs. Backward runs on the autograd thread (``pt_autograd_0``): one
  ``autograd::engine::evaluate_function: XBackward0`` per autograd node, replayed from the
  forward "tape" in reverse, with the forward op's ``Sequence number`` and a ``fwdbwd`` flow.
  Every launching op costs ``cpu_op_overhead_ns`` before its first launch, each launch
  ``launch_ns``.
* **GPU streams.** A kernel starts at ``max(launch end + 2 µs, previous end on its stream + 1 µs,
  dependencies)`` and runs for its roofline time: GEMMs ``2·M·N·K / (peak · gemm_efficiency)``,
  attention the same at 0.75 of that efficiency, everything else ``bytes / (bandwidth ·
  memory_efficiency)``, never under 2 µs. A host that launches slower than the GPU executes
  leaves the GPU idle (launch-bound); a faster host runs ahead (up to 1024 queued kernels).
* **Communication** (``world_size > 1`` and ``comm_bytes > 0``): DDP-style gradient all-reduce on
  a separate NCCL stream. ``comm_overlap`` of the bytes go out in per-layer buckets during
  backward (each waits for the gradients it reduces), the rest in one bucket after backward;
  the optimizer waits for all of it. Duration ``bytes · 2(n-1)/n / comm_bandwidth`` (ring, bus
  bandwidth). A collective ends on every rank when the last rank has arrived plus that duration,
  so ranks wait inside NCCL kernels for a straggler (:func:`build_ranks` simulates the ranks in
  lockstep).
* **Memory** (``[memory]`` events, on the allocating thread): persistent state plus activations
  allocated through forward and freed through backward (true tensor sizes unless they would
  exceed 60% of the budget), sized so that the peak ``Total Reserved`` is
  ``peak_memory_fraction · totalGlobalMem`` and reserved = ``reserved_overhead`` × allocated at
  the peak; reserved never shrinks (caching allocator); ``leak_bytes_per_step`` stays allocated.

Beyond what :class:`KinetoTraceBuilder` writes, :meth:`RankSim.finish` adds ``thread_name``
metadata for the autograd thread and the streams, sets real CUPTI ``cbid`` values (``cid``,
``kernel``, ``grid``, ``block`` on ROCm runtime events), turns ``cuLaunchKernel`` into
``cuda_driver`` and drops the occupancy fields ROCm kernels do not have.

Use::

    from tracegen.workloads import PRESETS, Workload, build, build_ranks
    build(PRESETS["launch_bound"]).write("t.json.gz")
    for r, b in enumerate(build_ranks(PRESETS["straggler"])):
        b.write(f"rank-{r}.json.gz")
"""

from __future__ import annotations

from typing import Any

from tracegen.model import GiB, MiB, Workload
from tracegen.rank import RankSim, run_lockstep
from tracegen.synth import KinetoTraceBuilder

__all__ = ["PRESETS", "GiB", "MiB", "Workload", "build", "build_ranks"]


def _simulate(w: Workload, ranks: list[int]) -> list[RankSim]:
    return run_lockstep([RankSim(w, r) for r in ranks])


def build(w: Workload) -> KinetoTraceBuilder:
    """The trace of rank ``w.rank``. Ranks are simulated together when they can differ."""
    if w.world_size > 1 and w.comm_bytes and (w.straggler_rank is not None or w.jitter):
        sims = _simulate(w, list(range(w.world_size)))
        return sims[w.rank].finish()
    return _simulate(w, [w.rank])[0].finish()


def build_ranks(w: Workload) -> list[KinetoTraceBuilder]:
    """One trace per rank, ``0 .. world_size-1`` (``w.rank`` is ignored)."""
    return [s.finish() for s in _simulate(w, list(range(w.world_size)))]


# --- named scenarios ------------------------------------------------------------------------

_SMALL: dict[str, Any] = {"hidden": 2048, "seq": 1024, "batch": 4}

PRESETS: dict[str, Workload] = {
    # H100 bf16, big GEMMs at a realistic efficiency, host far ahead: GPU busy ~99%
    "healthy": Workload(),
    # small model, tiny kernels, slow Python: the GPU waits for launches
    "launch_bound": Workload(
        hidden=512, seq=256, batch=2, cpu_op_overhead_ns=40_000, tiny_kernels_per_layer=12
    ),
    # the DataLoader takes ~35% of every step; loss.item() at step end keeps host and GPU in step
    "input_bound": Workload(**_SMALL, dataloader_ns=7_000_000, syncs_per_step=1),
    # 16 .item() syncs per step drain the GPU queue again and again
    "host_sync": Workload(hidden=1024, seq=1024, batch=2, syncs_per_step=16),
    # small GEMMs, 6x the elementwise traffic at 30% of peak bandwidth
    "memory_bound": Workload(
        hidden=1024, seq=2048, batch=8, elementwise_scale=6.0, memory_efficiency=0.3
    ),
    # large GEMMs at 85% of peak
    "compute_bound": Workload(hidden=8192, seq=2048, batch=8, gemm_efficiency=0.85),
    # fp32 training on H100: SIMT GEMMs at 67 TFLOP/s
    "fp32_gemms": Workload(**_SMALL, dtype="fp32"),
    # 4 ranks, 768 MiB all-reduce per step, none of it overlapped with backward
    "comm_bound": Workload(
        hidden=2048, seq=2048, batch=2, world_size=4, comm_bytes=768 * MiB, comm_overlap=0.0
    ),
    # 4 ranks, rank 2's GPU 1.5x slower; the others wait inside NCCL
    "straggler": Workload(
        hidden=2048,
        seq=2048,
        batch=2,
        world_size=4,
        comm_bytes=256 * MiB,
        comm_overlap=0.5,
        straggler_rank=2,
        straggler_slowdown=1.5,
    ),
    # start-up: the first launch loads modules for 2 s, then 2 ordinary steps (not steady state)
    "cold_start": Workload(**_SMALL, steps=3, syncs_per_step=1, cold_start_ns=2_000_000_000),
    # every 2nd step stalls the host for 30 ms (GC / checkpoint), plus 5% noise
    "jitter": Workload(
        **_SMALL, syncs_per_step=1, jitter=0.05, slow_step_every=2, slow_step_extra_ns=30_000_000
    ),
    # allocator caching: reserved 1.8x allocated at the peak (tens of GiB unused)
    "fragmentation": Workload(**_SMALL, reserved_overhead=1.8, peak_memory_fraction=0.6),
    # peak reserved at 96% of HBM
    "memory_pressure": Workload(**_SMALL, peak_memory_fraction=0.96),
    # 2 GiB more allocated at every step end
    "leak": Workload(**_SMALL, leak_bytes_per_step=2 * GiB),
    # healthy on MI300X (ROCm names, stream 0, Device Type 6)
    "mi300x": Workload(device="MI300X"),
    # captured without with_stack / record_shapes
    "no_stack": Workload(**_SMALL, with_stack=False, record_shapes=False),
}
