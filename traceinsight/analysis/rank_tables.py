"""Attribution's inputs: each table of a store read once, with the columns attribution uses,
as pandas with plain object strings, and split by rank once (a single-rank table is served
as it is, not copied); flows read by kind on first need."""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from traceinsight.analysis import by_rank
from traceinsight.store import schema
from traceinsight.store.core import TraceStore

__all__ = ["GPU_COLUMNS", "LazyFlows", "all_columns", "frame", "rank_rows"]

#: the activity columns attribution reads (the rest stays in the store)
GPU_COLUMNS = [
    "rank",
    "kind",
    "name",
    "device",
    "stream",
    "start_ns",
    "dur_ns",
    "correlation",
    "external_id",
    "grid_x",
    "grid_y",
    "grid_z",
    "block_x",
    "block_y",
    "block_z",
    "blocks_per_sm",
    "occupancy_pct",
    "bytes",
    "copy_kind",
    "pg_name",
    "seq",
]


_STR_COLUMNS = ("name", "kind", "process", "thread", "phase", "cat_raw", "copy_kind", "collective")


def frame(t: pa.Table, own: bool = False) -> pd.DataFrame:
    """A table as pandas with the analysis' plain object strings (one shared object per
    distinct value) and a fresh 0..n-1 index. ``own``: nothing else refers to this table
    object (a selection or a filter of the store's), so its Arrow memory is released column
    by column as pandas takes it over, instead of both copies living at once."""
    df = t.to_pandas(split_blocks=True, self_destruct=True) if own else t.to_pandas()
    for c in _STR_COLUMNS:
        if c in df.columns:
            df[c] = df[c].astype(object)
    return df


def all_columns(table: str) -> list[str]:
    return schema.TABLES[table].column_names


def rank_rows(df: pd.DataFrame, rank: int) -> pd.DataFrame:
    """The rows of ``rank`` (index kept), from the table's one split by rank
    (:func:`.by_rank.positions`, made only for a table of several ranks): the frame itself
    when it holds that rank only, so that attribution writing into the job's frame neither
    copies it nor is copied."""
    if not len(df):
        return df
    r = df["rank"].to_numpy()
    if r[0] == r[-1] and (r == r[0]).all():  # one rank (a job's tables start and end apart)
        return df if int(r[0]) == rank else df.iloc[0:0]
    pos = by_rank.positions(df).get(rank)
    return df.iloc[0:0] if pos is None else df.iloc[pos]


class LazyFlows:
    """The flows of one kind (``launch`` ends recover correlations; ``fwd_bwd`` links backward
    nodes) of each rank, read from the store on first use: most traces need neither (every
    activity has its correlation, every backward node its Sequence number), and a trace that
    needs one kind does not pay for the other."""

    def __init__(self, store: TraceStore) -> None:
        self.store = store
        self.frames: dict[str, pd.DataFrame] = {}

    def of(self, rank: int) -> Callable[[str], pd.DataFrame]:
        def get(kind: str) -> pd.DataFrame:
            if kind not in self.frames:
                t = self.store.table("flows")
                self.frames[kind] = (
                    frame(t.filter(pc.equal(t["kind"], kind)), own=True) if t.num_rows else frame(t)
                )
            return rank_rows(self.frames[kind], rank)

        return get
