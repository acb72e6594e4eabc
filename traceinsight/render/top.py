"""Terminal and JSON rendering of the ``top`` rollups."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from .. import fmt
from ..analysis import Analysis
from ..analysis.rollups import shapes_text


def _clean(v: Any) -> Any:
    if isinstance(v, float) and math.isnan(v):
        return None
    if hasattr(v, "item"):
        return v.item()
    return v


def records(df: pd.DataFrame) -> list[dict[str, Any]]:
    return [{k: _clean(v) for k, v in row.items()} for row in df.to_dict("records")]


def render_top(an: Analysis, by: str, n: int, rank: int | None) -> str:
    df = an.rollup(by, rank)
    cov = an.attribution.coverage(rank)
    head = (f"GPU kernel time {fmt.fmt_ns(cov['kernel_time_ns'])} in {cov['kernels']:,} kernels; "
            f"linked to a launch {fmt.fmt_pct(cov['coverage_pct'])}"
            if cov["kernel_time_ns"] else "No GPU kernels in this trace.")
    rank_txt = f" (rank {rank})" if rank is not None else (
        f" (all {len(an.store.ranks)} ranks)" if len(an.store.ranks) > 1 else "")
    lines = [head + rank_txt, ""]
    if not len(df):
        lines.append(f"Nothing to list by {by}.")
        return "\n".join(lines)
    total_rows = len(df)
    df = df.head(n)
    if by == "kernel":
        rows = [[fmt.short_kernel_name(r.name), r.cls, f"{r.calls:,}", fmt.fmt_ns(r.total_ns), fmt.fmt_ns(r.mean_ns),
                 fmt.fmt_ns(r.max_ns), fmt.fmt_pct(r.share_pct), r.top_op]
                for r in df.itertuples()]
        table = fmt.table(rows, ["kernel", "class", "calls", "total", "mean", "max", "share",
                                 "launched by"], align="llrrrrrl", flex=0)
    elif by == "op":
        rows = [[r.name, f"{r.calls:,}", fmt.fmt_ns(r.device_self_ns), fmt.fmt_ns(r.device_total_ns),
                 fmt.fmt_ns(r.host_ns), fmt.fmt_pct(r.share_pct), shapes_text(r.input_dims, 40)]
                for r in df.itertuples()]
        table = fmt.table(rows, ["operator", "calls", "device self", "device total", "host",
                                 "share", "input shapes (top)"], align="lrrrrrl", flex=0)
    elif by == "layer":
        rows = [[r.module, fmt.fmt_ns(r.forward_ns), fmt.fmt_ns(r.backward_ns), fmt.fmt_ns(r.other_ns),
                 fmt.fmt_ns(r.total_ns), fmt.fmt_pct(r.share_pct)] for r in df.itertuples()]
        table = fmt.table(rows, ["module (innermost)", "forward", "backward", "other", "total",
                                 "share"], flex=0)
    elif by == "annotation":
        rows = [[r.annotation, f"{r.kernels:,}", fmt.fmt_ns(r.device_ns), fmt.fmt_pct(r.share_pct)]
                for r in df.itertuples()]
        table = fmt.table(rows, ["annotation", "kernels", "device time", "share"], flex=0)
    else:  # step
        rows = []
        for r in df.itertuples():
            wall = r.wall_ns or 1
            rows.append([r.rank, "whole trace" if r.step is None or pd.isna(r.step) else f"#{int(r.step)}",
                         fmt.fmt_ns(r.wall_ns), fmt.fmt_pct(100 * r.busy_ns / wall),
                         fmt.fmt_pct(100 * r.compute_ns / wall), fmt.fmt_pct(100 * r.comm_exposed_ns / wall),
                         fmt.fmt_pct(100 * (r.memcpy_exposed_ns + r.memset_exposed_ns) / wall),
                         fmt.fmt_pct(100 * r.idle_ns / wall), f"{r.kernels:,}"])
        table = fmt.table(rows, ["rank", "step", "wall", "busy", "compute", "comm exposed",
                                 "memcpy/set", "idle", "kernels"], align="llrrrrrrr")
    lines.append(table)
    if total_rows > n:
        lines.append(f"… {total_rows - n:,} more (use -n)")
    return "\n".join(lines)
