"""Writing the store's tables as they are read: parquet row groups, never a whole trace at once.

A reader hands a :class:`TableSink` the rows of each batch of events as small Arrow tables; the
sink keeps them per table and writes a table's rows as one parquet row group once it has
gathered enough rows, or once all waiting rows pass a byte budget, so memory holds a bounded
amount of rows whatever the trace's size.
Each rank gets its own sink (one parquet file per table in a parts folder): a rank that must be
read again (exact timestamps, a damaged file read whole) is discarded without touching the
others, and the ranks of a run are joined in rank order at the end (:func:`join_parts`; one
rank needs no join: its files are the store's).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from traceinsight import settings
from traceinsight.store import schema

__all__ = ["PENDING_BYTES", "ROW_GROUP_ROWS", "StoredTable", "TableSink", "join_parts"]

#: a row group is written once a table has gathered this many rows, or once the rows waiting
#: in all tables hold this many bytes of Arrow data (the table holding most is written then)
ROW_GROUP_ROWS = settings.get("TRACEINSIGHT_ROW_GROUP_ROWS")
PENDING_BYTES = settings.get("TRACEINSIGHT_PENDING_BYTES")
#: threads that write the last row groups and footers of a sink's tables
CLOSE_THREADS = 2


def _write_options(sch: pa.Schema) -> dict[str, Any]:
    """zstd level 1 and dictionary pages for the string columns only: dictionary-encoding
    times and ids costs a hash per value and makes the files larger (measured)."""
    strings = [f.name for f in sch if pa.types.is_dictionary(f.type) or pa.types.is_string(f.type)]
    return {
        "compression": "zstd",
        "compression_level": 1,
        "use_dictionary": strings,
        "write_statistics": True,
    }


@dataclass(frozen=True)
class StoredTable:
    """One table of a rank, written: its parquet file and row count."""

    path: Path
    rows: int


class TableSink:
    """The tables of one rank, written to ``folder/NAME.parquet`` as batches arrive."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self._writers: dict[str, pq.ParquetWriter] = {}
        self._pending: dict[str, list[pa.Table]] = {}
        self._pending_rows: dict[str, int] = {}
        self._pending_bytes: dict[str, int] = {}
        self.rows: dict[str, int] = {name: 0 for name in schema.TABLES}
        self.flushed = False  #: whether any row group has been written

    def add(self, name: str, table: pa.Table) -> None:
        """Rows of table ``name`` (any number, conformed to the store schema here)."""
        if table.num_rows == 0:
            return
        spec = schema.TABLES[name]
        if not table.schema.equals(spec.arrow_schema):
            table = schema.conform(name, {c: table[c].combine_chunks() for c in table.column_names})
        self._pending.setdefault(name, []).append(table)
        self._pending_rows[name] = self._pending_rows.get(name, 0) + table.num_rows
        self._pending_bytes[name] = self._pending_bytes.get(name, 0) + table.nbytes
        self.rows[name] += table.num_rows
        if self._pending_rows[name] >= ROW_GROUP_ROWS:
            self._flush(name)
        while self._pending_bytes and sum(self._pending_bytes.values()) >= PENDING_BYTES:
            self._flush(max(self._pending_bytes, key=self._pending_bytes.__getitem__))

    def _flush(self, name: str) -> None:
        self._write(name, self._take(name))

    def _take(self, name: str) -> list[pa.Table]:
        """The rows waiting for table ``name``, no longer pending."""
        self._pending_rows.pop(name, None)
        self._pending_bytes.pop(name, None)
        return self._pending.pop(name, [])

    def _write(self, name: str, parts: list[pa.Table]) -> None:
        """``parts`` as one row group of table ``name`` (its writer opened on first use)."""
        if not parts:
            return
        t = parts[0] if len(parts) == 1 else pa.concat_tables(parts)
        del parts
        if t.column_names and any(c.num_chunks > 1 for c in t.columns):
            t = t.unify_dictionaries().combine_chunks()
        w = self._writers.get(name)
        if w is None:
            sch = schema.TABLES[name].arrow_schema
            w = self._writers[name] = pq.ParquetWriter(
                self.folder / f"{name}.parquet", sch, **_write_options(sch)
            )
        w.write_table(t, row_group_size=max(1, t.num_rows))
        self.flushed = True
        del t
        pa.default_memory_pool().release_unused()  # mimalloc keeps freed pages otherwise

    def close(self) -> dict[str, StoredTable]:
        """Write what is pending; every table of the schema gets a file (empty or not).

        The tables are finished two at a time (largest first): parquet encoding and zstd
        release the GIL, and the parse helpers have ended by now, so the second core would
        otherwise idle while the last row groups (most tables' only one) are written. Each
        table has its own file and writer, so the files are what one thread would write."""
        jobs = [(name, self._take(name)) for name in schema.TABLES]
        jobs.sort(key=lambda job: -sum(t.nbytes for t in job[1]))
        if len(jobs) > 1 and any(parts for _, parts in jobs):
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(max_workers=CLOSE_THREADS) as pool:
                list(pool.map(self._finish, jobs))
        else:
            for job in jobs:
                self._finish(job)
        return {
            name: StoredTable(self.folder / f"{name}.parquet", self.rows[name])
            for name in schema.TABLES
        }

    def _finish(self, job: tuple[str, list[pa.Table]]) -> None:
        name, parts = job
        self._write(name, parts)
        w = self._writers.pop(name, None)
        if w is not None:
            w.close()
        else:
            _write_empty(name, self.folder / f"{name}.parquet")

    def reset(self) -> None:
        """Drop everything written and start again, empty."""
        self.discard()
        self.__init__(self.folder)  # type: ignore[misc]

    def discard(self) -> None:
        """Drop everything written (the rank is read again another way)."""
        for w in self._writers.values():
            with contextlib.suppress(OSError, pa.ArrowException):
                w.close()
        self._writers.clear()
        self._pending.clear()
        self._pending_rows.clear()
        self._pending_bytes.clear()
        shutil.rmtree(self.folder, ignore_errors=True)


def _write_empty(name: str, path: Path) -> None:
    sch = schema.TABLES[name].arrow_schema
    pq.write_table(sch.empty_table(), path, **_write_options(sch))


def join_parts(ranks: Iterable[dict[str, StoredTable]], folder: Path) -> dict[str, StoredTable]:
    """One file per table holding the rows of ``ranks`` in order (row groups copied one at a
    time: memory holds one row group). A single rank's files are returned as they are."""
    ranks = list(ranks)
    if len(ranks) == 1:
        return ranks[0]
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for name in schema.TABLES:
        sch = schema.TABLES[name].arrow_schema
        path = folder / f"{name}.parquet"
        rows = 0
        with pq.ParquetWriter(path, sch, **_write_options(sch)) as w:
            for r in ranks:
                part = r[name]
                if part.rows == 0:
                    continue
                f = pq.ParquetFile(part.path)
                for i in range(f.num_row_groups):
                    t = f.read_row_group(i)
                    if not t.schema.equals(sch):
                        t = schema.conform(name, {c: t[c].combine_chunks() for c in t.column_names})
                    w.write_table(t, row_group_size=max(1, t.num_rows))
                    rows += t.num_rows
                f.close()
                os.unlink(part.path)
        out[name] = StoredTable(path, rows)
    return out
