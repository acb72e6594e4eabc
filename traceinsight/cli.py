"""The ``traceinsight`` command: a thin layer over the library API.

Exit codes: 0 success; 1 a finding reached ``--fail-on`` (or a compare gate failed);
2 usage, input, configuration or installation error (one line on stderr, no traceback
unless ``--debug``).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click

from . import __version__
from .cli_base import Group, emit, with_skipped
from .cli_checks import COUNT, FINITE, POSITIVE, device_key
from .cli_profile import profile
from .cli_ranks import rank_options

if TYPE_CHECKING:  # the commands import the library lazily: a quick start for every command
    from .options import RooflineOptions
    from .result import DiagnosisResult

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


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


_INPUTS = click.argument("inputs", nargs=-1, required=True, type=click.Path(path_type=Path))


def _strict(f):
    """``--strict``: a rank file of the folder that cannot be read is an error, not a warning."""
    def keep(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
        ctx.ensure_object(dict)["strict"] = value
        return value

    return click.option("--strict", is_flag=True, expose_value=False, callback=keep,
                        help="Exit 2 when a rank file of the folder cannot be read (by default "
                             "a warning in the headline).")(f)


@main.command(context_settings=CONTEXT)
@_INPUTS
@click.option("-o", "--output", type=click.Path(path_type=Path),
              help="Store directory to write (default: the cache, keyed by file content).")
@click.option("--force", is_flag=True, help="Replace an existing store at --output.")
@click.option("--salvage", is_flag=True,
              help="Read the complete events of a truncated trace instead of refusing it.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the store's location and counts as JSON.")
@_strict
@rank_options
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
    from .prehash import start as start_hashing

    start_hashing(inputs)  # the traces' sha256 (the content key) while the library imports
    from .ingest import ingest as do_ingest

    store = do_ingest(list(inputs), output, force=force, salvage=salvage,
                      quiet=ctx.obj["quiet"], strict=ctx.obj.get("strict", False))
    ranks = [r["rank"] for r in store.ranks]
    info = {"store": str(store.path), "tables": store.row_counts, "ranks": ranks,
            "diagnostics": len(store.meta.get("diagnostics", []))}
    if as_json:
        click.echo(json.dumps(info, indent=2))
    else:
        rows = ", ".join(f"{k} {v:,}" for k, v in store.row_counts.items() if v)
        click.echo(f"store: {store.path}")
        click.echo(f"ranks: {', '.join(str(r) for r in ranks)}; rows: {rows}")


@main.command(context_settings=CONTEXT)
@_INPUTS
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option("-n", "--top", "top_n", default=10, show_default=True, type=COUNT,
              help="Kernels to list.")
@_strict
@click.pass_context
def summary(ctx: click.Context, inputs: tuple[Path, ...], as_json: bool, top_n: int) -> None:
    """A first read-out: span, ranks, devices, steps, event counts, kernel totals, top kernels.

    INPUTS is a store directory or trace file(s)/folder (ingested through the cache).

    \b
    Examples:
      traceinsight summary trace.json.gz
      traceinsight summary traces/ -n 20
      traceinsight summary run.tistore --json > summary.json
    """
    from .ingest import load
    from .summary import render_summary, summarize

    store = load(list(inputs), quiet=ctx.obj["quiet"], strict=ctx.obj.get("strict", False))
    s = summarize(store, top_n=top_n)
    if as_json:
        click.echo(json.dumps(s, indent=2))
    else:
        click.echo(render_summary(s))


@main.command(context_settings=CONTEXT)
@_INPUTS
@click.option("--by", type=click.Choice(["kernel", "op", "layer", "module-type", "annotation",
                                         "step"]),
              default="kernel", show_default=True, help="What to group GPU time by.")
@click.option("-n", "top_n", default=20, show_default=True, type=COUNT, help="Rows to show.")
@click.option("--rank", type=int, default=None,
              help="Only this rank (default: all ranks together).")
@click.option("--json", "as_json", is_flag=True, help="Print all rows as JSON.")
@_strict
@click.pass_context
def top(ctx: click.Context, inputs: tuple[Path, ...], by: str, top_n: int, rank: int | None,
        as_json: bool) -> None:
    """Where the GPU time went: the top kernels, operators, layers, annotations or steps.

    \b
    --by kernel      GPU kernels (and copies) by total time, with their launching op
    --by op          framework ops: device self time (kernels launched directly), device
                     total (with callees), host time, calls, the costliest input shapes
    --by layer       nn.Module paths (needs with_stack=True), forward vs backward
    --by module-type nn.Module types over all their instances (Qwen2Attention ×24), with
                     their sub-modules
    --by annotation  record_function / user annotations
    --by step        per ProfilerStep: wall time, GPU busy, compute, exposed comm, idle

    Kernels that cannot be linked to a CPU op are listed as [unattributed]: rows always add
    up to the total GPU time.

    \b
    Examples:
      traceinsight top trace.json.gz
      traceinsight top traces/ --by op -n 30
      traceinsight top trace.json.gz --by module-type
      traceinsight top traces/ --by step --rank 2 --json
    """
    from .analysis import Analysis
    from .ingest import load
    from .progress import Progress
    from .render.top import records, render_top

    store = load(list(inputs), quiet=ctx.obj["quiet"], strict=ctx.obj.get("strict", False))
    an = Analysis(store)
    prog = Progress("analyse", quiet=ctx.obj["quiet"])
    prog.stage("attribution" if by != "step" else "breakdown", 0.0)
    try:
        df = an.rollup(by, rank)
        cov = an.attribution.coverage(rank)
    finally:
        prog.done()
    if as_json:
        click.echo(json.dumps({"by": by, "rank": rank, "coverage": cov, "rows": records(df)},
                              indent=2, default=str))
    else:
        click.echo(render_top(df, by, top_n, coverage=cov, ranks=len(store.ranks), rank=rank))


SEVERITY_CHOICES = ["high", "medium", "low", "info", "never"]


def _rule_options(f):
    f = click.option("--rules", "rules_dirs", multiple=True, type=click.Path(path_type=Path),
                     help="Extra folder of rule YAML files (same id replaces a shipped rule). "
                          "Repeatable.")(f)
    f = click.option("--set", "overrides", multiple=True, metavar="RULE.THRESHOLD=VALUE",
                     help="Override a rule threshold, e.g. "
                          "--set comm-bound.min_exposed_comm_pct=20. Repeatable.")(f)
    return f


@main.command(context_settings=CONTEXT)
@_INPUTS
@click.option("--json", "json_out", type=click.Path(path_type=Path, allow_dash=True),
              help="Write the result as JSON to FILE ('-' prints it instead of the terminal view).")
@click.option("--markdown", "md_out", type=click.Path(path_type=Path),
              help="Write a Markdown summary for a ticket body.")
@click.option("--html", "html_out", type=click.Path(path_type=Path),
              help="Write the self-contained HTML report.")
@click.option("--fail-on", type=click.Choice(SEVERITY_CHOICES), default="never", show_default=True,
              help="Exit 1 when a finding has this severity or higher (for CI).")
@_rule_options
@click.option("--device", callback=device_key,
              help="Device to use for the roofline (a key from `traceinsight devices`).")
@click.option("--peak-tflops", type=POSITIVE,
              help="Dense bf16/fp16 peak in TFLOP/s (unknown GPUs).")
@click.option("--peak-bw", type=POSITIVE, help="Memory bandwidth in GB/s (unknown GPUs).")
@click.option("--params", type=POSITIVE,
              help="Model parameters, for the 6·N·tokens MFU estimate.")
@click.option("--tokens-per-step", type=POSITIVE,
              help="Tokens per step over all ranks (MFU estimate).")
@click.option("--mode", type=click.Choice(["train", "infer"]), default=None,
              help="6·N (train) or 2·N (infer) FLOPs per token; "
                   "default: train if backward kernels exist.")
@click.option("-v", "--verbose", is_flag=True, help="All evidence tables and recommendations.")
@click.option("--color/--no-color", default=None,
              help="Colour the terminal output (default: on a TTY).")
@click.option("--recompute", is_flag=True,
              help="Recompute the analysis even when the store already holds the result of the "
                   "same code, rules, thresholds and options (it is cached there by default).")
@click.option("--max-memory", "max_memory", type=POSITIVE, metavar="MB", default=None,
              help="Memory the analysis may use (default 4096, or $TRACEINSIGHT_MAX_MEMORY_MB). "
                   "A trace that would need more is diagnosed on its last steps that fit, "
                   "and the report says which.")
@click.option("--memory-snapshot", "memory_snapshots", multiple=True,
              type=click.Path(path_type=Path),
              help="A CUDA memory snapshot of the same run (torch.cuda.memory._dump_snapshot() "
                   "pickle, or an export_memory_timeline raw file): fragmentation, OOMs and "
                   "memory over time from the allocator itself. Repeatable (one per rank).")
@_strict
@rank_options
@click.pass_context
def diagnose(ctx: click.Context, inputs: tuple[Path, ...], json_out: Path | None,
             md_out: Path | None, html_out: Path | None, fail_on: str,
             rules_dirs: tuple[Path, ...], overrides: tuple[str, ...], device: str | None,
             peak_tflops: float | None, peak_bw: float | None, params: float | None,
             tokens_per_step: float | None, mode: str | None, verbose: bool,
             color: bool | None, recompute: bool, max_memory: float | None = None,
             memory_snapshots: tuple[Path, ...] = ()) -> None:
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
      traceinsight diagnose snapshot.pickle
    """
    from .prehash import start as start_hashing

    start_hashing(inputs)  # the traces' sha256 (the cache key) while the library imports
    from .diagnose import diagnose as run_diagnose
    from .ingest import load
    from .options import RooflineOptions
    from .outputs import check_files
    from .progress import Progress
    from .render.terminal import render

    check_files([json_out, md_out, html_out], inputs)
    store = load(list(inputs), quiet=ctx.obj["quiet"], strict=ctx.obj.get("strict", False),
                 memory=memory_snapshots)
    opts = RooflineOptions(device=device, peak_tflops=peak_tflops, peak_bw_gbs=peak_bw,
                           params=params, tokens_per_step=tokens_per_step, mode=mode)
    prog = Progress("analyse", quiet=ctx.obj["quiet"])
    try:
        result = run_diagnose(store, options=opts, rules_dirs=rules_dirs, overrides=overrides,
                              command=["traceinsight", *sys.argv[1:]] if sys.argv else [],
                              cache=not recompute, progress=prog, max_memory_mb=max_memory)
    except BaseException:
        prog.stop()
        raise
    result, notes = with_skipped(result, list(inputs), store)
    use_color = sys.stdout.isatty() if color is None else color

    def md() -> str:
        from .render.markdown import render_markdown

        return render_markdown(result)

    def html() -> str:
        from .render.html import render_html

        return render_html(result)

    emit(json_out, md_out, html_out, as_json=result.to_json, as_md=md, as_html=html,
          as_text=lambda: render(result, color=use_color, verbose=verbose), progress=prog,
          notes=notes)
    _exit_on(ctx, result, fail_on)


def _exit_on(ctx: click.Context, result, fail_on: str) -> None:
    if fail_on == "never":
        return
    from .result import SEVERITY_RANK

    limit = SEVERITY_RANK[fail_on]
    hit = [f for f in result.findings if SEVERITY_RANK.get(f.severity, 9) <= limit]
    if hit:
        click.echo(f"traceinsight: {len(hit)} finding(s) at or above {fail_on}: "
                   + ", ".join(f.rule for f in hit), err=True)
        ctx.exit(1)


@main.command(context_settings=CONTEXT)
@click.argument("source", type=click.Path(path_type=Path))
@click.option("-o", "--output", type=click.Path(path_type=Path), default=Path("report.html"),
              show_default=True, help="The HTML file to write.")
@click.option("--markdown", "md_out", type=click.Path(path_type=Path),
              help="Also write the Markdown summary.")
@_rule_options
@_strict
@rank_options
@click.pass_context
def report(ctx: click.Context, source: Path, output: Path, md_out: Path | None,
           rules_dirs: tuple[Path, ...], overrides: tuple[str, ...]) -> None:
    """Write the self-contained HTML report from a result JSON or a store/trace.

    SOURCE is a file written by `diagnose --json` (rendered as is) or a store or trace
    (diagnosed first, with the shipped rules plus --rules/--set).

    \b
    Examples:
      traceinsight report result.json -o report.html
      traceinsight report traces/ -o report.html --markdown ticket.md
      traceinsight report run.tistore --set comm-bound.min_exposed_comm_pct=20
    """
    from .outputs import check_files, write_files
    from .render.html import render_html

    check_files([output, md_out], [source])
    result = _result_of(ctx, source, rules_dirs, overrides, None,
                        command=["traceinsight", *sys.argv[1:]])
    files = {output: render_html(result)}
    if md_out is not None:
        from .render.markdown import render_markdown

        files[md_out] = render_markdown(result)
    write_files(files)  # all or none
    for f in files:
        click.echo(f"wrote {f}")


def _is_result(path: Path) -> bool:
    """Whether ``path`` starts like a saved diagnosis result (its schema tag)."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    return b'"traceinsight.diagnosis"' in head


def _result_of(ctx: click.Context, path: Path, rules_dirs: Sequence[Path],
               overrides: Sequence[str], opts: RooflineOptions | None, *,
               command: list[str] | None = None) -> DiagnosisResult:
    """A DiagnosisResult from a result JSON (read as is, without loading the analysis), a
    store, a trace file or a folder of rank traces (diagnosed; ``command`` is recorded, by
    default ``traceinsight diagnose PATH``)."""
    from .result import DiagnosisResult

    if path.is_file() and path.suffix == ".json" and _is_result(path):
        return DiagnosisResult.load(str(path))
    from .diagnose import diagnose as run_diagnose
    from .ingest import load
    from .progress import Progress

    store = load([path], quiet=ctx.obj["quiet"], strict=ctx.obj.get("strict", False))
    prog = Progress("analyse", quiet=ctx.obj["quiet"])
    try:
        result = run_diagnose(store, options=opts, rules_dirs=rules_dirs, overrides=overrides,
                              command=command or ["traceinsight", "diagnose", str(path)],
                              progress=prog)
    finally:
        prog.done()
    return with_skipped(result, [path], store)[0]


@main.command(context_settings=CONTEXT)
@click.argument("before", type=click.Path(path_type=Path))
@click.argument("after", type=click.Path(path_type=Path))
@click.option("--json", "json_out", type=click.Path(path_type=Path, allow_dash=True),
              help="Write the comparison as JSON to FILE ('-' prints it instead).")
@click.option("--html", "html_out", type=click.Path(path_type=Path), help="Write an HTML report.")
@click.option("--markdown", "md_out", type=click.Path(path_type=Path), help="Write Markdown.")
@click.option("--by", type=click.Choice(["auto", "layer", "op", "class"]), default="auto",
              show_default=True, help="Split compute time by layer (module path), top-level op, or "
                                      "kernel class; auto picks the finest both sides support.")
@click.option("--fail-if-slower", type=FINITE, metavar="PCT",
              help="Exit 1 when the p50 step time regresses by more than PCT percent (CI gate); "
                   "exit 2 when the runs are not comparable or a side has no step time.")
@click.option("--allow-incomparable", is_flag=True,
              help="Gate with --fail-if-slower even when the runs are not comparable (different "
                   "model shapes or world sizes): on the normalised change where there is one.")
@click.option("--tokens-per-step", "tokens", type=POSITIVE, nargs=2, metavar="BEFORE AFTER",
              help="Tokens per step of each side: step time is then also compared per token "
                   "where the work per step differs.")
@click.option("-n", "top_n", default=12, show_default=True, type=COUNT,
              help="Contributors to list.")
@_rule_options
@click.option("--device", callback=device_key,
              help="Device for both sides' roofline (traces only).")
@_strict
@click.pass_context
def compare(ctx: click.Context, before: Path, after: Path, json_out: Path | None,
            html_out: Path | None, md_out: Path | None, by: str, fail_if_slower: float | None,
            allow_incomparable: bool, tokens: tuple[float, float] | None, top_n: int,
            rules_dirs: tuple[Path, ...], overrides: tuple[str, ...],
            device: str | None) -> None:
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
    """
    from .comparability import gate
    from .compare import compare as run_compare
    from .options import RooflineOptions
    from .outputs import check_files
    from .render.terminal import render_compare

    check_files([json_out, md_out, html_out], [before, after])
    opts = RooflineOptions(device=device)
    a = _result_of(ctx, before, rules_dirs, overrides, opts)
    b = _result_of(ctx, after, rules_dirs, overrides, opts)
    c = run_compare(a, b, by=by, labels=(before.name, after.name),
                    tokens=(tokens[0], tokens[1]) if tokens else (None, None))

    def md() -> str:
        from .render.markdown import render_compare_markdown

        return render_compare_markdown(c)

    def html() -> str:
        from .render.html import render_compare_html

        return render_compare_html(c)

    emit(json_out, md_out, html_out, as_json=lambda: json.dumps(c, indent=2, default=str),
          as_md=md, as_html=html, as_text=lambda: render_compare(c, n=top_n))
    if fail_if_slower is not None:
        code, line = gate(c, fail_if_slower, allow_incomparable=allow_incomparable,
                          names=(str(before), str(after)))
        if line:
            click.echo(line, err=True)
        if code:
            ctx.exit(code)


@main.command(context_settings=CONTEXT)
@click.option("--explain", "explain_id", metavar="ID", help="Show one rule: what, why, thresholds.")
@click.option("--metrics", "list_metrics", is_flag=True, help="List the metrics rules can use.")
@_rule_options
def rules(explain_id: str | None, list_metrics: bool, rules_dirs: tuple[Path, ...],
          overrides: tuple[str, ...]) -> None:
    """List the diagnosis rules, or explain one with its thresholds.

    Rules are YAML files (the shipped ones live in the package's rules/ folder); add or replace
    rules with --rules DIR and change thresholds with --set RULE.THRESHOLD=VALUE.

    \b
    Examples:
      traceinsight rules
      traceinsight rules --explain comm-bound
      traceinsight rules --metrics
      traceinsight rules --rules my_rules/ --set comm-bound.min_exposed_comm_pct=20
    """
    from . import fmt
    from .engine import explain, load_rules
    from .errors import ConfigError
    from .metrics import REGISTRY

    if list_metrics:
        rows = [[m.name, m.unit, m.doc] for m in sorted(REGISTRY.values(), key=lambda m: m.name)]
        click.echo(fmt.table(rows, ["metric", "unit", "meaning"], align="lll", flex=2, wrap=True))
        return
    rs = load_rules(list(rules_dirs), list(overrides))
    if explain_id:
        match = [r for r in rs if r.id == explain_id]
        if not match:
            raise ConfigError(f"no rule {explain_id!r}",
                              hint="one of " + ", ".join(sorted(r.id for r in rs)))
        click.echo(explain(match[0]))
        return
    rows = [[r.id, r.category, r.summary] for r in sorted(rs, key=lambda r: (r.category, r.id))]
    click.echo(fmt.table(rows, ["rule", "category", "what it finds"], align="lll", flex=2,
                         wrap=True))
    click.echo("\ntraceinsight rules --explain ID shows a rule's thresholds and advice.")


@main.command(context_settings=CONTEXT)
@click.option("--json", "as_json", is_flag=True, help="Print the table as JSON.")
def devices(as_json: bool) -> None:
    """The device peak table used for the roofline and MFU (dense FLOP/s, bandwidth).

    Extend or override it with a YAML file named by TRACEINSIGHT_DEVICES (same schema as the
    shipped traceinsight/data/devices.yaml).

    \b
    Examples:
      traceinsight devices
      traceinsight devices --json
      TRACEINSIGHT_DEVICES=my_gpus.yaml traceinsight devices
    """
    from . import devices as dev
    from . import fmt

    specs = dev.list_devices()
    if as_json:
        click.echo(json.dumps([{"key": s.key, "name": s.name, "vendor": s.vendor,
                                "peak_flops": s.peak_flops, "mem_bw": s.mem_bw,
                                "mem_bytes": s.mem_bytes} for s in specs], indent=2))
        return
    rows = [[s.key, s.name, fmt.fmt_rate(s.peak("bf16") or s.peak("fp16"), "FLOP/s"),
             fmt.fmt_rate(s.peak("fp32"), "FLOP/s"), fmt.fmt_rate(s.peak("fp8"), "FLOP/s"),
             fmt.fmt_rate(s.mem_bw, "B/s"), fmt.fmt_bytes(s.mem_bytes)] for s in specs]
    click.echo(fmt.table(rows, ["key", "name", "bf16/fp16", "fp32", "fp8", "bandwidth", "memory"],
                         align="llrrrrr", flex=1))


main.add_command(profile)  # traceinsight profile -- COMMAND (cli_profile.py)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
