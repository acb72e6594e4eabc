"""Two runs compared: the change of step time explained (explain), whether they can be
compared at all (comparability), and the serving view (serving).

The package is also what ``traceinsight.compare`` names at the top level, so it is callable:
``traceinsight.compare(a, b)`` is :func:`traceinsight.api.compare` whichever was imported
first (a plain function of that name would be replaced by this package on its first import).
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any


class _CallableModule(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # the API sits above this layer: it is looked up at call time, never imported here
        return importlib.import_module("traceinsight.api").compare(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
