"""``traceinsight diagnose``: why the run was slow, in the terminal and as HTML, Markdown and
JSON."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from traceinsight.cli.base import emit, with_skipped
from traceinsight.cli.checks import POSITIVE, device_key, step_range
from traceinsight.cli.ranks import rank_options

if TYPE_CHECKING:  # the commands import the library lazily: a quick start for every command
    pass
from traceinsight.cli.options import (
    CONTEXT,
    INPUTS,
    SEVERITY_CHOICES,
    json_option,
    loading,
    rule_options,
    salvage,
    strict,
)


@click.command(context_settings=CONTEXT)
@INPUTS
@json_option("the result")
@click.option(
    "--markdown",
    "md_out",
    type=click.Path(path_type=Path),
    help="Write a Markdown summary for a ticket body.",
)
@click.option(
    "--html",
    "html_out",
    type=click.Path(path_type=Path),
    help="Write the self-contained HTML report.",
)
@click.option(
    "--fail-on",
    type=click.Choice(SEVERITY_CHOICES),
    default="never",
    show_default=True,
    help="Exit 1 when a finding has this severity or higher (for CI).",
)
@rule_options
@click.option(
    "--device",
    callback=device_key,
    help="Device to use for the roofline (a key from `traceinsight devices`).",
)
@click.option(
    "--peak-tflops", type=POSITIVE, help="Dense bf16/fp16 peak in TFLOP/s (unknown GPUs)."
)
@click.option("--peak-bw", type=POSITIVE, help="Memory bandwidth in GB/s (unknown GPUs).")
@click.option("--params", type=POSITIVE, help="Model parameters, for the 6·N·tokens MFU estimate.")
@click.option(
    "--tokens-per-step", type=POSITIVE, help="Tokens per step over all ranks (MFU estimate)."
)
@click.option(
    "--mode",
    type=click.Choice(["train", "infer"]),
    default=None,
    help="6·N (train) or 2·N (infer) FLOPs per token; default: train if backward kernels exist.",
)
@click.option("-v", "--verbose", is_flag=True, help="All evidence tables and recommendations.")
@click.option(
    "--color/--no-color", default=None, help="Colour the terminal output (default: on a TTY)."
)
@click.option(
    "--recompute",
    is_flag=True,
    help="Recompute the analysis even when the store already holds the result of the "
    "same code, rules, thresholds and options (it is cached there by default).",
)
@click.option(
    "--max-memory",
    "max_memory",
    type=POSITIVE,
    metavar="MB",
    default=None,
    help="Memory the analysis may use (default 4096, or $TRACEINSIGHT_MAX_MEMORY_MB). "
    "A trace that would need more is analysed in step chunks, one at a time: every step in "
    "the step table, time breakdown and rollups; the report says what rests on its last "
    "steps.",
)
@click.option(
    "--steps",
    "steps",
    metavar="RANGE",
    default=None,
    callback=step_range,
    help="Diagnose only these steps: last:N (the last N), A:B (ProfilerStep#A through #B), "
    "A: or :B; e.g. --steps last:100, --steps 20:80. Every figure then describes those "
    "steps, and the report says so.",
)
@click.option(
    "--memory-snapshot",
    "memory_snapshots",
    multiple=True,
    type=click.Path(path_type=Path),
    help="A CUDA memory snapshot of the same run (torch.cuda.memory._dump_snapshot() "
    "pickle, or an export_memory_timeline raw file): fragmentation, OOMs and "
    "memory over time from the allocator itself. Repeatable (one per rank).",
)
@strict
@salvage
@rank_options
@click.pass_context
def diagnose(
    ctx: click.Context,
    inputs: tuple[Path, ...],
    json_out: Path | None,
    md_out: Path | None,
    html_out: Path | None,
    fail_on: str,
    rules_dirs: tuple[Path, ...],
    overrides: tuple[str, ...],
    device: str | None,
    peak_tflops: float | None,
    peak_bw: float | None,
    params: float | None,
    tokens_per_step: float | None,
    mode: str | None,
    verbose: bool,
    color: bool | None,
    recompute: bool,
    max_memory: float | None = None,
    steps: str | None = None,
    memory_snapshots: tuple[Path, ...] = (),
) -> None:
    """Why was this run slow? Findings with evidence and advice, ordered by impact.

    INPUTS is a trace file, the per-rank files of one run, a folder of them, or a store; a
    CUDA memory snapshot (.pickle) alone gives a memory-only diagnosis.

    \b
    Exit codes: 0 done; 1 a finding reached --fail-on; 2 bad input or options.
    \b
    Examples:
      traceinsight diagnose trace.json.gz
      traceinsight diagnose traces/ --html report.html --markdown ticket.md
      traceinsight diagnose run.tistore --json result.json --fail-on high
      traceinsight diagnose trace.json.gz --set launch-bound.min_idle_launch_pct=25
      traceinsight diagnose trace.json.gz --memory-snapshot snapshot.pickle
      traceinsight diagnose huge.pt.trace.json --max-memory 8000
      traceinsight diagnose huge.pt.trace.json --steps last:100
      traceinsight diagnose snapshot.pickle
    """
    from traceinsight.ingest.prehash import start as start_hashing

    start_hashing(inputs)  # the traces' sha256 (the cache key) while the library imports
    from traceinsight.diagnose import diagnose as run_diagnose
    from traceinsight.ingest import load
    from traceinsight.options import RooflineOptions
    from traceinsight.render.terminal import render
    from traceinsight.util.outputs import check_files
    from traceinsight.util.progress import Progress

    check_files([json_out, md_out, html_out], inputs)
    store = load(
        list(inputs),
        quiet=ctx.obj["quiet"],
        **loading(ctx),
        memory=memory_snapshots,
    )
    opts = RooflineOptions(
        device=device,
        peak_tflops=peak_tflops,
        peak_bw_gbs=peak_bw,
        params=params,
        tokens_per_step=tokens_per_step,
        mode=mode,
    )
    prog = Progress("analyse", quiet=ctx.obj["quiet"])
    try:
        result = run_diagnose(
            store,
            options=opts,
            rules_dirs=rules_dirs,
            overrides=overrides,
            command=["traceinsight", *sys.argv[1:]] if sys.argv else [],
            cache=not recompute,
            progress=prog,
            max_memory_mb=max_memory,
            steps=steps,
        )
    except BaseException:
        prog.stop()
        raise
    result, notes = with_skipped(result, list(inputs), store)
    use_color = sys.stdout.isatty() if color is None else color

    def md() -> str:
        from traceinsight.render.markdown import render_markdown

        return render_markdown(result)

    def html() -> str:
        from traceinsight.render.html import render_html

        return render_html(result)

    emit(
        json_out,
        md_out,
        html_out,
        as_json=result.to_json,
        as_md=md,
        as_html=html,
        as_text=lambda: render(result, color=use_color, verbose=verbose),
        progress=prog,
        notes=notes,
    )
    exit_on(ctx, result, fail_on)


def exit_on(ctx: click.Context, result, fail_on: str) -> None:
    if fail_on == "never":
        return
    from traceinsight.result import SEVERITY_RANK

    limit = SEVERITY_RANK[fail_on]
    hit = [f for f in result.findings if SEVERITY_RANK.get(f.severity, 9) <= limit]
    if hit:
        click.echo(
            f"traceinsight: {len(hit)} finding(s) at or above {fail_on}: "
            + ", ".join(f.rule for f in hit),
            err=True,
        )
        ctx.exit(1)
