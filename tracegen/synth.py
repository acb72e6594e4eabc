"""Synthetic Kineto trace builder: traces with known answers, for tests, samples and benchmarks.

Times are given in integer nanoseconds relative to the start of the trace; the builder writes
them the way a real profiler does (µs with three decimals relative to ``baseTimeNanoseconds``,
or legacy integer µs since the epoch), so every reader path is exercised. Nothing is random
unless a seeded generator is passed in.

Low-level use::

    b = KinetoTraceBuilder()
    with b.cpu_op("aten::mm", 0, 100_000, input_dims=[[64, 128], [128, 256]],
                  input_types=["float", "float"]):
        b.launch("sm90_xmma_gemm_f32f32", cpu_start=10_000, gpu_start=20_000, gpu_dur=50_000)
    b.write("t.json.gz")

``cpu_op``/``annotation``/``module`` return a context manager only for readability: events are
recorded immediately, nesting is by time, as in a real trace.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracegen.devices import DEVICE_PROPS

DEFAULT_BASE_NS = 1_790_000_000_000_000_000  # an epoch in late 2026, a round second


def _us(ns: int, style: str, base_ns: int) -> Any:
    """ns (relative) -> the JSON number a profiler of ``style`` would write."""
    if style == "legacy":
        return (base_ns + ns) // 1000  # integer µs since the epoch
    if style == "absolute":
        t = base_ns + ns
        return _Dec(f"{t // 1000}.{t % 1000:03d}")
    if ns < 0:
        return _Dec(f"-{(-ns) // 1000}.{(-ns) % 1000:03d}")
    return _Dec(f"{ns // 1000}.{ns % 1000:03d}")


def _dur(ns: int, style: str) -> Any:
    if style == "legacy":
        return ns // 1000
    return _Dec(f"{ns // 1000}.{ns % 1000:03d}")


class _Dec(str):
    """A number kept as exact text; written to JSON without quotes."""


class _Encoder(json.JSONEncoder):
    pass


def _conv(o: Any) -> Any:
    # json can't emit raw numbers from strings: mark them and strip the quotes afterwards
    if isinstance(o, _Dec):
        return "\u0000" + str(o) + "\u0000"
    if isinstance(o, dict):
        return {k: _conv(v) for k, v in o.items()}
    if isinstance(o, list):
        return [_conv(v) for v in o]
    return o


def _unmark(text: str) -> str:
    return text.replace('"\\u0000', "").replace('\\u0000"', "")


EVENT_SEP = ",\n  "  #: between two events of the ``traceEvents`` list


def dumps_events(events: list[dict[str, Any]]) -> str:
    """Events as Kineto writes them (``", "`` and ``": "`` separators, exact numbers), joined by
    :data:`EVENT_SEP`."""
    return _unmark(EVENT_SEP.join(json.dumps(_conv(e)) for e in events))


_OPEN, _CLOSE = '  "traceEvents": [\n  ', "\n  ]"


def trace_parts(doc: dict[str, Any]) -> tuple[str, str]:
    """The text of a trace in Kineto's layout before its first event and after its last, so
    that ``head + dumps_events(events) + tail`` is the whole trace (written in pieces: join the
    pieces' :func:`dumps_events` with :data:`EVENT_SEP`).

    Kineto's layout: one top-level key per line, one event per line, with ``", "`` and ``": "``
    separators (other tools find the rank with a regex that expects the space after the colon).
    """
    before: list[str] = []
    after: list[str] = []
    side = before
    for k, v in doc.items():
        if k == "traceEvents":
            side = after
            continue
        side.append(f"  {json.dumps(k)}: {_unmark(json.dumps(_conv(v)))}")
    return "{\n" + ",\n".join([*before, _OPEN]), _CLOSE + "".join(",\n" + p for p in after) + "\n}"


def _dumps_trace(doc: dict[str, Any]) -> str:
    """A whole trace in Kineto's layout (see :func:`trace_parts`)."""
    head, tail = trace_parts(doc)
    events = doc.get("traceEvents")
    if not events:
        return head[: -len(_OPEN)] + '  "traceEvents": []' + tail[len(_CLOSE) :]
    return head + dumps_events(events) + tail


@dataclass
class _Op:
    name: str
    start: int
    dur: int
    tid: int
    ext: int

    @property
    def end(self) -> int:
        return self.start + self.dur


@dataclass
class KinetoTraceBuilder:
    """Builds one rank's Kineto trace. All times are ns relative to the trace start."""

    rank: int | None = None
    world_size: int | None = None
    device: str | None = "H100"
    num_devices: int = 1
    pid: int = 4242
    tid: int = 4242
    style: str = "relative"  #: relative | absolute | legacy
    base_ns: int = DEFAULT_BASE_NS
    capture: dict[str, int] = field(
        default_factory=lambda: {
            "record_shapes": 1,
            "profile_memory": 1,
            "with_stack": 1,
            "with_flops": 0,
            "with_modules": 1,
        }
    )
    metadata: dict[str, Any] = field(default_factory=dict)
    default_stream: int = 7
    vendor: str = "nvidia"

    def __post_init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self._ext = 0
        self._corr = 1000
        self._py = 0
        self._flow = 0
        self._ops: list[_Op] = []
        self._mod_counts: dict[str, int] = {}
        if self.vendor == "amd" and self.default_stream == 7:
            self.default_stream = 0

    # --- ids ------------------------------------------------------------------------------
    def _next_ext(self) -> int:
        self._ext += 1
        return self._ext

    def _next_corr(self) -> int:
        self._corr += 1
        return self._corr

    def _x(
        self,
        cat: str,
        name: str,
        start: int,
        dur: int,
        pid: Any,
        tid: Any,
        args: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        ev = {
            "ph": "X",
            "cat": cat,
            "name": name,
            "pid": pid,
            "tid": tid,
            "ts": _us(start, self.style, self.base_ns),
            "dur": _dur(dur, self.style),
        }
        if args:
            ev["args"] = args
        self.events.append(ev)
        return ev

    def _enclosing_ext(self, t: int, tid: int) -> int | None:
        best = None
        for op in self._ops:
            if (
                op.tid == tid
                and op.start <= t <= op.end
                and (best is None or op.start >= best.start)
            ):
                best = op
        return best.ext if best else None

    # --- CPU side -------------------------------------------------------------------------
    @contextmanager
    def cpu_op(self, name: str, start: int, dur: int, **kw: Any) -> Iterator[int]:
        yield self.op(name, start, dur, **kw)

    def op(
        self,
        name: str,
        start: int,
        dur: int,
        *,
        tid: int | None = None,
        input_dims: list | None = None,
        input_types: list | None = None,
        concrete_inputs: list | None = None,
        seq: int | None = None,
        fwd_tid: int | None = None,
        cat: str = "cpu_op",
        **extra: Any,
    ) -> int:
        """A framework op (``cpu_op``). Returns its External id."""
        tid = self.tid if tid is None else tid
        ext = self._next_ext()
        args: dict[str, Any] = {"External id": ext}
        if input_dims is not None:
            args["Input Dims"] = input_dims
        if input_types is not None:
            args["Input type"] = input_types
        if concrete_inputs is not None:
            args["Concrete Inputs"] = concrete_inputs
        if seq is not None:
            args["Sequence number"] = seq
            args["Fwd thread id"] = fwd_tid if fwd_tid is not None else 1
        args.update(extra)
        self._x(cat, name, start, dur, self.pid, tid, args)
        self._ops.append(_Op(name, start, dur, tid, ext))
        return ext

    @contextmanager
    def annotation(
        self,
        name: str,
        start: int,
        dur: int,
        *,
        tid: int | None = None,
        gpu: tuple[int, int] | None = None,
    ) -> Iterator[int]:
        """A ``record_function`` range; ``gpu=(start, dur)`` adds its GPU projection."""
        tid = self.tid if tid is None else tid
        ext = self._next_ext()
        self._x("user_annotation", name, start, dur, self.pid, tid, {"External id": ext})
        self._ops.append(_Op(name, start, dur, tid, ext))
        if gpu is not None:
            self._x(
                "gpu_user_annotation",
                name,
                gpu[0],
                gpu[1],
                0,
                self.default_stream,
                {"External id": ext},
            )
        yield ext

    def step(self, n: int, start: int, dur: int, *, gpu: tuple[int, int] | None = None):
        """A ``ProfilerStep#n`` window (context manager)."""
        return self.annotation(f"ProfilerStep#{n}", start, dur, gpu=gpu)

    @contextmanager
    def module(
        self, cls: str, start: int, dur: int, *, tid: int | None = None, instance: int | None = None
    ) -> Iterator[str]:
        """An ``nn.Module: Cls_k`` Python frame (``with_stack=True``)."""
        tid = self.tid if tid is None else tid
        if instance is None:
            instance = self._mod_counts.get(cls, 0)
            self._mod_counts[cls] = instance + 1
        self._py += 1
        name = f"nn.Module: {cls}_{instance}"
        self._x(
            "python_function",
            name,
            start,
            dur,
            self.pid,
            tid,
            {"Python id": self._py, "Python parent id": None, "Python module id": instance},
        )
        yield name

    def python(self, name: str, start: int, dur: int, *, tid: int | None = None) -> None:
        self._py += 1
        self._x(
            "python_function",
            name,
            start,
            dur,
            self.pid,
            self.tid if tid is None else tid,
            {"Python id": self._py, "Python parent id": None},
        )

    def runtime(
        self,
        name: str,
        start: int,
        dur: int,
        *,
        tid: int | None = None,
        corr: int | None = None,
        cat: str = "cuda_runtime",
    ) -> int:
        """A runtime call without GPU work (cudaStreamSynchronize, cudaMalloc, ...)."""
        tid = self.tid if tid is None else tid
        corr = self._next_corr() if corr is None else corr
        args: dict[str, Any] = {"cbid": 0, "correlation": corr}
        ext = self._enclosing_ext(start, tid)
        if ext is not None:
            args["External id"] = ext
        self._x(cat, name, start, dur, self.pid, tid, args)
        return corr

    # --- GPU side -------------------------------------------------------------------------
    def launch(
        self,
        kernel: str,
        *,
        cpu_start: int,
        gpu_start: int,
        gpu_dur: int,
        cpu_dur: int = 4_000,
        stream: int | None = None,
        device: int = 0,
        kind: str = "kernel",
        api: str | None = None,
        tid: int | None = None,
        bytes: int | None = None,
        grid: list[int] | None = None,
        block: list[int] | None = None,
        flow: bool = True,
        orphan: bool = False,
        **kargs: Any,
    ) -> int:
        """A runtime launch on the CPU thread and its kernel / memcpy / memset on the GPU.

        ``orphan=True`` writes only the GPU activity (its launch record is lost).
        Returns the correlation id.
        """
        tid = self.tid if tid is None else tid
        stream = self.default_stream if stream is None else stream
        corr = self._next_corr()
        ext = self._enclosing_ext(cpu_start, tid)
        if api is None:
            api = {
                "kernel": "cudaLaunchKernel",
                "memcpy": "cudaMemcpyAsync",
                "memset": "cudaMemsetAsync",
            }[kind]
            if self.vendor == "amd":
                api = {
                    "kernel": "hipLaunchKernel",
                    "memcpy": "hipMemcpyAsync",
                    "memset": "hipMemsetAsync",
                }[kind]
        if not orphan:
            rargs: dict[str, Any] = {"cbid": 211, "correlation": corr}
            if ext is not None:
                rargs["External id"] = ext
            self._x("cuda_runtime", api, cpu_start, cpu_dur, self.pid, tid, rargs)
            if flow:
                self.events.append(
                    {
                        "ph": "s",
                        "id": corr,
                        "pid": self.pid,
                        "tid": tid,
                        "ts": _us(cpu_start, self.style, self.base_ns),
                        "cat": "ac2g",
                        "name": "ac2g",
                    }
                )
        gargs: dict[str, Any] = {"device": device, "stream": stream, "correlation": corr}
        if ext is not None:
            gargs["External id"] = ext
        cat = {"kernel": "kernel", "memcpy": "gpu_memcpy", "memset": "gpu_memset"}[kind]
        if kind == "kernel":
            gargs.update(
                {
                    "grid": grid or [132, 1, 1],
                    "block": block or [256, 1, 1],
                    "registers per thread": 64,
                    "shared memory": 0,
                    "blocks per SM": 1.0,
                    "warps per SM": 8.0,
                    "est. achieved occupancy %": 50,
                }
            )
        if bytes is not None:
            gargs["bytes"] = bytes
        gargs.update(kargs)
        self._x(cat, kernel, gpu_start, gpu_dur, device, stream, gargs)
        if flow and not orphan:
            self.events.append(
                {
                    "ph": "f",
                    "id": corr,
                    "pid": device,
                    "tid": stream,
                    "ts": _us(gpu_start, self.style, self.base_ns),
                    "cat": "ac2g",
                    "name": "ac2g",
                    "bp": "e",
                }
            )
        return corr

    def graph_launch(
        self,
        kernels: list[tuple[str, int, int]] | list[tuple[str, int, int, str]],
        *,
        cpu_start: int,
        cpu_dur: int = 8_000,
        stream: int | None = None,
        device: int = 0,
    ) -> int:
        """``cudaGraphLaunch``: one correlation id for every node of the replay; a node is
        ``(name, start, dur)`` (a kernel) or ``(name, start, dur, kind)`` with kind kernel,
        memset or memcpy."""
        stream = self.default_stream if stream is None else stream
        corr = self._next_corr()
        ext = self._enclosing_ext(cpu_start, self.tid)
        api = "hipGraphLaunch" if self.vendor == "amd" else "cudaGraphLaunch"
        rargs: dict[str, Any] = {"cbid": 311, "correlation": corr}
        if ext is not None:
            rargs["External id"] = ext
        self._x("cuda_runtime", api, cpu_start, cpu_dur, self.pid, self.tid, rargs)
        for node in kernels:
            name, start, dur = node[0], node[1], node[2]
            kind = node[3] if len(node) > 3 else "kernel"  # type: ignore[misc]
            self._x(
                {"kernel": "kernel", "memcpy": "gpu_memcpy", "memset": "gpu_memset"}[kind],
                name,
                start,
                dur,
                device,
                stream,
                {"device": device, "stream": stream, "correlation": corr, "graph id": 1},
            )
        return corr

    def sync(
        self, name: str, start: int, dur: int, *, stream: int | None = None, device: int = 0
    ) -> None:
        """A device-side ``cuda_sync`` event (Stream Sync, Event Sync, ...)."""
        stream = self.default_stream if stream is None else stream
        self._x(
            "cuda_sync",
            name,
            start,
            dur,
            device,
            stream,
            {"device": device, "stream": stream, "cuda_sync_kind": name},
        )

    def fwdbwd(
        self,
        fwd_start: int,
        bwd_start: int,
        *,
        fwd_tid: int | None = None,
        bwd_tid: int | None = None,
    ) -> None:
        self._flow += 1
        self.events.append(
            {
                "ph": "s",
                "id": self._flow,
                "pid": self.pid,
                "tid": self.tid if fwd_tid is None else fwd_tid,
                "ts": _us(fwd_start, self.style, self.base_ns),
                "cat": "fwdbwd",
                "name": "fwdbwd",
            }
        )
        self.events.append(
            {
                "ph": "f",
                "id": self._flow,
                "pid": self.pid,
                "tid": self.tid if bwd_tid is None else bwd_tid,
                "ts": _us(bwd_start, self.style, self.base_ns),
                "cat": "fwdbwd",
                "name": "fwdbwd",
                "bp": "e",
            }
        )

    # --- memory ---------------------------------------------------------------------------
    def memory(
        self,
        ts: int,
        nbytes: int,
        total_allocated: int,
        total_reserved: int,
        *,
        addr: int = 0x7F0000000000,
        device: int = 0,
        device_type: int = 1,
        tid: int | None = None,
        oom: bool = False,
    ) -> None:
        args = {
            "Total Reserved": total_reserved,
            "Total Allocated": total_allocated,
            "Bytes": nbytes,
            "Device Id": device,
            "Device Type": device_type,
        }
        if not oom:
            args["Addr"] = addr
        self.events.append(
            {
                "ph": "i",
                "cat": "cpu_instant_event",
                "s": "t",
                "name": "[OutOfMemory]" if oom else "[memory]",
                "pid": self.pid,
                "tid": self.tid if tid is None else tid,
                "ts": _us(ts, self.style, self.base_ns),
                "args": args,
            }
        )

    # --- output ---------------------------------------------------------------------------
    def _device_props(self) -> list[dict[str, Any]]:
        if self.device is None:
            return []
        preset = dict(DEVICE_PROPS.get(self.device, {"name": self.device}))
        preset.setdefault("warpSize", 32)
        return [{"id": i, **preset} for i in range(self.num_devices)]

    def to_dict(self) -> dict[str, Any]:
        meta: list[dict[str, Any]] = [
            {
                "name": "process_name",
                "ph": "M",
                "ts": _us(0, self.style, self.base_ns),
                "pid": self.pid,
                "tid": 0,
                "args": {"name": "python3"},
            },
            {
                "name": "thread_name",
                "ph": "M",
                "ts": _us(0, self.style, self.base_ns),
                "pid": self.pid,
                "tid": self.tid,
                "args": {"name": f"thread {self.tid} (python3)"},
            },
        ]
        for i in range(self.num_devices):
            meta.append(
                {
                    "name": "process_name",
                    "ph": "M",
                    "ts": _us(0, self.style, self.base_ns),
                    "pid": i,
                    "tid": 0,
                    "args": {"name": "python3"},
                }
            )
            meta.append(
                {
                    "name": "process_labels",
                    "ph": "M",
                    "ts": _us(0, self.style, self.base_ns),
                    "pid": i,
                    "tid": 0,
                    "args": {"labels": f"GPU {i}"},
                }
            )
        d: dict[str, Any] = {"schemaVersion": 1, "deviceProperties": self._device_props()}
        if self.rank is not None:
            d["distributedInfo"] = {
                "backend": "nccl",
                "rank": self.rank,
                "world_size": self.world_size or 1,
            }
        if self.vendor == "amd":
            d["hip_runtime_version"] = 60200000
        else:
            d["cuda_runtime_version"] = 12040
        for k, v in self.capture.items():
            if v:
                d[k] = v
        d.update(self.metadata)
        d["traceEvents"] = meta + self.events
        d["traceName"] = "synthetic.pt.trace.json"
        d["displayTimeUnit"] = "ms"
        if self.style == "relative":
            d["baseTimeNanoseconds"] = self.base_ns
        return d

    def dumps(self) -> str:
        return _dumps_trace(self.to_dict())

    def write(self, path: str | Path, *, compress: bool | None = None) -> Path:
        path = Path(path)
        text = self.dumps().encode()
        if compress is None:
            compress = path.name.endswith(".gz")
        if compress:
            path.write_bytes(gzip.compress(text, mtime=0))
        else:
            path.write_bytes(text)
        return path
