"""``traceinsight compare``: two runs, the change of step time explained, and the CI gates."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from traceinsight.cli.base import emit
from traceinsight.cli.checks import COUNT, FINITE, POSITIVE, device_key

if TYPE_CHECKING:  # the commands import the library lazily: a quick start for every command
    pass
from traceinsight.cli.options import (
    CONTEXT,
    format_options,
    json_option,
    rule_options,
    salvage,
    strict,
    write_output,
)
from traceinsight.cli.report import result_of


@click.command(context_settings=CONTEXT)
@click.argument("before", type=click.Path(path_type=Path))
@click.argument("after", type=click.Path(path_type=Path))
@json_option("the comparison")
@click.option("--html", "html_out", type=click.Path(path_type=Path), help="Write an HTML report.")
@click.option("--markdown", "md_out", type=click.Path(path_type=Path), help="Write Markdown.")
@click.option(
    "--by",
    type=click.Choice(["auto", "layer", "op", "class"]),
    default="auto",
    show_default=True,
    help="Split compute time by layer (module path), top-level op, or "
    "kernel class; auto picks the finest both sides support.",
)
@click.option(
    "--fail-if-slower",
    type=FINITE,
    metavar="PCT",
    help="Exit 1 when the p50 step time regresses by more than PCT percent (CI gate); "
    "exit 2 when the runs are not comparable or a side has no step time.",
)
@click.option(
    "--allow-incomparable",
    is_flag=True,
    help="Gate with --fail-if-slower even when the runs are not comparable (different "
    "model shapes or world sizes): on the normalised change where there is one.",
)
@click.option(
    "--tokens-per-step",
    "tokens",
    type=POSITIVE,
    nargs=2,
    metavar="BEFORE AFTER",
    help="Tokens per step of each side: step time is then also compared per token "
    "where the work per step differs.",
)
@click.option(
    "-n", "top_n", default=12, show_default=True, type=COUNT, help="Contributors to list."
)
@format_options
@rule_options
@click.option(
    "--device", callback=device_key, help="Device for both sides' roofline (traces only)."
)
@strict
@salvage
@click.pass_context
def compare(
    ctx: click.Context,
    before: Path,
    after: Path,
    json_out: Path | None,
    html_out: Path | None,
    md_out: Path | None,
    by: str,
    fail_if_slower: float | None,
    allow_incomparable: bool,
    tokens: tuple[float, float] | None,
    top_n: int,
    out_format: str | None,
    output: Path | None,
    rules_dirs: tuple[Path, ...],
    overrides: tuple[str, ...],
    device: str | None,
) -> None:
    """Compare two runs: what changed in step time, and which layers, ops or parts explain it.

    BEFORE and AFTER are each a result JSON (diagnose --json), a store, a trace file or a
    folder of per-rank traces. Layers and ops are aligned by module path and top-level op, so
    runs on different GPUs or libraries (H100 vs MI300X) still line up. The contributors add up
    exactly to the change of the mean step time. The headline says first whether the runs can
    be compared: different model shapes, world sizes or run modes make them not comparable;
    different GPUs, dtypes, eager vs torch.compile or too few steps call for caution
    (docs/COMPARE.md).

    \b
    Examples:
      traceinsight compare before.json.gz after.json.gz
      traceinsight compare base/ new/ --json delta.json --fail-if-slower 5
      traceinsight compare h100.json.gz mi300x.json.gz --html compare.html --markdown compare.md
      traceinsight compare base/ new/ --format csv -o contributors.csv   (one row per contributor)
    """
    from traceinsight.compare.comparability import gate
    from traceinsight.compare.explain import compare as run_compare
    from traceinsight.options import RooflineOptions
    from traceinsight.render.terminal import render_compare
    from traceinsight.util.outputs import check_files
    from traceinsight.util.pathlabel import distinct_pair

    if out_format is not None and json_out is not None and str(json_out) == "-":
        raise click.UsageError(f"--json - and --format {out_format} both print: pick one")
    check_files([json_out, md_out, html_out, output], [before, after])
    opts = RooflineOptions(device=device)
    a = result_of(ctx, before, rules_dirs, overrides, opts)
    b = result_of(ctx, after, rules_dirs, overrides, opts)
    c = run_compare(
        a,
        b,
        by=by,
        labels=distinct_pair(before.resolve(), after.resolve()),
        tokens=(tokens[0], tokens[1]) if tokens else (None, None),
    )

    def md() -> str:
        from traceinsight.render.markdown import render_compare_markdown

        return render_compare_markdown(c)

    def html() -> str:
        from traceinsight.render.html import render_compare_html

        return render_compare_html(c)

    if out_format is not None or output is not None:
        from traceinsight.render.csvout import compare_csv

        if json_out is not None or md_out is not None or html_out is not None:
            emit(
                json_out,
                md_out,
                html_out,
                as_json=lambda: json.dumps(c, indent=2, default=str),
                as_md=md,
                as_html=html,
                as_text=lambda: "",
            )
        text = {
            "csv": lambda: compare_csv(c),
            "json": lambda: json.dumps(c, indent=2, default=str),
        }.get(out_format or "text", lambda: render_compare(c, n=top_n))()
        write_output(text, output, (before, after))
    else:
        emit(
            json_out,
            md_out,
            html_out,
            as_json=lambda: json.dumps(c, indent=2, default=str),
            as_md=md,
            as_html=html,
            as_text=lambda: render_compare(c, n=top_n),
        )
    if fail_if_slower is not None:
        code, line = gate(
            c,
            fail_if_slower,
            allow_incomparable=allow_incomparable,
            names=(str(before), str(after)),
        )
        if line:
            click.echo(line, err=True)
        if code:
            ctx.exit(code)
