"""Handing freed memory back to the system between the phases of an analysis.

glibc's allocator keeps the memory of freed arrays for reuse (its threshold for giving large
blocks their own mapping rises as they are freed), so after a phase that built and dropped
large frames the process stays as large as that phase's peak. :func:`release` asks it to
return what is free (``malloc_trim``); elsewhere (another C library, another system) it does
nothing. Measured on a 16-rank store of 2.5 M ops: 1,464 MB resident after attribution, 833 MB
after the trim, with the same frames alive.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import sys
from functools import cache
from typing import Any

__all__ = ["release"]


@cache
def _libc() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc if hasattr(libc, "malloc_trim") else None
    except OSError:  # pragma: no cover - no C library by that name
        return None


def release() -> None:
    """Return the allocators' free memory to the system: glibc's (elsewhere a no-op) and, once
    Arrow is loaded, its memory pool's (tables read from the store and dropped)."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)
    pa = sys.modules.get("pyarrow")
    if pa is not None:
        with contextlib.suppress(AttributeError, NotImplementedError):  # an old pyarrow
            pa.default_memory_pool().release_unused()
