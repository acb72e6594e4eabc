"""Rows of one rank, split once: the per-rank steps of the analysis read their rank's rows
from a split made in one pass over a table, instead of filtering the whole job's table for
every rank (which made an N-rank job cost N times the whole job).

``rows(df, rank)`` is ``df[df["rank"] == rank]`` exactly (same rows, order, index and
dtypes); the split (row positions) is computed on first use and kept for as long as ``df``
lives, with the rows of the rank asked for last (not a second copy of the whole table).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

#: per table (by identity): (the table, {rank: row positions}, {last rank: its rows})
_SPLITS: dict[int, tuple[weakref.ref, dict[int, np.ndarray], dict[int, pd.DataFrame]]] = {}


def positions(df: pd.DataFrame) -> dict[int, np.ndarray]:
    """Row positions of every rank of ``df`` (ascending), from one pass over its rank column."""
    return _split(df)[0]


def rows(df: pd.DataFrame, rank: int) -> pd.DataFrame:
    """``df[df["rank"] == rank]``, from the table's split by rank."""
    pos, taken = _split(df)
    got = taken.get(rank)
    if got is None:
        p = pos.get(rank)
        # a table of this rank only: a new frame over the same data (copied on write), not a
        # second copy of the data
        got = df.iloc[0:0] if p is None else df.iloc[:] if len(p) == len(df) else df.take(p)
        taken.clear()  # the last rank's rows only: per-rank steps ask for one rank at a time
        taken[rank] = got
    return got


def table_rows(an: Any, table: str, columns: tuple[str, ...], rank: int) -> pd.DataFrame:
    """One rank's rows of the store table ``table`` (``columns`` only, as pandas) for the
    analysis ``an``: the table is converted once and split by rank (kept in ``an.cache``)."""
    key = ("table_rows", table, columns)
    if key not in an.cache:
        an.cache[key] = an.store.table(table, list(columns)).to_pandas()
    return rows(an.cache[key], rank)


def _split(df: pd.DataFrame) -> tuple[dict[int, np.ndarray], dict[int, pd.DataFrame]]:
    key = id(df)
    hit = _SPLITS.get(key)
    if hit is not None and hit[0]() is df:
        return hit[1], hit[2]
    if len(df) and "rank" in df.columns:
        codes, uniq = pd.factorize(df["rank"], sort=True)
        order = np.argsort(codes, kind="stable")
        bounds = np.searchsorted(codes[order], np.arange(len(uniq) + 1))
        pos = {int(r): order[bounds[i] : bounds[i + 1]] for i, r in enumerate(uniq)}
    else:
        pos = {}
    taken: dict[int, pd.DataFrame] = {}
    _SPLITS[key] = (weakref.ref(df, _dropper(key)), pos, taken)
    return pos, taken


def _dropper(key: int) -> Callable[[weakref.ref], None]:
    """A weakref callback that forgets the split of the table ``key``."""

    def drop(_ref: weakref.ref) -> None:
        _SPLITS.pop(key, None)

    return drop
