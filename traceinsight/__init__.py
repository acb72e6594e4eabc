"""traceinsight: tells you why a training or inference run was slow, from its profiler traces."""

from __future__ import annotations

__version__ = "0.2.0"
