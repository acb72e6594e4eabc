"""Attribution where the data is: one task per rank partition, joined into the job's.

A store of several ranks written by the per-rank ingest keeps each rank in its own partition
(``rank=N/``, :mod:`traceinsight.store.partitions`). Attribution links a rank's activities to its
own runtime calls, ops, ranges and module frames only, so each partition is attributed by
itself, in a worker of the current runner (``--jobs N`` local processes, or a Dask task with
``--scheduler``; with one job, a store too large to read at once is attributed here, one
partition after the other, and a smaller one is read whole). A worker reads its own
rank's tables, and only the attributed frames travel back: the raw tables of every rank are
never held here at once.

The parts are joined in rank order, the order of a whole-store table: op, runtime and GPU rows
follow each other as they would in one read, and every op index (``op_idx``, ``parent``,
``bwd_node``, ``fwd_op``) moves by the ops of the partitions before it. The result is the
attribution of the whole store read at once (``tests/test_workers.py``), its
diagnostics in the same order.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from pandas.api.types import union_categoricals

from traceinsight.analysis.attribution import Part, attribute_part
from traceinsight.diagnostics import DiagnosticLog
from traceinsight.store import partitions
from traceinsight.store.window import estimate_mb, rows_mb
from traceinsight.util.memory import release

if TYPE_CHECKING:
    from traceinsight.store.core import TraceStore

__all__ = ["PRODUCTS", "PartitionTask", "attribute_partition", "by_partition", "join", "product"]

#: with one process, a store whose analysis is estimated above this is still attributed one
#: partition at a time (its raw tables never all held at once); a smaller one is read at once
SPLIT_ALONE_MB = 1024.0
#: a joined frame of at least this many rows is joined column by column, the parts' memory
#: handed back after each (each trim costs a few ms: 0.4 s over the 64 small ranks' columns
#: for nothing); a smaller one is joined at once
TRIM_ROWS = 250_000
#: partitions analysed by one task together: up to this much estimated analysis memory a group
GROUP_MB = 64.0
#: and at most this many partitions (a group's per-rank loops stay short)
GROUP_MAX = 64
#: tasks a worker is given at least (while there are partitions): a slow task is not the tail
TASKS_PER_WORKER = 2
#: the columns of each frame that hold a row of the job's ops (-1: none)
OP_INDEX_COLUMNS = {
    "ops": ("op_idx", "parent", "bwd_node", "fwd_op"),
    "runtime": ("op_idx",),
    "gpu": ("op_idx",),
}


@dataclass(frozen=True)
class Product:
    """A per-rank result that a worker computes from its partition's analysis, next to the
    attribution: ``compute(analysis)`` there, and the partitions' values joined in rank order
    (``join``) into the value the whole store's analysis keeps in its ``cache[name]``."""

    name: str
    module: str  #: imported by the worker before computing (it registers the product)
    compute: Callable[[Any], Any]
    join: Callable[[list[Any]], Any]


#: the per-rank products, by the ``Analysis.cache`` key they fill (registered by the modules
#: that compute them, in the order they are computed)
PRODUCTS: dict[str, Product] = {}


def product(
    name: str, module: str, compute: Callable[[Any], Any], join: Callable[[list[Any]], Any]
) -> None:
    """Register a per-rank product (see :class:`Product`)."""
    PRODUCTS[name] = Product(name, module, compute, join)


def concat_lists(values: list[list[Any]]) -> list[Any]:
    """Lists of the partitions one after the other (rank order)."""
    return [x for v in values for x in v]


def merge_dicts(values: list[dict[Any, Any]]) -> dict[Any, Any]:
    """Per-rank mappings of the partitions as one (rank order; each rank in one partition)."""
    return {k: v for d in values for k, v in d.items()}


@dataclass(frozen=True)
class PartitionTask:
    """Attribute the partition folder ``path`` (with ``group``: the partitions of that name of
    the store at ``path``, as one store of their ranks) and compute the products ``products``
    (names with the module that registers each)."""

    path: str
    products: tuple[tuple[str, str], ...] = ()
    group: tuple[str, ...] = ()


def by_partition(store: TraceStore) -> list[Part] | None:
    """Every partition's attribution (and its products, :data:`PRODUCTS`), in rank order,
    computed by the current runner; None for a store that is not partitioned on disk (or is
    served through a time window, which the workers would not see)."""
    from traceinsight.util.distributed import current

    names = partitions.names(store.meta)
    if len(names) < 2 or not store.path.is_dir() or getattr(store, "window", None) is not None:
        return None
    runner = current()
    if not (runner.scheduler or runner.workers > 1) and estimate_mb(store) < SPLIT_ALONE_MB:
        return None  # one process and a small store: read at once (no per-partition cost)
    wanted = tuple((p.name, p.module) for p in PRODUCTS.values())
    tasks = [
        PartitionTask(str(store.path / g[0]), wanted)
        if len(g) == 1
        else PartitionTask(str(store.path), wanted, tuple(g))
        for g in groups(store, names, runner.slots())
    ]
    # what each partition's frames took in transit, handed back as they arrive
    parts = runner.map(attribute_partition, tasks, done=lambda _k, _n: release())
    return parts


def groups(store: TraceStore, names: list[str], workers: int) -> list[list[str]]:
    """The partitions ``names`` in consecutive groups, one task each: small partitions
    together, up to :data:`GROUP_MB` of estimated analysis a group, in at least
    :data:`TASKS_PER_WORKER` tasks a worker (while there are partitions for them). A task
    costs a fixed ~10 ms a partition beyond its rows (tables read, frames built, per-rank
    pandas calls), which a group pays once: 64 small ranks 88 -> 74 ms a rank in groups of 16."""
    from traceinsight.store.core import read_meta

    sizes = [rows_mb((read_meta(store.path / n) or {}).get("tables") or {}) for n in names]
    total = sum(sizes)
    if GROUP_MB <= 0 or total <= 0 or len(names) < 2:
        return [[n] for n in names]
    n_groups = max(
        max(1, workers) * TASKS_PER_WORKER, math.ceil(total / GROUP_MB), -(-len(names) // GROUP_MAX)
    )
    n_groups = min(len(names), n_groups)
    per_group = total / n_groups
    out: dict[int, list[str]] = {}
    before = 0.0
    for n, mb in zip(names, sizes):  # each to the group its middle falls in: near-equal groups
        out.setdefault(min(n_groups - 1, int((before + mb / 2) / per_group)), []).append(n)
        before += mb
    return [out[k] for k in sorted(out)]


def joined_products(parts: list[Part]) -> dict[str, Any]:
    """The products every partition computed, joined (a product one of them lacks is left
    to the whole store's analysis)."""
    out: dict[str, Any] = {}
    for name, prod in PRODUCTS.items():
        values = [p.products.get(name, _MISSING) for p in parts]
        if all(v is not _MISSING for v in values):
            out[name] = prod.join(values)
    return out


_MISSING = object()


def attribute_partition(task: PartitionTask | str) -> Part:
    """The attribution of a partition folder and its products (runs in a worker)."""
    import importlib

    from traceinsight.analysis import Analysis, plain_strings
    from traceinsight.analysis.attribution import finish
    from traceinsight.store.core import TraceStore

    if isinstance(task, str):
        task = PartitionTask(task)
    store = (
        partitions.open_group(Path(task.path), list(task.group))
        if task.group
        else TraceStore.open(task.path)
    )
    with plain_strings():
        part = attribute_part(store)
        if task.products:
            for _name, module in task.products:
                importlib.import_module(module)
            an = Analysis(store)
            an.__dict__["attribution"] = finish(part, copy=True)
            for name, _module in task.products:
                prod = PRODUCTS.get(name)
                if prod is not None:
                    part.products[name] = prod.compute(an)
            del an
    release()  # the worker's analysis, before its result is sent and the next rank read
    return part


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
        products=joined_products(parts),
    )


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """``frames`` one after the other with a fresh index; a column categorical in every frame
    stays categorical (its categories in order of first appearance, as a table's unified
    dictionary reads). A large join goes column by column, each part's column dropped once
    joined, so the job's frame and the parts are never both held whole (the parts are
    consumed)."""
    if len(frames) == 1:
        return frames[0].reset_index(drop=True)
    cols = list(frames[0].columns)
    # parts of different columns; or small ones, joined at once (dropping each part's columns
    # one by one costs more than the join: 0.25 s over the 64 small ranks' frames)
    if any(list(f.columns) != cols for f in frames[1:]) or sum(map(len, frames)) < TRIM_ROWS:
        return _concat_whole(frames)
    out: dict[str, Any] = {}
    for c in cols:
        parts = [f[c] for f in frames]
        if all(isinstance(x.dtype, pd.CategoricalDtype) for x in parts):
            out[c] = pd.Series(union_categoricals(parts), name=c)
        else:
            out[c] = pd.concat(parts, ignore_index=True)
        del parts
        for f in frames:
            del f[c]
        release()  # the parts' column, freed in small pieces the allocator would keep
    return pd.DataFrame(out, copy=False)


def _concat_whole(frames: list[pd.DataFrame]) -> pd.DataFrame:
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
