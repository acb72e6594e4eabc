"""Shapes an op's own record lacks, found in its neighbours, for the FLOPs model
(:class:`traceinsight.metrics.flops.OpContext`).

Traces before PyTorch 2 record no ``Concrete Inputs``: a convolution's stride and padding are
unknown, and a stride-2 convolution costed at stride 1 is counted 4x (2-D). Its output shape is
recorded all the same, as the input of the op that reads it next on the same thread (the batch
norm, activation or bias add after it). The output is taken from the first of the next
:data:`LOOKAHEAD` ops whose first input is a ``[N, K, *spatial]`` tensor with the
convolution's batch and output channels and a spatial size that some stride and padding give;
none found, the model's own assumption stands and is stated.

The gradient ops of those traces (``cudnn_convolution_backward_input`` / ``_weight``) lack the
input and weight sizes too; their parent (``cudnn_convolution_backward``) records both.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from traceinsight.metrics.flops.conv import _CONV, _CONV_COMPOSITE, _geometry
from traceinsight.metrics.flops.core import OpContext, _as_list, _shape

#: how many following ops on the thread are searched for a convolution's output
LOOKAHEAD = 8

_FWD = frozenset(
    n for n, p in {**_CONV, **_CONV_COMPOSITE}.items() if not p.get("transposed", False)
)
_BWD_INPUT = frozenset(
    {"aten::cudnn_convolution_backward_input", "aten::miopen_convolution_backward_input"}
)
_BWD_WEIGHT = frozenset(
    {"aten::cudnn_convolution_backward_weight", "aten::miopen_convolution_backward_weight"}
)
_BWD_PARENT = frozenset({"aten::cudnn_convolution_backward", "aten::miopen_convolution_backward"})


def _first_shapes(text: Any, n: int) -> list[tuple[int, ...] | None]:
    dims = _as_list(text)
    if dims is None:
        return [None] * n
    return [_shape(dims[i]) if i < len(dims) else None for i in range(n)]


def op_contexts(ops: pd.DataFrame, idx: np.ndarray) -> dict[int, OpContext]:
    """The context of the ops at ``idx`` (index labels of ``ops``: the attribution's op table
    with ``name``, ``input_dims``, ``concrete_inputs``, ``rank``, ``process``, ``thread``,
    ``start_ns``, ``dur_ns`` and ``parent``) that need one; others are left out."""
    if not len(idx) or not len(ops):
        return {}
    names = ops["name"].astype(object)
    sel = ops.loc[idx]
    sel_names = sel["name"].astype(object)
    out: dict[int, OpContext] = {}
    fwd = sel[sel_names.isin(_FWD).to_numpy()]
    if len(fwd):
        out.update(_forward_outputs(ops, fwd))
    grads = sel[sel_names.isin(_BWD_INPUT | _BWD_WEIGHT).to_numpy()]
    if len(grads) and "parent" in ops:
        par = grads["parent"].to_numpy()
        ok = par >= 0
        ok[ok] = np.isin(par[ok], ops.index.to_numpy())
        for lab, p, nm in zip(grads.index[ok], par[ok], grads["name"].astype(object)[ok]):
            if names.loc[p] not in _BWD_PARENT:
                continue
            # (self, grad_output, weight, ...): the forward input and the weight
            x, _, w = _first_shapes(ops.at[p, "input_dims"], 3)
            src = "the gradient op's parent"
            if nm in _BWD_INPUT and x is not None:
                out[int(lab)] = OpContext(input=x, input_source=src)
            elif nm in _BWD_WEIGHT and w is not None:
                out[int(lab)] = OpContext(weight=w, weight_source=src)
    return out


def _forward_outputs(ops: pd.DataFrame, fwd: pd.DataFrame) -> dict[int, OpContext]:
    keys = ["rank", "process", "thread"]
    out: dict[int, OpContext] = {}
    want = set(map(tuple, fwd[keys].astype(object).drop_duplicates().itertuples(index=False)))
    for key, pos in ops.groupby(keys, observed=True, dropna=False, sort=False).indices.items():
        if tuple(key) not in want:
            continue
        th = ops.iloc[pos].sort_values(["start_ns", "dur_ns"], ascending=[True, False])
        start = th["start_ns"].to_numpy(np.int64)
        dims = th["input_dims"].astype(object).to_numpy()
        cache: dict[int, tuple[int, ...] | None] = {}
        mine = fwd[
            (fwd["rank"].astype(object) == key[0]).to_numpy()
            & (fwd["process"].astype(object) == key[1]).to_numpy()
            & (fwd["thread"].astype(object) == key[2]).to_numpy()
        ]
        for lab, s0, d0, text in zip(
            mine.index,
            mine["start_ns"].to_numpy(np.int64),
            mine["dur_ns"].to_numpy(np.int64),
            mine["input_dims"].astype(object),
        ):
            x, w = _first_shapes(text, 2)
            if x is None or w is None or len(w) < 3 or len(x) != len(w):
                continue
            lead = (x[0], w[0])
            j0 = int(np.searchsorted(start, s0 + d0, side="left"))
            for j in range(j0, min(j0 + LOOKAHEAD, len(start))):
                if j not in cache:
                    cache[j] = _first_shapes(dims[j], 1)[0]
                y = cache[j]
                if y is None or len(y) != len(x) or y[:2] != lead:
                    continue
                if _geometry(x[2:], w[2:], [1] * (len(w) - 2), y[2:]) is not None:
                    out[int(lab)] = OpContext(output=y, output_source="the next op's input")
                break
    return out
