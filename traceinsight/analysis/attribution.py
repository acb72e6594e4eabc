"""Attribution: every GPU activity -> its launch -> CPU op -> ancestors, module path, annotation,
step and phase. Unlinked activity goes to ``[unattributed]``, never dropped.

The chain (docs/FORMATS.md §1.8):

1. kernel / memcpy / memset -> runtime or driver call by ``correlation`` within the rank's
   process (graph launches map one call to many kernels); a missing correlation is recovered
   from the ``launch`` flow (Kineto ``ac2g``) that ends on the activity;
2. launch -> innermost enclosing ``cpu_op`` on the launching thread by time nesting
   (:class:`~traceinsight.analysis.intervals.Nesting`), and that op's ancestors;
3. -> innermost enclosing ``nn.Module: X_k`` frame, whose chain of enclosing module frames is
   the module path (needs ``with_stack=True``);
4. backward kernels (launched under ``autograd::engine::evaluate_function: ...`` on the
   autograd thread, which has no module frames) reach their forward op through ``Sequence
   number`` (or the ``fwd_bwd`` flow) and take that op's module path with ``phase=backward``;
5. ``External id`` is a fallback and a cross-check only, ignored where it equals the
   correlation (files before pytorch/kineto#873 wrote it that way for unlinked events).

Every activity records ``method`` in {time, graph, external_id, none}.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.compute as pc

from traceinsight.analysis import by_rank, categories
from traceinsight.analysis.intervals import Nesting, any_ancestor, take
from traceinsight.analysis.rank_tables import (
    GPU_COLUMNS,
    LazyFlows,
    all_columns,
    frame,
    rank_rows,
)
from traceinsight.analysis.step_windows import StepWindow, step_windows
from traceinsight.diagnostics import DiagnosticLog
from traceinsight.store.core import TraceStore
from traceinsight.util.vocab import UNATTRIBUTED

GRAPH_REPLAY = "[graph replay]"
BWD_PREFIX = "autograd::engine::evaluate_function:"


@dataclass
class Attribution:
    """GPU activities with their attribution, the op tree, and the step windows."""

    gpu: pd.DataFrame  #: one row per kernel / memcpy / memset (device syncs excluded)
    ops: pd.DataFrame  #: cpu ops with parent, depth, module path, forward op link
    steps: list[StepWindow]
    has_step_markers: dict[int, bool]
    syncs: pd.DataFrame  #: device-side synchronisation events (cuda_sync)
    runtime: pd.DataFrame  #: runtime/driver calls with their enclosing op
    diagnostics: DiagnosticLog = field(default_factory=DiagnosticLog)

    def ranks(self) -> list[int]:
        return sorted(set(int(r) for r in self.gpu["rank"].unique())) if len(self.gpu) else []

    def coverage(self, rank: int | None = None) -> dict[str, Any]:
        g = self.gpu if rank is None else by_rank.rows(self.gpu, rank)
        g = g[g["kind"] == "kernel"]
        total = int(g["dur_ns"].sum())
        attributed = int(g.loc[g["op"] != UNATTRIBUTED, "dur_ns"].sum())
        by_method = {
            str(k): int(v) for k, v in g.groupby("method", observed=True)["dur_ns"].sum().items()
        }
        return {
            "kernel_time_ns": total,
            "attributed_ns": attributed,
            "unattributed_ns": total - attributed,
            "coverage_pct": 100.0 * attributed / total if total else None,
            "by_method_ns": by_method,
            "kernels": len(g),
            "unattributed_kernels": int((g["op"] == UNATTRIBUTED).sum()),
        }


def attribute(store: TraceStore) -> Attribution:
    """Attribute every GPU activity of every rank in ``store``.

    A store of rank partitions is attributed one partition at a time, in the workers of the
    current runner (:mod:`traceinsight.analysis.attribution_parts`): each reads its own rank's
    rows only, and the parts are joined here into the attribution the whole store would give.
    Otherwise each table is read once with the columns attribution needs and split by rank
    once (a single-rank store is not copied), so memory stays near one copy of the rank's
    rows."""
    return attribute_with_products(store)[0]


def attribute_with_products(store: TraceStore) -> tuple[Attribution, dict[str, Any]]:
    """:func:`attribute`, and the per-rank products the partitions' workers computed with it
    (joined; empty for a store attributed here)."""
    from traceinsight.analysis import attribution_parts
    from traceinsight.util.memory import release

    parts = attribution_parts.by_partition(store)
    part = attribution_parts.join(parts) if parts is not None else attribute_part(store)
    del parts
    products, part.products = part.products, {}
    out = finish(part)
    del part
    release()  # the tables and partial frames attribution dropped
    return out, products


@dataclass
class Part:
    """The attribution of a store, before its categorical columns: what one partition's worker
    returns (its op, runtime and GPU rows indexed within the partition)."""

    gpu: pd.DataFrame
    ops: pd.DataFrame
    steps: list[StepWindow]
    has_step_markers: dict[int, bool]
    syncs: pd.DataFrame
    runtime: pd.DataFrame
    diagnostics: DiagnosticLog  #: those of the ranks' attribution, rank by rank
    comm_diagnostics: DiagnosticLog  #: the ranks' ``no-communication-found`` checks
    #: per-rank results computed next to the attribution (``attribution_parts.PRODUCTS``)
    products: dict[str, Any] = field(default_factory=dict)


def finish(p: Part, copy: bool = False) -> Attribution:
    """The attribution of a part: its repeated strings as categories (``copy``: the part's
    own frame is left as it is)."""
    gpu = p.gpu.copy(deep=False) if copy else p.gpu
    for c in ("kind", "cls", "cls_how", "method", "phase"):
        if c in gpu.columns:
            gpu[c] = gpu[c].astype("category")
    diags = DiagnosticLog()
    diags.extend(p.diagnostics)
    diags.extend(p.comm_diagnostics)
    return Attribution(gpu, p.ops, p.steps, p.has_step_markers, p.syncs, p.runtime, diags)


def attribute_part(store: TraceStore) -> Part:
    """The attribution of every rank in ``store``, read here (before :func:`finish`)."""
    diags = DiagnosticLog()
    gpu_all = frame(store.table("gpu_activities", GPU_COLUMNS), own=True)
    rt_all = frame(store.table("runtime_calls", all_columns("runtime_calls")), own=True)
    ops_all = frame(
        store.table(
            "cpu_ops",
            [
                "rank",
                "name",
                "process",
                "thread",
                "start_ns",
                "dur_ns",
                "external_id",
                "sequence_nr",
                "input_dims",
                "input_types",
                "concrete_inputs",
                "flops",
            ],
        ),
        own=True,
    )
    rng_all = frame(store.table("ranges", all_columns("ranges")), own=True)
    py = store.table(
        "python_frames", ["rank", "name", "process", "thread", "start_ns", "dur_ns", "frame_kind"]
    )
    py_all = frame(py.filter(pc.equal(py["frame_kind"], "module")) if py.num_rows else py, own=True)
    del py
    flows = LazyFlows(store)  # read only when a correlation or a backward link is missing

    ops_all["op_idx"] = np.arange(len(ops_all), dtype=np.int64)
    ops_all["parent"] = -1
    ops_all["depth"] = -1
    ops_all["module"] = None
    ops_all["bwd_node"] = -1
    ops_all["fwd_op"] = -1
    rt_all["op_idx"] = -1

    gpu_parts, sync_parts, steps = [], [], []
    has_steps: dict[int, bool] = {}
    ranks = sorted({int(r["rank"]) for r in store.ranks}) or sorted(set(gpu_all["rank"].unique()))
    is_node = name_matches(ops_all["name"].to_numpy(), re.compile("^" + re.escape(BWD_PREFIX)))
    for rank in ranks:
        g = rank_rows(gpu_all, rank)
        is_sync = (g["kind"] == "sync").to_numpy()
        if is_sync.any():
            sync_parts.append(g[is_sync])
            g = g[~is_sync]
        rt = rank_rows(rt_all, rank)
        ops = rank_rows(ops_all, rank)
        rng = rank_rows(rng_all, rank)
        mods = rank_rows(py_all, rank)
        res = _attribute_rank(
            rank, g, rt, ops, rng, mods, flows.of(rank), ops_all, rt_all, diags, is_node
        )
        gpu_parts.append(res[0])
        steps.extend(res[1])
        has_steps[rank] = res[2]
    del g, rt, ops, rng, mods, flows, py_all

    gpu = pd.concat(gpu_parts, ignore_index=True) if gpu_parts else _empty_gpu()
    gpu["cls"], gpu["cls_how"] = categories.classify(gpu, ops_all)
    comm_diags = DiagnosticLog()
    categories.check_communication(store, gpu, ops_all, comm_diags)
    syncs = pd.concat(sync_parts, ignore_index=True) if sync_parts else gpu_all.iloc[0:0].copy()
    del gpu_all
    return Part(gpu, ops_all, steps, has_steps, syncs, rt_all, diags, comm_diags)


def _empty_gpu() -> pd.DataFrame:
    cols = [
        "rank",
        "kind",
        "name",
        "device",
        "stream",
        "start_ns",
        "dur_ns",
        "end_ns",
        "cls",
        "op",
        "top_op",
        "op_idx",
        "module",
        "phase",
        "annotation",
        "step",
        "method",
    ]
    return pd.DataFrame({c: [] for c in cols})


def thread_keys(proc: np.ndarray, thr: np.ndarray, table: dict) -> np.ndarray:
    """Integer ids of (process, thread) pairs, shared through ``table`` between calls.

    Each column is factorised on its own (few distinct values, hashed in C), so only the
    distinct pairs are looked up in Python.
    """
    if not len(proc):
        return np.empty(0, dtype=np.int64)
    cp, up = pd.factorize(pd.Series(proc, dtype=object), use_na_sentinel=False)
    ct, ut = pd.factorize(pd.Series(thr, dtype=object), use_na_sentinel=False)
    width = len(ut) + 1
    pair = cp.astype(np.int64) * width + ct
    upair, inv = np.unique(pair, return_inverse=True)
    ids = np.array(
        [table.setdefault((up[u // width], ut[u % width]), len(table)) for u in upair],
        dtype=np.int64,
    )
    return ids[inv.reshape(-1)]


def nest_by_thread(
    intervals: pd.DataFrame,
    queries: pd.DataFrame,
    q_time: np.ndarray,
    q_proc: np.ndarray,
    q_thread: np.ndarray,
) -> tuple[np.ndarray, dict]:
    """Innermost interval (row position in ``intervals``) enclosing each query on its thread.

    Returns (positions or -1, {thread key id: (positions array, Nesting)}).
    """
    out = np.full(len(q_time), -1, dtype=np.int64)
    nests: dict[int, tuple[np.ndarray, Nesting]] = {}
    if not len(intervals):
        return out, nests
    table: dict = {}
    codes = thread_keys(intervals["process"].to_numpy(), intervals["thread"].to_numpy(), table)
    n_keys = len(table)
    starts = intervals["start_ns"].to_numpy(np.int64)
    ends = starts + intervals["dur_ns"].to_numpy(np.int64)
    order = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[order], np.arange(n_keys + 1))
    qcodes = (
        thread_keys(np.asarray(q_proc, dtype=object), np.asarray(q_thread, dtype=object), table)
        if len(q_time)
        else np.empty(0, np.int64)
    )
    for k in range(n_keys):
        pos = order[bounds[k] : bounds[k + 1]]
        nest = Nesting.build(starts[pos], ends[pos])
        nests[k] = (pos, nest)
        sel = np.flatnonzero(qcodes == k)
        if len(sel):
            local = nest.enclosing(q_time[sel])
            ok = local >= 0
            out[sel[ok]] = pos[local[ok]]
    return out, nests


#: the module levels a path spells out (real models nest a few dozen deep)
MAX_PATH_DEPTH = 64


def _paths(names: np.ndarray, parent: np.ndarray, sep: str = "/") -> np.ndarray:
    """Full path strings from a parent array (parents before children not required)."""
    n = len(names)
    paths = np.empty(n, dtype=object)
    depth = np.zeros(n, dtype=np.int64)
    cur = parent.copy()
    # depth by walking up (vectorised per level)
    active = cur >= 0
    while active.any():
        depth[active] += 1
        cur[active] = parent[cur[active]]
        active = cur >= 0
    # past MAX_PATH_DEPTH levels a path keeps its first MAX_PATH_DEPTH parts, "…" and its own
    # name: a module nested 20,000 deep costs a path of bounded length, not 20,000 parts
    base = np.empty(n, dtype=object)
    for d in range(int(depth.max()) + 1 if n else 0):
        idx = np.flatnonzero(depth == d)
        if d == 0:
            paths[idx] = names[idx]
        elif d <= MAX_PATH_DEPTH:
            paths[idx] = [f"{p}{sep}{m}" for p, m in zip(paths[parent[idx]], names[idx])]
        else:
            up = parent[idx]
            base[idx] = paths[up] if d == MAX_PATH_DEPTH + 1 else base[up]
            paths[idx] = [f"{b}{sep}…{sep}{m}" for b, m in zip(base[idx], names[idx])]
    return paths


def _attribute_rank(
    rank: int,
    g: pd.DataFrame,
    rt: pd.DataFrame,
    ops: pd.DataFrame,
    rng: pd.DataFrame,
    mods: pd.DataFrame,
    flows: Callable[[str], pd.DataFrame],
    ops_all: pd.DataFrame,
    rt_all: pd.DataFrame,
    diags: DiagnosticLog,
    is_node: np.ndarray,
) -> tuple[pd.DataFrame, list[StepWindow], bool]:
    """Attribute one rank's activities (``ops``: its rows of ``ops_all``; ``is_node`` marks
    the backward nodes among all ops)."""
    n = len(g)
    g = g.reset_index(drop=True)
    g["end_ns"] = g["start_ns"] + g["dur_ns"]

    # --- 1. activity -> launch (correlation) ---------------------------------------------
    corr = g["correlation"].copy()
    if corr.isna().any() and len(fl := flows("launch")):
        corr = _corr_from_flows(g, corr, fl)
    rt_c = rt[rt["correlation"].notna()]
    dup = rt_c["correlation"].duplicated(keep="first")
    if dup.any():
        diags.add(
            "duplicate-correlation",
            "runtime calls sharing a correlation id (several "
            "processes in one file?): the first is used",
            source=f"rank {rank}",
            count=int(dup.sum()),
        )
        rt_c = rt_c[~dup]
    rt_index = pd.Index(rt_c["correlation"].astype("int64"))
    launch_local = rt_index.get_indexer(corr.fillna(-(2**62)).astype("int64"))
    launch_row = take(rt_c.index.to_numpy(), launch_local, -1)
    has_launch = launch_row >= 0

    # --- 2. launch -> enclosing cpu op (per thread) ---------------------------------------
    op_of_rt, op_nests = nest_by_thread(
        ops,
        rt,
        rt["start_ns"].to_numpy(np.int64),
        rt["process"].to_numpy(),
        rt["thread"].to_numpy(),
    )
    # op positions are local to ``ops``: map to global op_idx
    op_global = ops["op_idx"].to_numpy()
    rt_op = take(op_global, op_of_rt, -1)
    rt_all.loc[rt.index, "op_idx"] = rt_op
    # op tree (parents, depth) into the global frame
    clipped = mis = 0
    for _key, (pos, nest) in op_nests.items():
        par = nest.parent
        glob_par = take(op_global[pos], par, -1)
        # zero-length ops: parent = innermost op enclosing their start
        zero = nest.ends <= nest.starts
        if zero.any():
            enc = nest.enclosing(nest.starts[zero])
            glob_par[zero] = take(op_global[pos], enc, -1)
        ops_all.loc[op_global[pos], "parent"] = glob_par
        ops_all.loc[op_global[pos], "depth"] = np.maximum(nest.level, 0)
        clipped += nest.clipped
        mis += nest.misnested
    if mis:
        diags.add(
            "misnested-ops",
            "CPU ops that overlap their parent by more than 1 µs "
            "(attributed to the enclosing op at launch time)",
            source=f"rank {rank}",
            count=mis,
        )

    rt_pos = pd.Index(rt_all.index).get_indexer(launch_row)
    op_idx = take(rt_all["op_idx"].to_numpy(), rt_pos, -1)
    launch_names = take(rt_all["name"].to_numpy(), rt_pos, None)
    is_graph = np.array(
        [isinstance(x, str) and "GraphLaunch" in x for x in launch_names], dtype=bool
    )

    # --- 5. External id fallback and cross-check -------------------------------------------
    ext = g["external_id"]
    ext_valid = ext.notna() & (ext != g["correlation"])
    ext_map = pd.Series(
        ops["op_idx"].to_numpy(), index=ops["external_id"].fillna(-1).astype("int64").to_numpy()
    )
    ext_map = ext_map[~ext_map.index.duplicated(keep="first")]
    ext_op = (
        ext_map.reindex(ext.fillna(-1).astype("int64").to_numpy())
        .fillna(-1)
        .astype("int64")
        .to_numpy()
    )
    ext_op = np.where(ext_valid.to_numpy(), ext_op, -1)
    both = (op_idx >= 0) & (ext_op >= 0)
    if both.any():
        op_ext = ops_all["external_id"].to_numpy()[op_idx[both]]
        disagree = int(np.sum(op_ext != ext.to_numpy()[both]))
        if disagree:
            diags.add(
                "external-id-mismatch",
                "kernels whose External id names another op than "
                "time nesting (time nesting is used)",
                severity="info",
                source=f"rank {rank}",
                count=disagree,
            )
    method = np.full(n, "none", dtype=object)
    method[op_idx >= 0] = "time"
    method[(op_idx >= 0) & is_graph] = "graph"
    use_ext = (op_idx < 0) & (ext_op >= 0)
    op_idx = np.where(use_ext, ext_op, op_idx)
    method[use_ext] = "external_id"

    # --- op names, top op, communication by launching op ----------------------------------
    names_all = ops_all["name"].to_numpy()
    parent_all = ops_all["parent"].to_numpy()
    has_op = op_idx >= 0
    leaf = take(names_all, op_idx, UNATTRIBUTED)
    # a launch outside any CPU op (Triton from Python, graph replays, copies issued directly):
    # the launch itself is the op-level context
    launch_only = ~has_op & has_launch
    leaf[launch_only & is_graph] = GRAPH_REPLAY
    lo = np.flatnonzero(launch_only & ~is_graph)
    leaf[lo] = [f"[{x}]" for x in launch_names[lo]]
    method[launch_only] = np.where(is_graph[launch_only], "graph", "time")
    top = op_idx.copy()
    for _ in range(512):
        p = take(parent_all, top, -1)
        move = p >= 0
        if not move.any():
            break
        top = np.where(move, p, top)
    top_name = take(names_all, top, UNATTRIBUTED)
    top_name[launch_only] = leaf[launch_only]

    # --- 3/4. modules, backward link -------------------------------------------------------
    _modules_and_backward(rank, ops_all, ops, mods, flows, diags, is_node)
    mod_all = ops_all["module"].to_numpy()
    fwd_all = ops_all["fwd_op"].to_numpy()
    bwd_all = ops_all["bwd_node"].to_numpy()
    module = take(mod_all, op_idx, None)
    # kernels launched outside any op: the module frame enclosing the launch itself
    if len(mods) and (~has_op & has_launch).any():
        sel = np.flatnonzero(~has_op & has_launch)
        lr = rt_all.iloc[rt_pos[sel]]
        mpos, _ = nest_by_thread(
            mods,
            lr,
            lr["start_ns"].to_numpy(np.int64),
            lr["process"].to_numpy(),
            lr["thread"].to_numpy(),
        )
        mod_paths = _module_paths(mods)
        ok = mpos >= 0
        module[sel[ok]] = mod_paths[mpos[ok]]
    is_bwd = take(bwd_all, op_idx, -1) >= 0
    fwd = np.where(is_bwd, take(fwd_all, op_idx, -1), -1)
    module = np.where(is_bwd & (fwd >= 0), take(mod_all, fwd, None), module)

    # --- annotations -----------------------------------------------------------------------
    ann = rng[rng["kind"] == "annotation"]
    annotation = np.full(n, None, dtype=object)
    optimizer = np.zeros(n, dtype=bool)
    if len(ann) and has_launch.any():
        sel = np.flatnonzero(has_launch)
        lr = rt_all.iloc[rt_pos[sel]]
        apos, anests = nest_by_thread(
            ann,
            lr,
            lr["start_ns"].to_numpy(np.int64),
            lr["process"].to_numpy(),
            lr["thread"].to_numpy(),
        )
        ann_names = ann["name"].to_numpy()
        ok = apos >= 0
        annotation[sel[ok]] = ann_names[apos[ok]]
        # optimizer: any enclosing annotation named Optimizer.*
        opt_name = np.array([isinstance(x, str) and x.startswith("Optimizer.") for x in ann_names])
        ann_parent = np.full(len(ann), -1, dtype=np.int64)
        for _k, (pos, nest) in anests.items():
            ann_parent[pos] = np.where(nest.parent >= 0, pos[np.clip(nest.parent, 0, None)], -1)
        optimizer[sel] = any_ancestor(apos, ann_parent, opt_name)
    gann = rng[rng["kind"] == "gpu_annotation"]
    if len(gann):
        need = np.flatnonzero(pd.isna(annotation))
        if len(need):
            annotation[need] = _gpu_annotation(g.iloc[need], gann)

    # --- steps -----------------------------------------------------------------------------
    launch_t = take(rt_all["start_ns"].to_numpy(np.int64), rt_pos, -1)
    steps, step_of, has_markers = step_windows(rank, g, rng, launch_t, has_launch, ops, rt, diags)

    phase = np.full(n, "forward", dtype=object)
    phase[optimizer] = "optimizer"
    phase[is_bwd] = "backward"
    phase[~has_op] = "unknown"

    kind = g["kind"].to_numpy()
    cls = np.full(n, "other", dtype=object)  # decided for all ranks at once (categories.classify)

    out = pd.DataFrame(
        {
            "rank": g["rank"].to_numpy(),
            "kind": kind,
            "name": g["name"].to_numpy(),
            "device": g["device"].to_numpy(),
            "stream": g["stream"].to_numpy(),
            "start_ns": g["start_ns"].to_numpy(np.int64),
            "dur_ns": g["dur_ns"].to_numpy(np.int64),
            "end_ns": g["end_ns"].to_numpy(np.int64),
            "cls": cls,
            "bytes": g["bytes"].to_numpy(),
            "copy_kind": g["copy_kind"].to_numpy(),
            "correlation": g["correlation"].to_numpy(),
            "launch_name": launch_names,
            "launch_start_ns": launch_t,
            "op_idx": op_idx,
            "op": leaf,
            "top_op": top_name,
            # None is a valid object-array operand; numpy's stubs type none of where()'s as None
            "module": np.where(pd.isna(module), None, module),  # type: ignore[call-overload]
            "phase": phase,
            "annotation": annotation,
            "step": step_of,
            "method": method,
            "grid_x": g["grid_x"].to_numpy(),
            "grid_y": g["grid_y"].to_numpy(),
            "grid_z": g["grid_z"].to_numpy(),
            "block_x": g["block_x"].to_numpy(),
            "block_y": g["block_y"].to_numpy(),
            "block_z": g["block_z"].to_numpy(),
            "blocks_per_sm": g["blocks_per_sm"].to_numpy(),
            "occupancy_pct": g["occupancy_pct"].to_numpy(),
            # a communication kernel's own process group and sequence number (newer PyTorch)
            "pg_name": g["pg_name"].to_numpy() if "pg_name" in g else None,
            "seq": g["seq"].to_numpy() if "seq" in g else None,
        }
    )
    kern = out["kind"] == "kernel"
    n_un = int(((out["op"] == UNATTRIBUTED) & kern).sum())
    if n_un:
        un_ns = int(out.loc[(out["op"] == UNATTRIBUTED) & kern, "dur_ns"].sum())
        tot = int(out.loc[kern, "dur_ns"].sum()) or 1
        no_launch = int(((~has_launch) & (method == "none") & kern.to_numpy()).sum())
        diags.add(
            "unattributed-kernels",
            f"{n_un:,} kernels ({100 * un_ns / tot:.1f}% of kernel time) could not be linked "
            f"to a CPU op ({no_launch:,} have no launch record: outside the profiling "
            "window, graph replays or lost records)",
            source=f"rank {rank}",
            count=n_un,
            hint="kernels from CUDA/HIP graph replays carry no per-op context; record "
            "an eager step to see their ops"
            if is_graph.any()
            else None,
        )
    if is_graph.any():
        diags.add(
            "graph-replay",
            "kernels replayed from CUDA/HIP graphs: attributed to the op that launched the graph",
            severity="info",
            source=f"rank {rank}",
            count=int(is_graph.sum()),
        )
    return out, steps, has_markers


def name_matches(names: np.ndarray, rx: re.Pattern) -> np.ndarray:
    """Boolean mask of names matching ``rx``, testing each distinct name once."""
    if not len(names):
        return np.zeros(0, dtype=bool)
    codes, uniq = pd.factorize(pd.Series(names, dtype=object))
    hit = np.array([isinstance(u, str) and bool(rx.search(u)) for u in uniq], dtype=bool)
    return np.where(codes >= 0, hit[np.clip(codes, 0, None)] if len(hit) else False, False)


def _corr_from_flows(g: pd.DataFrame, corr: pd.Series, flows: pd.DataFrame) -> pd.Series:
    """Recover correlation ids from ``launch`` flow ends that sit on the activity (MTIA)."""
    f = flows[(flows["kind"] == "launch") & (flows["phase"] == "end")]
    if not len(f):
        return corr
    dev = pd.to_numeric(f["process"], errors="coerce")
    strm = pd.to_numeric(f["thread"].astype(str).str.extract(r"(-?\d+)")[0], errors="coerce")
    key = pd.MultiIndex.from_arrays(
        [
            dev.fillna(-1).astype("int64"),
            strm.fillna(-1).astype("int64"),
            f["ts_ns"].astype("int64"),
        ]
    )
    fid = pd.Series(f["flow_id"].to_numpy(), index=key)
    fid = fid[~fid.index.duplicated(keep="first")]
    need = corr.isna()
    gk = pd.MultiIndex.from_arrays(
        [
            g.loc[need, "device"].fillna(-1).astype("int64"),
            g.loc[need, "stream"].fillna(-1).astype("int64"),
            g.loc[need, "start_ns"].astype("int64"),
        ]
    )
    got = fid.reindex(gk).to_numpy()
    corr = corr.copy()
    corr.loc[need] = got
    return corr


def _module_paths(mods: pd.DataFrame) -> np.ndarray:
    """Path string of every module frame (``Model_0/Block_3/Linear_12``), by time nesting."""
    if not len(mods):
        return np.empty(0, dtype=object)
    names = np.array(
        [str(x).removeprefix("nn.Module: ") for x in mods["name"].to_numpy()], dtype=object
    )
    parent = np.full(len(mods), -1, dtype=np.int64)
    _, nests = nest_by_thread(mods, mods.iloc[0:0], np.empty(0, np.int64), np.empty(0), np.empty(0))
    for _k, (pos, nest) in nests.items():
        parent[pos] = np.where(nest.parent >= 0, pos[np.clip(nest.parent, 0, None)], -1)
    return _paths(names, parent)


def _modules_and_backward(
    rank: int,
    ops_all: pd.DataFrame,
    ops: pd.DataFrame,
    mods: pd.DataFrame,
    flows: Callable[[str], pd.DataFrame],
    diags: DiagnosticLog,
    is_node: np.ndarray,
) -> None:
    """Module path, backward node and forward op of the rank's ops (``ops``: its rows of
    ``ops_all`` as taken before attribution: their identity columns only are read)."""
    if not len(ops):
        return
    # module path of every op: innermost module frame enclosing the op's start on its thread
    if len(mods):
        mpos, _ = nest_by_thread(
            mods,
            ops,
            ops["start_ns"].to_numpy(np.int64),
            ops["process"].to_numpy(),
            ops["thread"].to_numpy(),
        )
        paths = _module_paths(mods)
        mod = take(paths, mpos, None)
        ops_all.loc[ops.index, "module"] = mod
    # backward node of every op: nearest ancestor-or-self named evaluate_function:
    parent = ops_all["parent"].to_numpy()
    idx = ops["op_idx"].to_numpy()
    node = np.full(len(idx), -1, dtype=np.int64)
    cur = idx.copy()
    for _ in range(512):
        ok = (cur >= 0) & (node < 0)
        if not ok.any():
            break
        hit = ok & is_node[np.clip(cur, 0, None)]
        node[hit] = cur[hit]
        cur = np.where(ok & ~hit, parent[np.clip(cur, 0, None)], -1)
    ops_all.loc[ops.index, "bwd_node"] = node
    nodes = np.unique(node[node >= 0])
    if not len(nodes):
        return
    # forward op of each backward node: same Sequence number, latest forward op before it
    fwd_cand = ops[ops["sequence_nr"].notna().to_numpy() & (node < 0)]
    nd = ops_all.loc[nodes]
    fwd_of_node = pd.Series(-1, index=nodes, dtype="int64")
    if len(fwd_cand):
        left = nd[nd["sequence_nr"].notna()][["op_idx", "sequence_nr", "start_ns"]].sort_values(
            "start_ns"
        )
        right = (
            fwd_cand[["op_idx", "sequence_nr", "start_ns"]]
            .rename(columns={"op_idx": "fwd_idx", "start_ns": "fwd_start"})
            .sort_values("fwd_start")
        )
        if len(left):
            left = left.astype({"sequence_nr": "int64"})
            right = right.astype({"sequence_nr": "int64"})
            m = pd.merge_asof(
                left,
                right,
                left_on="start_ns",
                right_on="fwd_start",
                by="sequence_nr",
                direction="backward",
            )
            ok = m["fwd_idx"].notna()
            fwd_of_node.loc[m.loc[ok, "op_idx"].to_numpy()] = (
                m.loc[ok, "fwd_idx"].astype("int64").to_numpy()
            )
    # fallback: fwd_bwd flows (start on the forward op, end on the backward node)
    missing = fwd_of_node[fwd_of_node < 0].index.to_numpy()
    fl = flows("fwd_bwd") if len(missing) else None
    if fl is not None and len(fl):
        fb = fl[fl["kind"] == "fwd_bwd"]
        s = fb[fb["phase"] == "start"].set_index("flow_id")
        f = fb[fb["phase"] == "end"]
        if len(s) and len(f):
            key = pd.MultiIndex.from_arrays([ops["process"], ops["thread"], ops["start_ns"]])
            op_at = pd.Series(ops["op_idx"].to_numpy(), index=key)
            op_at = op_at[~op_at.index.duplicated(keep="last")]
            fk = pd.MultiIndex.from_arrays([f["process"], f["thread"], f["ts_ns"]])
            bwd_op = op_at.reindex(fk).to_numpy()
            s = s[~s.index.duplicated()]
            src = s.reindex(f["flow_id"].to_numpy())
            sk = pd.MultiIndex.from_arrays([src["process"], src["thread"], src["ts_ns"]])
            fwd_op = op_at.reindex(sk).to_numpy()
            pairs = pd.DataFrame({"b": bwd_op, "f": fwd_op}).dropna().astype("int64")
            if len(pairs):
                bn = ops_all["bwd_node"].to_numpy()[pairs["b"].to_numpy()]
                pairs["node"] = np.where(bn >= 0, bn, pairs["b"])
                pm = pairs.drop_duplicates("node").set_index("node")["f"]
                hit = pm.reindex(missing).dropna().astype("int64")
                fwd_of_node.loc[hit.index] = hit.to_numpy()
    # AccumulateGrad nodes have no forward op by design (they add into .grad)
    accum = np.array(
        ["AccumulateGrad" in str(x) for x in ops_all.loc[fwd_of_node.index, "name"]], dtype=bool
    )
    unlinked = int(((fwd_of_node < 0).to_numpy() & ~accum).sum())
    if unlinked:
        diags.add(
            "backward-unlinked",
            "backward nodes whose forward op was not found (no "
            "Sequence number or fwdbwd flow in the window): no module path for their "
            "kernels",
            severity="info",
            source=f"rank {rank}",
            count=unlinked,
        )
    node_of_op = ops_all.loc[ops.index, "bwd_node"].to_numpy()
    fwd_of = fwd_of_node.reindex(node_of_op).fillna(-1).astype("int64").to_numpy()
    fwd = np.where(node_of_op >= 0, fwd_of, -1)
    ops_all.loc[ops.index, "fwd_op"] = fwd


def _gpu_annotation(g: pd.DataFrame, gann: pd.DataFrame) -> np.ndarray:
    """Innermost GPU-projected annotation containing each activity's start, per device."""
    out = np.full(len(g), None, dtype=object)
    gann = gann[~gann["name"].astype(str).str.startswith("ProfilerStep#")]
    if not len(gann):
        return out
    for dev, grp in gann.groupby("device", dropna=False):
        nest = Nesting.build(
            grp["start_ns"].to_numpy(np.int64), (grp["start_ns"] + grp["dur_ns"]).to_numpy(np.int64)
        )
        sel = np.flatnonzero((g["device"] == dev).to_numpy())
        if not len(sel):
            continue
        pos = nest.enclosing(g["start_ns"].to_numpy(np.int64)[sel])
        ok = pos >= 0
        out[sel[ok]] = grp["name"].to_numpy()[pos[ok]]
    return out
