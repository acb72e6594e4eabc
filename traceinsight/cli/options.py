"""Options shared by several commands: the inputs argument, ``--strict``, ``--rules`` /
``--set`` and the ``--fail-on`` choices."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

import click

if TYPE_CHECKING:  # the commands import the library lazily: a quick start for every command
    pass


CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


INPUTS = click.argument("inputs", nargs=-1, required=True, type=click.Path(path_type=Path))


def strict(f):
    """``--strict``: a rank file of the folder that cannot be read is an error, not a warning."""

    def keep(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
        ctx.ensure_object(dict)["strict"] = value
        return value

    return click.option(
        "--strict",
        is_flag=True,
        expose_value=False,
        callback=keep,
        help="Exit 2 when a rank file of the folder cannot be read (by default "
        "a warning in the headline).",
    )(f)


def salvage(f):
    """``--salvage``: read the complete events of a truncated trace instead of refusing it (the
    hint of a truncated file's error names it; ``ingest`` has its own flag of that name)."""

    def keep(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
        ctx.ensure_object(dict)["salvage"] = value
        return value

    return click.option(
        "--salvage",
        is_flag=True,
        expose_value=False,
        callback=keep,
        help="Read the complete events of a truncated trace (a job killed while writing it) "
        "instead of refusing it; the headline says what the cut lost.",
    )(f)


class LoadFlags(TypedDict):
    strict: bool
    salvage: bool


def loading(ctx: click.Context) -> LoadFlags:
    """The ``load`` options the shared flags set: ``strict``, ``salvage``."""
    obj = ctx.obj or {}
    return {"strict": bool(obj.get("strict")), "salvage": bool(obj.get("salvage"))}


SEVERITY_CHOICES = ["high", "medium", "low", "info", "never"]


def rule_options(f):
    f = click.option(
        "--rules",
        "rules_dirs",
        multiple=True,
        type=click.Path(path_type=Path),
        help="Extra folder of rule YAML files (same id replaces a shipped rule). Repeatable.",
    )(f)
    f = click.option(
        "--set",
        "overrides",
        multiple=True,
        metavar="RULE.THRESHOLD=VALUE",
        help="Override a rule threshold, e.g. "
        "--set comm-bound.min_exposed_comm_pct=20. Repeatable.",
    )(f)
    return f


#: names of inputs that ``--json FILE`` must never take for its output
_INPUT_ENDS = (".json.gz", ".gz", ".sqlite", ".nsys-rep", ".qdrep", ".pickle", ".pkl")
_JSON_INPUT = "traceinsight.json_input"
#: a Kineto trace's events key (as a key: a message quoting it in a result is escaped)
_TRACE_KEY = re.compile(rb'(?<!\\)"traceEvents"\s*:')


def _is_input(value: Path) -> bool:
    """Whether ``--json``'s value names an input rather than a file to write: a folder, a
    trace or snapshot file name, an existing Kineto trace."""
    if value.is_dir() or value.name.lower().endswith(_INPUT_ENDS):
        return True
    if value.is_file():
        try:
            with open(value, "rb") as f:
                return _TRACE_KEY.search(f.read(1 << 16)) is not None
        except OSError:
            return False
    return False


def _json_callback(takes_inputs: bool):
    def check(ctx: click.Context, param: click.Parameter, value: Path | None) -> Path | None:
        """``--json``'s FILE, unless it names an input: the older flag form before the inputs
        (``top --json trace.json.gz``) reads it as one (the JSON is printed) where the command
        takes inputs (:func:`with_json_input`), else it is a usage error, never overwritten."""
        if value is None or str(value) == "-" or not _is_input(value):
            return value
        if takes_inputs:
            ctx.meta[_JSON_INPUT] = value
            return Path("-")
        raise click.BadParameter(
            f"{value} is a trace or a folder, not a file to write the JSON to (give --json "
            "a FILE, or '-' to print it, or put --json after the inputs)",
            ctx=ctx,
            param=param,
        )

    return check


def json_option(what: str, *, takes_inputs: bool = False):
    """``--json [FILE]``, the same on every command: write ``what`` as JSON to FILE; ``-``, or
    ``--json`` with no FILE (the older flag form), prints it instead of the terminal view.
    ``takes_inputs``: the command reads its INPUTS with :data:`INPUTS_AFTER_JSON` and
    :func:`with_json_input`, so ``--json INPUT`` (the flag form before the inputs) reads it."""
    return click.option(
        "--json",
        "json_out",
        type=click.Path(path_type=Path, allow_dash=True),
        is_flag=False,
        flag_value="-",
        default=None,
        metavar="[FILE]",
        callback=_json_callback(takes_inputs),
        help=f"Write {what} as JSON to FILE ('-', or --json alone, prints it instead).",
    )


#: INPUTS of a command whose ``--json`` may have taken the first of them (checked by
#: :func:`with_json_input`)
INPUTS_AFTER_JSON = click.argument(
    "inputs", nargs=-1, required=False, type=click.Path(path_type=Path)
)


def with_json_input(
    ctx: click.Context, inputs: tuple[Path, ...], json_out: Path | None
) -> tuple[tuple[Path, ...], Path | None]:
    """The command's inputs and ``--json`` value, with the input ``--json`` took back among
    the inputs: a trace or folder (see :func:`json_option`), or the only path given when no
    INPUTS are left (``summary --json <(cat t.json)``: a pipe, which may also be a FIFO to
    write to when inputs follow). No input at all is the usage error of a missing INPUTS."""
    taken = ctx.meta.get(_JSON_INPUT)
    if taken is None and not inputs and json_out is not None and str(json_out) != "-":
        taken, json_out = json_out, Path("-")
    got = (taken, *inputs) if taken is not None else tuple(inputs)
    if not got:
        raise click.UsageError("Missing argument 'INPUTS...'.", ctx=ctx)
    return got, json_out


def json_target(
    json_out: Path | None, out_format: str | None, output: Path | None
) -> tuple[str | None, Path | None]:
    """The format and the file of ``--json [FILE]`` with ``--format`` / ``-o``: (format,
    output), or a usage error (exit 2) when they ask for two different things."""
    if json_out is None:
        return out_format, output
    if out_format not in (None, "json"):
        raise click.UsageError(f"--json and --format {out_format} ask for two formats: pick one")
    if str(json_out) != "-" and output is not None and output != json_out:
        raise click.UsageError("--json FILE and -o FILE name two files: pick one")
    return "json", output if str(json_out) == "-" else json_out


FORMATS = ["text", "json", "csv"]


def format_options(f):
    """``--format text|json|csv`` and ``-o/--output FILE``: the one way ``top``, ``summary``
    and ``compare`` choose how their table is printed (``--json [FILE]``: :func:`json_option`)."""
    f = click.option(
        "-o",
        "--output",
        "output",
        type=click.Path(path_type=Path, allow_dash=True),
        help="Write the --format output to FILE instead of printing it ('-' prints it).",
    )(f)
    f = click.option(
        "--format",
        "out_format",
        type=click.Choice(FORMATS),
        default=None,
        help="text (the terminal table, default), json, or csv (one table: a header row, "
        "times in ns, sizes in bytes, shares in percent) for spreadsheets.",
    )(f)
    return f


def write_output(text: str, output: Path | None, inputs: tuple[Path, ...] = ()) -> None:
    """Print ``text``, or write it atomically to ``output`` (refused when it is an input) and
    name the file on stderr."""
    if output is None or str(output) == "-":
        click.echo(text, nl=not text.endswith("\n"))
        return
    from traceinsight.util.outputs import check_files, write_text

    check_files([output], list(inputs))
    write_text(output, text)
    click.echo(f"wrote {output}", err=True)
