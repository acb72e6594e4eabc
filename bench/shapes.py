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
    )
}
#: the shapes ``make bench`` measures (besides the generated trace)
DEFAULT_SHAPES = ("hta_a100", "tracelens_h100", "tb_resnet50")

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
