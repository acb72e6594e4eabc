"""Core types and argument parsing of the FLOPs model: the cost record (:class:`OpCost`), its
kinds, and the readers of Kineto's JSON argument text (shapes, concrete values)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

KINDS = (
    "gemm",
    "attention",
    "conv",
    "elementwise",
    "norm",
    "softmax",
    "reduction",
    "copy",
    "embedding",
    "other",
)


@dataclass(frozen=True)
class OpCost:
    """Cost of one op call. ``bytes`` is ideal DRAM traffic; ``note`` says what was assumed,
    ``inferred`` what was derived from the op's context (a shape its own record lacks)."""

    flops: float
    bytes: float
    dtype: str
    kind: str
    exact: bool = True
    note: str = ""
    inferred: str = ""

    @property
    def intensity(self) -> float | None:
        """FLOPs per byte (None when no bytes)."""
        return self.flops / self.bytes if self.bytes > 0 else None


@dataclass(frozen=True)
class OpContext:
    """Shapes an op's own record lacks, found in its neighbours: ``output`` (the shape of the
    tensor the next op reads, e.g. a convolution's result) and ``input`` (e.g. the input a
    convolution's input-gradient op writes, from its parent) and ``weight`` (the weight whose
    gradient a convolution's weight-gradient op writes, from its parent), each with where it
    came from."""

    output: tuple[int, ...] | None = None
    output_source: str | None = None
    input: tuple[int, ...] | None = None
    input_source: str | None = None
    weight: tuple[int, ...] | None = None
    weight_source: str | None = None


# ----------------------------------------------------------------------------------- parsing


def _as_list(x: Any) -> list | None:
    if x is None:
        return None
    if isinstance(x, (list, tuple)):
        return list(x)
    if isinstance(x, (bytes, bytearray)):
        try:
            x = x.decode("utf-8")
        except UnicodeDecodeError:
            return None
    if not isinstance(x, str):
        return None
    s = x.strip()
    if not s or s == "null":
        return None
    try:
        v = json.loads(s)
    except (ValueError, RecursionError):
        return None
    return v if isinstance(v, list) else None


def _shape(d: Any) -> tuple[int, ...] | None:
    if not isinstance(d, list):
        return None
    out = []
    for v in d:
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            return None  # symbolic / negative / nested
        out.append(v)
    return tuple(out)


def _prod(xs: Iterable[int]) -> int:
    p = 1
    for x in xs:
        p *= x
    return p


_INT_RE = re.compile(r"^-?\d+$")


def _scalar(s: str) -> Any:
    s = s.strip()
    if s in ("True", "true"):
        return True
    if s in ("False", "false"):
        return False
    if _INT_RE.match(s):
        return int(s)
    try:
        return float(s)
    except ValueError:
        return s


def _cval(s: Any) -> Any:
    """Concrete input text -> None / bool / int / float / list / str."""
    if s is None:
        return None
    if isinstance(s, (bool, int, float, list)):
        return s
    if not isinstance(s, str):
        return None
    t = s.strip()
    if not t:
        return None
    if t.startswith("[") and t.endswith("]"):
        inner = t[1:-1].strip()
        if not inner:
            return []
        return [_scalar(p) for p in inner.split(",")]
    if t.startswith("(") and t.endswith(")"):
        return _cval("[" + t[1:-1] + "]")
    return _scalar(t)


def _is_float_text(s: Any) -> bool:
    if not isinstance(s, str):
        return False
    t = s.strip()
    return bool(t) and not _INT_RE.match(t) and isinstance(_scalar(t), float)
