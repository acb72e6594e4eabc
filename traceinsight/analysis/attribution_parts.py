"""Attribution where the data is: one task per rank partition, joined into the job's.

A store of several ranks written by the per-rank ingest keeps each rank in its own partition
(``rank=N/``, :mod:`traceinsight.store.partitions`). Attribution links a rank's activities to its
own runtime calls, ops, ranges and module frames only, so each partition is attributed by
itself, in a worker of the current runner (``--jobs N`` local processes, or a Dask task with
``--scheduler``; with one job, here, one partition after the other). A worker reads its own
rank's tables, and only the attributed frames travel back: the raw tables of every rank are
never held here at once.

The parts are joined in rank order, the order of a whole-store table: op, runtime and GPU rows
follow each other as they would in one read, and every op index (``op_idx``, ``parent``,
``bwd_node``, ``fwd_op``) moves by the ops of the partitions before it. The result is the
attribution of the whole store read at once (``tests/test_attribution_parts.py``), its
diagnostics in the same order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
from pandas.api.types import union_categoricals

from traceinsight.analysis.attribution import Part, attribute_part
from traceinsight.diagnostics import DiagnosticLog
from traceinsight.store import partitions

if TYPE_CHECKING:
    from traceinsight.store.core import TraceStore

__all__ = ["attribute_partition", "by_partition", "join"]

#: the columns of each frame that hold a row of the job's ops (-1: none)
OP_INDEX_COLUMNS = {
    "ops": ("op_idx", "parent", "bwd_node", "fwd_op"),
    "runtime": ("op_idx",),
    "gpu": ("op_idx",),
}


def by_partition(store: TraceStore) -> list[Part] | None:
    """Every partition's attribution, in rank order, computed by the current runner; None
    for a store that is not partitioned on disk (or is served through a time window, which
    the workers would not see)."""
    from traceinsight.util.distributed import current
    from traceinsight.util.memory import release

    names = partitions.names(store.meta)
    if len(names) < 2 or not store.path.is_dir() or getattr(store, "window", None) is not None:
        return None
    parts = current().map(attribute_partition, [str(store.path / n) for n in names])
    release()  # what the partitions' frames took in transit
    return parts


def attribute_partition(path: str) -> Part:
    """The attribution of the partition folder ``path`` (runs in a worker)."""
    from traceinsight.analysis import plain_strings
    from traceinsight.store.core import TraceStore

    with plain_strings():
        return attribute_part(TraceStore.open(path))


def join(parts: list[Part]) -> Part:
    """The partitions' attributions as one, as the whole store's would be."""
    if len(parts) == 1:
        return parts[0]
    offset = 0
    for p in parts:
        if offset:
            for what, cols in OP_INDEX_COLUMNS.items():
                df = getattr(p, what)
                for c in cols:
                    if c in df.columns and len(df):
                        v = df[c].to_numpy(np.int64).copy()
                        v[v >= 0] += offset
                        df[c] = v
        offset += len(p.ops)
    diags, comm = DiagnosticLog(), DiagnosticLog()
    steps = []
    has_steps: dict[int, bool] = {}
    for p in parts:
        diags.extend(p.diagnostics)
        comm.extend(p.comm_diagnostics)
        steps.extend(p.steps)
        has_steps.update(p.has_step_markers)
    nonempty_syncs = [p.syncs for p in parts if len(p.syncs)]
    syncs = _concat(nonempty_syncs) if nonempty_syncs else parts[0].syncs
    frames = {}
    for what in ("ops", "gpu", "runtime"):  # the largest first; each part's dropped once joined
        frames[what] = _concat([getattr(p, what) for p in parts])
        for p in parts:
            setattr(p, what, None)
    return Part(
        gpu=frames["gpu"],
        ops=frames["ops"],
        steps=steps,
        has_step_markers=has_steps,
        syncs=syncs,
        runtime=frames["runtime"],
        diagnostics=diags,
        comm_diagnostics=comm,
    )


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """``frames`` one after the other with a fresh index; a column categorical in every frame
    stays categorical (its categories in order of first appearance, as a table's unified
    dictionary reads)."""
    if len(frames) == 1:
        return frames[0].reset_index(drop=True)
    first = frames[0]
    cats = [
        c
        for c in first.columns
        if all(c in f.columns and isinstance(f[c].dtype, pd.CategoricalDtype) for f in frames)
    ]
    out = pd.concat(frames, ignore_index=True)
    for c in cats:
        out[c] = union_categoricals([f[c] for f in frames])
    return out
