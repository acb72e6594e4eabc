"""Shared vocabulary: names every layer agrees on, with no heavy imports (no pandas, no numpy).

Analysis, metrics, rules and renderers import these instead of spelling the strings again.
"""

from __future__ import annotations

import re

#: kernel classes, in display order (the patterns that assign them: analysis/categories.py)
CLASSES = (
    "gemm",
    "attention",
    "convolution",
    "elementwise",
    "reduction",
    "communication",
    "memory",
    "other",
)

#: the op bucket of device activity that no CPU op launched (kept, never dropped)
UNATTRIBUTED = "[unattributed]"
#: the layer bucket of device activity launched outside any nn.Module / annotation
NO_MODULE = "[no module]"

_MORE_ROW = re.compile(r"^\[[\d,]+ more\]$")


def more_row(n: int) -> str:
    """The name of the row that sums what a capped rollup table left out: ``[1,234 more]``."""
    return f"[{n:,} more]"


def is_more_row(name: object) -> bool:
    """Whether a row name is a :func:`more_row` label (renderers keep it out of sorting)."""
    return isinstance(name, str) and _MORE_ROW.match(name) is not None


def mark_steps_hint(fmt_name: str | None, torch: bool = True) -> str:
    """How to mark steps in the vocabulary of the input's profiler (``trace.format``; ``torch``
    False: a program without PyTorch). Phrased by :mod:`traceinsight.util.capture_hints`."""
    from traceinsight.util import capture_hints

    tool = capture_hints.tool_of(fmt_name)
    return capture_hints.steps_hint(capture_hints.Capture(tool, torch or tool != "nsys"))
