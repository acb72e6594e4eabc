"""Shared vocabulary: names every layer agrees on, with no heavy imports (no pandas, no numpy).

Analysis, metrics, rules and renderers import these instead of spelling the strings again.
"""

from __future__ import annotations

#: kernel classes, in display order (the patterns that assign them: analysis/categories.py)
CLASSES = ("gemm", "attention", "convolution", "elementwise", "reduction", "communication",
           "memory", "other")

#: the op bucket of device activity that no CPU op launched (kept, never dropped)
UNATTRIBUTED = "[unattributed]"
#: the layer bucket of device activity launched outside any nn.Module / annotation
NO_MODULE = "[no module]"
