"""The ``traceinsight`` command: a thin layer over the library API.

Exit codes: 0 success; 1 a finding reached ``--fail-on`` (or a compare gate failed);
2 usage, input, configuration or installation error (one line on stderr, no traceback
unless ``--debug``).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import click

from . import __version__
from .errors import TraceInsightError

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class _Group(click.Group):
    """Turns library errors into one line on stderr and exit code 2."""

    def invoke(self, ctx: click.Context) -> Any:
        debug = bool(ctx.params.get("debug")) or os.environ.get("TRACEINSIGHT_DEBUG") == "1"
        try:
            return super().invoke(ctx)
        except TraceInsightError as e:
            if debug:
                raise
            click.echo(f"traceinsight: error: {e.one_line()}", err=True)
            ctx.exit(e.exit_code)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except KeyboardInterrupt:
            click.echo("traceinsight: interrupted", err=True)
            ctx.exit(130)
        except MemoryError:
            if debug:
                raise
            click.echo("traceinsight: error: out of memory (hint: free memory or use a machine "
                       "with more RAM; ingest needs about 2.5x the uncompressed trace size)",
                       err=True)
            ctx.exit(2)
        except Exception as e:  # noqa: BLE001 - the last line of defence for users
            if debug:
                raise
            click.echo(f"traceinsight: internal error: {type(e).__name__}: {e} "
                       "(hint: rerun with --debug for the traceback and report it)", err=True)
            ctx.exit(2)


def write_atomic(path: Path, text: str) -> None:
    """Write a text file via a temporary sibling and rename: never a half-written output."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


@click.group(cls=_Group, context_settings=CONTEXT)
@click.version_option(__version__, "-V", "--version", prog_name="traceinsight")
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bars.")
@click.pass_context
def main(ctx: click.Context, debug: bool, quiet: bool) -> None:
    """Tell why a training or inference run was slow, from its profiler traces.

    \b
    Inputs: PyTorch profiler (Kineto) traces, .json or .json.gz, one file per rank,
    or a folder of per-rank files. Traces are ingested once into a parquet store
    (cached by content), so a second run on the same trace starts in a fraction of
    the time.

    \b
    Start here:
      traceinsight summary trace.json.gz      what is in the trace
      traceinsight ingest  trace.json.gz -o run.tistore   keep a store next to it

    Record a trace that diagnoses well with traceinsight.capture.profile() (record_shapes,
    profile_memory, with_stack and a schedule with ProfilerStep markers).
    """
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug
    ctx.obj["quiet"] = quiet


_INPUTS = click.argument("inputs", nargs=-1, required=True, type=click.Path(path_type=Path))


@main.command(context_settings=CONTEXT)
@_INPUTS
@click.option("-o", "--output", type=click.Path(path_type=Path),
              help="Store directory to write (default: the cache, keyed by file content).")
@click.option("--force", is_flag=True, help="Replace an existing store at --output.")
@click.option("--salvage", is_flag=True,
              help="Read the complete events of a truncated trace instead of refusing it.")
@click.option("--json", "as_json", is_flag=True, help="Print the store's location and counts as JSON.")
@click.pass_context
def ingest(ctx: click.Context, inputs: tuple[Path, ...], output: Path | None, force: bool,
           salvage: bool, as_json: bool) -> None:
    """Read traces into a parquet trace store.

    INPUTS is one trace file, several per-rank files of one run, or one folder of per-rank
    files. The rank of each file comes from its distributedInfo, else from its name
    (rank-3..., worker3...). Re-running on unchanged input reuses the store.

    \b
    Examples:
      traceinsight ingest trace.json.gz
      traceinsight ingest traces/ -o run.tistore
    """
    from .ingest import ingest as do_ingest

    store = do_ingest(list(inputs), output, force=force, salvage=salvage,
                      quiet=ctx.obj["quiet"])
    info = {"store": str(store.path), "tables": store.row_counts,
            "ranks": [r["rank"] for r in store.ranks],
            "diagnostics": len(store.meta.get("diagnostics", []))}
    if as_json:
        click.echo(json.dumps(info, indent=2))
    else:
        rows = ", ".join(f"{k} {v:,}" for k, v in store.row_counts.items() if v)
        click.echo(f"store: {store.path}")
        click.echo(f"ranks: {', '.join(str(r) for r in info['ranks'])}; rows: {rows}")


@main.command(context_settings=CONTEXT)
@_INPUTS
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option("-n", "--top", "top_n", default=10, show_default=True, help="Kernels to list.")
@click.pass_context
def summary(ctx: click.Context, inputs: tuple[Path, ...], as_json: bool, top_n: int) -> None:
    """A first read-out: span, ranks, devices, steps, event counts, kernel totals, top kernels.

    INPUTS is a store directory or trace file(s)/folder (ingested through the cache).
    """
    from .ingest import load
    from .summary import render_summary, summarize

    store = load(list(inputs), quiet=ctx.obj["quiet"])
    s = summarize(store, top_n=top_n)
    if as_json:
        click.echo(json.dumps(s, indent=2))
    else:
        click.echo(render_summary(s))


@main.command(context_settings=CONTEXT)
@_INPUTS
@click.option("--by", type=click.Choice(["kernel", "op", "layer", "annotation", "step"]),
              default="kernel", show_default=True, help="What to group GPU time by.")
@click.option("-n", "top_n", default=20, show_default=True, help="Rows to show.")
@click.option("--rank", type=int, default=None, help="Only this rank (default: all ranks together).")
@click.option("--json", "as_json", is_flag=True, help="Print all rows as JSON.")
@click.pass_context
def top(ctx: click.Context, inputs: tuple[Path, ...], by: str, top_n: int, rank: int | None,
        as_json: bool) -> None:
    """Where the GPU time went: the top kernels, operators, layers, annotations or steps.

    \b
    --by kernel      GPU kernels (and copies) by total time, with their launching op
    --by op          framework ops: device self time (kernels launched directly), device
                     total (with callees), host time, calls, the costliest input shapes
    --by layer       nn.Module paths (needs with_stack=True), forward vs backward
    --by annotation  record_function / user annotations
    --by step        per ProfilerStep: wall time, GPU busy, compute, exposed comm, idle

    Kernels that cannot be linked to a CPU op are listed as [unattributed]: rows always add
    up to the total GPU time.
    """
    from .analysis import Analysis
    from .ingest import load
    from .render.top import records, render_top

    store = load(list(inputs), quiet=ctx.obj["quiet"])
    an = Analysis(store)
    if as_json:
        df = an.rollup(by, rank)
        click.echo(json.dumps({"by": by, "rank": rank, "coverage": an.attribution.coverage(rank),
                               "rows": records(df)}, indent=2, default=str))
    else:
        click.echo(render_top(an, by, top_n, rank))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
