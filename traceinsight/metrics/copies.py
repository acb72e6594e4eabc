"""Memory copies by kind: which copies run exposed (no kernel at the same time), and so which
advice applies.

Kineto names each copy with its direction and, on CUDA, the host memory it touches:
``Memcpy HtoD (Pageable -> Device)``, ``Memcpy DtoH (Device -> Pinned)``, ``Memcpy DtoD (Device
-> Device)``, ``Memcpy PtoP (Device -> Device)``. ROCm writes ``(Host -> Device)``: pinned or
pageable is not recorded. The kinds:

* ``pageable``: host copies from/to pageable memory. The driver stages them through a pinned
  buffer and the host blocks; pinning the memory (``pin_memory=True``) and ``non_blocking=True``
  is the fix, and only for these.
* ``pinned``: host copies from/to pinned memory, already asynchronous; when exposed, nothing was
  scheduled beside them (prefetch on a side stream).
* ``host``: host copies whose memory kind the trace does not record (ROCm).
* ``d2d``: device-to-device copies on one GPU (``.clone()``, ``.contiguous()`` of contiguous
  data, ``copy_``, DDP's copies of gradients into its buckets): fewer copies, views, in-place ops.
* ``peer``: copies between GPUs (``PtoP``).

Exposed time per kind is the part of that kind's copies, inside the step windows, that no
kernel overlaps (the breakdown's ``memcpy_exposed`` restricted to one kind), % of step time.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from traceinsight.analysis import Analysis, attribution_parts, by_rank
from traceinsight.analysis import intervals as iv
from traceinsight.metrics.registry import MetricSet, declare

KINDS = ("pageable", "pinned", "host", "d2d", "peer", "other")
LABELS = {
    "pageable": "host copies, pageable memory",
    "pinned": "host copies, pinned memory",
    "host": "host copies, memory kind not recorded",
    "d2d": "device to device (same GPU)",
    "peer": "peer to peer (between GPUs)",
    "other": "other copies",
}
_DIR_RE = re.compile(r"\b(HtoD|DtoH|DtoD|HtoH|PtoP)\b")

for _k in KINDS[:-1]:
    declare(
        f"memcpy_exposed_{_k}_pct",
        "%",
        f"{LABELS[_k]} with no kernel running, % of step time",
        needs="GPU copies in step windows",
    )
declare(
    "memcpy_exposed_d2h_pct",
    "%",
    "device-to-host copies (any host memory) with no kernel running, % of step time",
    needs="GPU copies in step windows",
)
declare(
    "memcpy_pageable_copies",
    "count",
    "host copies from or to pageable memory, whole trace",
    needs="GPU activity",
)


def classify(names: np.ndarray, directions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(kind, direction) of each copy from its name (and the recorded direction)."""
    kinds = np.empty(len(names), dtype=object)
    dirs = np.empty(len(names), dtype=object)
    for i, (name, d) in enumerate(zip(names, directions)):
        text = name if isinstance(name, str) else ""
        if not isinstance(d, str):
            m = _DIR_RE.search(text)
            d = m.group(1) if m else None
        dirs[i] = d
        if d in ("HtoD", "DtoH", "HtoH"):
            kinds[i] = (
                "pageable" if "Pageable" in text else "pinned" if "Pinned" in text else "host"
            )
        elif d == "DtoD":
            kinds[i] = "d2d"
        elif d == "PtoP":
            kinds[i] = "peer"
        else:
            kinds[i] = "other"
    return kinds, dirs


def _copies(g: pd.DataFrame) -> pd.DataFrame:
    """The copies among the GPU rows ``g``, with their ``copy_class`` and ``direction``."""
    cp = g[g["kind"] == "memcpy"]
    kinds, dirs = classify(
        cp["name"].astype(object).to_numpy(), cp["copy_kind"].astype(object).to_numpy()
    )
    return cp.assign(copy_class=kinds, direction=dirs)


#: per rank: exposed ns by copy class, by (class, direction), and of device-to-host copies
Exposed = dict[int, tuple[dict[str, int], dict[tuple[str, str], int], int]]


def _exposed(an: Analysis, cp: pd.DataFrame) -> Exposed:
    """Per rank with copies in its step windows: the ns of its copies (by class, by class and
    direction, device-to-host) with no kernel of the rank running, inside its windows."""
    g = an.attribution.gpu
    windows = an.attribution.steps
    out: Exposed = {}
    for rank, d in cp.groupby("rank", sort=True):
        kern = by_rank.rows(g, rank)
        kern = kern[kern["kind"] == "kernel"]
        busy = iv.union(kern["start_ns"].to_numpy(np.int64), kern["end_ns"].to_numpy(np.int64))
        ws = np.array([w.start_ns for w in windows if w.rank == rank], dtype=np.int64)
        we = np.array([w.end_ns for w in windows if w.rank == rank], dtype=np.int64)
        if not len(ws):
            continue

        def alone(rows: pd.DataFrame, busy=busy, ws=ws, we=we) -> int:
            u = iv.union(rows["start_ns"].to_numpy(np.int64), rows["end_ns"].to_numpy(np.int64))
            return int(iv.overlap_with_windows(iv.subtract(u, busy), ws, we).sum())

        by_class = {str(k): alone(rows) for k, rows in d.groupby("copy_class")}
        by_pair = {
            (str(k), str(dr)): alone(rows)
            for (k, dr), rows in d.groupby(["copy_class", d["direction"].fillna("?")])
        }
        d2h = alone(d[d["direction"] == "DtoH"]) if (d["direction"] == "DtoH").any() else 0
        out[int(rank)] = (by_class, by_pair, d2h)
    return out


def _rank_exposed(an: Analysis) -> Exposed:
    g = an.attribution.gpu
    return _exposed(an, _copies(g)) if len(g) else {}


# measured per rank partition next to its attribution (in the worker that reads it)
attribution_parts.product(
    "copy_exposed",
    __name__,
    _rank_exposed,
    attribution_parts.merge_dicts,
)


def compute(an: Analysis, ms: MetricSet) -> None:
    g = an.attribution.gpu
    windows = an.attribution.steps
    wall = float(sum(w.dur_ns for w in windows))
    names = [f"memcpy_exposed_{k}_pct" for k in KINDS[:-1]] + ["memcpy_exposed_d2h_pct"]
    if not len(g) or not wall:
        for n in [*names, "memcpy_pageable_copies"]:
            ms.set(n, None, why_missing="no GPU activity in step windows")
        return
    cp = _copies(g)
    ms.set("memcpy_pageable_copies", float((cp["copy_class"] == "pageable").sum()))
    per = an.cache.get("copy_exposed")  # the rank partitions' own, joined
    if per is None:
        per = _exposed(an, cp)
    exposed = {k: 0 for k in KINDS}
    by_pair: dict[tuple[str, str], int] = {}
    d2h = 0
    for _rank, (by_class, pairs, rank_d2h) in sorted(per.items()):
        for k, ns in by_class.items():
            exposed[k] += ns
        for key, ns in pairs.items():
            by_pair[key] = by_pair.get(key, 0) + ns
        d2h += rank_d2h
    for k in KINDS[:-1]:
        ms.set(f"memcpy_exposed_{k}_pct", 100.0 * exposed[k] / wall)
    ms.set("memcpy_exposed_d2h_pct", 100.0 * d2h / wall)
    ms.evidence["copy_kinds"] = _table(cp, by_pair, wall)


def _table(cp: pd.DataFrame, exposed: dict[tuple[str, str], int], wall: float) -> list[dict]:
    """One row per copy kind and direction: copies, time, exposed share, bytes, bandwidth."""
    if not len(cp):
        return []
    cp = cp.assign(direction=cp["direction"].fillna("?"))
    agg = (
        cp.groupby(["copy_class", "direction"])
        .agg(
            copies=("dur_ns", "size"),
            total_ns=("dur_ns", "sum"),
            bytes=("bytes", lambda b: float(b.fillna(0).sum())),
        )
        .reset_index()
    )
    agg = agg.sort_values("total_ns", ascending=False)
    out = []
    for r in agg.itertuples():
        k, dr = str(r.copy_class), str(r.direction)
        rate = 1e9 * r.bytes / r.total_ns if r.total_ns and r.bytes else None
        out.append(
            {
                "kind": LABELS.get(k, k),
                "direction": dr,
                "copies": int(r.copies),
                "total_ns": int(r.total_ns),
                "exposed_pct": 100.0 * exposed.get((k, dr), 0) / wall,
                "bytes": int(r.bytes) if r.bytes else None,
                "bytes_per_s": rate,
            }
        )
    return out
