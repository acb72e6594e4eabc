"""Rows read from an export, grouped by the store table they fill, with the process of each row.

A :class:`Family` is the rows one export table contributes to one store table, already with
store columns (Arrow arrays), plus the pid of every row so the rows can be split into ranks.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from traceinsight.ingest.columns import rank_col
from traceinsight.store import schema

#: pid of rows whose process the export does not say (GPU rows of synthetic exports)
NO_PID = -1


@dataclass
class Family:
    """Rows for store table ``table``: its columns (without ``rank``) and the pid of each row."""

    table: str
    source: str  #: the export table the rows come from
    data: pa.Table  #: conformed to the store table (``rank`` 0 until split)
    pid: np.ndarray  #: int64, NO_PID where unknown

    @property
    def rows(self) -> int:
        return self.data.num_rows

    def for_pids(self, pids: Sequence[int], rank: int) -> pa.Table:
        """The rows of processes ``pids`` as rows of ``rank``."""
        mask = np.isin(self.pid, np.asarray(pids, dtype=np.int64))
        t = self.data if mask.all() else self.data.filter(pa.array(mask))
        field = pa.field(schema.RANK.name, schema.RANK.type, nullable=False)
        return t.set_column(0, field, rank_col(t.num_rows, rank))


def family(table: str, source: str, cols: dict[str, Any], pid: Sequence[int | None]) -> Family:
    """A family from column arrays (any store column of ``table``; absent ones are null)."""
    n = len(pid)
    cols = {"rank": rank_col(n, 0), **cols}
    return Family(
        table,
        source,
        schema.conform(table, cols),
        np.array([NO_PID if p is None else p for p in pid], dtype=np.int64),
    )


#: the largest capture-clock time a row may have (ns; about 146 years)
CLOCK_MAX = 2**62


def times(
    start: list[Any], end: list[Any], base: int, bad: Counter, what: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(keep mask, start_ns, dur_ns) from nsys integer ns ``start`` / ``end``.

    Times are exact integers on the capture clock; ``base`` (the session's Unix epoch, or 0)
    is added. Rows without a start are dropped (counted in ``bad``); a missing or earlier end
    gives a zero duration (counted)."""
    s = pa.array(start, pa.int64())
    e = pa.array(end, pa.int64())
    keep = np.asarray(pc.is_valid(s))
    if not keep.all():
        bad[f"{what} rows without a start time"] += int((~keep).sum())
    s_np = np.asarray(s.fill_null(0), dtype=np.int64)
    e_np = np.asarray(e.fill_null(0), dtype=np.int64)
    # the capture clock counts ns from the session's start: a time outside [0, 2**62) is no
    # time (a crafted or corrupt row) and would wrap int64 arithmetic (a negative duration)
    wild = keep & ((s_np < 0) | (s_np >= CLOCK_MAX) | (e_np < 0) | (e_np >= CLOCK_MAX))
    if wild.any():
        bad[f"{what} rows with a time outside a capture clock's range (dropped)"] += int(wild.sum())
        keep = keep & ~wild
        s_np = np.where(wild, 0, s_np)
        e_np = np.where(wild, 0, e_np)
    dur = e_np - s_np
    broken = keep & (np.asarray(pc.is_null(e)) | (dur < 0))
    if broken.any():
        bad[f"{what} rows whose end is missing or before the start (duration 0)"] += int(
            broken.sum()
        )
    dur = np.where(broken, 0, dur)
    return keep, s_np + base, dur


def ints(values: list[Any], keep: np.ndarray | None = None) -> pa.Array:
    """int64 column (nulls kept) of the rows in ``keep``."""
    arr = pa.array(values, pa.int64()) if values else pa.array([], pa.int64())
    return arr.filter(pa.array(keep)) if keep is not None and not keep.all() else arr


def pick(values: Sequence[Any], keep: np.ndarray) -> list[Any]:
    """The values of the rows in ``keep``."""
    if keep.all():
        return list(values)
    return [v for v, k in zip(values, keep) if k]


def texts(values: Sequence[str | None]) -> pa.Array:
    """A dictionary-encoded string column."""
    return pa.array(list(values), pa.string()).dictionary_encode()


def constant(n: int, value: str | None) -> pa.Array:
    """A dictionary column holding one value ``n`` times."""
    idx = pa.array(np.zeros(n, dtype=np.int32)) if value is not None else pa.nulls(n, pa.int32())
    return pa.DictionaryArray.from_arrays(idx, pa.array([value or ""], pa.string()))


def id_texts(values: Sequence[int | None]) -> pa.Array:
    """Process / thread ids as dictionary strings (the store's ``process`` / ``thread``)."""
    arr = pa.array(list(values), pa.int64())
    enc = arr.dictionary_encode()
    return pa.DictionaryArray.from_arrays(
        enc.indices.cast(pa.int32()), enc.dictionary.cast(pa.string())
    )


def name_of(strings: dict[int, str], *ids: Any) -> str | None:
    """The first of ``ids`` that names a string."""
    for i in ids:
        if i is not None:
            s = strings.get(int(i))
            if s is not None:
                return s
    return None
