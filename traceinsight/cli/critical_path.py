"""``traceinsight critical-path``: each step's critical path as a table, and an overlay trace."""

from __future__ import annotations

from pathlib import Path

import click

from traceinsight.cli.options import CONTEXT, INPUTS, loading, salvage, strict


@click.command("critical-path", context_settings=CONTEXT)
@INPUTS
@click.option("--step", "step", type=int, default=None, help="Only step N (ProfilerStep#N).")
@click.option("--rank", type=int, default=None, help="Only this rank (default: all).")
@click.option(
    "--overlay",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the trace with the path as flow events and a track of its own (.json or "
    ".json.gz; opens in ui.perfetto.dev and chrome://tracing).",
)
@click.option("-n", "top_n", default=8, show_default=True, type=int, help="Top path items.")
@strict
@salvage
@click.pass_context
def critical_path(
    ctx: click.Context,
    inputs: tuple[Path, ...],
    step: int | None,
    rank: int | None,
    overlay: Path | None,
    top_n: int,
) -> None:
    """Why each step takes its time: the critical path of every step (length = the measured
    step), its breakdown by category, the replayed step and the items on the path.

    \b
    Categories: compute, communication, copies, host and Python, launch overhead, input,
    synchronisation, start-up and compile, unrecorded.

    \b
    Examples:
      traceinsight critical-path trace.json.gz
      traceinsight critical-path trace.json.gz --step 12 --overlay path.json.gz
    """
    from traceinsight.analysis import Analysis
    from traceinsight.analysis.critical_path import step_models
    from traceinsight.analysis.critical_path.graph import CATEGORIES
    from traceinsight.analysis.critical_path.overlay import write_overlay
    from traceinsight.analysis.critical_path.path import top_items
    from traceinsight.errors import InputError
    from traceinsight.ingest import load
    from traceinsight.render.critical_path import render_models

    store = load(list(inputs), quiet=ctx.obj["quiet"], **loading(ctx))
    an = Analysis(store)
    models = step_models(an, None if rank is None else [rank], step)
    if not models:
        raise InputError(
            "no step to analyse" + (f" (step {step})" if step is not None else ""),
            path=str(inputs[0]),
            hint="traceinsight top PATH --by step lists the steps",
        )
    tops = [top_items(m.graph, m.path, top_n) for m in models]
    click.echo(
        render_models(
            models, tops, detail=step is not None or len(models) == 1, categories=CATEGORIES
        )
    )
    if overlay is not None:
        n = write_overlay(store, models, overlay)
        click.echo(f"wrote {overlay} ({n:,} events; open it at ui.perfetto.dev)")
