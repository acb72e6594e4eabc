"""FLOPs models of data movement (0 FLOPs, bytes only, a few accumulate): copies, fills,
concatenation, gathers and scatters, embeddings, advanced indexing, dtype conversion."""

from __future__ import annotations

from traceinsight.metrics.flops.args import (
    _COMPOSITE_MODELS,
    _MODELS,
    _T,
    _Args,
    _broadcast,
    _cost,
    _main_dtype,
    _reg,
    _shape_list,
)
from traceinsight.metrics.flops.core import OpCost, _prod
from traceinsight.metrics.flops.dtypes import _SCALAR_TYPE, _out_dtype

# ---- copies, gathers, fills


@_reg(_MODELS, "aten::copy_")
def _copy(a: _Args, name: str) -> OpCost | None:
    dst, src = a.t(0), a.t(1)
    if dst is None or src is None:
        return None
    return _cost(0, dst.nbytes + src.numel * src.bpe, _main_dtype([dst, src]), "copy", a)


@_reg(_MODELS, "aten::fill_", "aten::zero_fill_")
def _fill(a: _Args, name: str) -> OpCost | None:
    t = a.t(0)
    if t is None:
        return None
    return _cost(0, t.nbytes, _main_dtype([t]), "copy", a)


@_reg(_MODELS, "aten::_local_scalar_dense")
def _item(a: _Args, name: str) -> OpCost | None:
    t = a.t(0)
    if t is None:
        return None
    return _cost(0, t.bpe, _main_dtype([t]), "copy", a)


@_reg(_MODELS, "aten::flip", "aten::roll", "aten::tril", "aten::triu", "aten::tril_", "aten::triu_")
def _permute_copy(a: _Args, name: str) -> OpCost | None:
    t = a.t(0)
    if t is None:
        return None
    return _cost(0, 2 * t.nbytes, _main_dtype([t]), "copy", a)


@_reg(_MODELS, "aten::cat", "aten::_cat")
def _cat(a: _Args, name: str) -> OpCost | None:
    ts = a.tlist(0)
    if not ts:
        return None
    if not a.list_dtype_given:
        a.assumed.append(f"TensorList element type not recorded: assumed {a.list_dtype}")
    total = sum(t.nbytes for t in ts)
    return _cost(0, 2 * total, _out_dtype(a.list_dtype), "copy", a)


@_reg(_MODELS, "aten::index_select")
def _index_select(a: _Args, name: str) -> OpCost | None:
    # (self, dim, index)
    x, idx = a.t(0), a.t(2)
    dim = a.c(1)
    if x is None or idx is None or not isinstance(dim, int) or isinstance(dim, bool):
        return None
    if not x.shape:
        rows = 1
    else:
        if not -len(x.shape) <= dim < len(x.shape):
            return None
        rows = x.shape[dim]
    row = x.numel // rows if rows else 0
    out = idx.numel * row
    return _cost(0, 2 * out * x.bpe + idx.nbytes, _main_dtype([x]), "embedding", a)


@_reg(_COMPOSITE_MODELS, "aten::embedding")
def _embedding(a: _Args, name: str) -> OpCost | None:
    # (weight, indices, padding_idx, scale_grad_by_freq, sparse)
    W, idx = a.t(0), a.t(1)
    if W is None or idx is None or len(W.shape) != 2:
        return None
    out = idx.numel * W.shape[1]
    return _cost(0, 2 * out * W.bpe + idx.nbytes, _main_dtype([W]), "embedding", a)


@_reg(_MODELS, "aten::embedding_dense_backward")
def _embedding_bwd(a: _Args, name: str) -> OpCost | None:
    # (grad_output, indices, num_weights, padding_idx, scale_grad_by_freq)
    g, idx = a.t(0), a.t(1)
    nw = a.c(2)
    if (
        g is None
        or idx is None
        or not g.shape
        or not isinstance(nw, int)
        or isinstance(nw, bool)
        or nw < 0
    ):
        return None
    D = g.shape[-1]
    return _cost(g.numel, g.nbytes + idx.nbytes + nw * D * g.bpe, _main_dtype([g]), "embedding", a)


@_reg(_MODELS, "aten::_embedding_bag", "aten::_embedding_bag_forward_only")
def _embedding_bag(a: _Args, name: str) -> OpCost | None:
    # (weight, indices, offsets, scale_grad_by_freq, mode, sparse, per_sample_weights?, ...)
    W, idx, off = a.t(0), a.t(1), a.t(2)
    if W is None or idx is None or len(W.shape) != 2:
        return None
    D = W.shape[1]
    bags = off.numel if off is not None else 1
    nbytes = idx.numel * D * W.bpe + idx.nbytes + (off.nbytes if off else 0) + bags * D * W.bpe
    return _cost(idx.numel * D, nbytes, _main_dtype([W]), "embedding", a)


@_reg(_MODELS, "aten::gather")
def _gather(a: _Args, name: str) -> OpCost | None:
    # (self, dim, index, sparse_grad)
    x, idx = a.t(0), a.t(2)
    if x is None or idx is None:
        return None
    return _cost(0, 2 * idx.numel * x.bpe + idx.nbytes, _main_dtype([x]), "copy", a)


@_reg(
    _MODELS,
    "aten::scatter",
    "aten::scatter_",
    "aten::scatter_add",
    "aten::scatter_add_",
    "aten::scatter_reduce",
    "aten::scatter_reduce_",
    "aten::index_add",
    "aten::index_add_",
    "aten::index_copy",
    "aten::index_copy_",
)
def _scatter(a: _Args, name: str) -> OpCost | None:
    # scatter*(self, dim, index, src|value, ...); index_*(self, dim, index, source, ...)
    x, idx, src = a.t(0), a.t(2), a.t(3)
    if x is None or idx is None:
        return None
    n = src.numel if src is not None else idx.numel
    if name.startswith("aten::index_") and src is not None:
        n = src.numel
    nbytes = idx.nbytes + (src.nbytes if src else 0) + n * x.bpe
    if not name.endswith("_"):
        nbytes += 2 * x.nbytes  # out-of-place: self copied into the output first
    reduce = "add" in name or "reduce" in name
    return _cost(n if reduce else 0, nbytes, _main_dtype([x]), "copy", a)


def _index_lists(a: _Args, i: int) -> list[_T] | None:
    """Index tensors of aten::index / index_put_ (List[Optional[Tensor]]), if recorded."""
    if i >= len(a.dims):
        return None
    shapes = _shape_list(a.dims[i])
    return None if shapes is None else [_T(s, 8, "int64") for s in shapes]


@_reg(_MODELS, "aten::index")
def _index(a: _Args, name: str) -> OpCost | None:
    x = a.t(0)
    idx = _index_lists(a, 1)
    if x is None or not idx:
        return None
    b = _broadcast([t.shape for t in idx])
    if b is None:
        return None
    rest = x.shape[len(idx) :]
    out = _prod(b) * _prod(rest)
    a.assumed.append("advanced indexing: index tensors assumed int64 on leading dims")
    return _cost(0, 2 * out * x.bpe + sum(t.nbytes for t in idx), _main_dtype([x]), "copy", a)


@_reg(_MODELS, "aten::index_put_", "aten::_index_put_impl_", "aten::index_put")
def _index_put(a: _Args, name: str) -> OpCost | None:
    # (self, indices, values, accumulate[, unsafe])
    x, v = a.t(0), a.t(2)
    idx = _index_lists(a, 1)
    if x is None or v is None or not idx:
        return None
    a.assumed.append("advanced indexing: index tensors assumed int64")
    acc = a.c(3) is True
    nbytes = v.nbytes + sum(t.nbytes for t in idx) + v.numel * x.bpe * (2 if acc else 1)
    if not name.endswith("_"):
        nbytes += 2 * x.nbytes
    return _cost(v.numel if acc else 0, nbytes, _main_dtype([x]), "copy", a)


@_reg(_COMPOSITE_MODELS, "aten::clone", "aten::contiguous")
def _clone(a: _Args, name: str) -> OpCost | None:
    t = a.t(0)
    if t is None:
        return None
    return _cost(0, 2 * t.nbytes, _main_dtype([t]), "copy", a)


@_reg(_COMPOSITE_MODELS, "aten::_to_copy", "aten::to")
def _to_copy(a: _Args, name: str) -> OpCost | None:
    t = a.t(0)
    if t is None:
        return None
    out_bpe = t.bpe
    for i in (1, 2):  # dtype is argument 1 (_to_copy, to.dtype) or 2 (to.device)
        v = a.c(i)
        typ = a.types[i] if i < len(a.types) else None
        if typ == "Scalar" and isinstance(v, int) and not isinstance(v, bool) and v in _SCALAR_TYPE:
            out_bpe = _SCALAR_TYPE[v][0]
            break
    return _cost(0, t.nbytes + t.numel * out_bpe, _main_dtype([t]), "copy", a)
