"""The ingest benchmark's trace: large, realistic and deterministic, written to a target size.

The trace comes from the scenario simulator (:mod:`tracegen.workloads`); what is specific to
the benchmark lives here: the workload (:data:`BENCH`) and the writer that streams it to a
target size. :data:`BENCH` is one rank (of 8) of a data-parallel GPT-2-medium-sized training
run: 24 blocks of width 1024, bf16, batch 8 x 1024 tokens, on an H100, recorded with
``record_shapes``, ``profile_memory``, ``with_stack`` (with the Python call frames inside every
``nn.Module`` frame) and ``with_modules``. Each ``ProfilerStep#N`` holds the data loader and its
host-to-device copy, the forward pass on the main thread, the backward pass on the autograd
thread (``fwdbwd`` flows), DDP's bucketed all-reduce on the NCCL stream (80% overlapped with
backward), AdamW and a ``loss.item()`` host sync, with ``[memory]`` events throughout; the seed
drives a 3% per-step jitter.

:func:`write_trace` writes each step's events as soon as the step ends and then drops them, so
memory stays flat whatever the size; it stops after the step that reaches the size.

Use::

    from tracegen.bench import write_trace
    write_trace("bench/.cache/bench_320mb.pt.trace.json", size_mb=320)
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from pathlib import Path
from typing import Any

from tracegen.model import MiB, Workload
from tracegen.rank import RankSim, run_lockstep
from tracegen.synth import EVENT_SEP, dumps_events, trace_parts

N_LAYERS = 24
DEFAULT_SEED = 20260
#: what the benchmark trace simulates (``steps`` is only a cap: the size decides)
BENCH = Workload(
    layers=N_LAYERS,
    hidden=1024,
    seq=1024,
    batch=8,
    world_size=8,
    comm_bytes=640 * MiB,
    comm_overlap=0.8,
    syncs_per_step=1,
    jitter=0.03,
    python_frames=True,
    steps=1_000_000,
    first_step=1,
    seed=DEFAULT_SEED,
)
TRACE_ID = "5A0B7C2E9D6F4B1A8C3E2D1F0A9B8C7D"
#: a real run has been going a while when the profiler starts: CUPTI correlation ids are large
#: (this also keeps HTA 0.5.0 off an int16 downcast that pandas 3 rejects)
FIRST_CORRELATION = 675_000


def write_trace(
    out: str | Path,
    size_mb: float = 320,
    seed: int = DEFAULT_SEED,
    quiet: bool = False,
    layers: int = N_LAYERS,
) -> dict[str, Any]:
    """Write the trace to ``out`` (uncompressed JSON, atomically); stop after the step that
    passes ``size_mb`` (10^6 bytes). Returns what was written (path, bytes, events, steps, ...)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    target = int(size_mb * 1_000_000)
    w = dataclasses.replace(BENCH, seed=seed, layers=layers)
    sim = RankSim(w, w.rank)
    sim.b.metadata["trace_id"] = TRACE_ID
    sim.b._corr = FIRST_CORRELATION
    doc = sim.b.to_dict()  # before any step: its traceEvents are the process metadata
    head, tail = trace_parts(doc)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    t0 = time.perf_counter()
    state = {"written": 0, "events": 0, "steps": 0, "report": target / 10}

    def write(fh: Any, text: str) -> None:
        fh.write(text)
        state["written"] += len(text)

    try:
        with open(tmp, "w", encoding="utf-8", newline="\n") as fh:
            write(fh, head + dumps_events(doc["traceEvents"]))
            state["events"] += len(doc["traceEvents"])

            def on_step(_i: int) -> bool:
                events = sim.flush()
                if events:
                    write(fh, EVENT_SEP + dumps_events(events))
                state["events"] += len(events)
                state["steps"] += 1
                sim.b.events.clear()
                if not quiet and state["written"] >= state["report"]:
                    state["report"] += target / 10
                    print(
                        f"  step {state['steps']}: {state['written'] / 1e6:.0f} MB, "
                        f"{state['events']:,} events, {time.perf_counter() - t0:.0f} s",
                        file=sys.stderr,
                    )
                return state["written"] + len(tail) >= target

            sim.on_step = on_step
            run_lockstep([sim])
            names = sim.thread_names()
            write(fh, EVENT_SEP + dumps_events(names) + tail)
            state["events"] += len(names)
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            tmp.unlink()
    info = {
        "path": str(out),
        "bytes": out.stat().st_size,
        "events": state["events"],
        "steps": state["steps"],
        "layers": layers,
        "seed": seed,
        "build_s": round(time.perf_counter() - t0, 2),
    }
    if not quiet:
        print(
            f"wrote {out}: {info['bytes'] / 1e6:.1f} MB, {info['events']:,} events, "
            f"{info['steps']} steps in {info['build_s']} s",
            file=sys.stderr,
        )
    return info
