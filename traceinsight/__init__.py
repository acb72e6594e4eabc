"""traceinsight: tells you why a training or inference run was slow, from its profiler traces.

From Python (loaded on first use, so ``import traceinsight`` stays cheap)::

    import traceinsight as ti
    trace = ti.open("trace.json.gz")   # Trace: the store's tables as pandas DataFrames
    d = trace.diagnose()               # Diagnosis: headline, findings, metrics, _repr_html_
    ti.compare("before.json.gz", "after.json.gz")
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.2.0"

#: the names of the Python API (traceinsight/api.py), imported on first access
_API = ("open", "compare", "Trace", "Diagnosis", "Compare")

__all__ = ["__version__", *_API]


def __getattr__(name: str) -> Any:
    # imported by name: every module of the package imports this one (for __version__), and
    # none of them may depend on the API, which sits above them all. ``compare`` is the
    # subpackage traceinsight.compare, callable as the API's compare (compare/__init__.py).
    if name == "compare":
        return importlib.import_module("traceinsight.compare")
    if name in _API:
        return getattr(importlib.import_module("traceinsight.api"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_API})
