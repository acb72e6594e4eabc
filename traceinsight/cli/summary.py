"""``traceinsight summary``: a first read-out of a store, straight from its tables."""

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
@json_option("the summary", takes_inputs=True)
@click.option(
    "-n", "--top", "top_n", default=10, show_default=True, type=COUNT, help="Kernels to list."
)
@format_options
@strict
@salvage
@rank_options
@click.pass_context
def summary(
    ctx: click.Context,
    inputs: tuple[Path, ...],
    json_out: Path | None,
    top_n: int,
    out_format: str | None,
    output: Path | None,
) -> None:
    """A first read-out: span, ranks, devices, steps, event counts, kernel totals, top kernels.

    INPUTS is a store directory or trace file(s)/folder (ingested through the cache).

    \b
    Examples:
      traceinsight summary trace.json.gz
      traceinsight summary traces/ -n 20
      traceinsight summary run.tistore --json summary.json
      traceinsight summary trace.json.gz --json -      (print the JSON)
      traceinsight summary trace.json.gz --no-cache    (ingest afresh)
      traceinsight summary traces/ --format csv -o ranks.csv   (one row per rank)
    """
    inputs, json_out = with_json_input(ctx, inputs, json_out)
    from traceinsight.ingest import load
    from traceinsight.store.summary import render_summary, summarize

    store = load(list(inputs), quiet=ctx.obj["quiet"], **loading(ctx))
    s = summarize(store, top_n=top_n)
    out_format, output = json_target(json_out, out_format, output)
    fmt_ = out_format or "text"
    if fmt_ == "json":
        text = json.dumps(s, indent=2)
    elif fmt_ == "csv":
        from traceinsight.render.csvout import summary_csv

        text = summary_csv(s)
    else:
        text = render_summary(s)
    write_output(text, output, inputs)
