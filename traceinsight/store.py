"""The parquet trace store: one directory, one parquet file per table, ``meta.json``.

Writes are atomic: everything is written into a hidden sibling directory which is renamed
into place only when complete, so an interrupted ingest never leaves a store that looks
valid. A store is valid when ``meta.json`` exists, names the current schema version and
every table file it lists is present.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from . import schema
from .diagnostics import Diagnostic
from .errors import StoreError

META_FILE = "meta.json"
#: sub-folder of cached analysis results (``diagnose`` keys them by code, rules and options)
DERIVED_DIR = "derived"
DERIVED_KEEP = 8
STORE_FORMAT = "traceinsight-store"


@dataclass
class TraceStore:
    """An open store: metadata in memory, tables read from parquet on first use."""

    path: Path
    meta: dict[str, Any]
    _tables: dict[str, pa.Table] = field(default_factory=dict, repr=False)

    # --- opening ---------------------------------------------------------------------------
    @classmethod
    def open(cls, path: str | Path) -> TraceStore:
        path = Path(path)
        meta = read_meta(path)
        if meta is None:
            raise StoreError("not a trace store (no meta.json)", path=path,
                             hint="create one with: traceinsight ingest TRACE -o " + str(path))
        if meta.get("schema_version") != schema.SCHEMA_VERSION:
            raise StoreError(
                f"store has schema version {meta.get('schema_version')}, this traceinsight "
                f"reads version {schema.SCHEMA_VERSION}", path=path,
                hint="re-ingest the trace: traceinsight ingest TRACE -o STORE --force")
        for name in meta.get("tables", {}):
            if not (path / f"{name}.parquet").is_file():
                raise StoreError(f"store is incomplete: {name}.parquet is missing", path=path,
                                 hint="re-ingest the trace with --force")
        return cls(path, meta)

    @classmethod
    def in_memory(cls, meta: dict[str, Any], tables: dict[str, pa.Table]) -> TraceStore:
        return cls(Path("<memory>"), meta, dict(tables))

    # --- access ----------------------------------------------------------------------------
    def table(self, name: str, columns: list[str] | None = None) -> pa.Table:
        if name not in schema.TABLES:
            raise KeyError(name)
        t = self._tables.get(name)
        if t is None:
            f = self.path / f"{name}.parquet"
            if not f.is_file():
                t = schema.empty_table(name)
            else:
                t = pq.read_table(f)
                t = _restore_schema(name, t)
            self._tables[name] = t
        return t.select(columns) if columns else t

    def df(self, name: str, columns: list[str] | None = None):  # -> pandas.DataFrame
        """A table as pandas (dictionary columns become categoricals)."""
        return self.table(name, columns).to_pandas()

    @property
    def ranks(self) -> list[dict[str, Any]]:
        return list(self.meta.get("ranks", []))

    @cached_property
    def diagnostics(self) -> list[Diagnostic]:
        return [Diagnostic.from_dict(d) for d in self.meta.get("diagnostics", [])]

    @property
    def row_counts(self) -> dict[str, int]:
        return dict(self.meta.get("tables", {}))

    # --- derived results (a cache next to the tables; never needed to read the store) -----
    def read_derived(self, name: str) -> str | None:
        """The text of ``derived/NAME`` when this store on disk holds it."""
        f = self.path / DERIVED_DIR / name
        try:
            return f.read_text(encoding="utf-8") if self.path.is_dir() else None
        except (OSError, UnicodeDecodeError):
            return None

    def write_derived(self, name: str, text: str) -> bool:
        """Save ``derived/NAME`` atomically, keeping the newest :data:`DERIVED_KEEP` files.

        Best effort: a read-only or in-memory store just isn't cached (returns False)."""
        if not (self.path / META_FILE).is_file():
            return False
        d = self.path / DERIVED_DIR
        try:
            d.mkdir(exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{name}.tmp-", dir=d)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.chmod(tmp, 0o644)  # as readable as the tables (mkstemp makes it private)
            os.replace(tmp, d / name)
            old = sorted((p for p in d.iterdir() if not p.name.startswith(".")),
                         key=lambda p: p.stat().st_mtime, reverse=True)[DERIVED_KEEP:]
            for p in old:
                p.unlink(missing_ok=True)
            return True
        except OSError:
            return False


def _restore_schema(name: str, t: pa.Table) -> pa.Table:
    want = schema.TABLES[name].arrow_schema
    if t.schema.equals(want):
        return t
    cols = []
    for f in want:
        if f.name in t.column_names:
            c = t[f.name]
            cols.append(c if c.type.equals(f.type) else c.cast(f.type))
        else:
            cols.append(pa.nulls(t.num_rows, f.type))
    return pa.Table.from_arrays(cols, schema=want)


def read_meta(path: Path) -> dict[str, Any] | None:
    f = Path(path) / META_FILE
    if not f.is_file():
        return None
    try:
        meta = json.loads(f.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or meta.get("format") != STORE_FORMAT:
        return None
    return meta


def is_valid_store(path: Path) -> bool:
    try:
        TraceStore.open(path)
        return True
    except StoreError:
        return False


def write_store(path: Path, meta: dict[str, Any], tables: dict[str, pa.Table], *,
                replace: bool = False) -> TraceStore:
    """Write tables and metadata to ``path`` atomically (temp directory + rename)."""
    path = Path(path)
    parent = path.parent
    parent.mkdir(parents=True, exist_ok=True)
    if path.exists() and not replace:
        raise StoreError("already exists", path=path, hint="pass --force to replace it")
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=parent))
    try:
        def write(item: tuple[str, pa.Table]) -> tuple[str, int]:
            name, table = item
            if not table.schema.equals(schema.TABLES[name].arrow_schema):
                table = schema.conform(name, {c: table[c].combine_chunks()
                                              for c in table.column_names})
            pq.write_table(table, tmp / f"{name}.parquet", compression="zstd",
                           compression_level=1, use_dictionary=True, write_statistics=True,
                           row_group_size=1_000_000)
            return name, table.num_rows

        # parquet encoding releases the GIL: the tables are written two at a time
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=2) as pool:
            counts = dict(pool.map(write, sorted(tables.items(), key=lambda kv: -kv[1].num_rows)))
        counts = {name: counts[name] for name in tables}
        full = {"format": STORE_FORMAT, "schema_version": schema.SCHEMA_VERSION, **meta,
                "tables": counts}
        (tmp / META_FILE).write_text(json.dumps(full, indent=1, sort_keys=False, default=str))
        if path.exists():
            old = parent / f".{path.name}.old-{os.getpid()}"
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return TraceStore(path, json.loads((path / META_FILE).read_text()), dict(tables))
