"""Checks of the modelled figures against the device, and what the model assumed.

A modelled rate above the device's peak is impossible: the op's FLOPs (or bytes) model does not
fit it (a convolution costed at stride 1 that ran at stride 2, a direct-convolution count for a
Winograd kernel, ideal DRAM traffic for data served from cache). Such op shapes count nowhere:
not in MFU, FLOP/s, the roofline efficiencies or points, nor in the modelled coverage; they
are listed with their assumption and said once in the data-quality notes
(:func:`above_peak_diagnostic`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceinsight.util import fmt


def above_peak(m: pd.DataFrame, bw: float) -> np.ndarray:
    """Rows of op shapes (op, input dims, dtype) whose modelled FLOP/s exceed the peak of their
    dtype or whose modelled bytes/s exceed the memory bandwidth, over all their calls."""
    key = ["op", "input_dims", "dtype"]
    g = m.groupby(key, dropna=False, sort=False)
    t = g["dev_ns"].transform("sum").to_numpy(np.float64) / 1e9
    F = g["flops"].transform("sum").to_numpy(np.float64)
    B = g["bytes"].transform("sum").to_numpy(np.float64)
    P = m["peak"].to_numpy(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return (t > 0) & ((F / t > P) | (B / t > bw))


#: what each model assumes, said of the ops whose modelled rate is above the device's peak
_ASSUMES = {
    "conv": "direct-convolution FLOPs; cuDNN's Winograd and FFT algorithms do fewer",
    "gemm": "dense matrix FLOPs at the peak of the input dtype; the kernel ran on faster units "
    "than that dtype's (or does less work)",
    "attention": "dense attention FLOPs over the full sequence lengths",
}
_ASSUMES_BYTES = (
    "ideal memory traffic, every tensor read and written once in DRAM; the data came from "
    "cache, or the op moves fewer bytes than its recorded tensors"
)


def note_rows(m: pd.DataFrame, col: str) -> list[dict]:
    """What the model assumed (``assumed``) or inferred from context (``inferred``) for the
    counted ops: one row per statement (its general part, before any ": " detail), with the
    op shapes, calls and device time it concerns and their share of the counted time."""
    total = float(m["dev_ns"].sum()) or 1.0
    acc: dict[str, dict] = {}
    sub = m[m[col].astype(bool).to_numpy()]
    for (_op, _dims, notes), g in sub.groupby(["op", "input_dims", col], dropna=False, sort=False):
        for note in dict.fromkeys(str(notes).split("; ")):
            text = note.split(": ", 1)[0] if col == "inferred" else note
            row = acc.setdefault(text, {"text": text, "ops": 0, "calls": 0, "device_ns": 0})
            row["ops"] += 1
            row["calls"] += len(g)
            row["device_ns"] += int(g["dev_ns"].sum())
    out = sorted(acc.values(), key=lambda r: -r["device_ns"])
    for r in out:
        r["pct_of_counted"] = 100.0 * r["device_ns"] / total
    return out


def excluded_rows(x: pd.DataFrame, bw: float) -> list[dict]:
    """One row per excluded op shape: its figures, how far above the peak and the assumption."""
    grp = (
        x.groupby(["op", "input_dims", "dtype"], dropna=False, sort=False)
        .agg(
            dev_ns=("dev_ns", "sum"),
            flops=("flops", "sum"),
            bytes=("bytes", "sum"),
            calls=("dev_ns", "size"),
            peak=("peak", "first"),
            kind=("kind", "first"),
            assumed=("assumed", "first"),
            inferred=("inferred", "first"),
        )
        .reset_index()
        .sort_values("dev_ns", ascending=False)
    )
    out = []
    for r in grp.itertuples():
        t = r.dev_ns / 1e9
        pf, pb = float(r.flops) / t / float(r.peak), float(r.bytes) / t / bw
        on_flops = pf >= pb
        why = _ASSUMES.get(str(r.kind), f"{r.kind} FLOPs per element") if on_flops else None
        parts = [p for p in (r.assumed, why if on_flops else _ASSUMES_BYTES) if p]
        out.append(
            {
                "op": r.op,
                "dims": r.input_dims if isinstance(r.input_dims, str) else None,
                "dtype": r.dtype,
                "kind": r.kind,
                "calls": int(r.calls),
                "device_ns": int(r.dev_ns),
                "flops": float(r.flops),
                "bytes": float(r.bytes),
                "above": "peak" if on_flops else "bandwidth",
                "pct_of_peak": 100.0 * max(pf, pb),
                "assumption": "; ".join(parts),
                "inferred": r.inferred or None,
            }
        )
    return out


def above_peak_diagnostic(excluded: list[dict]) -> dict | None:
    """The data-quality line of the op shapes excluded for a modelled rate above the peak."""
    if not excluded:
        return None
    by: dict[str, int] = {}
    for e in excluded:
        by[e["assumption"]] = by.get(e["assumption"], 0) + 1
    why = "; ".join(f"{k} ({v} op{'s' if v != 1 else ''})" for k, v in by.items())
    n = len(excluded)
    ns = sum(int(e["device_ns"]) for e in excluded)
    calls = sum(int(e["calls"]) for e in excluded)
    return {
        "code": "model-above-peak",
        "severity": "warning",
        "message": f"{n} op{'s' if n != 1 else ''} above the peak: their model's assumption "
        f"({why}) is wrong for them; excluded from MFU, FLOP/s, the roofline and the "
        f"modelled coverage ({fmt.fmt_ns(ns)} of kernel time, {calls:,} calls)",
        "count": n,
        "count_of": "ops",
    }
