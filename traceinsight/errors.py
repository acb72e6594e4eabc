"""Error types. Every error a user can cause carries the file, the problem and a hint.

The CLI turns any :class:`TraceInsightError` into one line on stderr and exit code 2
(1 is reserved for "a finding reached --fail-on"). Tracebacks only with ``--debug``.
"""

from __future__ import annotations

from pathlib import Path


class TraceInsightError(Exception):
    """Base class of every error traceinsight raises on purpose."""

    exit_code = 2

    def __init__(self, message: str, *, path: str | Path | None = None, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.path = str(path) if path is not None else None
        self.hint = hint

    def one_line(self) -> str:
        """``FILE: problem (hint: ...)`` on a single line."""
        parts = []
        if self.path:
            parts.append(f"{self.path}: ")
        parts.append(self.message.replace("\n", " "))
        if self.hint:
            parts.append(f" (hint: {self.hint})")
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
