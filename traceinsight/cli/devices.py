"""``traceinsight devices``: the device table (peaks per dtype, bandwidth, memory)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:  # the commands import the library lazily: a quick start for every command
    pass
from traceinsight.cli.options import CONTEXT, json_option, write_output


@click.command(context_settings=CONTEXT)
@json_option("the table")
def devices(json_out: Path | None) -> None:
    """The device peak table used for the roofline and MFU (dense FLOP/s, bandwidth).

    Extend or override it with a YAML file named by TRACEINSIGHT_DEVICES (same schema as the
    shipped traceinsight/devices/devices.yaml).

    \b
    Examples:
      traceinsight devices
      traceinsight devices --json              (print it; --json FILE writes it)
      TRACEINSIGHT_DEVICES=my_gpus.yaml traceinsight devices
    """
    from traceinsight.devices import table as dev
    from traceinsight.util import fmt

    specs = dev.list_devices()
    if json_out is not None:
        write_output(
            json.dumps(
                [
                    {
                        "key": s.key,
                        "name": s.name,
                        "vendor": s.vendor,
                        "peak_flops": s.peak_flops,
                        "mem_bw": s.mem_bw,
                        "mem_bytes": s.mem_bytes,
                    }
                    for s in specs
                ],
                indent=2,
            ),
            json_out,
        )
        return
    rows = [
        [
            s.key,
            s.name,
            fmt.fmt_rate(s.peak("bf16") or s.peak("fp16"), "FLOP/s"),
            fmt.fmt_rate(s.peak("fp32"), "FLOP/s"),
            fmt.fmt_rate(s.peak("fp8"), "FLOP/s"),
            fmt.fmt_rate(s.mem_bw, "B/s"),
            fmt.fmt_bytes(s.mem_bytes),
        ]
        for s in specs
    ]
    click.echo(
        fmt.table(
            rows,
            ["key", "name", "bf16/fp16", "fp32", "fp8", "bandwidth", "memory"],
            align="llrrrrr",
            flex=1,
        )
    )
