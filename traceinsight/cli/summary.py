"""``traceinsight summary``: a first read-out of a store, straight from its tables."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from traceinsight.cli.checks import COUNT

if TYPE_CHECKING:  # the commands import the library lazily: a quick start for every command
    pass
from traceinsight.cli.options import (
    CONTEXT,
    INPUTS,
    format_options,
    loading,
    resolve_format,
    salvage,
    strict,
    write_output,
)


@click.command(context_settings=CONTEXT)
@INPUTS
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON (--format json).")
@click.option(
    "-n", "--top", "top_n", default=10, show_default=True, type=COUNT, help="Kernels to list."
)
@format_options
@strict
@salvage
@click.pass_context
def summary(
    ctx: click.Context,
    inputs: tuple[Path, ...],
    as_json: bool,
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
      traceinsight summary run.tistore --json > summary.json
      traceinsight summary traces/ --format csv -o ranks.csv   (one row per rank)
    """
    from traceinsight.ingest import load
    from traceinsight.store.summary import render_summary, summarize

    store = load(list(inputs), quiet=ctx.obj["quiet"], **loading(ctx))
    s = summarize(store, top_n=top_n)
    fmt_ = resolve_format(as_json, out_format)
    if fmt_ == "json":
        text = json.dumps(s, indent=2)
    elif fmt_ == "csv":
        from traceinsight.render.csvout import summary_csv

        text = summary_csv(s)
    else:
        text = render_summary(s)
    write_output(text, output, inputs)
