"""The ``traceinsight`` command group: its help, global options and the context every command
reads."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from traceinsight import __version__
from traceinsight.cli.base import Group

if TYPE_CHECKING:  # the commands import the library lazily: a quick start for every command
    pass
from traceinsight.cli.options import CONTEXT


@click.group(cls=Group, context_settings=CONTEXT)
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
      traceinsight diagnose trace.json.gz                why it was slow, in the terminal
      traceinsight diagnose traces/ --html report.html   a folder of per-rank traces; the report
      traceinsight profile -o run/ -- python train.py    record a run (script unchanged), then
      traceinsight diagnose run/                         diagnose what it recorded

    Every command has --help with examples. -q/--quiet and --debug work before or after the
    command. From Python, traceinsight.capture.profile() records a trace that diagnoses well
    (record_shapes, profile_memory, with_stack and a schedule with ProfilerStep markers).
    """
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug
    ctx.obj["quiet"] = quiet
