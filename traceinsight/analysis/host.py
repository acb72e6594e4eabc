"""The host view of a run without GPU kernels: where the CPU time of each step went.

A CPU-only trace (a CPU run, or a GPU run profiled without ``ProfilerActivity.CUDA``) has no
kernels, so the GPU rules cannot run. What it does have is the op tree, the user annotations,
the Python frames and the step markers, which answer the same question for the host:

* step time split, per step window (``ProfilerStep#N`` or the whole trace), into disjoint
  parts: data loading (DataLoader ranges) > synchronisation (``.item()``, waits, collectives)
  > framework ops (top-level ``aten::`` / ``c10d::`` ops) > Python and other host work (time in
  no op at all: the interpreter, the training loop, the profiler itself);
* the top ops by self time (inside the op, not its callees) and total time (each name counted
  once where it nests in itself);
* host time per ``nn.Module`` type (``TransformerEncoderLayer ×2``: the union of its frames,
  so a type nested in itself is not counted twice) and per user annotation;
* a headline worded for a CPU run.

What the split means (a CPU run bound by its Python loop, by input loading, ...) and what to do
about it are rules, like every verdict: ``rules/cpu-*.yaml``, scoped to CPU-only runs, read the
split through the host metrics (``metrics/host.py``).

Everything is measured inside the step windows, so every percentage is a share of step time.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd

from traceinsight.analysis import intervals as iv
from traceinsight.util import fmt

#: host ranges and ops that load input (same patterns as the GPU input-bound rule)
DATALOADER_RE = re.compile(
    r"enumerate\(DataLoader\)|DataLoader.*__next__|enumerate\(DataPipe\)|"
    r"_next_data|get_batch",
    re.IGNORECASE,
)
#: ops that wait for something else: a scalar read back, a collective, a barrier, a future
SYNC_RE = re.compile(
    r"^aten::(?:item|_local_scalar_dense)$|synchroniz|^c10d::|^aten::wait|"
    r"barrier|^(?:gloo|nccl|mpi):|^record_param_comms$",
    re.IGNORECASE,
)
#: matrix math (what a CPU run is usually bound by)
MATMUL_RE = re.compile(
    r"^aten::(?:mm|addmm|bmm|baddbmm|matmul|linear|_addmm_activation|"
    r"_scaled_dot_product\w*|convolution|_convolution|mkldnn\w*)$"
)
MODULE_PREFIX = "nn.Module: "
TOP_N = 20


def module_type(name: str) -> str:
    """``nn.Module: TransformerEncoderLayer_1`` (or a path component ``Linear_3``) -> its type."""
    s = str(name)
    if s.startswith(MODULE_PREFIX):
        s = s[len(MODULE_PREFIX) :]
    return re.sub(r"_\d+$", "", s.strip())


def host_view(an: Any) -> dict[str, Any]:
    """The host view of the analysed store (see the module docstring)."""
    attr = an.attribution
    ops = attr.ops
    windows = _windows(attr, ops)
    wall = sum(iv.length(w) for w in windows.values())
    if not len(ops) or not wall:
        return {"empty": "no CPU ops in this trace", "headline": ""}
    split = _split(an, ops, windows)
    op_rows = _ops(ops, windows, wall)
    modules = _modules(an, windows, wall)
    annotations = _annotations(an, windows, wall)
    steps = [w for w in attr.steps if w.step is not None]
    durs = np.array([w.host_end_ns - w.host_start_ns for w in steps], dtype=np.float64)
    step_info = {
        "count": len(steps),
        "ranks": len(windows),
        "p50_ns": float(np.median(durs)) if len(durs) else None,
        "max_ns": float(durs.max()) if len(durs) else None,
        "basis": "ProfilerStep" if steps else "trace span",
    }
    matmul = sum(r["self_ns"] for r in _all_ops(ops, windows) if MATMUL_RE.match(r["name"]))
    view = {
        "window_ns": int(wall),
        "steps": step_info,
        "split": split,
        "ops": op_rows,
        "modules": modules,
        "annotations": annotations,
        "matmul_pct": 100.0 * matmul / wall,
    }
    view["headline"] = _headline(view)
    return view


def op_table(attr: Any, rank: int | None = None) -> pd.DataFrame:
    """Every CPU op name inside the step windows (of ``rank``, or all ranks): calls, host self
    and total time (ns) and their shares of step time, most self time first: ``top --by op``
    on a trace without GPU kernels."""
    cols = ["name", "calls", "self_ns", "total_ns", "self_pct", "total_pct"]
    ops = attr.ops if rank is None else attr.ops[attr.ops["rank"] == rank]
    if not len(ops):
        return pd.DataFrame(columns=cols)
    windows = _windows(attr, ops)
    wall = sum(iv.length(w) for w in windows.values())
    rows = sorted(_all_ops(ops, windows), key=lambda r: (-r["self_ns"], r["name"]))
    for r in rows:
        r["self_pct"] = 100.0 * r["self_ns"] / wall if wall else None
        r["total_pct"] = 100.0 * r["total_ns"] / wall if wall else None
    return pd.DataFrame(rows, columns=cols)


# --- windows and the split of step time -------------------------------------------------------

Union = tuple[np.ndarray, np.ndarray]


def _windows(attr: Any, ops: pd.DataFrame) -> dict[int, Union]:
    """Per rank, the union of its step windows on the host (the op span without markers)."""
    out: dict[int, Union] = {}
    for rank in sorted({int(r) for r in ops["rank"].unique()}):
        ws = [w for w in attr.steps if w.rank == rank]
        marked = [w for w in ws if w.step is not None]
        if marked:
            s = np.array([w.host_start_ns for w in marked], dtype=np.int64)
            e = np.array([w.host_end_ns for w in marked], dtype=np.int64)
        else:
            o = ops[ops["rank"] == rank]
            s = np.array([int(o["start_ns"].min())], dtype=np.int64)
            e = np.array([int((o["start_ns"] + o["dur_ns"]).max())], dtype=np.int64)
        out[rank] = iv.union(s, e)
    return out


def _ranges(an: Any) -> pd.DataFrame:
    rng = an.store.table("ranges", ["rank", "kind", "name", "start_ns", "dur_ns"]).to_pandas()
    rng = rng[rng["kind"].astype(str) == "annotation"]
    return rng.assign(name=rng["name"].astype(str))


def _union_of(df: pd.DataFrame) -> Union:
    s = df["start_ns"].to_numpy(np.int64)
    return iv.union(s, s + df["dur_ns"].to_numpy(np.int64))


def _split(an: Any, ops: pd.DataFrame, windows: dict[int, Union]) -> list[dict[str, Any]]:
    """Disjoint parts of step time, by priority: data loading, synchronisation, ops, the rest."""
    rng = _ranges(an)
    names = ops["name"].astype(str)
    parts = {
        "framework ops": 0,
        "Python and other host work": 0,
        "data loading": 0,
        "synchronisation": 0,
    }
    for rank, win in windows.items():
        o = ops[ops["rank"] == rank]
        n = names[ops["rank"] == rank]
        r = rng[rng["rank"] == rank]
        dl = iv.intersect(
            iv.union(
                *_cat(
                    _union_of(r[r["name"].str.contains(DATALOADER_RE)]),
                    _union_of(o[n.str.contains(DATALOADER_RE)]),
                )
            ),
            win,
        )
        sy = iv.subtract(iv.intersect(_union_of(o[n.str.contains(SYNC_RE)]), win), dl)
        top = o[o["depth"] <= 0] if "depth" in o.columns else o
        busy = iv.subtract(iv.subtract(iv.intersect(_union_of(top), win), dl), sy)
        parts["data loading"] += iv.length(dl)
        parts["synchronisation"] += iv.length(sy)
        parts["framework ops"] += iv.length(busy)
        parts["Python and other host work"] += (
            iv.length(win) - iv.length(dl) - iv.length(sy) - iv.length(busy)
        )
    wall = sum(iv.length(w) for w in windows.values()) or 1
    return [{"part": k, "ns": int(v), "pct": 100.0 * v / wall} for k, v in parts.items()]


def _cat(a: Union, b: Union) -> tuple[np.ndarray, np.ndarray]:
    return np.concatenate((a[0], b[0])), np.concatenate((a[1], b[1]))


def _in_windows(starts: np.ndarray, win: Union) -> np.ndarray:
    """Which of ``starts`` fall inside the union ``win``."""
    i = np.searchsorted(win[0], starts, side="right") - 1
    ok = i >= 0
    out = np.zeros(len(starts), dtype=bool)
    out[ok] = starts[ok] < win[1][i[ok]]
    return out


# --- ops, modules, annotations ---------------------------------------------------------------


def _all_ops(ops: pd.DataFrame, windows: dict[int, Union]) -> list[dict[str, Any]]:
    """Per op name (ops that start inside a step window): calls, self and total time."""
    n = len(ops)
    dur = ops["dur_ns"].to_numpy(np.int64)
    parent = ops["parent"].to_numpy(np.int64)
    has_parent = parent >= 0
    child = np.zeros(n, dtype=np.int64)
    np.add.at(child, parent[has_parent], dur[has_parent])
    self_ns = np.maximum(dur - child, 0)
    codes, uniq = pd.factorize(ops["name"].astype(str))
    nested = np.zeros(n, dtype=bool)  # inside an op of the same name: not counted in its total
    idx = np.arange(n)
    cur = parent.copy()
    for _ in range(512):
        ok = cur >= 0
        if not ok.any():
            break
        nested[idx[ok]] |= codes[cur[ok]] == codes[idx[ok]]
        idx, cur = idx[ok], parent[cur[ok]]
    inside = np.zeros(n, dtype=bool)
    ranks = ops["rank"].to_numpy()
    starts = ops["start_ns"].to_numpy(np.int64)
    for rank, win in windows.items():
        sel = ranks == rank
        inside[sel] = _in_windows(starts[sel], win)
    df = pd.DataFrame(
        {
            "code": codes[inside],
            "self": self_ns[inside],
            "total": np.where(nested[inside], 0, dur[inside]),
        }
    )
    agg = df.groupby("code").agg(
        calls=("self", "size"), self_ns=("self", "sum"), total_ns=("total", "sum")
    )
    return [
        {
            "name": str(uniq[c]),
            "calls": int(r.calls),
            "self_ns": int(r.self_ns),
            "total_ns": int(r.total_ns),
        }
        for c, r in zip(agg.index, agg.itertuples())
    ]


def _ops(ops: pd.DataFrame, windows: dict[int, Union], wall: int) -> list[dict[str, Any]]:
    rows = sorted(_all_ops(ops, windows), key=lambda r: (-r["self_ns"], r["name"]))[:TOP_N]
    for r in rows:
        r["self_pct"] = 100.0 * r["self_ns"] / wall
        r["total_pct"] = 100.0 * r["total_ns"] / wall
    return rows


def _modules(an: Any, windows: dict[int, Union], wall: int) -> list[dict[str, Any]]:
    """Host time per nn.Module type: the union of its frames inside the step windows."""
    py = an.store.table("python_frames", ["rank", "name", "start_ns", "dur_ns", "frame_kind"])
    if not py.num_rows:
        return []
    df = py.to_pandas()
    df = df[df["frame_kind"].astype(str) == "module"]
    if not len(df):
        return []
    df = df.assign(name=df["name"].astype(str))
    df = df.assign(type=df["name"].map(module_type))
    rows: list[dict[str, Any]] = []
    for typ, grp in df.groupby("type"):
        t = 0
        calls = 0
        for rank, win in windows.items():
            g = grp[grp["rank"] == rank]
            if not len(g):
                continue
            t += iv.length(iv.intersect(_union_of(g), win))
            calls += int(_in_windows(g["start_ns"].to_numpy(np.int64), win).sum())
        if t:
            rows.append(
                {
                    "type": str(typ),
                    "instances": int(grp["name"].nunique()),
                    "calls": calls,
                    "total_ns": int(t),
                    "pct": 100.0 * t / wall,
                }
            )
    rows.sort(key=lambda r: (-r["total_ns"], r["type"]))
    return rows[:TOP_N]


def _annotations(an: Any, windows: dict[int, Union], wall: int) -> list[dict[str, Any]]:
    """Host time per user annotation (record_function), step markers and loaders aside."""
    rng = _ranges(an)
    rng = rng[~rng["name"].str.startswith("ProfilerStep#")]
    rows: list[dict[str, Any]] = []
    for name, grp in rng.groupby("name"):
        t = sum(
            iv.length(iv.intersect(_union_of(grp[grp["rank"] == rank]), win))
            for rank, win in windows.items()
        )
        if t:
            rows.append(
                {"name": str(name), "calls": len(grp), "total_ns": int(t), "pct": 100.0 * t / wall}
            )
    rows.sort(key=lambda r: (-r["total_ns"], r["name"]))
    return rows[:TOP_N]


# --- words -------------------------------------------------------------------------------------


def _pct(view: dict[str, Any], part: str) -> float:
    return next((p["pct"] for p in view["split"] if p["part"] == part), 0.0)


def _headline(view: dict[str, Any]) -> str:
    st = view["steps"]
    if st["count"]:
        ranks = f" × {st['ranks']} ranks" if st["ranks"] > 1 else ""
        head = (
            f"CPU-only run: a step takes {fmt.fmt_ns(st['p50_ns'])} (median of "
            f"{st['count'] // max(1, st['ranks'])} steps{ranks})"
        )
    else:
        head = f"CPU-only run over {fmt.fmt_ns(view['window_ns'])} (no step markers)"
    tops = ", ".join(
        f"{r['name']} {fmt.fmt_pct(r['self_pct'], 0)}"
        for r in view["ops"][:2]
        if r["self_pct"] >= 1.0
    )
    ops_part = f"framework ops {fmt.fmt_pct(_pct(view, 'framework ops'), 0)}"
    if tops:
        ops_part += f" (most: {tops})"
    return (
        f"{head}; {ops_part}, Python and other host work "
        f"{fmt.fmt_pct(_pct(view, 'Python and other host work'), 0)}, data loading "
        f"{fmt.fmt_pct(_pct(view, 'data loading'), 0)}, synchronisation "
        f"{fmt.fmt_pct(_pct(view, 'synchronisation'), 0)} of step time."
    )
