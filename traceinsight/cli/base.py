"""The command line's plumbing: the group class (one-line errors, exit codes, the global
options on every command) and the output helpers the commands share (atomic writes, the
rendering of the requested files, notes on stderr). :mod:`traceinsight.cli` holds the commands.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import click

from traceinsight import settings
from traceinsight.errors import ConfigError, TraceInsightError, no_space
from traceinsight.util.safetext import for_terminal

if TYPE_CHECKING:
    from traceinsight.result import DiagnosisResult, Diagnostic


def _keep(name: str) -> Callable[[click.Context, click.Parameter, bool], bool]:
    def callback(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
        if value:  # the command's context shares the group's obj dict
            ctx.ensure_object(dict)[name] = True
        return value

    return callback


def _global_options() -> list[click.Parameter]:
    """The group's own options, accepted after the command name too (``diagnose x --quiet``)."""
    return [
        click.Option(
            ["-q", "--quiet"],
            is_flag=True,
            expose_value=False,
            callback=_keep("quiet"),
            help="No progress bars (also before the command).",
        ),
        click.Option(
            ["--debug"],
            is_flag=True,
            expose_value=False,
            callback=_keep("debug"),
            help="Show tracebacks for errors (also before the command).",
        ),
    ]


def _command_words(ctx: click.Context | None) -> str:
    """``traceinsight diagnose``: the command a usage error belongs to, as a user types it."""
    words: list[str] = []
    while ctx is not None:
        words.append(ctx.info_name or "")
        ctx = ctx.parent
    words = [w for w in reversed(words) if w]
    return " ".join(["traceinsight", *words[1:]])


class Group(click.Group):
    """Turns library errors into one line on stderr and exit code 2; gives every command the
    global options."""

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        have = {o for p in cmd.params for o in getattr(p, "opts", [])}
        cmd.params.extend(p for p in _global_options() if not set(p.opts) & have)
        super().add_command(cmd, name)

    def main(self, *args: Any, **kwargs: Any) -> Any:
        """As click's, but a usage error (a bad option value, an unknown option, a missing
        argument) is one line on stderr naming the command's ``--help``, exit 2, like every
        other error."""
        if kwargs.get("standalone_mode", True) is False:
            return super().main(*args, **kwargs)
        kwargs["standalone_mode"] = False
        try:
            rv = super().main(*args, **kwargs)
        except click.UsageError as e:
            where = _command_words(e.ctx)
            text = " ".join(e.format_message().split())
            click.echo(
                f"traceinsight: error: {for_terminal(text)} (hint: {where} --help)", err=True
            )
            sys.exit(e.exit_code)
        except click.ClickException as e:
            text = " ".join(e.format_message().split())
            click.echo(f"traceinsight: error: {for_terminal(text)}", err=True)
            sys.exit(e.exit_code)
        except click.Abort:
            click.echo("traceinsight: aborted", err=True)
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)

    def invoke(self, ctx: click.Context) -> Any:
        try:  # every TRACEINSIGHT_* variable that is set, first: a bad one is one line, exit 2
            settings.check()
            env_debug = bool(settings.get("TRACEINSIGHT_DEBUG"))
        except ConfigError as e:
            click.echo(f"traceinsight: error: {for_terminal(e.one_line())}", err=True)
            ctx.exit(e.exit_code)

        def debug_on() -> bool:
            return env_debug or bool(ctx.params.get("debug")) or bool((ctx.obj or {}).get("debug"))

        debug = debug_on()
        try:
            return super().invoke(ctx)
        except TraceInsightError as e:
            if debug_on():
                raise
            click.echo(f"traceinsight: error: {for_terminal(e.one_line())}", err=True)
            ctx.exit(e.exit_code)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except BrokenPipeError:  # `traceinsight rules | head`: the reader left; so do we
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            ctx.exit(141)
        except KeyboardInterrupt:
            click.echo("traceinsight: interrupted", err=True)
            ctx.exit(130)
        except MemoryError:
            if debug_on():
                raise
            click.echo(
                "traceinsight: error: out of memory (hint: free memory or use a machine "
                "with more RAM; ingest needs about 2.5x the uncompressed trace size)",
                err=True,
            )
            ctx.exit(2)
        except Exception as e:  # the last line of defence for users
            if debug or debug_on():
                raise
            if no_space(e):  # a write anywhere found the disk full: the user's to fix
                name = getattr(e, "filename", None)
                where = f"{name}: " if name else ""
                click.echo(
                    f"traceinsight: error: {for_terminal(str(where))}no space left on the "
                    "device (hint: free space there, or write elsewhere)",
                    err=True,
                )
                ctx.exit(2)
            click.echo(
                f"traceinsight: internal error: {type(e).__name__}: "
                f"{for_terminal(str(e))} "
                "(hint: rerun with --debug for the traceback and report it)",
                err=True,
            )
            ctx.exit(2)


def with_skipped(
    result: DiagnosisResult, inputs: list[Path], store: Any
) -> tuple[DiagnosisResult, list[str]]:
    """The result with a data-quality note per entry of the input folder that was not read,
    and those notes as stderr lines."""
    from traceinsight.ingest.inputs import skipped_entries, skipped_lines

    extra = skipped_entries(inputs, store)
    if extra:
        result = dataclasses.replace(
            result, diagnostics=[*result.diagnostics, *cast("list[Diagnostic]", extra)]
        )
    return result, skipped_lines(result.diagnostics)


def emit(
    json_out: Path | None,
    md_out: Path | None,
    html_out: Path | None,
    *,
    as_json: Callable[[], str],
    as_md: Callable[[], str],
    as_html: Callable[[], str],
    as_text: Callable[[], str],
    progress: Any = None,
    notes: Sequence[str] = (),
) -> None:
    """Write the requested files atomically, then print the terminal view (or the JSON, for
    ``--json -``) and name the files written (and ``notes``) on stderr. ``progress`` (a
    :class:`~traceinsight.util.progress.Progress`) shows the rendering and ends before the print."""
    if progress is not None:
        progress.stage("rendering", 0.95)
    try:
        outputs, text = render_all(
            json_out,
            md_out,
            html_out,
            as_json=as_json,
            as_md=as_md,
            as_html=as_html,
            as_text=as_text,
        )
    finally:
        if progress is not None:
            progress.done()
    click.echo(text, nl=False)
    if json_out is None or str(json_out) != "-":
        for path in outputs:
            click.echo(f"wrote {path}", err=True)
    for line in notes:
        click.echo(line, err=True)


def render_all(
    json_out: Path | None,
    md_out: Path | None,
    html_out: Path | None,
    *,
    as_json: Callable[[], str],
    as_md: Callable[[], str],
    as_html: Callable[[], str],
    as_text: Callable[[], str],
) -> tuple[dict[Path, str], str]:
    """Write the requested files; the text for stdout (the view, or the JSON for --json -)."""
    outputs = {}
    if json_out is not None and str(json_out) != "-":
        outputs[json_out] = as_json()
    if md_out is not None:
        outputs[md_out] = as_md()
    if html_out is not None:
        outputs[html_out] = as_html()
    from traceinsight.util.outputs import write_files

    write_files(outputs)  # all or none
    if json_out is not None and str(json_out) == "-":
        return outputs, as_json() + "\n"
    return outputs, as_text()
