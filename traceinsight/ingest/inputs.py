"""What a folder given as input held besides the traces that were read, and why each other
entry was left out.

Ingest reads the files of a folder whose names end in a trace suffix (``.json``,
``.json.gz``) and skips, with a ``file-skipped`` diagnostic, such files that no reader
recognises. Everything else in the folder (notes, scripts, images, sub-folders) is never
opened; :func:`skipped_entries` names those too, so a user who drops a run's folder with its
other files sees what was diagnosed and what was not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from traceinsight.ingest.readers import suffixes
from traceinsight.store.core import TraceStore

SKIPPED = "file-skipped"


def skipped_entries(inputs: list[Path], store: TraceStore) -> list[dict[str, Any]]:
    """Diagnostics (code ``file-skipped``, severity info) for every entry of a single input
    folder that was not read into ``store`` and that ingest did not already report; [] for
    file inputs and stores. Hidden entries (``.name``) are left out silently. The entries come
    from ingest's own listing of the folder (``store.listing``): the folder is not read again
    after the diagnosis."""
    if len(inputs) != 1 or store.listing is None or Path(inputs[0]) == store.path:
        return []
    read = {str(s.get("name")) for s in store.meta.get("sources", [])}
    reported = {
        str(d.get("source")) for d in store.meta.get("diagnostics", []) if d.get("code") == SKIPPED
    }
    ends = tuple(s for s in suffixes())
    shown = ", ".join(s for s in ends if s != ".gz")
    out = []
    for name, is_dir in store.listing:
        if name.startswith(".") or name in read or name in reported:
            continue
        if is_dir:
            why = "a folder (folders inside the input folder are not searched)"
        elif not name.lower().endswith(ends):
            why = f"not a trace file name ({shown})"
        else:
            continue  # a trace-named file that was read under another name: nothing to say
        out.append(
            {
                "code": SKIPPED,
                "severity": "info",
                "source": name,
                "message": f"{name} skipped: {why}",
            }
        )
    return out


def skipped_lines(result_diagnostics: Sequence[Mapping[str, Any]]) -> list[str]:
    """One stderr line per skipped entry of the input folder (this run's and ingest's)."""
    return [
        f"traceinsight: {d.get('message')}" for d in result_diagnostics if d.get("code") == SKIPPED
    ]
