"""The backward pass of a simulated rank: autograd nodes replayed from the forward tape on the
autograd thread, gradient accumulation and DDP's bucketed all-reduce."""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from tracegen.kernels import COLL_DT, Kernel, attention_impl, attention_kernels
from tracegen.model import (
    COMM_LATENCY_NS,
    KERNEL_GAP_NS,
    LAUNCH_LATENCY_NS,
    OP_GAP_NS,
    VOCAB,
    WRAP_POST_NS,
    WRAP_PRE_NS,
)


@dataclass
class Node:
    """One autograd node recorded in forward (the tape), replayed in reverse by backward."""

    kind: str
    seq: int = 0
    fwd_start: int = 0
    info: dict[str, Any] = field(default_factory=dict)


class Backward:
    """Backward-pass methods of :class:`~tracegen.rank.RankSim`."""

    @contextmanager
    def node(self, name: str, seq: int | None, fwd_start: int | None) -> Iterator[None]:
        """``autograd::engine::evaluate_function: <name>`` around ``<name>`` around the block."""
        tid = self.bwd
        start = self.t[tid]
        if seq is not None and fwd_start is not None:
            self.flows.append((fwd_start, start, seq))
        self.t[tid] = start + WRAP_PRE_NS
        with self.op(name, tid=tid, seq=seq):
            yield
        end = self.t[tid] - OP_GAP_NS + WRAP_POST_NS
        self.t[tid] = end + OP_GAP_NS
        kw: dict[str, Any] = {"seq": seq, "fwd_tid": 1} if seq is not None else {}
        self._rec(
            start,
            end - start,
            partial(
                self.b.op,
                f"autograd::engine::evaluate_function: {name}",
                start,
                end - start,
                tid=tid,
                **kw,
            ),
        )

    def _accumulate(self, dims: list, hook_bytes: int = 0) -> Generator[tuple[int, int], int, None]:
        """AccumulateGrad for one parameter; ``hook_bytes``: the DDP bucket it completes."""
        tid = self.bwd
        with self.op(
            "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", tid=tid
        ):
            self.leaf("torch::autograd::AccumulateGrad", tid=tid, dims=[dims], types=[self.dt])
            if hook_bytes:
                yield from self._allreduce(hook_bytes)

    def _allreduce(self, nbytes: int) -> Generator[tuple[int, int], int, None]:
        """DDP's all-reduce of one gradient bucket, from the autograd thread, on the NCCL stream.
        Yields (arrival, duration) to the driver and receives the collective's end time."""
        w, tid = self.w, self.bwd
        nelems = nbytes // self.ds
        self.coll_seq += 1
        coll = {
            "Collective name": "allreduce",
            "In msg nelems": nelems,
            "Out msg nelems": nelems,
            "Group size": w.world_size,
            "dtype": COLL_DT[w.dtype],
            "In split size": "[]",
            "Out split size": "[]",
            "Process Group Name": "0",
            "Process Group Description": "default_pg",
            "Process Group Ranks": str(list(range(w.world_size))),
            "Rank": self.rank,
            "Global rank start": 0,
            "Global rank stride": 1,
            "Is asynchronized op": True,
        }
        on_kernel = {k: v for k, v in coll.items() if k not in ("Rank", "Is asynchronized op")}
        on_kernel["Seq"] = self.coll_seq
        with self.op("c10d::allreduce_", tid=tid), self.op("record_param_comms", tid=tid, **coll):
            c = self.t[tid] + 4_000
            if not self.amd:
                self._rec(
                    c, 1_500, partial(self.b.runtime, "cudaStreamWaitEvent", c, 1_500, tid=tid)
                )
                c += 2_500
            self.t[tid] = c
            with self.annotation("nccl:all_reduce", tid=tid, late=True):
                c = self.t[tid] + 6_000
                api_ns = w.launch_ns + 4_000
                # waits for the gradients it reduces: everything launched on the compute stream
                arrival = max(
                    c + api_ns + LAUNCH_LATENCY_NS,
                    self.free[self.comm] + KERNEL_GAP_NS,
                    self.free[self.compute],
                )
                n = w.world_size
                dur = COMM_LATENCY_NS + round(nbytes * 2 * (n - 1) / n / w.comm_bandwidth * 1e9)
                end = yield (arrival, dur)
                self.free[self.comm] = end
                heapq.heappush(self.pending, end)
                self.step_gpu[1] = max(self.step_gpu[1], end)
                self._rec(
                    c,
                    api_ns,
                    partial(
                        self.b.launch,
                        self.names["nccl"],
                        cpu_start=c,
                        gpu_start=arrival,
                        gpu_dur=end - arrival,
                        cpu_dur=api_ns,
                        stream=self.comm,
                        api="hipExtLaunchKernel" if self.amd else "cudaLaunchKernelExC",
                        tid=tid,
                        grid=[32, 1, 1],
                        block=[512 if self.amd else 640, 1, 1],
                        **on_kernel,
                    ),
                )
                self.t[tid] = c + api_ns + 3_000

    def _backward(self) -> Generator[tuple[int, int], int, None]:
        """Replays the forward tape in reverse on the autograd thread."""
        grad: list[int | None] = [None]  # the live incoming gradient (an allocation key)
        tape = self.tape
        for idx in range(len(tape) - 1, -1, -1):
            nd = tape[idx]
            if nd.kind == "bucket":
                continue
            # a DDP bucket is complete once the tape entry before this one is a bucket marker
            prev = tape[idx - 1] if idx > 0 else None
            hook = prev.info["bytes"] if prev is not None and prev.kind == "bucket" else 0
            yield from self._backward_node(nd, grad, hook)
        self.mfree(self.t[self.bwd], self.bwd, grad[0])
        if self.w.world_size > 1 and self.w.comm_bytes and not self.amd:
            c = self.t[self.bwd]  # DDP: the compute stream waits for the all-reduce
            self._rec(
                c, 1_500, partial(self.b.runtime, "cudaStreamWaitEvent", c, 1_500, tid=self.bwd)
            )
            self.t[self.bwd] = c + 2_500

    def _backward_node(
        self, nd: Node, grad: list[int | None], hook: int
    ) -> Generator[tuple[int, int], int, None]:
        w, T, H, dt, tid, ds = self.w, self.w.tokens, self.w.hidden, self.dt, self.bwd, self.ds
        B, S, F = w.batch, w.seq, 4 * w.hidden
        info = nd.info
        saved = info.get("saved")

        def swap(size: int) -> tuple[int | None, int | None]:
            """(new grad key, old grad key): the node's output gradient replaces the old one."""
            new = self.malloc(self.t[tid], tid, size) if size else None
            old = grad[0] if new is not None else None
            if new is not None:
                grad[0] = new
            return new, old

        def release(old: int | None) -> None:
            self.mfree(self.t[tid], tid, saved)
            self.mfree(self.t[tid], tid, old)

        if nd.kind == "addmm":
            k, n = info["k"], info["n"]
            with self.node("AddmmBackward0", nd.seq, nd.fwd_start):
                _, old = swap(T * k * ds)
                self.leaf("aten::t", tid=tid, dims=[[k, n]], types=[dt])
                self.leaf(
                    "aten::mm",
                    [self.gemm(T, k, n, "nn")],
                    tid=tid,
                    dims=[[T, n], [n, k]],
                    types=[dt, dt],
                )
                self.leaf("aten::t", tid=tid, dims=[[T, n]], types=[dt])
                self.leaf(
                    "aten::mm",
                    [self.gemm(n, k, T, "nt")],
                    tid=tid,
                    dims=[[n, T], [T, k]],
                    types=[dt, dt],
                )
                self.leaf(
                    "aten::sum",
                    [self.mem_kernel("sum", T * n * ds, T * n)],
                    tid=tid,
                    dims=[[T, n], [], [], []],
                    types=[dt, "ScalarList", "Scalar", ""],
                )
                release(old)
            yield from self._accumulate([n])
        elif nd.kind == "t":
            with self.node("TBackward0", nd.seq, nd.fwd_start):
                self.leaf("aten::t", tid=tid, dims=[[info["k"], info["n"]]], types=[dt])
            yield from self._accumulate([info["n"], info["k"]])
        elif nd.kind == "ln":
            with self.node("NativeLayerNormBackward0", nd.seq, nd.fwd_start):
                _, old = swap(T * H * ds)
                kerns = [
                    self.mem_kernel("ln_bwd_input", 3 * T * H * ds, T * H),
                    self.mem_kernel("ln_bwd_gamma", 2 * T * H * ds, T * H),
                ]
                self.leaf(
                    "aten::native_layer_norm_backward",
                    kerns,
                    tid=tid,
                    dims=[[B, S, H], [B, S, H], [], [B, S, 1], [B, S, 1], [H], [H], []],
                    types=[dt, dt, "", "float", "float", dt, dt, "ScalarList"],
                )
                release(old)
            yield from self._accumulate([H])
            yield from self._accumulate([H], hook)
            hook = 0
        elif nd.kind == "sdpa":
            self._attention_backward(nd, swap, release)
        else:
            if nd.kind == "gelu":
                name, op, size = "GeluBackward0", "aten::gelu_backward", T * F * ds
                kerns = [self.mem_kernel("gelu_bwd", 3 * T * F * ds, T * F)]
                dims, types = [[B, S, F], [B, S, F], []], [dt, dt, ""]
            elif nd.kind == "mul":
                nb = info["bytes"]
                name, op, size = "MulBackward0", "aten::mul", round(nb / 3)
                kerns = [self.mem_kernel("mul", nb, T * F), self.mem_kernel("mul", nb, T * F)]
                dims, types = [[B, S, F], [B, S, F]], [dt, dt]
            elif nd.kind == "add":
                name, op, size, kerns, dims, types = "AddBackward0", "", 0, [], [], []
            elif nd.kind == "mse":
                name, op, size = "MseLossBackward0", "aten::mse_loss_backward", T * H * ds
                kerns = [self.mem_kernel("mse_bwd", 3 * T * H * ds, T * H)]
                dims, types = [[], [B, S, H], [B, S, H], []], [dt, dt, dt, "Scalar"]
            elif nd.kind == "embedding":
                name, op = "EmbeddingBackward0", "aten::embedding_dense_backward"
                size = VOCAB * H * ds
                kerns = [
                    self.mem_kernel("fill", VOCAB * H * ds, VOCAB * H),
                    self.mem_kernel("embedding_bwd", 2 * T * H * ds, T * H),
                ]
                dims = [[B, S, H], [B, S], [], [], []]
                types = [dt, "long int", "Scalar", "Scalar", "Scalar"]
            else:
                raise AssertionError(nd.kind)
            with self.node(name, nd.seq, nd.fwd_start):
                _, old = swap(size)
                if op:
                    self.leaf(op, kerns, tid=tid, dims=dims, types=types)
                release(old)
            if nd.kind == "embedding":
                yield from self._accumulate([VOCAB, H], hook)
                hook = 0
        if hook:  # a bucket boundary on a node without parameters (not built by _forward)
            yield from self._allreduce(hook)

    def _attention_backward(
        self,
        nd: Node,
        swap: Callable[[int], tuple[int | None, int | None]],
        release: Callable[[int | None], None],
    ) -> None:
        w, T, H, dt, tid, ds = self.w, self.w.tokens, self.w.hidden, self.dt, self.bwd, self.ds
        B, S = w.batch, w.seq
        _, names = attention_kernels(w, self.hd)
        qkv = [B, self.heads, S, self.hd]
        grid = [math.ceil(S / 128), self.heads, B]
        main = self._gpu_ns(2.5 * nd.info["flops"] / (self.peak * w.gemm_efficiency * 0.75))
        kerns = [
            Kernel(
                names[0],
                main,
                grid=[math.ceil(S / 64), self.heads, B],
                block=[256, 1, 1],
                api="hipLaunchKernel" if self.amd else None,
            )
        ]
        if len(names) > 1:  # flash / ck: dO·O before, dQ conversion after
            bw = self.bw * w.memory_efficiency
            kerns.insert(
                0, Kernel(names[1], self._gpu_ns(2 * T * H * ds / bw), grid=grid, block=[256, 1, 1])
            )
            kerns.append(
                Kernel(names[2], self._gpu_ns(T * H * (4 + ds) / bw), grid=grid, block=[256, 1, 1])
            )
        kind = "Efficient" if attention_impl(w) == "efficient" else "Flash"
        low = kind.lower()
        with self.node(f"ScaledDotProduct{kind}AttentionBackward0", nd.seq, nd.fwd_start):
            _, old = swap(3 * T * H * ds)
            dims, types = [qkv, qkv, qkv, qkv, [B, self.heads, S]], [dt, dt, dt, dt, "float"]
            with self.op(
                f"aten::_scaled_dot_product_{low}_attention_backward",
                tid=tid,
                dims=dims,
                types=types,
            ):
                self.leaf(
                    f"aten::_{low}_attention_backward", kerns, tid=tid, dims=dims, types=types
                )
            release(old)
