"""``traceinsight ingest``: read traces into a parquet trace store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from traceinsight.cli.ranks import rank_options

if TYPE_CHECKING:  # the commands import the library lazily: a quick start for every command
    pass
from traceinsight.cli.options import (
    CONTEXT,
    INPUTS_AFTER_JSON,
    json_option,
    strict,
    with_json_input,
    write_output,
)


@click.command(context_settings=CONTEXT)
@INPUTS_AFTER_JSON
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path),
    help="Store directory to write (default: the cache, keyed by file content).",
)
@click.option("--force", is_flag=True, help="Replace an existing store at --output.")
@click.option(
    "--salvage",
    is_flag=True,
    help="Read the complete events of a truncated trace instead of refusing it.",
)
@json_option("the store's location and counts", takes_inputs=True)
@strict
@rank_options
@click.pass_context
def ingest(
    ctx: click.Context,
    inputs: tuple[Path, ...],
    output: Path | None,
    force: bool,
    salvage: bool,
    json_out: Path | None,
) -> None:
    """Read traces into a parquet trace store.

    INPUTS is one trace file, several per-rank files of one run, or one folder of per-rank
    files. The rank of each file comes from its distributedInfo, else from its name
    (rank-3..., worker3...). Re-running on unchanged input reuses the store.

    \b
    Examples:
      traceinsight ingest trace.json.gz
      traceinsight ingest traces/ -o run.tistore
    """
    inputs, json_out = with_json_input(ctx, inputs, json_out)
    from traceinsight.ingest.prehash import start as start_hashing

    start_hashing(inputs)  # the traces' sha256 (the content key) while the library imports
    from traceinsight.ingest import ingest as do_ingest

    store = do_ingest(
        list(inputs),
        output,
        force=force,
        salvage=salvage,
        quiet=ctx.obj["quiet"],
        strict=ctx.obj.get("strict", False),
    )
    ranks = [r["rank"] for r in store.ranks]
    info = {
        "store": str(store.path),
        "tables": store.row_counts,
        "ranks": ranks,
        "diagnostics": len(store.meta.get("diagnostics", [])),
    }
    if json_out is not None:
        write_output(json.dumps(info, indent=2), json_out, inputs)
    else:
        rows = ", ".join(f"{k} {v:,}" for k, v in store.row_counts.items() if v)
        click.echo(f"store: {store.path}")
        click.echo(f"ranks: {', '.join(str(r) for r in ranks)}; rows: {rows}")
