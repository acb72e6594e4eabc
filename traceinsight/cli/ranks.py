"""The options of commands that read many ranks: ``--jobs``, ``--scheduler``, ``--no-cache``.

:func:`rank_options` adds them to a command and runs the command inside
``distributed.using(Runner(...))``, so the per-rank ingest and analysis of that command run
where the options say (``distributed.py``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import click

__all__ = ["rank_options"]


def _keep(key: str) -> Callable[[click.Context, click.Parameter, Any], Any]:
    def keep(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        ctx.ensure_object(dict)[key] = value
        return value

    return keep


def rank_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--jobs N``, ``--scheduler ADDRESS`` and ``--no-cache`` for a command."""

    @functools.wraps(f)
    def run(*args: Any, **kwargs: Any) -> Any:
        from traceinsight.util.distributed import Runner, using

        obj = click.get_current_context().ensure_object(dict)
        runner = Runner(
            jobs=obj.get("jobs"), scheduler=obj.get("scheduler"), fresh=bool(obj.get("no_cache"))
        )
        with using(runner):
            return f(*args, **kwargs)

    run = click.option(
        "--no-cache",
        is_flag=True,
        expose_value=False,
        callback=_keep("no_cache"),
        help="Ingest and analyse afresh, ignoring stores and results cached before.",
    )(run)
    run = click.option(
        "--scheduler",
        metavar="ADDRESS",
        expose_value=False,
        callback=_keep("scheduler"),
        help="Run the per-rank ingest and analysis as Dask tasks: 'local' (a LocalCluster "
        "of --jobs workers), a scheduler address (tcp://HOST:8786) or a scheduler file; "
        "the store must be on storage every worker sees. Needs the dask extra.",
    )(run)
    run = click.option(
        "-j",
        "--jobs",
        type=click.IntRange(1),
        metavar="N",
        expose_value=False,
        callback=_keep("jobs"),
        help="Rank files read in parallel by N worker processes (default: the number of "
        "cores); peak memory is about N times the largest rank.",
    )(run)
    return run
