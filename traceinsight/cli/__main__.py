"""``python -m traceinsight.cli``: the command line (as ``python -m traceinsight``)."""

import sys

from traceinsight.cli import main

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
