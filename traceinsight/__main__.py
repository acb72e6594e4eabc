"""``python -m traceinsight``."""

from __future__ import annotations

import os
import sys

from traceinsight.cli import main


def run() -> None:
    """Run the command; once it has finished, end the process without tearing the interpreter
    down (with Arrow loaded, module teardown and a last full garbage collection take 30-80 ms
    and change nothing: every file a command writes is closed and renamed by then, temporary
    folders are removed by their ``with`` blocks). An exception that escapes the command ends
    the process the usual way."""
    try:
        main()
        code: object = 0
    except SystemExit as e:
        code = e.code
    if code is None:
        code = 0
    elif not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):  # a closed pipe (``| head``): nothing more can be said
        pass
    os._exit(code)


if __name__ == "__main__":  # pragma: no cover
    run()
