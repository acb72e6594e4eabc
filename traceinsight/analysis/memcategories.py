"""What fills memory, by category, over time (``memory_categories``: the torch.profiler
memory-timeline export). Memory that existed before the window (``preexisting``) is the
baseline; each later row adds or removes bytes of one category; the peak is the moment the
total is highest, and its split by category says whether activations, parameters, gradients
or optimizer state dominate."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

MAX_POINTS = 400
ORDER = (
    "parameter",
    "optimizer_state",
    "gradient",
    "activation",
    "autograd_detail",
    "input",
    "temporary",
    "unknown",
)


def categories_view(store: Any) -> list[dict[str, Any]]:
    """One view per rank of the store's memory-timeline rows (empty: none)."""
    t = store.table("memory_categories")
    if not t.num_rows:
        return []
    df = t.select(["rank", "seq", "ts_ns", "delta_bytes", "category"]).to_pandas()
    df["category"] = df["category"].astype(str)
    return [
        view(int(rank), d.sort_values("seq", kind="stable"))
        for rank, d in df.groupby("rank", sort=True)
    ]


def view(rank: int, d: pd.DataFrame) -> dict[str, Any]:
    cats = [c for c in ORDER if c in set(d["category"])]
    pre = d[d["ts_ns"].isna()]
    timed = d[d["ts_ns"].notna()].sort_values(["ts_ns", "seq"], kind="stable")
    base = {c: int(pre.loc[pre["category"] == c, "delta_bytes"].sum()) for c in cats}
    wide = pd.DataFrame(0, index=np.arange(len(timed)), columns=cats, dtype=np.int64)
    for c in cats:
        wide[c] = np.where(
            timed["category"].to_numpy() == c, timed["delta_bytes"].to_numpy(np.int64), 0
        )
    levels = wide.cumsum() + pd.Series(base)
    x = timed["ts_ns"].to_numpy(np.int64)
    total = levels.sum(axis=1).to_numpy(np.int64)
    if len(total):
        k = int(np.argmax(total))
        peak = {
            "x": int(x[k]),
            "bytes": int(total[k]),
            "by_category": {c: int(levels[c].iloc[k]) for c in cats},
        }
    else:
        peak = {"x": None, "bytes": sum(base.values()), "by_category": base}
    if len(x) > MAX_POINTS:  # keep each bucket's highest total (peaks stay visible)
        edges = np.linspace(x[0], x[-1], MAX_POINTS + 1)
        b = np.clip(np.searchsorted(edges, x, side="right") - 1, 0, MAX_POINTS - 1)
        pick = pd.Series(total).groupby(b).idxmax().to_numpy()
        x, levels = x[pick], levels.iloc[pick]
    return {
        "rank": rank,
        "categories": cats,
        "baseline": base,
        "x": x.tolist(),
        "series": {c: levels[c].astype(np.int64).tolist() for c in cats},
        "peak": peak,
        "rows": len(d),
    }
