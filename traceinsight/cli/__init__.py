"""The ``traceinsight`` command: a thin layer over the library API.

Exit codes: 0 success; 1 a finding reached ``--fail-on`` (or a compare gate failed);
2 usage, input, configuration or installation error (one line on stderr, no traceback
unless ``--debug``).
"""

from __future__ import annotations

from traceinsight.cli.cache import cache
from traceinsight.cli.compare import compare
from traceinsight.cli.critical_path import critical_path
from traceinsight.cli.devices import devices
from traceinsight.cli.diagnose import diagnose
from traceinsight.cli.group import main
from traceinsight.cli.ingest import ingest
from traceinsight.cli.profile import profile
from traceinsight.cli.report import report
from traceinsight.cli.rules import rules
from traceinsight.cli.summary import summary
from traceinsight.cli.top import top
from traceinsight.cli.trend import trend

#: every command of the group, one module each (``traceinsight/cli/NAME.py``)
COMMANDS = [
    ingest,
    summary,
    top,
    diagnose,
    critical_path,
    report,
    compare,
    trend,
    rules,
    devices,
    profile,
    cache,
]
for _command in COMMANDS:
    main.add_command(_command)

__all__ = ["COMMANDS", "main"]
