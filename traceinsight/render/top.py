"""Terminal rendering of the ``top`` rollups. The caller computes the rollup table (the analysis
layer: ``Analysis.rollup``), its rows as plain records (``analysis.rollups.records``, also the
``--json`` output) and its attribution coverage; this module only renders them."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

from traceinsight.util import fmt
from traceinsight.util.kernelname import short_names
from traceinsight.util.safetext import for_terminal


def render_top(
    records: Sequence[dict[str, Any]],
    by: str,
    n: int,
    *,
    coverage: dict[str, Any],
    ranks: int,
    rank: int | None = None,
    wide: bool = False,
    width: int | None = None,
    activity: dict[str, tuple[int, int]] | None = None,
) -> str:
    """The first ``n`` rows of the rollup table ``records`` by ``by`` (kernel, op, layer,
    module-type, annotation, step) under a line on the kernel time and how much of it is linked
    to a launch (``coverage`` of the same rank selection); ``ranks``: how many ranks the store
    holds. Names and shapes are cut so the table fits ``width`` (the terminal's), kernel names
    in their short form (:mod:`traceinsight.util.kernelname`); ``wide``: full names, uncut.
    ``activity``: the count and time of the kernels and of the copies and memsets (``kernel``,
    ``other``), for the header of the views whose rows add up to both."""
    cov = coverage
    width = 100_000 if wide else (width or fmt.terminal_width())
    head = (
        f"GPU kernel time {fmt.fmt_ns(cov['kernel_time_ns'])} in {cov['kernels']:,} kernels; "
        f"linked to a launch {fmt.fmt_pct(cov['coverage_pct'])}"
        if cov["kernel_time_ns"]
        else "No GPU kernels in this trace."
    )
    if by == "kernel" and records:
        head = _kernel_head(records, cov)
    elif by in ("op", "layer", "annotation") and activity and cov["kernel_time_ns"]:
        head = activity_head(activity, cov)  # their rows add up to every GPU activity
    rank_txt = (
        f" (rank {rank})" if rank is not None else (f" (all {ranks} ranks)" if ranks > 1 else "")
    )
    if by == "api":
        head = (
            f"CUDA/HIP API time {fmt.fmt_ns(sum(r['total_ns'] for r in records))} in "
            f"{_count(sum(r['calls'] for r in records), 'call')} (host side)"
            if records
            else "No CUDA/HIP runtime or driver calls in this trace."
        )
    elif by == "memcpy":
        head = (
            f"Memory copy and set time {fmt.fmt_ns(sum(r['total_ns'] for r in records))} in "
            f"{_count(sum(r['count'] for r in records), 'operation')}"
            if records
            else "No memory copies or memsets in this trace."
        )
    host_ops = by == "op" and bool(records) and "self_ns" in records[0]
    if host_ops:  # a trace without GPU kernels: its CPU ops
        head = (
            f"No GPU kernels in this trace: CPU ops by host self time "
            f"({_count(sum(int(r['calls']) for r in records), 'call')} of "
            f"{_count(len(records), 'op name')}; shares of step time)"
        )
    lines = [*textwrap.wrap(head + rank_txt, width), ""]
    if not records:
        lines.append(f"Nothing to list by {by}.")
        return for_terminal("\n".join(lines))
    total_rows = len(records)
    df = [SimpleNamespace(**r) for r in records[:n]]
    if by == "kernel":
        names = (
            {r["name"]: " ".join(str(r["name"]).split()) for r in records}
            if wide
            else short_names(r["name"] for r in records)
        )
        rows = [
            [
                names[r.name],
                r.cls,
                f"{r.calls:,}",
                fmt.fmt_ns(r.total_ns),
                fmt.fmt_ns(r.mean_ns),
                fmt.fmt_ns(r.median_ns),
                fmt.fmt_ns(r.min_ns),
                fmt.fmt_ns(r.max_ns),
                fmt.fmt_ns(r.stddev_ns),
                fmt.fmt_pct(r.share_pct),
                r.top_op,
            ]
            for r in df
        ]
        table = fitted(
            rows,
            [
                "kernel",
                "class",
                "calls",
                "total",
                "mean",
                "median",
                "min",
                "max",
                "stddev",
                "share",
                "launched by",
            ],
            align="llrrrrrrrrl",
            flex=(0, 10),
            middle=(0,),
            width=width,
            optional=(8, 6, 7, 5, 1),
        )
    elif by in ("api", "memcpy"):
        table = _stats_table(df, by, width)
    elif host_ops:
        rows = [
            [
                r.name,
                f"{r.calls:,}",
                fmt.fmt_ns(r.self_ns),
                fmt.fmt_pct(r.self_pct),
                fmt.fmt_ns(r.total_ns),
                fmt.fmt_pct(r.total_pct),
            ]
            for r in df
        ]
        table = fmt.table(
            rows,
            ["operator", "calls", "host self", "self share", "host total", "total share"],
            align="lrrrrr",
            flex=0,
            max_width=width,
        )
    elif by == "op":
        rows = [
            [
                r.name,
                f"{r.calls:,}",
                fmt.fmt_ns(r.device_self_ns),
                fmt.fmt_ns(r.device_total_ns),
                fmt.fmt_ns(r.host_ns),
                fmt.fmt_pct(r.share_pct),
                fmt.shapes_text(r.input_dims, 10_000),
            ]
            for r in df
        ]
        table = fmt.table(
            rows,
            [
                "operator",
                "calls",
                "device self",
                "device total",
                "host",
                "share",
                "input shapes (top)",
            ],
            align="lrrrrrl",
            flex=(0, 6),
            max_width=width,
        )
    elif by == "shape":
        from traceinsight.render.overview_text import shape_table

        table = shape_table(df)
    elif by == "layer":
        rows = [
            [
                r.module,
                fmt.fmt_ns(r.forward_ns),
                fmt.fmt_ns(r.backward_ns),
                fmt.fmt_ns(r.other_ns),
                fmt.fmt_ns(r.total_ns),
                fmt.fmt_pct(r.share_pct),
            ]
            for r in df
        ]
        table = fmt.table(
            rows,
            ["module (innermost)", "forward", "backward", "other", "total", "share"],
            flex=0,
            max_width=width,
        )
    elif by == "module-type":
        rows = [
            [
                f"{r.module_type} ×{r.instances}",
                fmt.fmt_ns(r.forward_ns),
                fmt.fmt_ns(r.backward_ns),
                fmt.fmt_ns(r.other_ns),
                fmt.fmt_ns(r.total_ns),
                f"{r.kernels:,}",
                fmt.fmt_pct(r.share_pct),
            ]
            for r in df
        ]
        table = fmt.table(
            rows,
            [
                "module type (with sub-modules)",
                "forward",
                "backward",
                "other",
                "total",
                "kernels",
                "share",
            ],
            flex=0,
            max_width=width,
        )
        if len(df):
            table += "\nshares overlap: a type's time includes its sub-modules (a block holds its "
            table += "attention)"
    elif by == "annotation":
        rows = [
            [r.annotation, f"{r.kernels:,}", fmt.fmt_ns(r.device_ns), fmt.fmt_pct(r.share_pct)]
            for r in df
        ]
        table = fmt.table(
            rows, ["annotation", "kernels", "device time", "share"], flex=0, max_width=width
        )
    else:  # step
        rows = []
        for r in df:
            wall = r.wall_ns or 1
            step = "whole trace" if r.step is None else f"#{int(r.step)}"
            rows.append(
                [
                    r.rank,
                    step,
                    fmt.fmt_ns(r.wall_ns),
                    fmt.fmt_pct(100 * r.busy_ns / wall),
                    fmt.fmt_pct(100 * r.compute_ns / wall),
                    fmt.fmt_pct(100 * r.comm_exposed_ns / wall),
                    fmt.fmt_pct(100 * (r.memcpy_exposed_ns + r.memset_exposed_ns) / wall),
                    fmt.fmt_pct(100 * r.idle_ns / wall),
                    f"{r.kernels:,}",
                ]
            )
        table = fmt.table(
            rows,
            [
                "rank",
                "step",
                "wall",
                "busy",
                "compute",
                "comm exposed",
                "memcpy/set",
                "idle",
                "kernels",
            ],
            align="llrrrrrrr",
            max_width=width,
        )
    lines.append(table)
    if total_rows > n:
        lines.append(f"… {total_rows - n:,} more (use -n)")
    return for_terminal("\n".join(lines))


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def _bytes(v: float | None) -> str:
    return "unknown" if v is None else fmt.fmt_bytes(v)


#: the narrowest a name column may get before optional columns give way to it
NAME_MIN = 32


def fitted(
    rows: Sequence[Sequence[Any]],
    headers: Sequence[str],
    *,
    align: str,
    flex: Sequence[int],
    width: int,
    optional: Sequence[int] = (),
    middle: Sequence[int] = (),
) -> str:
    """:func:`fmt.table` within ``width``, its ``flex`` (name) columns balanced; the
    ``optional`` columns (in that order) left out while the name columns would otherwise be
    cut under :data:`NAME_MIN` characters, with a line naming them."""
    cells = [[str(c) for c in r] for r in rows]
    keep = list(range(len(headers)))

    def need(cols: list[int]) -> int:  # the width of the fixed columns and the names' wish
        w = {i: max([len(headers[i])] + [len(r[i]) for r in cells]) for i in cols}
        fixed = sum(w[i] for i in cols if i not in flex) + 2 * (len(cols) - 1)
        names = sum(min(w[i], NAME_MIN) for i in cols if i in flex)
        return fixed + names

    dropped = []
    for i in optional:
        if need(keep) <= width:
            break
        keep.remove(i)
        dropped.append(headers[i])
    text = fmt.table(
        [[r[i] for i in keep] for r in cells],
        [headers[i] for i in keep],
        align="".join(align[i] for i in keep),
        max_width=width,
        flex=[keep.index(i) for i in flex if i in keep],
        middle=[keep.index(i) for i in middle if i in keep],
    )
    if dropped:
        note = f"(not shown, to fit the terminal: {', '.join(dropped)}; see --wide or --format csv)"
        text += "\n" + "\n".join(textwrap.wrap(note, width))
    return text


def _kernel_head(records: Sequence[dict[str, Any]], cov: dict[str, Any]) -> str:
    """The line over ``top --by kernel``: the time and count of its rows (kernels and the
    copies and memsets listed with them: the counts add up to the rows' calls)."""
    kern = [r for r in records if r.get("kind", "kernel") == "kernel"]
    other = [r for r in records if r.get("kind", "kernel") != "kernel"]
    return activity_head(
        {
            "kernel": (sum(int(r["calls"]) for r in kern), sum(int(r["total_ns"]) for r in kern)),
            "other": (
                sum(int(r["calls"]) for r in other),
                sum(int(r["total_ns"]) for r in other),
            ),
        },
        cov,
    )


def activity_head(activity: dict[str, tuple[int, int]], cov: dict[str, Any]) -> str:
    """``GPU time 45.6 ms: 1,465 kernels (45.4 ms) and 242 copies and memsets (215 µs); …``
    from ``activity`` (``kernel`` and ``other``: (count, ns)), the totals the rows of the
    kernel, op, layer and annotation views add up to."""
    (k_n, k_ns), (o_n, o_ns) = activity.get("kernel", (0, 0)), activity.get("other", (0, 0))
    head = f"GPU time {fmt.fmt_ns(k_ns + o_ns)}: {_count(k_n, 'kernel')}"
    if o_n:
        what = "copy or memset" if o_n == 1 else "copies and memsets"
        head += f" ({fmt.fmt_ns(k_ns)}) and {o_n:,} {what} ({fmt.fmt_ns(o_ns)})"
    if cov.get("kernel_time_ns"):
        head += f"; kernel time linked to a launch {fmt.fmt_pct(cov['coverage_pct'])}"
    return head


def _stats_table(df: Sequence[SimpleNamespace], by: str, width: int) -> str:
    """``top --by api`` (``nsys stats`` cuda_api_sum) and ``--by memcpy`` (cuda_gpu_mem_time_sum
    with the sizes of cuda_gpu_mem_size_sum)."""
    stats = ("total_ns", "mean_ns", "median_ns", "min_ns", "max_ns", "stddev_ns")
    heads = ["total", "mean", "median", "min", "max", "stddev", "share"]
    if by == "api":
        rows = [
            [r.name, r.kind, f"{r.calls:,}"]
            + [fmt.fmt_ns(getattr(r, c)) for c in stats]
            + [fmt.fmt_pct(r.share_pct)]
            for r in df
        ]
        return fmt.table(
            rows,
            ["API", "kind", "calls", *heads],
            align="llrrrrrrrr",
            flex=0,
            max_width=width,
        )
    rows = [
        ["memset" if r.kind == "memset" else f"memcpy {r.copy_kind or 'unknown'}", f"{r.count:,}"]
        + [fmt.fmt_ns(getattr(r, c)) for c in stats]
        + [fmt.fmt_pct(r.share_pct), _bytes(r.total_bytes), _bytes(r.median_bytes)]
        + [_bytes(r.max_bytes)]
        for r in df
    ]
    return fmt.table(
        rows,
        ["operation", "count", *heads, "bytes", "median size", "max size"],
        align="lrrrrrrrrrrr",
        flex=0,
        max_width=width,
    )
