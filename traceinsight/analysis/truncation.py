"""What a salvaged (truncated) trace lost: which files were cut, and whether GPU events survived.

``--salvage`` reads a trace that ends early (a job killed while the profiler wrote it) up to
its last complete event; the ingest records a ``truncated-salvaged`` diagnostic per file.
Kineto writes a file's events grouped by kind: CPU ops, memory events and Python frames first,
the runtime calls and the GPU activity (kernels, copies, memsets) after them. A file cut before
that part holds no GPU event at all, and looks exactly like a CPU-only run; it is not one.
The verdict and the CPU-only metrics ask :func:`truncation` first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: the diagnostic codes of a file read only up to a cut
SALVAGED = ("truncated-salvaged",)
#: tables of device activity (GPU verdicts rest on them)
GPU_TABLES = ("gpu_activities",)
#: host-side tables whose rows the headline counts as what the cut kept
KEPT_TABLES = (
    ("cpu_ops", "CPU ops"),
    ("runtime_calls", "runtime calls"),
    ("python_frames", "Python frames"),
    ("memory_events", "memory events"),
)


@dataclass(frozen=True)
class Truncation:
    """The salvaged files of a store and what survived their cuts."""

    files: tuple[str, ...]  #: the salvaged files (base names)
    lost_bytes: int  #: bytes of the cut files after their last complete event
    gpu_rows: int  #: GPU activity rows kept
    kept: tuple[tuple[str, int], ...]  #: (what, rows) of the host-side tables kept

    @property
    def gpu_lost(self) -> bool:
        """No GPU event survived the cut: GPU verdicts are not possible."""
        return self.gpu_rows == 0

    def kept_text(self) -> str:
        parts = [f"{n:,} {what}" for what, n in self.kept if n]
        return ", ".join(parts) or "no host events"

    def files_text(self) -> str:
        shown = ", ".join(self.files[:3])
        more = f" and {len(self.files) - 3:,} more" if len(self.files) > 3 else ""
        return shown + more


def truncation(store: Any) -> Truncation | None:
    """The store's salvaged files, None when none was cut."""
    diags = [d for d in store.meta.get("diagnostics") or [] if d.get("code") in SALVAGED]
    if not diags:
        return None
    files = tuple(dict.fromkeys(str(d.get("source") or "?") for d in diags))
    rows = store.row_counts
    return Truncation(
        files=files,
        lost_bytes=sum(int(d.get("count") or 0) for d in diags),
        gpu_rows=sum(int(rows.get(t, 0)) for t in GPU_TABLES),
        kept=tuple((what, int(rows.get(t, 0))) for t, what in KEPT_TABLES),
    )


def headline(t: Truncation) -> str:
    """The headline of a salvaged trace whose GPU events were all past the cut (instead of a
    CPU-only verdict, which it is not)."""
    return (
        f"Truncated trace: {t.files_text()} ended early and was read up to its last complete "
        "event; no GPU event survived the cut "
        "(Kineto writes GPU activity after the CPU events), so GPU verdicts are not possible. "
        f"Kept: {t.kept_text()}. Record again, or copy the whole file."
    )


def prefix(t: Truncation) -> str:
    """What a salvaged trace's headline starts with when GPU events survived."""
    return (
        f"Truncated trace ({t.files_text()} read up to its last complete event; the verdict "
        "covers what was kept): "
    )
