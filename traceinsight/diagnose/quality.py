"""Data-quality notes a reader can weigh: what each count counts (``count_of``) and whether it
affects the figures (``impact``).

The profiler's own record counts (Kineto's INFO line ``Record counts: Out-of-range = 4181,
Blocklisted runtime = …``, kept by the reader as numbers) are restated one count at a time with
what that kind of record is and what its absence does to the figures; a line whose counts do
not affect any figure is information, not a warning.
"""

from __future__ import annotations

import re
from typing import Any

#: the reader's form of the profiler's record counts (ingest/readers/kineto/metadata.py)
_RECORD_COUNTS = re.compile(r"^profiler info: Record counts: (.*)$")
_PAIR = re.compile(r"([A-Za-z][A-Za-z -]{0,40}?)\s*=\s*(\d{1,18})")

#: Kineto's record-count name -> (what the records are, what missing them does to the figures,
#: whether that touches a figure)
RECORD_KINDS: dict[str, tuple[str, str, bool]] = {
    "out-of-range": (
        "records outside the profiling window, left out",
        "the figures cover the window only; GPU work still running when the window closed may "
        "be among them, so the last step's kernel time may be low",
        True,
    ),
    "blocklisted runtime": (
        "runtime calls on the profiler's blocklist (cudaGetDevice, cudaEventQuery and the "
        "like), not recorded by design",
        "does not affect the figures",
        False,
    ),
    "invalid ext correlations": (
        "GPU records whose link to their CPU op was invalid",
        "their kernels may be unattributed (kernel totals are not affected)",
        True,
    ),
    "cpu gpu out-of-order": (
        "records with GPU times before their CPU launch (clock skew)",
        "launch delays and idle causes near them are unreliable",
        True,
    ),
    "unexpected cuda events": (
        "CUDA records the profiler did not recognise, left out",
        "kernel totals may be low by their time (not known)",
        True,
    ),
}

#: code -> (what its count counts, whether and how it affects the figures)
KNOWN: dict[str, tuple[str, str | None]] = {
    "unattributed-kernels": (
        "kernels",
        "their time is in every total, but under [unattributed] in the op, layer and module tables",
    ),
    "kernels-without-launch": ("kernels", None),
    "graph-replay": ("kernels", "does not affect the figures"),
    "duplicate-correlation": ("runtime calls", "their kernels may be attributed to another op"),
    "misnested-ops": ("ops", "does not affect the figures (kernels keep their launching op)"),
    "external-id-mismatch": ("kernels", "does not affect the figures"),
    "json-repaired": ("values", "does not affect the figures"),
    "nul-tail": ("bytes", "does not affect the figures"),
    "trailing-data": ("bytes", "does not affect the figures"),
    "timestamps-rounded": ("timestamps", "below 1 ns: does not affect the figures"),
    "negative-durations": ("events", "their time counts as 0"),
    "missing-durations": ("events", "their time counts as 0"),
    "negative-timestamps": ("events", None),
    "invalid-values": ("events", "left out of every figure"),
    "records-dropped": ("records", None),
    "model-above-peak": ("ops", None),
}


def explain(diags: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``diags`` with the record counts restated and ``count_of`` / ``impact`` filled in where
    known (a diagnostic's own fields win)."""
    out = []
    for d in diags:
        d = dict(d)
        m = _RECORD_COUNTS.match(str(d.get("message") or ""))
        if m and d.get("code") == "profiler-log":
            d = _record_counts(d, _PAIR.findall(m.group(1)))
        known = KNOWN.get(str(d.get("code") or ""))
        if known:
            if d.get("count") and not d.get("count_of"):
                d["count_of"] = known[0]
            if known[1] and not d.get("impact"):
                d["impact"] = known[1]
        out.append(d)
    return out


def _record_counts(d: dict[str, Any], pairs: list[tuple[str, str]]) -> dict[str, Any]:
    said: list[str] = []
    effects: list[str] = []
    harmless: list[str] = []
    for key, num in pairs:
        n = int(num)
        if not n:
            continue
        name = key.strip()
        what, effect, touches = RECORD_KINDS.get(
            name.lower(), (f"'{name}' records", "their effect on the figures is not known", True)
        )
        said.append(f"{n:,} {what} ({name})")
        (effects if touches else harmless).append(f"{name}: {effect}" if touches else name)
    if not said:
        return d
    impact = "; ".join(effects)
    if harmless:
        impact += ("; " if impact else "") + f"{', '.join(harmless)}: does not affect the figures"
    return {
        **{k: v for k, v in d.items() if k not in ("count", "count_of")},
        "code": "profiler-record-counts",
        "message": "the profiler reports " + "; ".join(said),
        "severity": "warning" if effects else "info",
        "impact": impact if effects else "does not affect the figures",
    }
