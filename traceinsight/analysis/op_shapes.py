"""Operators grouped by name and input shape, with their device time and call stack: the
"group by input shape" operator view of the TensorBoard plugin.

For every CPU op (all ranks): host total = its duration, host self = its duration less its
children's (ops and runtime calls); device self = the GPU activities (kernels, copies,
memsets) it launched itself, device total = those of it and of every op below it. An op that
is the only child of an op of the same name (one call recorded twice) is folded into it. Ops
of the same name and recorded input dims (``record_shapes=True``) form one row. The call stack
of a row is that of its first call, innermost first: the stack recorded on the op (PyTorch
1.8-1.x ``Call stack``), else the Python frames (``with_stack=True``) enclosing it on its thread.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd

from traceinsight.analysis.intervals import Nesting
from traceinsight.util.safetext import for_terminal

TOP_N = 50
MAX_FRAMES = 12
NO_SHAPE = ""


def _stack_of(frames: pd.DataFrame, rank: int, thread: Any, t: int, cache: dict) -> list[str]:
    """The Python frames enclosing time ``t`` on (rank, thread), innermost first."""
    key = (rank, str(thread))
    if key not in cache:
        f = frames[(frames["rank"] == rank) & (frames["thread"].astype(str) == str(thread))]
        f = f.sort_values("start_ns", kind="stable")
        s = f["start_ns"].to_numpy(np.int64)
        e = s + f["dur_ns"].to_numpy(np.int64)
        cache[key] = (Nesting.build(s, e), f["name"].astype(str).to_numpy(object))
    nest, names = cache[key]
    i = int(nest.enclosing(np.array([t], np.int64))[0])
    out: list[str] = []
    while i >= 0 and len(out) < MAX_FRAMES:
        out.append(for_terminal(str(names[i])))
        i = int(nest.parent[i])
    return out


def _recorded_stacks(an: Any, n: int) -> np.ndarray | None:
    """The ops' recorded ``call_stack`` (store row order = op index), None when no op has one
    (or the store predates the column)."""
    try:
        col = an.store.table("cpu_ops", ["call_stack"]).column("call_stack")
    except (KeyError, ValueError):
        return None
    if col.null_count == len(col) or len(col) != n:
        return None
    return np.asarray(col.to_pandas().astype(object).to_numpy(), dtype=object)


def _representatives(names: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """Each op's representative: itself, or for an op that is the only child of an op of the
    same name (the dispatcher recording one call twice), that op's representative (the
    plugin's duplicate-node folding)."""
    n = len(names)
    has_p = parent >= 0
    nchild = np.bincount(parent[has_p], minlength=n) if n else np.zeros(0, np.int64)
    pp = np.clip(parent, 0, None)
    dup = has_p & (nchild[pp] == 1) & (names == names[pp])
    rep = np.arange(n)
    rep[dup] = parent[dup]
    for _ in range(64):  # chains of duplicates: follow to the outermost
        nxt = rep[rep]
        if (nxt == rep).all():
            break
        rep = nxt
    return rep


#: a job of fewer ops is grouped at once (the same result; per rank, each rank's frames only are
#: built at a time, which pays once the job's frames are large)
SLICE_MIN_OPS = 500_000


class _CrossRange(Exception):
    """An op whose parent lies outside its rank's range of ops."""


def _rank_slices(ops: pd.DataFrame, rank: int | None) -> list[tuple[int, int]]:
    """The op index ranges to group one at a time: each rank's ops when every rank's ops are
    contiguous (an op's parent is then in its range; ``rank``: that rank's range only), else
    the whole table."""
    n = len(ops)
    if "rank" not in ops.columns or (n <= SLICE_MIN_OPS and rank is None):
        return [(0, n)]
    r = ops["rank"].to_numpy(np.int64)
    cut = np.flatnonzero(r[1:] != r[:-1]) + 1
    lo = np.concatenate(([0], cut))
    hi = np.concatenate((cut, [n]))
    if len(np.unique(r[lo])) != len(lo):  # a rank in several runs: group the whole table
        return [(0, n)]
    return [(int(a), int(b)) for a, b in zip(lo, hi) if rank is None or int(r[a]) == rank]


def _slice_groups(attr: Any, lo: int, hi: int, rank: int | None) -> tuple[pd.DataFrame, bool]:
    """The (name, shape) groups of the ops ``lo:hi`` (their sums, ``first``: the index of the
    first op of each group) and whether any of those ops has recorded shapes."""
    ops = attr.ops.iloc[lo:hi]
    n = hi - lo
    dur = ops["dur_ns"].to_numpy(np.int64)
    names = ops["name"].astype(str).to_numpy(object)
    raw_parent = ops["parent"].to_numpy(np.int64)
    raw_parent = np.where(raw_parent >= 0, raw_parent - lo, -1)
    if ((raw_parent >= n) | (raw_parent < -1)).any():
        raise _CrossRange
    rep = _representatives(names, raw_parent)
    keep = rep == np.arange(n)
    # parents after folding: a kept op's parent is its parent's representative
    parent = np.where(raw_parent >= 0, rep[np.clip(raw_parent, 0, None)], -1)
    has_p = keep & (parent >= 0)
    child = np.zeros(n, np.int64)
    np.add.at(child, parent[has_p], dur[has_p])
    rt = attr.runtime
    if len(rt) and "op_idx" in rt.columns:  # runtime calls are children too (host self)
        ri = rt["op_idx"].to_numpy(np.int64)
        ok = (ri >= lo) & (ri < hi)
        np.add.at(child, rep[ri[ok] - lo], rt["dur_ns"].to_numpy(np.int64)[ok])
    dev_self = np.zeros(n, np.int64)
    dev_total = np.zeros(n, np.int64)
    g = attr.gpu
    if len(g) and "op_idx" in g.columns:
        idx = g["op_idx"].to_numpy(np.int64)
        gd = g["dur_ns"].to_numpy(np.int64)
        ok = (idx >= lo) & (idx < hi)
        cur, w = rep[idx[ok] - lo], gd[ok]
        np.add.at(dev_self, cur, w)
        for _ in range(512):
            if not len(cur):
                break
            np.add.at(dev_total, cur, w)
            nxt = parent[cur]
            more = nxt >= 0
            cur, w = nxt[more], w[more]
    dims = (
        ops["input_dims"].astype(object).to_numpy()
        if "input_dims" in ops.columns
        else np.full(n, None, object)
    )
    dcodes, duniq = pd.factorize(pd.Series(dims, dtype=object))
    texts = [_one_line(d) if isinstance(d, str) and d else NO_SHAPE for d in duniq]
    shape = np.array([*texts, NO_SHAPE], dtype=object)[np.where(dcodes >= 0, dcodes, len(duniq))]
    df = pd.DataFrame(
        {
            "name": names,
            "shape": shape,
            "calls": 1,
            "host_total_ns": dur,
            "host_self_ns": np.maximum(dur - child, 0),
            "device_self_ns": dev_self,
            "device_total_ns": dev_total,
            "first": np.arange(lo, hi),
        }
    )
    if rank is not None:
        keep = keep & (ops["rank"].to_numpy(np.int64) == rank)
    return _sum_groups(df[keep]), bool((shape != NO_SHAPE).any())


def _sum_groups(df: pd.DataFrame) -> pd.DataFrame:
    """Rows (ops, or groups of ops) summed per (name, shape), in order of first appearance;
    ``first``: the smallest op index."""
    return (
        df.groupby(["name", "shape"], sort=False)
        .agg(
            calls=("calls", "sum"),
            host_total_ns=("host_total_ns", "sum"),
            host_self_ns=("host_self_ns", "sum"),
            device_self_ns=("device_self_ns", "sum"),
            device_total_ns=("device_total_ns", "sum"),
            first=("first", "min"),
        )
        .reset_index()
    )


def ops_by_shape(an: Any, top: int = TOP_N, rank: int | None = None) -> dict[str, Any] | None:
    """The ``top`` (name, input dims) groups by device self time, then host self time (of
    ``rank`` only when given); None without CPU ops. Each rank's ops are grouped by
    themselves (its frames only built at a time), the groups then summed over the ranks."""
    attr = an.attribution
    ops = attr.ops
    if not len(ops):
        return None
    n = len(ops)
    parts, has_shapes = [], False
    try:
        for lo, hi in _rank_slices(ops, rank):
            grp_r, shaped = _slice_groups(attr, lo, hi, rank)
            parts.append(grp_r)
            has_shapes = has_shapes or shaped
    except _CrossRange:  # an op's parent in another rank's rows: the whole table at once
        grp_r, has_shapes = _slice_groups(attr, 0, n, rank)
        parts = [grp_r]
    grp = parts[0] if len(parts) == 1 else _sum_groups(pd.concat(parts, ignore_index=True))
    grp = grp.sort_values(
        ["device_self_ns", "host_self_ns", "name", "shape"],
        ascending=[False, False, True, True],
        kind="stable",
    )
    frames = an.store.df("python_frames", ["rank", "name", "thread", "start_ns", "dur_ns"])
    recorded = _recorded_stacks(an, n)
    has_stack = len(frames) > 0 or recorded is not None
    cache: dict = {}
    ranks = ops["rank"].to_numpy(np.int64)
    threads = ops["thread"].astype(object).to_numpy()
    starts = ops["start_ns"].to_numpy(np.int64)
    rows = []
    for r in grp.head(top).itertuples(index=False):
        i = int(r.first)
        row: dict[str, Any] = {
            "name": for_terminal(str(r.name)),
            "input_dims": for_terminal(str(r.shape)) or None,
            "calls": int(r.calls),
            "device_self_ns": int(r.device_self_ns),
            "device_total_ns": int(r.device_total_ns),
            "host_self_ns": int(r.host_self_ns),
            "host_total_ns": int(r.host_total_ns),
        }
        if recorded is not None and isinstance(recorded[i], str):
            row["stack"] = [for_terminal(f) for f in recorded[i].split("\n")[:MAX_FRAMES]]
        elif len(frames):
            row["stack"] = _stack_of(frames, int(ranks[i]), threads[i], int(starts[i]), cache)
        rows.append(row)
    return {
        "groups": len(grp),
        "has_shapes": has_shapes,
        "has_stack": has_stack,
        "rows": rows,
    }


def _one_line(dims: str) -> str:
    """Recorded input dims on one line, every entry kept (empty ones too, so two signatures
    that differ only in their non-tensor arguments stay two groups); renderers show them in
    the one shape format (``fmt.shapes_text``)."""
    return re.sub(r"\s+", "", dims).replace("],[", "], [")
