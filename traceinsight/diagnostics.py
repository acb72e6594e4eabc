"""Data-quality diagnostics: what the input lacked, what was repaired, what could not be linked.

Degraded input is never dropped silently: every reader and analysis step reports here, and
the diagnostics travel in the store's metadata and in every result and report.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Severity = Literal["info", "warning", "error"]


@dataclass(frozen=True, slots=True)
class Diagnostic:
    code: str  #: stable identifier, e.g. ``json-repaired``, ``orphan-kernels``
    message: str  #: one sentence a user can read
    severity: Severity = "warning"
    source: str | None = None  #: file (base name) or rank it concerns
    count: int | None = None  #: how many rows / events are affected
    hint: str | None = None  #: what to do about it (a capture option, a flag)
    count_of: str | None = None  #: what ``count`` counts ("kernels", "records")
    impact: str | None = None  #: whether and how it affects the figures

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Diagnostic:
        return cls(
            code=str(d.get("code", "unknown")),
            message=str(d.get("message", "")),
            severity=d.get("severity", "warning"),
            source=d.get("source"),
            count=d.get("count"),
            hint=d.get("hint"),
            count_of=d.get("count_of"),
            impact=d.get("impact"),
        )


@dataclass
class DiagnosticLog:
    """Collects diagnostics, merging repeats of the same code and source into one count."""

    items: list[Diagnostic] = field(default_factory=list)

    def add(
        self,
        code: str,
        message: str,
        *,
        severity: Severity = "warning",
        source: str | None = None,
        count: int | None = None,
        hint: str | None = None,
        count_of: str | None = None,
        impact: str | None = None,
    ) -> None:
        if count is not None and count <= 0:
            return
        self.items.append(
            Diagnostic(code, message, severity, source, count, hint, count_of, impact)
        )

    def extend(self, other: DiagnosticLog | list[Diagnostic]) -> None:
        self.items.extend(other.items if isinstance(other, DiagnosticLog) else other)

    def to_list(self) -> list[dict[str, Any]]:
        return [d.to_dict() for d in self.items]
