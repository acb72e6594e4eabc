"""The rank-partitioned layout of a trace store: one single-rank store per rank.

A store of several ranks written by the per-rank ingest (``ingest/ranks.py``) keeps each rank
in its own folder ``rank=N/``, which is itself a complete single-rank store (its ``meta.json``
names that rank's source, metadata and diagnostics, plus one parquet file per table). The
top-level ``meta.json`` lists the folders under ``partitions`` in rank order, and its
``tables`` counts are the sums over the ranks::

    store/
      meta.json            partitions: [rank=0, rank=1, ...]; ranks, sources, diagnostics
      rank=0/meta.json     a single-rank store
      rank=0/gpu_activities.parquet ...
      derived/             cached results of the whole job

A table of the whole store is its partitions' tables concatenated in rank order, the same
rows in the same order as a store written as one folder. A rank's analysis opens its
partition alone (:func:`open_partition`), so it reads one rank's events, never the job's.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from traceinsight.errors import StoreError
from traceinsight.store import schema

if TYPE_CHECKING:
    from traceinsight.store.core import TraceStore

__all__ = [
    "PREFIX",
    "folder_name",
    "names",
    "open_group",
    "open_partition",
    "partition_of",
    "read_file",
    "read_table",
]

#: a partition folder is ``rank=N``
PREFIX = "rank="
#: a table of at least this many partition files is read by :data:`READ_THREADS` threads
#: (a file's reader set-up is ~1 ms; 64 small ranks' cpu_ops 78 -> 48 ms)
THREADS_FROM = 8
READ_THREADS = 4
_HINT = "the store is damaged: re-ingest the traces with -o STORE --force"


def folder_name(rank: int) -> str:
    """The folder of rank ``rank``."""
    return f"{PREFIX}{rank}"


def names(meta: dict[str, Any]) -> list[str]:
    """The partition folders a store's metadata lists, in rank order (empty: one folder)."""
    parts = meta.get("partitions")
    return [str(p) for p in parts] if isinstance(parts, list) else []


def check(path: Path, meta: dict[str, Any], check_table: Callable[[Path, str], None]) -> None:
    """Every partition listed exists with its ``meta.json`` and every table file; the first
    partition's tables are checked in full (``check_table``: columns of the schema), the
    others by their presence (a damaged file is reported when it is read)."""
    parts = names(meta)
    for i, name in enumerate(parts):
        if not name.startswith(PREFIX) or "/" in name or name in (".", ".."):
            raise StoreError(
                f"meta.json is damaged: partition {name!r} is not a rank folder",
                path=path,
                hint=_HINT,
            )
        folder = path / name
        if not (folder / "meta.json").is_file():
            raise StoreError(
                f"store is incomplete: partition {name} is missing", path=path, hint=_HINT
            )
        for table in meta.get("tables", {}):
            if i == 0:
                check_table(folder, table)
            elif not (folder / f"{table}.parquet").is_file():
                raise StoreError(
                    f"store is incomplete: {name}/{table}.parquet is missing", path=path, hint=_HINT
                )


def read_table(
    path: Path,
    meta: dict[str, Any],
    name: str,
    restore: Callable[..., pa.Table],
    columns: list[str] | None = None,
    filters: list[tuple[str, str, Any]] | None = None,
) -> pa.Table:
    """Table ``name`` of every partition in rank order (of the store folder itself when it
    has none): ``columns`` only, the rows that pass ``filters`` (parquet row groups outside
    them are skipped by their statistics); ``restore`` conforms each part to the schema.
    Dictionary columns are unified, as a single file would read."""
    files = [
        f for folder in names(meta) or [""] if (f := path / folder / f"{name}.parquet").is_file()
    ]

    def one(f: Path) -> pa.Table:
        try:
            return restore(name, read_file(f, columns, filters), columns)
        except (pa.ArrowException, OSError, ValueError) as e:
            raise StoreError(
                f"{f.relative_to(path)} cannot be read ({str(e)[:120]})", path=path, hint=_HINT
            ) from None

    if len(files) >= THREADS_FROM:  # many small files: their set-up, in threads, overlaps
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(READ_THREADS) as pool:
            read = list(pool.map(one, files))
    else:
        read = [one(f) for f in files]
    parts = [t for t in read if t.num_rows]
    del read
    if not parts:
        t = schema.empty_table(name)
        return t.select(columns) if columns else t
    t = parts[0] if len(parts) == 1 else pa.concat_tables(parts)
    return t.unify_dictionaries() if len(parts) > 1 else t


def read_file(
    f: Path, columns: list[str] | None, filters: list[tuple[str, str, Any]] | None
) -> pa.Table:
    """One table file (the file reader itself without filters: a third less time than
    ``pq.read_table``'s dataset set-up, which a job's many small files pay once each)."""
    if filters is not None:
        return pq.read_table(f, columns=columns, filters=filters)
    with pq.ParquetFile(f) as pf:
        return pf.read(columns=columns)


def open_group(path: Path, parts: list[str]) -> TraceStore:
    """Partitions ``parts`` (consecutive, in rank order) of the store at ``path`` as one store
    of their ranks: each partition's tables one after the other, as the whole store's tables
    hold them. Its metadata is the partitions' (their ranks, sources, diagnostics; the table
    counts summed); one partition is opened as itself."""
    from traceinsight.store.core import TraceStore

    if len(parts) == 1:
        return TraceStore.open(path / parts[0])
    # the job's store was opened (its partitions checked) before its tasks were made: each
    # partition's metadata only, not every table's schema again
    metas = [_meta_of(path, name) for name in parts]
    meta = dict(metas[0])
    meta["partitions"] = list(parts)
    for key in ("ranks", "sources", "diagnostics"):
        meta[key] = [x for m in metas for x in m.get(key, [])]
    meta["event_counts"] = {k: v for m in metas for k, v in m.get("event_counts", {}).items()}
    tables: dict[str, int] = {}
    for m in metas:
        for name, n in m.get("tables", {}).items():
            tables[name] = tables.get(name, 0) + int(n)
    meta["tables"] = tables
    keys = "+".join(str(m.get("content_key")) for m in metas)
    meta["content_key"] = hashlib.sha256(keys.encode()).hexdigest()[:32]
    return TraceStore(path, meta)


def _meta_of(path: Path, name: str) -> dict[str, Any]:
    from traceinsight.store.core import read_meta

    meta = read_meta(path / name)
    if meta is None:
        raise StoreError(f"store is incomplete: partition {name} is missing", path=path, hint=_HINT)
    return meta


def open_meta(path: Path, name: str) -> TraceStore:
    """Partition ``name`` of the store at ``path`` by its metadata alone (its tables are not
    checked: the job's store was opened before)."""
    from traceinsight.store.core import TraceStore

    return TraceStore(path / name, _meta_of(path, name))


def partition_of(store: TraceStore, rank: int) -> Path | None:
    """The folder that holds rank ``rank`` of a partitioned store (None: not partitioned)."""
    name = folder_name(rank)
    return store.path / name if name in names(store.meta) else None


def open_partition(store: TraceStore, rank: int) -> TraceStore:
    """Rank ``rank`` of ``store`` as a single-rank store: its partition on disk, or (a store
    written as one folder, or in memory) the rank's rows of every table, in memory."""
    from traceinsight.store.core import TraceStore

    folder = partition_of(store, rank)
    if folder is not None:
        return TraceStore.open(folder)
    tables = {}
    for name in schema.TABLES:
        t = store.table(name)
        tables[name] = t.filter(pc.equal(t["rank"], rank)) if t.num_rows else t
    meta = dict(store.meta)
    meta["ranks"] = [r for r in store.ranks if r.get("rank") == rank]
    meta["sources"] = [s for s in meta.get("sources", []) if s.get("rank") == rank]
    meta.pop("partitions", None)
    meta["tables"] = {n: t.num_rows for n, t in tables.items()}
    return TraceStore.in_memory(meta, tables)
