"""``traceinsight report``: the HTML (and Markdown) report of a result JSON or a trace, and how
a source is read as a result."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click

from traceinsight.cli.base import with_skipped
from traceinsight.cli.ranks import rank_options

if TYPE_CHECKING:  # the commands import the library lazily: a quick start for every command
    from traceinsight.options import RooflineOptions
    from traceinsight.result import DiagnosisResult
from traceinsight.cli.options import CONTEXT, loading, rule_options, salvage, strict


@click.command(context_settings=CONTEXT)
@click.argument("source", type=click.Path(path_type=Path))
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path),
    default=Path("report.html"),
    show_default=True,
    help="The HTML file to write.",
)
@click.option(
    "--markdown", "md_out", type=click.Path(path_type=Path), help="Also write the Markdown summary."
)
@rule_options
@strict
@salvage
@rank_options
@click.pass_context
def report(
    ctx: click.Context,
    source: Path,
    output: Path,
    md_out: Path | None,
    rules_dirs: tuple[Path, ...],
    overrides: tuple[str, ...],
) -> None:
    """Write the self-contained HTML report from a result JSON or a store/trace.

    SOURCE is a file written by `diagnose --json` (rendered as is) or a store or trace
    (diagnosed first, with the shipped rules plus --rules/--set).

    \b
    Examples:
      traceinsight report result.json -o report.html
      traceinsight report traces/ -o report.html --markdown ticket.md
      traceinsight report run.tistore --set comm-bound.min_exposed_comm_pct=20
    """
    from traceinsight.render.html import render_html
    from traceinsight.util.outputs import check_files, write_files

    check_files([output, md_out], [source])
    result = result_of(
        ctx, source, rules_dirs, overrides, None, command=["traceinsight", *sys.argv[1:]]
    )
    files = {output: render_html(result)}
    if md_out is not None:
        from traceinsight.render.markdown import render_markdown

        files[md_out] = render_markdown(result)
    write_files(files)  # all or none
    for f in files:
        click.echo(f"wrote {f}")


def is_result(path: Path) -> bool:
    """Whether ``path`` starts like a saved diagnosis result (its schema tag)."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    return b'"traceinsight.diagnosis"' in head


def result_of(
    ctx: click.Context,
    path: Path,
    rules_dirs: Sequence[Path],
    overrides: Sequence[str],
    opts: RooflineOptions | None,
    *,
    command: list[str] | None = None,
) -> DiagnosisResult:
    """A DiagnosisResult from a result JSON (read as is, without loading the analysis), a
    store, a trace file or a folder of rank traces (diagnosed; ``command`` is recorded, by
    default ``traceinsight diagnose PATH``)."""
    from traceinsight.result import DiagnosisResult

    if path.is_file() and path.suffix == ".json" and is_result(path):
        return DiagnosisResult.load(str(path))
    from traceinsight.diagnose import diagnose as run_diagnose
    from traceinsight.ingest import load
    from traceinsight.util.progress import Progress

    store = load([path], quiet=ctx.obj["quiet"], **loading(ctx))
    prog = Progress("analyse", quiet=ctx.obj["quiet"])
    try:
        result = run_diagnose(
            store,
            options=opts,
            rules_dirs=rules_dirs,
            overrides=overrides,
            command=command or ["traceinsight", "diagnose", str(path)],
            progress=prog,
        )
    finally:
        prog.done()
    return with_skipped(result, [path], store)[0]
