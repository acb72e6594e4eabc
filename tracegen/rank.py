"""One simulated rank: host threads, launches, GPU streams, memory and the training loop."""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from typing import Any

from tracegen.backward import Backward, Node
from tracegen.devices import DEVICES
from tracegen.kernels import (
    CTYPE,
    DSIZE,
    Kernel,
    attention_impl,
    attention_kernels,
    gemm_kernel,
    kernel_names,
)
from tracegen.model import (
    ADAM_CHUNK_ELEMS,
    ANN_POST_NS,
    ANN_PRE_NS,
    CPU_ONLY_OP_NS,
    HEAD_DIM,
    KERNEL_GAP_NS,
    LAUNCH_LATENCY_NS,
    LAUNCH_QUEUE_DEPTH,
    MIN_KERNEL_NS,
    MODULE_POST_NS,
    MODULE_PRE_NS,
    OP_GAP_NS,
    OP_TAIL_NS,
    POST_SYNC_HOST_NS,
    VOCAB,
    WRAP_POST_NS,
    WRAP_PRE_NS,
    Workload,
)
from tracegen.output import Output
from tracegen.synth import KinetoTraceBuilder

#: Python frames between an nn.Module frame and its ops (``Workload.python_frames``)
_CALL_FRAMES = (
    "torch/nn/modules/module.py(1773): _wrapped_call_impl",
    "torch/nn/modules/module.py(1784): _call_impl",
    "model.py(64): forward",
)


class RankSim(Backward, Output):
    """Simulates one rank; ``run()`` is a generator that yields at every collective."""

    def __init__(self, w: Workload, rank: int) -> None:
        self.w = w
        self.rank = rank
        self.amd = w.device == "MI300X"
        pid = 4242 + 100 * rank
        capture = {
            "record_shapes": int(w.record_shapes),
            "profile_memory": int(w.memory),
            "with_stack": int(w.with_stack),
            "with_flops": 0,
            "with_modules": int(w.with_stack),
        }
        self.b = KinetoTraceBuilder(
            rank=rank if w.world_size > 1 else None,
            world_size=w.world_size if w.world_size > 1 else None,
            device=w.device,
            pid=pid,
            tid=pid,
            capture=capture,
            vendor="amd" if self.amd else "nvidia",
        )
        if w.world_size > 1:
            self.b.metadata["distributedInfo"] = {
                "backend": "nccl",
                "rank": rank,
                "world_size": w.world_size,
                "pg_count": 1,
                "pg_config": [
                    {
                        "pg_name": "0",
                        "pg_desc": "default_pg",
                        "backend_config": "cuda:nccl",
                        "pg_size": w.world_size,
                        "ranks": list(range(w.world_size)),
                    }
                ],
                "nccl_version": "2.21.5",
            }
        self.main = pid
        self.bwd = pid + 17 if w.backward_thread else pid
        self.compute = self.b.default_stream
        self.comm = 3 if self.amd else 24
        self.t: dict[int, int] = {self.bwd: 0}
        self.t[self.main] = 50_000
        self.in_backward = False
        self.free: dict[int, int] = {self.compute: 0, self.comm: 0}
        self.recs: list[tuple[int, int, int, Callable[[], Any]]] = []
        self.late: list[Callable[[], Any]] = []
        self.flows: list[tuple[int, int, int]] = []
        self.mem: list[tuple[int, int, int, str, int]] = []  # (ts, order, tid, op, key)
        self.mem_size: dict[int, int] = {}
        self.mem_leak: set[int] = set()
        self.mem_next = 0  # the next allocation's key
        self.mem_scale: float | None = None  # activation bytes scale, fixed by the first flush
        self.mem_alloc = self.mem_reserved = 0  # allocator totals written so far
        self.pending: list[int] = []  # heap of GPU end times (launch queue)
        self.launched = False
        self.seq = 4000
        self.coll_seq = 0
        self.names = kernel_names(w)
        self.dt = CTYPE[w.dtype]
        self.ds = DSIZE[w.dtype]
        self.peak = DEVICES[w.device].peak(w.dtype)
        self.bw = DEVICES[w.device].mem_bw
        self.factor = 1.0  # this step's jitter factor
        self.gpu_scale = w.straggler_slowdown if rank == w.straggler_rank else 1.0
        self.rng_jitter = random.Random(w.seed * 1_000_003 + rank + 1)
        self.rng_shape = random.Random(w.seed)
        self.step_gpu = [0, 0]
        self.hd = HEAD_DIM if w.hidden % HEAD_DIM == 0 else 64
        self.heads = max(1, w.hidden // self.hd)
        self.tape: list[Node] = []
        self.mod_count: dict[str, int] = {}
        #: called after each step with its index; returning True ends the run there
        self.on_step: Callable[[int], bool] | None = None

    # --- records ------------------------------------------------------------------------------
    def _rec(self, start: int, dur: int, fn: Callable[[], Any]) -> None:
        self.recs.append((start, -dur, len(self.recs), fn))

    def _shapes(self, dims: list | None, types: list | None) -> dict[str, Any]:
        if not self.w.record_shapes or dims is None:
            return {}
        return {"input_dims": dims, "input_types": types}

    def _next_seq(self) -> int:
        self.seq += 1
        return self.seq

    def _annotation(
        self, name: str, start: int, dur: int, tid: int, gpu: tuple[int, int] | None = None
    ) -> None:
        with self.b.annotation(name, start, dur, tid=tid, gpu=gpu):
            pass

    def _module(self, cls: str, start: int, dur: int, tid: int, inst: int) -> None:
        with self.b.module(cls, start, dur, tid=tid, instance=inst):
            pass

    @contextmanager
    def op(
        self,
        name: str,
        *,
        tid: int | None = None,
        dims: list | None = None,
        types: list | None = None,
        seq: int | None = None,
        **extra: Any,
    ) -> Iterator[int]:
        """A composite op around the ops issued inside the block; yields its start."""
        tid = self.main if tid is None else tid
        start = self.t[tid]
        self.t[tid] = start + WRAP_PRE_NS
        yield start
        end = self.t[tid] - OP_GAP_NS + WRAP_POST_NS
        self.t[tid] = end + OP_GAP_NS
        self._record_op(name, start, end, tid, dims, types, seq, extra)

    def _record_op(
        self,
        name: str,
        start: int,
        end: int,
        tid: int,
        dims: list | None,
        types: list | None,
        seq: int | None,
        extra: dict[str, Any],
    ) -> None:
        kw = self._shapes(dims, types)
        if seq is not None:
            kw.update(seq=seq, fwd_tid=int(self.in_backward))
        self._rec(
            start, end - start, partial(self.b.op, name, start, end - start, tid=tid, **kw, **extra)
        )

    @contextmanager
    def annotation(
        self, name: str, *, tid: int | None = None, late: bool = False
    ) -> Iterator[None]:
        """A record_function range around the block."""
        tid = self.main if tid is None else tid
        start = self.t[tid]
        self.t[tid] = start + ANN_PRE_NS
        yield
        end = self.t[tid] - OP_GAP_NS + ANN_POST_NS
        self.t[tid] = end + OP_GAP_NS
        fn = partial(self._annotation, name, start, end - start, tid)
        if late:  # registered after the launches inside it, so they link to the enclosing op
            self.late.append(fn)
        else:
            self._rec(start, end - start, fn)

    @contextmanager
    def module(self, cls: str, *, inst: int | None = None) -> Iterator[None]:
        if inst is None:
            inst = self.mod_count.get(cls, 0)
            self.mod_count[cls] = inst + 1
        if not self.w.with_stack:
            yield
            return
        tid = self.main
        start = self.t[tid]
        self.t[tid] = start + MODULE_PRE_NS
        yield
        end = self.t[tid] - OP_GAP_NS + MODULE_POST_NS
        self.t[tid] = end + OP_GAP_NS
        self._rec(start, end - start, partial(self._module, cls, start, end - start, tid, inst))
        if self.w.python_frames:  # nested inside the module frame, around its ops
            for depth, frame in enumerate(_CALL_FRAMES, start=1):
                s, e = start + 500 * depth, end - 300 * depth
                self._rec(s, e - s, partial(self.b.python, frame, s, e - s, tid=tid))

    def leaf(
        self,
        name: str,
        kernels: Sequence[Kernel] = (),
        *,
        tid: int | None = None,
        dims: list | None = None,
        types: list | None = None,
        seq: int | None = None,
        alloc: int = 0,
        cpu_ns: int | None = None,
        **extra: Any,
    ) -> tuple[int, int | None]:
        """An op that launches ``kernels``; returns (start, key of the allocation it made)."""
        tid = self.main if tid is None else tid
        start = self.t[tid]
        if cpu_ns is None:
            cpu_ns = round(self.w.cpu_op_overhead_ns * self.factor) if kernels else CPU_ONLY_OP_NS
        c = start + cpu_ns
        key = self.malloc(c - min(cpu_ns // 2, 1_000), tid, alloc) if alloc else None
        for k in kernels:
            c = self.launch(k, c, tid)
        end = c + (OP_TAIL_NS if kernels else 0)
        self.t[tid] = end + OP_GAP_NS
        self._record_op(name, start, end, tid, dims, types, seq, extra)
        return start, key

    def cpu(self, ns: int, tid: int | None = None) -> None:
        tid = self.main if tid is None else tid
        self.t[tid] += ns

    # --- GPU ----------------------------------------------------------------------------------
    def launch(self, k: Kernel, c: int, tid: int) -> int:
        """Launches ``k`` at CPU time ``c``; returns the CPU time after the launch call."""
        stream = self.compute if k.stream is None else k.stream
        api_ns = self.w.launch_ns
        if not self.launched and k.kind == "kernel":  # lazy module loading at the first kernel
            api_ns += self.w.cold_start_ns
            self.launched = True
        while self.pending and self.pending[0] <= c:
            heapq.heappop(self.pending)
        if len(self.pending) >= LAUNCH_QUEUE_DEPTH:  # the launch blocks until a slot frees up
            wait_until = c
            while len(self.pending) >= LAUNCH_QUEUE_DEPTH:
                wait_until = heapq.heappop(self.pending)
            api_ns += wait_until - c
        gpu_start = max(c + api_ns + LAUNCH_LATENCY_NS, self.free[stream] + KERNEL_GAP_NS, k.dep)
        dur = max(1, k.dur)
        self.free[stream] = gpu_start + dur
        heapq.heappush(self.pending, gpu_start + dur)
        self._track(gpu_start, gpu_start + dur)
        kw: dict[str, Any] = dict(k.extra)
        if k.kind == "memcpy":
            kw["memory bandwidth (GB/s)"] = round((k.bytes or 0) / dur, 6)
        self._rec(
            c,
            api_ns,
            partial(
                self.b.launch,
                k.name,
                cpu_start=c,
                gpu_start=gpu_start,
                gpu_dur=dur,
                cpu_dur=api_ns,
                stream=stream,
                kind=k.kind,
                api=k.api,
                tid=tid,
                bytes=k.bytes,
                grid=k.grid,
                block=k.block,
                **kw,
            ),
        )
        return c + api_ns + 300

    def _track(self, start: int, end: int) -> None:
        """Extent of the GPU work launched in the current step (its gpu_user_annotation)."""
        if self.step_gpu[1] == 0:
            self.step_gpu = [start, end]
        else:
            self.step_gpu = [min(self.step_gpu[0], start), max(self.step_gpu[1], end)]

    def _gpu_ns(self, seconds: float, floor: int = MIN_KERNEL_NS) -> int:
        return max(floor, round(seconds * 1e9 * self.factor * self.gpu_scale))

    def gemm(self, m: int, n: int, k: int, layout: str) -> Kernel:
        name, api = gemm_kernel(self.w, layout, n)
        dur = self._gpu_ns(2.0 * m * n * k / (self.peak * self.w.gemm_efficiency))
        tiles = max(1, math.ceil(m / 128)) * max(1, math.ceil(n / 128))
        return Kernel(
            name,
            dur,
            api=api,
            grid=[min(tiles, 65_535), 1, 1],
            block=[384 if self.w.device == "H100" else 256, 1, 1],
        )

    def mem_kernel(self, key: str, nbytes: float, numel: int = 0) -> Kernel:
        dur = self._gpu_ns(nbytes / (self.bw * self.w.memory_efficiency))
        blocks = max(1, min(2**31 - 1, math.ceil((numel or nbytes / self.ds) / 512)))
        return Kernel(self.names[key], dur, grid=[blocks, 1, 1], block=[128, 1, 1])

    # --- memory -------------------------------------------------------------------------------
    def malloc(self, ts: int, tid: int, nbytes: int, *, leak: bool = False) -> int:
        key = self.mem_next
        self.mem_next += 1
        self.mem_size[key] = nbytes
        if leak:
            self.mem_leak.add(key)
        self.mem.append((ts, len(self.mem), tid, "alloc", key))
        return key

    def mfree(self, ts: int, tid: int, key: int | None) -> None:
        if key is not None:
            self.mem.append((ts, len(self.mem), tid, "free", key))

    # --- the training loop ----------------------------------------------------------------------
    def run(self) -> Generator[tuple[int, int], int, None]:
        w = self.w
        n_sync_fwd = max(0, w.syncs_per_step - 1)
        slots = 2 * w.layers
        self.sync_plan = [
            n_sync_fwd // slots + (1 if i < n_sync_fwd % slots else 0) for i in range(slots)
        ]
        for i in range(w.steps):
            self.factor = 1.0
            if w.jitter:
                self.factor += w.jitter * (2.0 * self.rng_jitter.random() - 1.0)
            self.step_gpu = [0, 0]
            start = self.t[self.main]
            self.t[self.main] = start + ANN_PRE_NS
            if w.slow_step_every and (i + 1) % w.slow_step_every == 0 and w.slow_step_extra_ns:
                s0 = self.t[self.main]
                if w.with_stack:
                    self._rec(
                        s0,
                        w.slow_step_extra_ns,
                        partial(
                            self.b.python, "<built-in function collect>", s0, w.slow_step_extra_ns
                        ),
                    )
                self.t[self.main] = s0 + w.slow_step_extra_ns + OP_GAP_NS
            yield from self._step()
            end = self.t[self.main] - OP_GAP_NS + ANN_POST_NS
            g0, g1 = self.step_gpu
            proj = (g0, g1 - g0) if g1 else None
            name = f"ProfilerStep#{w.first_step + i}"
            self._rec(
                start,
                end - start,
                partial(self._annotation, name, start, end - start, self.main, proj),
            )
            self.t[self.main] = end + 4_000  # prof.step()
            if self.on_step is not None and self.on_step(i):
                return

    def _step(self) -> Generator[tuple[int, int], int, None]:
        w, T, dt = self.w, self.w.tokens, self.dt
        with self.annotation("Optimizer.zero_grad#AdamW.zero_grad"):
            self.cpu(8_000)
        with self.annotation("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"):
            self.cpu(max(0, round(w.dataloader_ns * self.factor) - ANN_PRE_NS))
        batch = [w.batch, w.seq]
        nbytes = T * 8
        copy = Kernel(
            "Memcpy HtoD (Pinned -> Device)",
            max(2_000, round(nbytes / 25e9 * 1e9)),
            kind="memcpy",
            bytes=nbytes,
        )
        with (
            self.op(
                "aten::to", dims=[batch, [], [], [], [], []], types=["long int"] + ["Scalar"] * 5
            ),
            self.op(
                "aten::_to_copy",
                dims=[batch, [], [], [], [], [], []],
                types=["long int"] + ["Scalar"] * 6,
            ),
        ):
            _, batch_key = self.leaf(
                "aten::copy_",
                [copy],
                dims=[batch, batch, []],
                types=["long int", "long int", "Scalar"],
                alloc=nbytes,
            )
        self.tape = []
        if w.world_size > 1:
            with (
                self.annotation("DistributedDataParallel.forward"),
                self.module("DistributedDataParallel", inst=0),
            ):
                self._forward()
        else:
            self._forward()
        # a leak: something keeps a tensor (and its graph) alive across steps
        if w.leak_bytes_per_step:
            self.malloc(self.t[self.main], self.main, w.leak_bytes_per_step, leak=True)
        # loss.backward()
        with self.annotation("## backward ##"):
            with self.op(
                "aten::ones_like",
                dims=[[], [], [], [], [], []],
                types=[dt, "Scalar", "Scalar", "Scalar", "Scalar", "Scalar"],
            ):
                with self.op(
                    "aten::empty_like",
                    dims=[[], [], [], [], [], []],
                    types=[dt, "Scalar", "Scalar", "Scalar", "Scalar", "Scalar"],
                ):
                    self.cpu(1_500)
                self.leaf(
                    "aten::fill_",
                    [self.mem_kernel("fill", self.ds, 1)],
                    dims=[[], []],
                    types=[dt, "Scalar"],
                )
            self.t[self.bwd] = max(self.t[self.bwd], self.t[self.main] + 15_000)
            self.in_backward = True
            yield from self._backward()
            self.in_backward = False
            self.t[self.main] = max(self.t[self.main], self.t[self.bwd] + 8_000)
        self.mfree(self.t[self.main], self.main, batch_key)
        # optimizer
        self.free[self.compute] = max(self.free[self.compute], self.free[self.comm])  # DDP wait
        with self.annotation("Optimizer.step#AdamW.step"):
            self._adamw()
        # host syncs: loss.item() at the end of the step
        if w.syncs_per_step:
            self._item()

    def _forward(self) -> None:
        w, T, H, dt = self.w, self.w.tokens, self.w.hidden, self.dt
        B, S = w.batch, w.seq
        self.mod_count = {}  # nn.Module instance numbers are per module object: same every step
        with self.annotation("## forward ##"), self.module("TransformerLM", inst=0):
            self.tape.append(Node("bucket", info={"bytes": self._bucket_bytes(-1)}))
            with self.module("Embedding", inst=0):
                seq = self._next_seq()
                with self.op(
                    "aten::embedding",
                    dims=[[VOCAB, H], [B, S], [], [], []],
                    types=[dt, "long int", "Scalar", "Scalar", "Scalar"],
                    seq=seq,
                ) as start:
                    kern = self.mem_kernel("index_select", 2 * T * H * self.ds, T * H)
                    _, key = self.leaf(
                        "aten::index_select",
                        [kern],
                        dims=[[VOCAB, H], [], [B * S]],
                        types=[dt, "Scalar", "long int"],
                        alloc=T * H * self.ds,
                    )
                self.tape.append(Node("embedding", seq, start, {"saved": key}))
            for layer in range(w.layers):
                self.tape.append(Node("bucket", info={"bytes": self._bucket_bytes(layer)}))
                self._block(layer)
            self._layer_norm(2 * w.layers)
            with self.module("MSELoss", inst=0):
                seq = self._next_seq()
                kerns = [
                    self.mem_kernel("mse", 3 * T * H * self.ds, T * H),
                    self.mem_kernel("mean", T * H * self.ds, T * H),
                ]
                start, key = self.leaf(
                    "aten::mse_loss",
                    kerns,
                    dims=[[B, S, H], [B, S, H], []],
                    types=[dt, dt, "Scalar"],
                    seq=seq,
                    alloc=T * H * self.ds,
                )
                self.tape.append(Node("mse", seq, start, {"saved": key}))

    def _bucket_bytes(self, layer: int) -> int:
        """Gradient bytes all-reduced after ``layer``'s backward (-1: the final, exposed bucket)."""
        w = self.w
        if w.world_size <= 1 or not w.comm_bytes:
            return 0
        overlapped = round(w.comm_bytes * w.comm_overlap) if w.layers > 1 else 0
        if layer == -1:
            return w.comm_bytes - overlapped
        if layer == 0:
            return 0
        share, rest = divmod(overlapped, w.layers - 1)
        return share + (rest if layer == w.layers - 1 else 0)

    def _layer_norm(self, inst: int) -> None:
        w, T, H, dt = self.w, self.w.tokens, self.w.hidden, self.dt
        with self.module("LayerNorm", inst=inst):
            seq = self._next_seq()
            with self.op(
                "aten::layer_norm",
                dims=[[w.batch, w.seq, H], [], [H], [H], [], []],
                types=[dt, "", dt, dt, "Scalar", "Scalar"],
                seq=seq,
            ):
                start, key = self.leaf(
                    "aten::native_layer_norm",
                    [self.mem_kernel("ln", 2 * T * H * self.ds, T * H)],
                    dims=[[w.batch, w.seq, H], [], [H], [H], []],
                    types=[dt, "", dt, dt, "Scalar"],
                    seq=seq,
                    alloc=T * H * self.ds,
                )
            self.tape.append(Node("ln", seq, start, {"saved": key}))

    def _linear(self, k_in: int, n_out: int) -> None:
        w, T, dt = self.w, self.w.tokens, self.dt
        with self.module("Linear"):
            seq_t = self._next_seq()
            with self.op(
                "aten::linear",
                dims=[[w.batch, w.seq, k_in], [n_out, k_in], [n_out]],
                types=[dt, dt, dt],
                seq=seq_t,
            ):
                start_t, _ = self.leaf("aten::t", dims=[[n_out, k_in]], types=[dt], seq=seq_t)
                seq = self._next_seq()
                start, key = self.leaf(
                    "aten::addmm",
                    [self.gemm(T, n_out, k_in, "tn")],
                    dims=[[n_out], [T, k_in], [k_in, n_out], [], []],
                    types=[dt, dt, dt, "Scalar", "Scalar"],
                    seq=seq,
                    alloc=T * n_out * self.ds,
                )
        self.tape.append(Node("t", seq_t, start_t, {"k": k_in, "n": n_out}))
        self.tape.append(Node("addmm", seq, start, {"k": k_in, "n": n_out, "saved": key}))

    def _block(self, layer: int) -> None:
        w, T, H, dt = self.w, self.w.tokens, self.w.hidden, self.dt
        B, S, F = w.batch, w.seq, 4 * w.hidden
        with self.module("TransformerBlock", inst=layer):
            self._layer_norm(2 * layer)
            with self.module("SelfAttention", inst=layer):
                self._linear(H, 3 * H)
                self._attention()
                self._linear(H, H)
            self._residual()
            self._tiny(0)
            self._syncs(2 * layer)
            self._layer_norm(2 * layer + 1)
            with self.module("MLP", inst=layer):
                self._linear(H, F)
                with self.module("GELU", inst=layer):
                    seq = self._next_seq()
                    kern = self.mem_kernel("gelu", 2 * T * F * self.ds, T * F)
                    start, key = self.leaf(
                        "aten::gelu",
                        [kern],
                        dims=[[B, S, F], []],
                        types=[dt, ""],
                        seq=seq,
                        alloc=T * F * self.ds,
                    )
                    self.tape.append(Node("gelu", seq, start, {"saved": key}))
                # elementwise_scale: extra memory-bound work (gating / scaling of the MLP
                # activations), on top of the 18·T·H elements a block moves in norms/adds/GELU
                extra_bytes = (w.elementwise_scale - 1.0) * 18 * T * H * self.ds
                n_extra = 0
                if extra_bytes > 0:
                    n_extra = math.ceil(extra_bytes / (3 * T * F * self.ds) - 1e-9)
                for _ in range(n_extra):
                    seq = self._next_seq()
                    nb = extra_bytes / n_extra
                    start, key = self.leaf(
                        "aten::mul",
                        [self.mem_kernel("mul", nb, T * F)],
                        dims=[[B, S, F], [B, S, F]],
                        types=[dt, dt],
                        seq=seq,
                        alloc=round(nb / 3),
                    )
                    self.tape.append(Node("mul", seq, start, {"saved": key, "bytes": nb}))
                self._linear(F, H)
            self._residual()
            self._tiny(1)
            self._syncs(2 * layer + 1)

    def _attention(self) -> None:
        w, T, H, dt = self.w, self.w.tokens, self.w.hidden, self.dt
        qkv = [w.batch, self.heads, w.seq, self.hd]
        impl = attention_impl(w)
        fwd_name, _ = attention_kernels(w, self.hd)
        flops = 2.0 * w.batch * w.seq * w.seq * H  # causal: half of 4·B·S²·H
        dur = self._gpu_ns(flops / (self.peak * self.w.gemm_efficiency * 0.75))
        kern = Kernel(
            fwd_name,
            dur,
            grid=[math.ceil(w.seq / 128), self.heads, w.batch],
            block=[128, 1, 1],
            api="hipLaunchKernel" if self.amd else None,
        )
        kind = "efficient" if impl == "efficient" else "flash"
        inner = (f"aten::_scaled_dot_product_{kind}_attention", f"aten::_{kind}_attention_forward")
        seq = self._next_seq()
        scalars = ["Scalar"] * 4
        with (
            self.op(
                "aten::scaled_dot_product_attention",
                dims=[qkv, qkv, qkv, [], [], [], [], []],
                types=[dt, dt, dt, "", *scalars],
                seq=seq,
            ),
            self.op(
                inner[0],
                dims=[qkv, qkv, qkv, [], [], [], []],
                types=[dt, dt, dt, *scalars],
                seq=seq,
            ) as start,
        ):
            _, key = self.leaf(
                inner[1],
                [kern],
                dims=[qkv, qkv, qkv, [], [], [], [], [], []],
                types=[dt, dt, dt, "", "", "Scalar", "Scalar", "Scalar", "Scalar"],
                alloc=T * H * self.ds,
            )
        self.tape.append(Node("sdpa", seq, start, {"saved": key, "flops": flops}))

    def _residual(self) -> None:
        w, T, H, dt = self.w, self.w.tokens, self.w.hidden, self.dt
        seq = self._next_seq()
        act = [w.batch, w.seq, H]
        start, key = self.leaf(
            "aten::add",
            [self.mem_kernel("add", 3 * T * H * self.ds, T * H)],
            dims=[act, act, []],
            types=[dt, dt, "Scalar"],
            seq=seq,
            alloc=T * H * self.ds,
        )
        self.tape.append(Node("add", seq, start, {"saved": key}))

    def _tiny(self, half: int) -> None:
        """Tiny elementwise ops on small buffers (no autograd): 1-3 µs kernels."""
        n = self.w.tiny_kernels_per_layer
        count = n // 2 + (n % 2 if half == 0 else 0)
        ops = (("aten::add_", "tiny_add"), ("aten::mul_", "tiny_mul"), ("aten::fill_", "tiny_fill"))
        for j in range(count):
            name, key = ops[j % 3]
            dur = max(1, round(self.rng_shape.randint(1_000, 3_000) * self.factor * self.gpu_scale))
            kern = Kernel(self.names[key], dur, grid=[1, 1, 1], block=[128, 1, 1])
            self.leaf(name, [kern], dims=[[self.w.hidden], []], types=["float", "Scalar"])

    def _syncs(self, slot: int) -> None:
        for _ in range(self.sync_plan[slot]):
            self._item()

    def _item(self) -> None:
        """``aten::item`` -> ``aten::_local_scalar_dense``: a DtoH copy queued behind all the
        work launched so far, and a host wait until it is done."""
        dt, tid, stream = self.dt, self.main, self.compute
        with self.op("aten::item", dims=[[]], types=[dt]):
            start = self.t[tid]
            c = start + round(self.w.cpu_op_overhead_ns * self.factor)
            if self.amd:  # hipMemcpyWithStream itself blocks until its copy is done
                gpu_start = max(c + 3_000, self.free[stream] + KERNEL_GAP_NS)
                api_ns = gpu_start + 2_000 + 2_000 - c
                self.free[stream] = gpu_start + 2_000
                heapq.heappush(self.pending, gpu_start + 2_000)
                self._track(gpu_start, gpu_start + 2_000)
                self._rec(
                    c,
                    api_ns,
                    partial(
                        self.b.launch,
                        "Memcpy DtoH (Device -> Host)",
                        cpu_start=c,
                        gpu_start=gpu_start,
                        gpu_dur=2_000,
                        cpu_dur=api_ns,
                        stream=stream,
                        kind="memcpy",
                        api="hipMemcpyWithStream",
                        tid=tid,
                        bytes=self.ds,
                        **{"memory bandwidth (GB/s)": round(self.ds / 2_000, 6)},
                    ),
                )
                c += api_ns
            else:  # cudaMemcpyAsync, then cudaStreamSynchronize until the stream drains
                copy = Kernel(
                    "Memcpy DtoH (Device -> Pinned)",
                    2_000,
                    kind="memcpy",
                    bytes=self.ds,
                    api="cudaMemcpyAsync",
                )
                c = self.launch(copy, c, tid)
                sync_ns = max(2_000, self.free[stream] + 1_000 - c)
                self._rec(
                    c,
                    sync_ns,
                    partial(self.b.runtime, "cudaStreamSynchronize", c, sync_ns, tid=tid),
                )
                c += sync_ns
            end = c + OP_TAIL_NS
            self.t[tid] = end + OP_GAP_NS
            self._rec(
                start,
                end - start,
                partial(
                    self.b.op,
                    "aten::_local_scalar_dense",
                    start,
                    end - start,
                    tid=tid,
                    **self._shapes([[]], [dt]),
                ),
            )
        self.cpu(POST_SYNC_HOST_NS)

    def _adamw(self) -> None:
        """``aten::_fused_adamw_``: multi_tensor_apply chunks over all parameters (memory-bound)."""
        w = self.w
        P = w.params
        n_launch = max(1, min(64, math.ceil(P / ADAM_CHUNK_ELEMS)))
        per = P * (3 * self.ds + 16) / n_launch  # param, grad r/w + fp32 exp_avg, exp_avg_sq r/w
        tensors = 16 * w.layers + 3
        kerns = [self.mem_kernel("adam", per, P // n_launch) for _ in range(n_launch)]
        for k in kerns:
            k.grid, k.block = [320, 1, 1], [512, 1, 1]
        self.leaf(
            "aten::_fused_adamw_",
            kerns,
            dims=[[tensors]] * 5 + [[]] * 10,
            types=["TensorList"] * 5 + ["Scalar"] * 10,
        )


def run_lockstep(sims: list[RankSim]) -> list[RankSim]:
    """Runs the ranks' simulations in lockstep: a collective ends when its last rank arrives
    plus its duration."""
    gens = [s.run() for s in sims]
    pending: list[tuple[int, int] | None] = []
    for g in gens:
        pending.append(next(g, None))
    while any(p is not None for p in pending):
        if any(p is None for p in pending):
            raise RuntimeError("ranks disagree on the number of collectives")
        arrivals = [p[0] for p in pending if p is not None]
        dur = max(p[1] for p in pending if p is not None)
        end = max(arrivals) + dur
        nxt: list[tuple[int, int] | None] = []
        for g in gens:
            try:
                nxt.append(g.send(end))
            except StopIteration:
                nxt.append(None)
        pending = nxt
    return sims
