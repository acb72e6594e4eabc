"""One op call's arguments as the models see them (:class:`_Args`: tensors, tensor lists,
concrete values) and the registry the op families add their models to."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from traceinsight.metrics.flops.core import OpCost, _cval, _prod, _shape
from traceinsight.metrics.flops.dtypes import _DTYPE_BPE, _FLOAT, _out_dtype, _type_info


@dataclass(frozen=True)
class _T:
    """One tensor argument."""

    shape: tuple[int, ...]
    bpe: int
    dtype: str

    @property
    def numel(self) -> int:
        return _prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * self.bpe


def _shape_list(d: Any) -> list[tuple[int, ...]] | None:
    """Shapes of a list argument (TensorList, List[Optional[Tensor]]), recorded as nested lists;
    None when absent, empty or any shape is unusable."""
    if not isinstance(d, list) or not d or not all(isinstance(x, list) for x in d):
        return None
    out = []
    for x in d:
        s = _shape(x)
        if s is None:
            return None
        out.append(s)
    return out


class _Args:
    def __init__(self, dims: list, types: list, concrete: list | None, list_dtype: str | None):
        self.dims = dims
        self.types = types
        self.concrete = concrete or []
        #: element dtype of TensorList arguments (Kineto records only "TensorList")
        self.list_dtype_given = list_dtype in _DTYPE_BPE
        self.list_dtype = list_dtype if list_dtype in _DTYPE_BPE else "fp32"
        self.list_bpe = _DTYPE_BPE[self.list_dtype]
        self.assumed: list[str] = []
        #: what was derived from the op's context (:func:`op_cost`'s ``context``)
        self.inferred: list[str] = []
        self.out_shape: tuple[int, ...] | None = None
        self.out_source: str | None = None
        self.in_shape: tuple[int, ...] | None = None
        self.in_source: str | None = None
        self.w_shape: tuple[int, ...] | None = None
        self.w_source: str | None = None

    def __len__(self) -> int:
        return len(self.dims)

    def t(self, i: int) -> _T | None:
        """Tensor at position i (None when absent, not a tensor, or its shape is unusable)."""
        if i >= len(self.dims) or i >= len(self.types):
            return None
        info = _type_info(self.types[i])
        if info is None:
            return None
        shp = _shape(self.dims[i])
        if shp is None:
            return None
        return _T(shp, info[0], info[1])

    def tensors(self) -> list[_T]:
        return [t for t in (self.t(i) for i in range(len(self.dims))) if t is not None]

    def tlist(self, i: int) -> list[_T] | None:
        """TensorList at position i (shapes recorded as nested lists); element type assumed."""
        if i >= len(self.dims):
            return None
        typ = self.types[i] if i < len(self.types) else None
        if typ not in ("TensorList", "c10::List<std::optional<at::Tensor>>", "GenericList"):
            return None
        shapes = _shape_list(self.dims[i])
        return None if shapes is None else [_T(s, self.list_bpe, self.list_dtype) for s in shapes]

    def c(self, i: int) -> Any:
        return _cval(self.concrete[i]) if i < len(self.concrete) else None

    def raw_c(self, i: int) -> Any:
        return self.concrete[i] if i < len(self.concrete) else None


def _broadcast(shapes: Sequence[tuple[int, ...]]) -> tuple[int, ...] | None:
    nd = max((len(s) for s in shapes), default=0)
    out = []
    for k in range(nd):
        size = 1
        for s in shapes:
            j = k - (nd - len(s))
            if j < 0 or s[j] == 1:
                continue
            if size == 1:
                size = s[j]
            elif s[j] != size:
                return None  # not broadcastable (0 only meets 0 or 1)
        out.append(size)
    return tuple(out)


def _main_dtype(ts: Sequence[_T]) -> str:
    for t in ts:
        if t.dtype in _FLOAT:
            return _out_dtype(t.dtype)
    for t in ts:
        if t.dtype == "int8":
            return "int8"
    return "other"


# --------------------------------------------------------------------------------- op models

_Model = Callable[[_Args, str], "OpCost | None"]
_MODELS: dict[str, _Model] = {}
_COMPOSITE_MODELS: dict[str, _Model] = {}


def _reg(table: dict[str, _Model], *names: str) -> Callable[[_Model], _Model]:
    def deco(fn: _Model) -> _Model:
        for n in names:
            table[n] = fn
        return fn

    return deco


def _cost(
    flops: float, nbytes: float, dtype: str, kind: str, a: _Args, exact: bool = True
) -> OpCost:
    notes = "; ".join(dict.fromkeys(a.assumed))
    return OpCost(
        float(flops),
        float(nbytes),
        dtype,
        kind,
        exact and not a.assumed,
        notes,
        "; ".join(dict.fromkeys(a.inferred)),
    )
