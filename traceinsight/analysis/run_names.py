"""The event names a trace holds, read once per analysis, and the :class:`Fact` type of
the run facts (:mod:`.run_facts`)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

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


def _counts(s: pd.Series) -> pd.Series:
    import pandas as pd

    if not len(s):
        return pd.Series([], dtype="int64")
    vc = s.astype(object).dropna().astype(str).value_counts()
    return vc[vc > 0]


def read_names(an: Analysis) -> Names:
    """The names of ``an``'s store, read once per analysis."""
    cached = an.__dict__.get("_run_fact_names")
    if cached is not None:
        return cached
    names = _read_names(an)
    an.__dict__["_run_fact_names"] = names
    return names


def _read_names(an: Analysis) -> Names:
    import pandas as pd

    st = an.store
    ops = _counts(st.df("cpu_ops", ["name"])["name"])
    rng = _counts(st.df("ranges", ["name"])["name"])
    py = _counts(st.df("python_frames", ["name"])["name"])
    rt = _counts(st.df("runtime_calls", ["name"])["name"])
    g = st.df("gpu_activities", ["name", "kind", "dur_ns", "graph_id"])
    kind = g["kind"].astype(object)
    k = g[kind == "kernel"]
    kern = (
        k.groupby(k["name"].astype(object).astype(str))["dur_ns"].sum()
        if len(k)
        else pd.Series([], dtype="int64")
    )
    mem = _counts(g.loc[kind == "memcpy", "name"])
    graphs = int(k["graph_id"].notna().sum()) if len(k) else 0
    return Names(ops, rng, py, kern, rt, mem, graphs)


def _show(hits: Iterable[tuple[str, float]], n: int = 3, unit: str = "x") -> str:
    hits = sorted(hits, key=lambda x: -x[1])
    parts = []
    for name, c in list(hits)[:n]:
        short = name if len(name) <= 70 else name[:67] + "..."
        parts.append(f"{short} {unit}{int(c)}" if unit == "x" else short)
    return ", ".join(parts)
