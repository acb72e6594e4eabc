"""Error types. Every error a user can cause carries the file, the problem and a hint.

The CLI turns any :class:`TraceInsightError` into one line on stderr and exit code 2
(1 is reserved for "a finding reached --fail-on"). Tracebacks only with ``--debug``.
"""

from __future__ import annotations

import errno
from pathlib import Path

#: the longest file name, problem and hint an error line shows (characters)
PATH_MAX, MESSAGE_MAX, HINT_MAX = 300, 600, 400


def _cut(text: str, n: int) -> str:
    """``text`` cut to ``n`` characters, saying how much was left out."""
    return text if len(text) <= n else f"{text[: n - 1]}…[{len(text) - n + 1:,} more characters]"


class TraceInsightError(Exception):
    """Base class of every error traceinsight raises on purpose."""

    exit_code = 2

    def __init__(self, message: str, *, path: str | Path | None = None, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.path = str(path) if path is not None else None
        self.hint = hint

    def one_line(self) -> str:
        """``FILE: problem (hint: ...)`` on a single line of readable length: the file's name,
        the problem and the hint are each cut to a bound (a name or a value quoted from an
        input may be megabytes long)."""
        parts = []
        if self.path:
            parts.append(f"{_cut(self.path, PATH_MAX)}: ")
        parts.append(_cut(" ".join(self.message.split()), MESSAGE_MAX))
        if self.hint:
            parts.append(f" (hint: {_cut(' '.join(self.hint.split()), HINT_MAX)})")
        return "".join(parts)

    def __str__(self) -> str:  # pragma: no cover - trivial
        return self.one_line()


class InputError(TraceInsightError):
    """The input cannot be used: missing, unreadable, ambiguous."""


class TraceFormatError(InputError):
    """The file is not a trace we can read (wrong format, truncated, corrupt)."""


class UnsupportedTraceVersion(TraceFormatError):
    """A trace format we recognise but cannot read (e.g. a .nsys-rep without nsys)."""


class EmptyTraceError(InputError):
    """The trace parses but holds no events."""


class OutputError(TraceInsightError):
    """An output path that would destroy an input or cannot be written."""


class ConfigError(TraceInsightError):
    """Bad option, rule file or threshold override."""


class InstallError(TraceInsightError):
    """The installation is incomplete (missing data files or optional extra)."""


class StoreError(TraceInsightError):
    """A trace store is missing, incomplete or of another schema version."""


#: what a write fails with when the disk (or the user's quota, or the file size limit) is full
NO_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def no_space(e: BaseException) -> bool:
    """Whether ``e`` says that a write found no space (Arrow's I/O errors are ``OSError``s
    that carry the reason in their text only)."""
    return isinstance(e, OSError) and (
        e.errno in NO_SPACE_ERRNOS or "No space left on device" in str(e)
    )
