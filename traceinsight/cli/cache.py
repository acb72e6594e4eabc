"""``traceinsight cache list`` / ``cache clear``: what the store cache holds, and removing it."""

from __future__ import annotations

import json
from pathlib import Path

import click

from traceinsight.cli.options import CONTEXT, json_option, write_output


@click.group(context_settings=CONTEXT)
def cache() -> None:
    """See or clear the cache of ingested traces (TRACEINSIGHT_CACHE_DIR).

    Every trace read by summary, top, diagnose, report or compare is kept there as a store,
    found again by the trace's content. TRACEINSIGHT_CACHE_MAX_GB bounds its size (default
    20; 0: no bound): a new entry evicts the entries used longest ago. Only the tool's own
    entries are ever removed: a file or folder it did not write is listed as foreign and left.

    \b
    Examples:
      traceinsight cache list
      traceinsight cache clear --older-than 30
      traceinsight cache clear
    """


@cache.command("list", context_settings=CONTEXT)
@json_option("the entries")
def list_(json_out: Path | None) -> None:
    """The cache's entries, most recently used first: kind, size, age since last use.

    \b
    Examples:
      traceinsight cache list
      traceinsight cache list --json cache.json
    """
    from traceinsight.ingest.cache import cache_root
    from traceinsight.ingest.cache_admin import entries, limit_bytes
    from traceinsight.util import fmt
    from traceinsight.util.safetext import for_terminal

    root = cache_root()
    all_ = entries(root)
    total = sum(e.size for e in all_)
    bound = limit_bytes()
    if json_out is not None:
        data = {
            "cache": str(root),
            "total_bytes": total,
            "limit_bytes": bound,
            "entries": [
                {
                    "path": str(e.path),
                    "kind": e.kind,
                    "bytes": e.size,
                    "last_used": e.used,
                    "age_days": round(e.age_days(), 3),
                    "owned": e.owned,
                    **({"foreign": e.why} if not e.owned else {}),
                }
                for e in all_
            ],
        }
        write_output(json.dumps(data, indent=2), None if str(json_out) == "-" else json_out)
        return
    head = (
        f"cache {root}: {len(all_):,} entr{'y' if len(all_) == 1 else 'ies'}, "
        f"{fmt.fmt_bytes(total)}"
        + (f" of {fmt.fmt_bytes(bound)} (TRACEINSIGHT_CACHE_MAX_GB)" if bound else ", unbounded")
    )
    lines = [head]
    if all_:
        rows = [
            [
                e.path.name,
                e.kind if e.owned else f"foreign: {e.why}",
                fmt.fmt_bytes(e.size),
                _age(e.age_days()),
            ]
            for e in all_
        ]
        lines += ["", fmt.table(rows, ["entry", "kind", "size", "last used"], align="llrr", flex=1)]
    click.echo(for_terminal("\n".join(lines)))


@cache.command(context_settings=CONTEXT)
@click.option(
    "--older-than",
    "older_than",
    type=click.FloatRange(min=0),
    metavar="DAYS",
    help="Only the entries last used more than DAYS days ago.",
)
def clear(older_than: float | None) -> None:
    """Remove the cache's entries (the tool's own only; foreign files stay).

    \b
    Examples:
      traceinsight cache clear
      traceinsight cache clear --older-than 30
    """
    from traceinsight.ingest.cache import cache_root
    from traceinsight.ingest.cache_admin import clear as do_clear
    from traceinsight.util import fmt
    from traceinsight.util.safetext import for_terminal

    removed, foreign = do_clear(older_than)
    freed = sum(e.size for e in removed)
    n = len(removed)
    click.echo(
        f"removed {n:,} entr{'y' if n == 1 else 'ies'} ({fmt.fmt_bytes(freed)}) "
        f"from {for_terminal(str(cache_root()))}"
    )
    for e in foreign:
        click.echo(f"left {for_terminal(str(e.path))}: {e.why}", err=True)


def _age(days: float) -> str:
    if days < 1 / 24:
        return f"{max(1, round(days * 1440))} min ago"
    if days < 1:
        return f"{round(days * 24)} h ago"
    return f"{days:.0f} days ago" if days >= 2 else "1 day ago"
