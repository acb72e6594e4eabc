"""Real-shaped benchmark inputs: the steps of real shared traces, repeated to a target size.

A generated trace has the simulator's shape; real traces have others (one is 40% ``ac2g``
flows, another mostly Python frames, a third the 2021 legacy categories). Each shape here names
one real trace of the shared corpus (``/work/shared/traces``, read-only; never copied into the
repository). Its events are repeated until the file reaches the requested size, each
repetition shifted so the result reads as one longer recording of the same run:

* times: every ``ts`` moves by the recording's span plus a 1 ms gap per repetition (decimal µs
  stay exact: floats are handled as :class:`~decimal.Decimal` and written back as numbers);
* ids: flow ``id``, ``args.correlation``, ``External id`` / ``external id``, ``Sequence
  number``, ``Python id`` / ``Python parent id``, ``Record function id`` and ``Ev Idx`` move by
  one more than their largest value per repetition, so links stay within a repetition and never
  collide across them;
* steps: ``ProfilerStep#N`` becomes ``ProfilerStep#(N + k * steps)``.

A shape may first transform its source into a shape the corpus lacks (:data:`TRANSFORMS`):
the ROCm traces of CUDA-graph replays become CUDA ones (``hip*`` runtime names, AMD-only
kernel args and header keys replaced, the GPU named in ``deviceProperties``; the A100 shape
also drops the Python frames, a training rank recorded with ``record_shapes`` only); a float-µs NCCL
rank becomes a legacy integer-µs absolute-epoch expert-parallel rank (``baseTimeNanoseconds``
folded into every ``ts``, ``ts``/``dur`` rounded to whole µs, every 8th kernel renamed to a
DeepEP dispatch/combine kernel, an H800 in ``deviceProperties``).

Metadata (``ph: M``) events and the header (``deviceProperties``, ``distributedInfo``, ...) are
written once. Events keep Kineto's layout (one event per line, a space after ``:`` and ``,``),
so a megabyte holds about as many events as in the original file. Outputs go to
``bench/.cache/`` (ignored by git), named by shape, size and a hash of this module and of the
source file, so a changed builder or source never reuses a stale input.
"""

from __future__ import annotations

import decimal
import gzip
import hashlib
import json
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

HERE = Path(__file__).resolve().parent
CACHE = HERE / ".cache"
SHARED = Path(os.environ.get("TRACEINSIGHT_SHARED_TRACES", "/work/shared/traces"))
GAP_US = 1000  #: between repetitions


@dataclass(frozen=True)
class Shape:
    """One real trace whose steps a benchmark input repeats."""

    name: str
    path: str  #: under the shared traces folder
    what: str  #: one line for the table
    transform: str = ""  #: a key of :data:`TRANSFORMS` applied to the source first


SHAPES: dict[str, Shape] = {
    s.name: s
    for s in (
        Shape(
            "hta_a100",
            "kineto/hta/nccl_parser_config/nccl_data.json.gz",
            "HTA A100 training rank (NCCL, 2024): 31% ac2g flows, 22% runtime calls",
        ),
        Shape(
            "tracelens_h100",
            "kineto/tracelens/traces/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
            "TraceLens H100 inference (Qwen1.5-0.5B): Python frames, [memory] events",
        ),
        Shape(
            "tb_resnet50",
            "kineto/tb_plugin/samples/resnet50_num_workers_0/worker0.1623143566756.pt.trace.json.gz",
            "tb_plugin ResNet50 training (V100, 2021): legacy categories, [memory], call stacks",
        ),
        Shape(
            "hta_v100_memory",
            "kineto/hta/df_index_resolver/df_index_resolver.json.gz",
            "HTA V100 training rank (2020 NCCL): the corpus's largest file, ac2g flows, [memory]",
        ),
        Shape(
            "a100_cudagraph",
            "kineto/tracelens/traces/inference/vllm_prefilldecode_piecewise/graph_execution.json.gz",
            "CUDA-graph-heavy A100 rank, record_shapes, no with_stack (TraceLens vLLM "
            "piecewise graphs as CUDA): 25 graph launches and 361 of 413 kernels without "
            "External id per repetition, Input Dims/type/Strides/Concrete Inputs on every op",
            transform="cuda_a100",
        ),
        Shape(
            "h800_ep_int_us",
            "kineto/hta/nccl_parser_config/nccl_data.json.gz",
            "H800 expert-parallel rank, integer-us epoch timestamps (HTA A100 rank rewritten): "
            "DeepEP dispatch/combine kernels, NCCL, ac2g flows",
            transform="int_us_ep_h800",
        ),
        Shape(
            "b200_vllm",
            "kineto/tracelens/traces/inference/vllm_decode_full/graph_execution.json.gz",
            "B200 vLLM serving rank (TraceLens full-graph decode as CUDA): 49% Python frames, "
            "one graph replay of 425 kernels per repetition",
            transform="cuda_b200",
        ),
    )
}
#: the shapes ``make bench`` measures (besides the generated trace)
DEFAULT_SHAPES = (
    "hta_a100",
    "tracelens_h100",
    "tb_resnet50",
    "a100_cudagraph",
    "h800_ep_int_us",
    "b200_vllm",
)

#: args keys holding ids that must stay unique per repetition
_ARG_IDS = (
    "correlation",
    "External id",
    "external id",
    "Sequence number",
    "Python id",
    "Python parent id",
    "Record function id",
    "Ev Idx",
)
_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_DEC = msgspec.json.Decoder(float_hook=decimal.Decimal)
_ENC = msgspec.json.Encoder(decimal_format="number")
_COLON = re.compile(rb'(?<!\\)":')


def builder_hash() -> str:
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:8]


def _source_bytes(shape: Shape) -> bytes:
    raw = (SHARED / shape.path).read_bytes()
    return gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw


# --- transforms: shapes the corpus lacks, built from its closest traces ---------------------
_GPUS: dict[str, dict[str, Any]] = {
    "a100": {
        "name": "NVIDIA A100-SXM4-80GB",
        "totalGlobalMem": 85_031_714_816,
        "computeMajor": 8,
        "computeMinor": 0,
        "numSms": 108,
    },
    "h800": {
        "name": "NVIDIA H800",
        "totalGlobalMem": 85_045_870_592,
        "computeMajor": 9,
        "computeMinor": 0,
        "numSms": 132,
    },
    "b200": {
        "name": "NVIDIA B200",
        "totalGlobalMem": 191_537_856_512,
        "computeMajor": 10,
        "computeMinor": 0,
        "numSms": 148,
    },
}
_AMD_KEYS = ("roctracer_version", "hip_runtime_version", "hip_driver_version")
_DEEP_EP = (
    "void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*, long*, float*, "
    "int*, int*, int4 const*, float const*, long const*, float const*, bool const*, int "
    "const*, int, int, int, int, int, int, int, int, int, void**, int, int, int)",
    "void deep_ep::intranode::combine<nv_bfloat16, 8, 768>(nv_bfloat16*, float*, nv_bfloat16 "
    "const*, float const*, int const*, int const*, int const*, int const*, int, int, int, "
    "int, void**, int, int, int)",
)


def _devices(header: dict[str, Any], gpu: str) -> None:
    props = header.get("deviceProperties")
    base = {"warpSize": 32, "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048}
    if isinstance(props, list) and props:
        header["deviceProperties"] = [
            {**p, **base, **_GPUS[gpu]} if isinstance(p, dict) else p for p in props
        ]
    else:
        header["deviceProperties"] = [{"id": 0, **base, **_GPUS[gpu]}]


def _to_cuda(
    header: dict[str, Any], events: list[dict[str, Any]], gpu: str, frames: bool = True
) -> None:
    """ROCm names to CUDA ones: ``hip*`` runtime calls, AMD-only args and header keys;
    without ``frames`` the Python frames go (a rank recorded without ``with_stack``)."""
    if not frames:
        events[:] = [e for e in events if e.get("cat") != "python_function"]
        header["with_stack"] = 0
    for k in _AMD_KEYS:
        header.pop(k, None)
    header.update(cuda_runtime_version=12040, cuda_driver_version=12040, cupti_version=22)
    _devices(header, gpu)
    for e in events:
        name = e.get("name")
        if isinstance(name, str) and name.startswith("hip") and e.get("cat") == "cuda_runtime":
            e["name"] = "cuda" + name[3:]
        args = e.get("args")
        if isinstance(args, dict) and e.get("cat") == "kernel" and "kind" in args:
            e["args"] = {k: v for k, v in args.items() if k != "kind"}


def _int_us_ep(header: dict[str, Any], events: list[dict[str, Any]], gpu: str) -> None:
    """Float µs relative to ``baseTimeNanoseconds`` to legacy integer µs since the epoch;
    every 8th kernel a DeepEP dispatch / combine kernel (an expert-parallel rank)."""
    base_ns = header.pop("baseTimeNanoseconds", 0) or 0
    base_us = decimal.Decimal(int(base_ns)) / 1000
    _devices(header, gpu)
    n = 0
    for e in events:
        ts = e.get("ts")
        if isinstance(ts, (int, decimal.Decimal)):
            e["ts"] = int((base_us + ts).to_integral_value(decimal.ROUND_HALF_EVEN))
        dur = e.get("dur")
        if isinstance(dur, decimal.Decimal):
            e["dur"] = int(dur.to_integral_value(decimal.ROUND_HALF_EVEN))
        if e.get("cat") == "kernel":
            if n % 8 == 7:
                e["name"] = _DEEP_EP[(n // 8) % 2]
            n += 1


TRANSFORMS = {
    "cuda_a100": lambda h, ev: _to_cuda(h, ev, "a100", frames=False),
    "cuda_b200": lambda h, ev: _to_cuda(h, ev, "b200"),
    "int_us_ep_h800": lambda h, ev: _int_us_ep(h, ev, "h800"),
}


def _plan(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The shifts of one repetition: span in µs, id strides, step count."""
    lo = hi = None
    top: dict[str, int] = {}
    steps = set()
    for e in events:
        ts = e.get("ts")
        if isinstance(ts, (int, decimal.Decimal)):
            end = ts + (e.get("dur") if isinstance(e.get("dur"), (int, decimal.Decimal)) else 0)
            lo = ts if lo is None or ts < lo else lo
            hi = end if hi is None or end > hi else hi
        if isinstance(e.get("id"), int):
            top["id"] = max(top.get("id", 0), e["id"])
        args = e.get("args")
        if isinstance(args, dict):
            for k in _ARG_IDS:
                v = args.get(k)
                if isinstance(v, int):
                    top[k] = max(top.get(k, 0), v)
        m = _STEP.match(e.get("name") or "") if isinstance(e.get("name"), str) else None
        if m:
            steps.add(int(m.group(1)))
    span = (hi - lo) if lo is not None else 0
    return {
        "span": int(span) + 1 + GAP_US,
        "stride": {k: v + 1 for k, v in top.items()},
        "steps": (max(steps) - min(steps) + 1) if steps else 0,
    }


def _shifted(e: dict[str, Any], k: int, plan: dict[str, Any]) -> dict[str, Any]:
    if k == 0:
        return e
    e = dict(e)
    dt = k * plan["span"]
    if isinstance(e.get("ts"), (int, decimal.Decimal)):
        e["ts"] = e["ts"] + dt
    stride = plan["stride"]
    if isinstance(e.get("id"), int) and "id" in stride:
        e["id"] = e["id"] + k * stride["id"]
    args = e.get("args")
    if isinstance(args, dict):
        new = None
        for key in _ARG_IDS:
            v = args.get(key)
            if isinstance(v, int) and v >= 0 and key in stride:
                new = new if new is not None else dict(args)
                new[key] = v + k * stride[key]
        if new is not None:
            e["args"] = new
    name = e.get("name")
    if plan["steps"] and isinstance(name, str):
        m = _STEP.match(name)
        if m:
            e["name"] = f"ProfilerStep#{int(m.group(1)) + k * plan['steps']}"
    return e


def _event_text(e: dict[str, Any]) -> bytes:
    """One event as Kineto lays it out: a space after each separator."""
    return _COLON.sub(b'": ', _ENC.encode(e).replace(b',"', b', "'))


def write_shape(shape: Shape, size_mb: float, out: Path) -> dict[str, Any]:
    """Write ``shape`` repeated to about ``size_mb`` (10^6 bytes) at ``out`` (atomically)."""
    t0 = time.perf_counter()
    src = _source_bytes(shape)
    doc = _DEC.decode(src)
    layout = "object" if isinstance(doc, dict) else "array"
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    if shape.transform:
        header = {k: v for k, v in doc.items() if k != "traceEvents"} if layout == "object" else {}
        events = [e for e in events if isinstance(e, dict)]
        TRANSFORMS[shape.transform](header, events)
        if layout == "object":
            doc = {**header, "traceEvents": events}
    meta = [e for e in events if isinstance(e, dict) and e.get("ph") == "M"]
    body = [e for e in events if isinstance(e, dict) and e.get("ph") != "M"]
    plan = _plan(body)
    target = int(size_mb * 1_000_000)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    out.parent.mkdir(parents=True, exist_ok=True)
    written = reps = n_events = 0
    sep = b",\n  "
    try:
        with open(tmp, "wb") as f:

            def put(b: bytes) -> None:
                nonlocal written
                f.write(b)
                written += len(b)

            if layout == "object":
                put(b"{\n")
                for key, value in doc.items():
                    if key != "traceEvents":
                        put(b'  "' + key.encode() + b'": ' + _ENC.encode(value) + b",\n")
                put(b'  "traceEvents": [\n  ')
            else:
                put(b"[\n  ")
            first = True
            for e in meta:
                put((b"" if first else sep) + _event_text(e))
                first = False
                n_events += 1
            while written < target or reps == 0:
                for chunk in _batches([_shifted(e, reps, plan) for e in body]):
                    put((b"" if first else sep) + chunk)
                    first = False
                n_events += len(body)
                reps += 1
            put(b"\n  ]\n}\n" if layout == "object" else b"\n]\n")
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            tmp.unlink()
    return {
        "shape": shape.name,
        "source": shape.path,
        "source_bytes": len(src),
        "source_events": len(events),
        "path": str(out),
        "bytes": out.stat().st_size,
        "events": n_events,
        "repetitions": reps,
        "layout": layout,
        "build_s": round(time.perf_counter() - t0, 2),
    }


def _batches(events: list[dict[str, Any]], n: int = 20_000) -> Iterator[bytes]:
    for i in range(0, len(events), n):
        yield b",\n  ".join(_event_text(e) for e in events[i : i + n])


def ensure_shape(name: str, size_mb: float) -> tuple[Path, dict[str, Any]]:
    """The cached input of shape ``name`` at ``size_mb``, built when missing."""
    shape = SHAPES[name]
    src = SHARED / shape.path
    if not src.is_file():
        raise FileNotFoundError(f"shared trace {src} is missing (TRACEINSIGHT_SHARED_TRACES)")
    digest = hashlib.sha256(src.read_bytes()).hexdigest()[:8]
    out = CACHE / f"shape_{name}_{size_mb:g}mb_{builder_hash()}_{digest}.json"
    info_path = out.with_name(out.name + ".info.json")
    if out.exists() and info_path.exists():
        return out, {**json.loads(info_path.read_text()), "built": False}
    info = write_shape(shape, size_mb, out)
    info_path.write_text(json.dumps(info, indent=2))
    return out, {**info, "built": True}


if __name__ == "__main__":  # python bench/shapes.py NAME SIZE_MB
    import sys

    p, i = ensure_shape(sys.argv[1], float(sys.argv[2]))
    print(p, json.dumps(i))
