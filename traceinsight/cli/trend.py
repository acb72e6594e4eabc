"""``traceinsight trend``: the key figures of saved results across runs, and the CI gate."""

from __future__ import annotations

import json
from pathlib import Path

import click

from traceinsight.cli.base import emit
from traceinsight.cli.checks import FINITE
from traceinsight.cli.options import CONTEXT, json_option


@click.command(context_settings=CONTEXT)
@click.argument("results", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--html", "html_out", type=click.Path(path_type=Path), help="Write an HTML page.")
@json_option("the trend")
@click.option(
    "-m",
    "--metric",
    "metrics",
    multiple=True,
    metavar="NAME",
    help="Show only this figure (step_time, mfu, peak_memory, exposed_comm, gpu_idle) or any "
    "metric by name (traceinsight rules lists them); repeatable. Default: the five figures.",
)
@click.option(
    "--fail-if-regressed",
    type=FINITE,
    metavar="PCT",
    help="Exit 1 when the last run's step time p50 is more than PCT percent above the median "
    "of the runs before it (CI gate); exit 2 when there is no earlier run or no step time.",
)
@click.pass_context
def trend(
    ctx: click.Context,
    results: tuple[Path, ...],
    html_out: Path | None,
    json_out: Path | None,
    metrics: tuple[str, ...],
    fail_if_regressed: float | None,
) -> None:
    """Key figures across runs: step time, MFU, peak memory, exposed comm and GPU idle share.

    RESULTS are result JSON files of ``traceinsight diagnose --json``, oldest first: the runs
    are taken in the order given (a result records no time of its own). Each run is one row;
    a ``*`` marks a run whose configuration (device, world size, matrix dtypes, tool or
    runtime/driver versions) changed from the run before, and what changed is listed.

    \b
    Examples:
      traceinsight trend base.json mon.json tue.json
      traceinsight trend runs/*.json --html trend.html --fail-if-regressed 5
      traceinsight trend a.json b.json --metric step_time --metric dataloader_pct
    """
    from traceinsight.compare.trend import build_trend, regression_gate
    from traceinsight.render.trend import render_trend
    from traceinsight.result import DiagnosisResult
    from traceinsight.util.outputs import check_files

    check_files([json_out, html_out], list(results))
    loaded = [DiagnosisResult.load(str(p)) for p in results]
    t = build_trend(loaded, [str(p) for p in results], metrics)
    code, line = 0, None
    if fail_if_regressed is not None:
        code, line, facts = regression_gate(t, fail_if_regressed)
        t["gate"] = {"code": code, "line": line, **facts}

    def html() -> str:
        from traceinsight.render.html.trend_page import render_trend_html

        return render_trend_html(t, line)

    emit(
        json_out,
        None,
        html_out,
        as_json=lambda: json.dumps(t, indent=2, allow_nan=False),
        as_md=lambda: "",
        as_html=html,
        as_text=lambda: render_trend(t),
    )
    if line:
        click.echo(f"traceinsight trend: {line}", err=True)
    if code:
        ctx.exit(code)
