"""Output of a simulated rank: its records written through the builder in start order, the
memory events scaled to the requested peak, and what the builder does not write itself."""

from __future__ import annotations

import math
from functools import partial
from typing import Any

from tracegen.devices import DEVICES
from tracegen.model import GiB, MiB
from tracegen.synth import KinetoTraceBuilder, _us

_CBID = {
    "cudaLaunchKernel": 211,
    "cudaLaunchKernelExC": 430,
    "cudaMemcpyAsync": 41,
    "cudaStreamSynchronize": 131,
    "cudaStreamWaitEvent": 146,
    "cudaEventRecord": 135,
}
_CID = {
    "hipLaunchKernel": 107,
    "hipExtModuleLaunchKernel": 65,
    "hipMemcpyWithStream": 153,
    "hipMemcpyAsync": 105,
    "hipExtLaunchKernel": 300,
}  # roctracer ids seen in MI300X traces
_AMD_DROP = (
    "registers per thread",
    "shared memory",
    "blocks per SM",
    "warps per SM",
    "est. achieved occupancy %",
)


class Output:
    """Output methods of :class:`~tracegen.rank.RankSim`."""

    def finish(self) -> KinetoTraceBuilder:
        """The builder with the whole run written into it (all records, then the metadata)."""
        self.flush(final=True)
        self.b.events.extend(self.thread_names())
        return self.b

    def flush(self, *, final: bool = False) -> list[dict[str, Any]]:
        """Writes the records made so far into the builder, in start order, and returns the
        events that added. A streaming writer calls this after every step and then clears
        ``b.events``; ``final`` (the run is over) adds the OOM event, if any."""
        w, b = self.w, self.b
        first = len(b.events)
        if w.memory:
            self._emit_memory(final)
        # Records go out in start order, so an op that ended before the current record can no
        # longer enclose anything still to come: park it, so the builder's enclosing-op lookup
        # stays short (it scans every op per launch), and put it back at the end.
        ops = getattr(b, "_ops", None)
        parked: list[Any] = []
        for i, (start, _neg, _order, fn) in enumerate(sorted(self.recs)):
            if isinstance(ops, list) and i % 64 == 0:
                live = [op for op in b._ops if op.end >= start]
                parked.extend(op for op in b._ops if op.end < start)
                b._ops = live
            fn()
        if isinstance(ops, list) and final:
            b._ops = parked + b._ops
        for fn in self.late:
            fn()
        for fwd_start, bwd_start, _seq in self.flows:
            b.fwdbwd(fwd_start, bwd_start, fwd_tid=self.main, bwd_tid=self.bwd)
        self.recs, self.late, self.flows = [], [], []
        events = b.events[first:]
        self._post_process(events)
        return events

    def _emit_memory(self, final: bool) -> None:
        """``[memory]`` records for the allocations made since the last flush. The first flush
        fixes the scale: a streamed run's first step stands for all (a whole run: all steps)."""
        w = self.w
        total = DEVICES[w.device].total_mem
        events = sorted(self.mem)
        self.mem = []
        if self.mem_scale is None:
            # real (unscaled) activation curve -> scale so the peak lands on the requested
            # fraction
            cur = peak = 0
            for _ts, _o, _tid, kind, key in events:
                if key in self.mem_leak:
                    continue
                cur += self.mem_size[key] if kind == "alloc" else -self.mem_size[key]
                peak = max(peak, cur)
            leak_total = w.leak_bytes_per_step * w.steps
            target_alloc = w.peak_memory_fraction * total / w.reserved_overhead
            avail = max(2 * GiB, target_alloc - leak_total)
            # true tensor sizes unless activations would exceed 60% of the budget; the rest is
            # persistent state (weights, grads, optimizer state, caches)
            act = min(peak, 0.6 * avail)
            baseline = avail - act
            self.mem_scale = act / peak if peak else 0.0
            self.mem_alloc = round(baseline / 512) * 512
            self.mem_reserved = self._reserve(0, self.mem_alloc)
        scale, alloc, reserved = self.mem_scale, self.mem_alloc, self.mem_reserved
        device_type = 6 if self.amd else 1
        ts = 0
        for ts, _o, tid, kind, key in events:
            v = self.mem_size[key]
            size = v if key in self.mem_leak else max(512, round(v * scale / 512) * 512)
            nbytes = size if kind == "alloc" else -size
            if kind == "free" and not final:
                del self.mem_size[key]  # a streamed run keeps only what is live
            alloc += nbytes
            reserved = self._reserve(reserved, alloc)
            self._rec(
                ts,
                0,
                partial(
                    self.b.memory,
                    ts,
                    nbytes,
                    alloc,
                    reserved,
                    addr=0x7F0000000000 + 0x200000 * key,
                    device_type=device_type,
                    tid=tid,
                ),
            )
        self.mem_alloc, self.mem_reserved = alloc, reserved
        if w.oom and final:
            t_oom = max(ts, self.t[self.main]) + 1_000
            request = max(GiB, total - reserved + GiB)
            self._rec(
                t_oom,
                0,
                partial(
                    self.b.memory,
                    t_oom,
                    request,
                    alloc,
                    reserved,
                    device_type=device_type,
                    tid=self.main,
                    oom=True,
                ),
            )

    def _reserve(self, reserved: int, alloc: int) -> int:
        total = DEVICES[self.w.device].total_mem
        want = math.ceil(alloc * self.w.reserved_overhead / (2 * MiB)) * 2 * MiB
        return min(total, max(reserved, want))

    def _post_process(self, events: list[dict[str, Any]]) -> None:
        """What the builder does not write: real cbids, ROCm arg shapes."""
        kernels_by_corr: dict[int, dict[str, Any]] = {}
        for ev in events:
            if ev.get("cat") in ("kernel", "gpu_memcpy") and ev.get("ph") == "X":
                kernels_by_corr[ev["args"]["correlation"]] = ev
        for ev in events:
            cat = ev.get("cat")
            if self.amd and cat == "kernel":
                for key in _AMD_DROP:
                    ev["args"].pop(key, None)
                ev["args"]["kind"] = "Dispatch Kernel"
            elif cat == "cuda_runtime":
                args = ev["args"]
                if self.amd:
                    args.pop("cbid", None)
                    args["cid"] = _CID.get(ev["name"], 0)
                    k = kernels_by_corr.get(args["correlation"])
                    if k is not None and k["cat"] == "kernel":
                        args["kernel"] = k["name"]
                        args["grid"], args["block"] = k["args"].get("grid"), k["args"].get("block")
                elif ev["name"] in _CBID:
                    args["cbid"] = _CBID[ev["name"]]
                if ev["name"] == "cuLaunchKernel":
                    ev["cat"] = "cuda_driver"
                    args["cbid"] = 307

    def thread_names(self) -> list[dict[str, Any]]:
        """``thread_name`` metadata of the autograd thread and the streams in use."""
        b = self.b
        ts0 = _us(0, b.style, b.base_ns)
        names = []
        if self.bwd != self.main:
            names.append((b.pid, self.bwd, f"thread {self.bwd} (pt_autograd_0)"))
        names += [(0, s, f"stream {s} ") for s in sorted(self.free) if self._stream_used(s)]
        return [
            {
                "name": "thread_name",
                "ph": "M",
                "ts": ts0,
                "pid": pid,
                "tid": tid,
                "args": {"name": name},
            }
            for pid, tid, name in names
        ]

    def _stream_used(self, stream: int) -> bool:
        return stream == self.compute or (self.w.world_size > 1 and self.w.comm_bytes > 0)
