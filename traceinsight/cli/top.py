"""``traceinsight top``: the top kernels, ops, layers, module types, annotations or steps by GPU
time, and the ``nsys stats``-like API and memory-copy summaries."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from traceinsight.cli.checks import COUNT
from traceinsight.cli.ranks import rank_options

if TYPE_CHECKING:  # the commands import the library lazily: a quick start for every command
    pass
from traceinsight.cli.options import (
    CONTEXT,
    INPUTS_AFTER_JSON,
    format_options,
    json_option,
    json_target,
    loading,
    salvage,
    strict,
    with_json_input,
    write_output,
)


@click.command(context_settings=CONTEXT)
@INPUTS_AFTER_JSON
@click.option(
    "--by",
    type=click.Choice(
        ["kernel", "op", "shape", "layer", "module-type", "annotation", "step", "api", "memcpy"]
    ),
    default="kernel",
    show_default=True,
    help="What to group time by.",
)
@click.option("-n", "top_n", default=20, show_default=True, type=COUNT, help="Rows to show.")
@click.option(
    "--rank", type=int, default=None, help="Only this rank (default: all ranks together)."
)
@click.option(
    "--wide",
    is_flag=True,
    help="Full kernel and op names and every column, however wide the terminal.",
)
@json_option("all rows", takes_inputs=True)
@format_options
@strict
@salvage
@rank_options
@click.pass_context
def top(
    ctx: click.Context,
    inputs: tuple[Path, ...],
    by: str,
    top_n: int,
    rank: int | None,
    wide: bool,
    json_out: Path | None,
    out_format: str | None,
    output: Path | None,
) -> None:
    """Where the time went: the top kernels, operators, layers, annotations, steps, API calls
    or memory copies.

    \b
    --by kernel      GPU kernels (and copies) by total time, with their launching op
    --by op          framework ops: device self time (kernels launched directly), device
                     total (with callees), host time, calls, the costliest input shapes;
                     on a trace without GPU kernels: CPU ops by host self and total time
    --by shape       framework ops by name and input shape (record_shapes=True): calls,
                     device and host self / total time, the innermost call-stack frame
    --by layer       nn.Module paths (needs with_stack=True), forward vs backward
    --by module-type nn.Module types over all their instances (Qwen2Attention ×24), with
                     their sub-modules
    --by annotation  record_function / user annotations
    --by step        per ProfilerStep: wall time, GPU busy, compute, exposed comm, idle
    --by api         CUDA/HIP runtime and driver calls (host side): calls, total, mean,
                     median, min, max, stddev, share (like nsys stats cuda_api_sum)
    --by memcpy      memory copies by direction and memsets: count, time statistics, bytes
                     (like nsys stats cuda_gpu_mem_time_sum / cuda_gpu_mem_size_sum)

    --by kernel also gives the median, min, max and sample stddev per kernel (nsys stats
    cuda_gpu_kern_sum). Kernel names are shortened to fit the terminal
    (elementwise<MulFunctor<bf16>>); --wide shows them in full, as JSON and CSV always do.
    --format csv prints every row (not just -n) as CSV with times in integer ns, sizes in
    bytes; -o FILE writes it to a file. --json FILE writes every row as JSON (--json alone
    prints it).

    Kernels that cannot be linked to a CPU op are listed as [unattributed]: rows always add
    up to the total GPU time.

    \b
    Examples:
      traceinsight top trace.json.gz
      traceinsight top traces/ --by op -n 30
      traceinsight top trace.json.gz --by module-type
      traceinsight top traces/ --by step --rank 2 --json steps.json
      traceinsight top trace.json.gz --wide --no-cache
      traceinsight top report.sqlite --by api
      traceinsight top trace.json.gz --by memcpy --format csv -o memcpy.csv
    """
    inputs, json_out = with_json_input(ctx, inputs, json_out)
    from traceinsight.analysis import Analysis
    from traceinsight.analysis.rollups import records
    from traceinsight.ingest import load
    from traceinsight.render.top import render_top
    from traceinsight.util.progress import Progress

    store = load(list(inputs), quiet=ctx.obj["quiet"], **loading(ctx))
    an = Analysis(store)
    prog = Progress("analyse", quiet=ctx.obj["quiet"])
    prog.stage("attribution" if by != "step" else "breakdown", 0.0)
    try:
        if by == "op" and not an.has_gpu_activities(rank):  # a CPU-only trace: its CPU ops
            from traceinsight.analysis.host import op_table

            table = op_table(an.attribution, rank)
        else:
            table = an.rollup(by, rank)
        rows = records(table)
        cov = an.attribution.coverage(rank)
    finally:
        prog.done()
    out_format, output = json_target(json_out, out_format, output)
    fmt_ = out_format or "text"
    if fmt_ == "json":
        text = json.dumps(
            {"by": by, "rank": rank, "coverage": cov, "rows": rows}, indent=2, default=str
        )
    elif fmt_ == "csv":
        from traceinsight.render.csvout import to_csv

        text = to_csv(rows, list(table.columns) if not rows else None)
    else:
        text = render_top(
            rows,
            by,
            top_n,
            coverage=cov,
            ranks=len(store.ranks),
            rank=rank,
            wide=wide,
            activity=an.activity(rank),
        )
    write_output(text, output, inputs)
