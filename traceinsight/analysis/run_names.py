"""The event names a trace holds, read once per analysis, and the :class:`Fact` type of
the run facts (:mod:`.run_facts`)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from traceinsight.analysis import attribution_parts

if TYPE_CHECKING:
    import pandas as pd

    from traceinsight.analysis import Analysis

UNKNOWN = "unknown"
FACT_NAMES = (
    "mode",
    "engine",
    "matrix_dtypes",
    "optimizer",
    "parallelism",
    "compiled",
    "attention",
    "comm_dtype",
    "dataloader",
    "vendor",
    "interconnect",
)


@dataclass(frozen=True)
class Fact:
    value: Any  #: a word, a list of words or a mapping; "unknown" when the trace cannot tell
    evidence: str  #: the events it rests on
    confidence: str = "high"  #: high | medium | low (unknown facts: low)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def unknown(why: str) -> Fact:
    return Fact(UNKNOWN, why, "low")


# --- the event names a trace holds -----------------------------------------------------------


@dataclass
class Names:
    """Distinct event names with their counts, per class of event."""

    ops: pd.Series  #: CPU op name -> count
    ranges: pd.Series  #: annotation / NVTX / step name -> count
    frames: pd.Series  #: Python frame name -> count
    kernels: pd.Series  #: kernel name -> total ns
    runtime: pd.Series  #: runtime call name -> count
    memcpy: pd.Series  #: memcpy name -> count
    graph_kernels: int  #: kernels launched from a CUDA/HIP graph

    def any(self, rx: re.Pattern[str], *where: str) -> list[tuple[str, float]]:
        """(name, count or ns) of the names matching ``rx`` in the given classes."""
        out: list[tuple[str, float]] = []
        for w in where:
            s: pd.Series = getattr(self, w)
            out += [(str(n), float(c)) for n, c in s.items() if rx.search(str(n))]
        return out


def _counts(s: pd.Series, sort: bool = True) -> pd.Series:
    import pandas as pd

    if not len(s):
        return pd.Series([], dtype="int64")
    vc = s.astype(object).dropna().astype(str).value_counts(sort=sort)
    return vc[vc > 0]


def read_names(an: Analysis) -> Names:
    """The names of ``an``'s store, read once per analysis (a partitioned store's: its rank
    partitions' counts, summed)."""
    cached = an.__dict__.get("_run_fact_names")
    if cached is not None:
        return cached
    names = an.cache.pop("run_names", None)
    if names is None:
        names = _read_names(an)
    an.__dict__["_run_fact_names"] = names
    return names


def _read_names(an: Analysis, sort: bool = True) -> Names:
    """``sort=False``: the counts in the order the table's value counts list the names before
    sorting them (what :func:`_joined` sums)."""
    import pandas as pd

    st = an.store
    ops = _counts(st.df("cpu_ops", ["name"])["name"], sort)
    rng = _counts(st.df("ranges", ["name"])["name"], sort)
    py = _counts(st.df("python_frames", ["name"])["name"], sort)
    rt = _counts(st.df("runtime_calls", ["name"])["name"], sort)
    g = st.df("gpu_activities", ["name", "kind", "dur_ns", "graph_id"])
    kind = g["kind"].astype(object)
    k = g[kind == "kernel"]
    kern = (
        k.groupby(k["name"].astype(object).astype(str))["dur_ns"].sum()
        if len(k)
        else pd.Series([], dtype="int64")
    )
    mem = _counts(g.loc[kind == "memcpy", "name"], sort)
    graphs = int(k["graph_id"].notna().sum()) if len(k) else 0
    return Names(ops, rng, py, kern, rt, mem, graphs)


def _rank_names(an: Analysis) -> Names:
    return _read_names(an, sort=False)


def _summed_counts(parts: list[pd.Series]) -> pd.Series:
    """The value counts of the partitions' tables one after the other, from each one's unsorted
    counts: the names in the order of the whole table's (first seen in rank order), then sorted
    as ``value_counts`` sorts them (stable, by count descending), so ties keep that order."""
    import numpy as np
    import pandas as pd

    parts = [p for p in parts if len(p)]
    if not parts:
        return pd.Series([], dtype="int64")
    total: dict[str, int] = {}
    for p in parts:
        for name, n in zip(p.index, p.to_numpy(np.int64)):
            total[name] = total.get(name, 0) + int(n)
    first = parts[0]
    index = pd.Index(list(total), dtype=first.index.dtype, name=first.index.name)
    out = pd.Series(np.fromiter(total.values(), np.int64, len(total)), index=index)
    out.name = first.name
    return out.sort_values(ascending=False, kind="stable")


def _summed_ns(parts: list[pd.Series]) -> pd.Series:
    """Kernel ns by name (sorted by name, as one group-by over the whole table)."""
    import pandas as pd

    parts = [p for p in parts if len(p)]
    if not parts:
        return pd.Series([], dtype="int64")
    if len(parts) == 1:
        return parts[0]
    both = pd.concat(parts)
    out = both.groupby(level=0).sum()
    out.index.name = parts[0].index.name
    return out


def _joined(values: list[Names]) -> Names:
    """The names of a store's rank partitions as the whole store's :func:`_read_names`."""
    return Names(
        ops=_summed_counts([v.ops for v in values]),
        ranges=_summed_counts([v.ranges for v in values]),
        frames=_summed_counts([v.frames for v in values]),
        kernels=_summed_ns([v.kernels for v in values]),
        runtime=_summed_counts([v.runtime for v in values]),
        memcpy=_summed_counts([v.memcpy for v in values]),
        graph_kernels=sum(v.graph_kernels for v in values),
    )


# counted per rank partition next to its attribution (in the worker, from the tables it read)
attribution_parts.product("run_names", __name__, _rank_names, _joined)


def _show(hits: Iterable[tuple[str, float]], n: int = 3, unit: str = "x") -> str:
    hits = sorted(hits, key=lambda x: -x[1])
    parts = []
    for name, c in list(hits)[:n]:
        short = name if len(name) <= 70 else name[:67] + "..."
        parts.append(f"{short} {unit}{int(c)}" if unit == "x" else short)
    return ", ".join(parts)
