"""``traceinsight rules``: the shipped rules, one rule explained, the metrics rules can use."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:  # the commands import the library lazily: a quick start for every command
    pass
from traceinsight.cli.options import CONTEXT, rule_options


@click.command(context_settings=CONTEXT)
@click.option("--explain", "explain_id", metavar="ID", help="Show one rule: what, why, thresholds.")
@click.option("--metrics", "list_metrics", is_flag=True, help="List the metrics rules can use.")
@rule_options
def rules(
    explain_id: str | None,
    list_metrics: bool,
    rules_dirs: tuple[Path, ...],
    overrides: tuple[str, ...],
) -> None:
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
    from traceinsight.engine.evaluate import explain, load_rules
    from traceinsight.errors import ConfigError
    from traceinsight.metrics import REGISTRY
    from traceinsight.util import fmt
    from traceinsight.util.safetext import for_terminal

    if list_metrics:
        rows = [[m.name, m.unit, m.doc] for m in sorted(REGISTRY.values(), key=lambda m: m.name)]
        click.echo(fmt.table(rows, ["metric", "unit", "meaning"], align="lll", flex=2, wrap=True))
        return
    rs = load_rules(list(rules_dirs), list(overrides))
    if explain_id:
        match = [r for r in rs if r.id == explain_id]
        if not match:
            raise ConfigError(
                f"no rule {explain_id!r}", hint="one of " + ", ".join(sorted(r.id for r in rs))
            )
        click.echo(for_terminal(explain(match[0])))
        return
    rows = [[r.id, r.category, r.summary] for r in sorted(rs, key=lambda r: (r.category, r.id))]
    click.echo(
        for_terminal(
            fmt.table(rows, ["rule", "category", "what it finds"], align="lll", flex=2, wrap=True)
        )
    )
    click.echo("\ntraceinsight rules --explain ID shows a rule's thresholds and advice.")
