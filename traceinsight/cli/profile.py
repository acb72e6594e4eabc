"""The ``traceinsight profile -- COMMAND`` command (registered on the group in
:mod:`traceinsight.cli`); the recording itself is :mod:`traceinsight.capture.profile_run`."""

from __future__ import annotations

import sys
from pathlib import Path

import click


@click.command(
    context_settings={
        "help_option_names": ["-h", "--help"],
        "max_content_width": 100,
        "ignore_unknown_options": True,
        "allow_interspersed_args": False,
    }
)
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path),
    default=Path("traceinsight-profile"),
    show_default=True,
    help="Folder for the traces (rank-N.pt.trace.json.gz, one per rank).",
)
@click.option(
    "--wait",
    default=2,
    show_default=True,
    type=click.IntRange(1),
    help="Optimizer steps skipped first (start-up; at least the first, after which "
    "the profiler starts).",
)
@click.option(
    "--warmup",
    default=2,
    show_default=True,
    type=click.IntRange(0),
    help="Steps the profiler warms up on (not kept).",
)
@click.option(
    "--active", default=6, show_default=True, type=click.IntRange(1), help="Steps recorded."
)
@click.option(
    "--step-on",
    type=click.Choice(["optimizer", "none"]),
    default="optimizer",
    show_default=True,
    help="What ends a step: each optimizer.step(), or none (record "
    "the whole run as one window, e.g. inference).",
)
@click.option("--no-stack", is_flag=True, help="Without Python stacks (less overhead; no layers).")
@click.option("--no-memory", is_flag=True, help="Without allocator events (no memory rules).")
@click.option("--force", is_flag=True, help="Replace the traces of an earlier recording in -o.")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def profile(
    output: Path,
    wait: int,
    warmup: int,
    active: int,
    step_on: str,
    no_stack: bool,
    no_memory: bool,
    force: bool,
    command: tuple[str, ...],
) -> None:
    """Record a run without editing its script, then diagnose it.

    COMMAND runs as given, after --. Every Python process it starts records itself (under
    torchrun: each rank to its own file) with the settings of traceinsight.capture: shapes,
    memory, stacks, modules and a schedule whose steps are the script's optimizer steps.
    Exit code: the command's (2 when nothing could be recorded).

    \b
    Examples:
      traceinsight profile -- python train.py --epochs 1
      traceinsight profile -o run/ -- torchrun --nproc_per_node 8 train.py
      traceinsight profile --step-on none -o infer/ -- python serve_batch.py
      traceinsight diagnose run/ --html report.html        (the command it prints next)
    """
    from traceinsight.capture.profile_run import Settings, record

    settings = Settings(
        out=str(output),
        wait=wait,
        warmup=warmup,
        active=active,
        step_on=step_on,
        with_stack=not no_stack,
        profile_memory=not no_memory,
    )
    rec = record(list(command), settings, force=force)
    for line in rec.summary_lines(settings):
        click.echo(line, err=not rec.files)
    if rec.returncode:
        sys.exit(rec.returncode)
    if not rec.files:
        sys.exit(2)
