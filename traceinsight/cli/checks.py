"""Option values the command line refuses up front (exit 2 naming the valid values), instead
of running with them and noting a data-quality problem: non-finite or non-positive numbers
where a size or a rate belongs, negative counts, an unknown ``--device``."""

from __future__ import annotations

import math
from typing import Any

import click


class Number(click.ParamType):
    """A finite float, optionally > 0 (``nan`` and ``inf`` are refused)."""

    name = "number"

    def __init__(self, *, positive: bool) -> None:
        self.positive = positive

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        if isinstance(value, float) and math.isfinite(value) and (value > 0 or not self.positive):
            return value
        try:
            x = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number", param, ctx)
        if not math.isfinite(x):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        if self.positive and x <= 0:
            self.fail(f"{value!r} must be greater than 0", param, ctx)
        return x

    def __repr__(self) -> str:
        return "POSITIVE" if self.positive else "FINITE"


#: a finite number (``--fail-if-slower``)
FINITE = Number(positive=False)
#: a finite number above 0 (``--peak-tflops``, ``--peak-bw``, ``--params``, ``--tokens-per-step``)
POSITIVE = Number(positive=True)
#: how many rows to show (``-n``)
COUNT = click.IntRange(min=0)


def device_key(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """``--device``: a key or name of the device table (the valid keys when it is not)."""
    if value is None:
        return None
    from traceinsight.devices.table import list_devices, lookup

    if lookup(value) is None:
        keys = ", ".join(s.key for s in list_devices())
        raise click.BadParameter(
            f"unknown device {value!r}; one of: {keys} (or give --peak-tflops and --peak-bw)",
            ctx=ctx,
            param=param,
        )
    return value


def step_range(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """``--steps``: ``last:N``, ``A:B``, ``A:`` or ``:B`` (the forms, when it is none)."""
    if value is None:
        return None
    from traceinsight.errors import ConfigError
    from traceinsight.store.window import parse_steps

    try:
        return parse_steps(value).text
    except ConfigError as e:
        raise click.BadParameter(str(e).removeprefix(f"--steps {value!r}: "), ctx, param) from None
