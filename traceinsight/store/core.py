"""The parquet trace store: one directory, one parquet file per table, ``meta.json``.

Writes are atomic: everything is written into a hidden sibling directory which is renamed
into place only when complete, so an interrupted ingest never leaves a store that looks
valid; the next write removes the temporaries of a killed run. A store is valid when
``meta.json`` exists, names the current schema version, has the keys and types its reader
relies on, and every table it lists is a parquet file with every column of the schema.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from traceinsight.diagnostics import Diagnostic
from traceinsight.errors import StoreError
from traceinsight.store import partitions, schema
from traceinsight.util.outputs import clean_stale

META_FILE = "meta.json"
#: a table with more rows is read for each use, only the columns asked for, and not kept in
#: memory: a large store's analysis holds its own frames, not a second copy of every table
CACHE_MAX_ROWS = 200_000
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
    #: every entry of the input folder the store was just read from or found for (name, is a
    #: folder), set by ingest from its one listing of the folder; None for a store opened as
    #: such. Not stored: the folder may hold other files next time.
    listing: list[tuple[str, bool]] | None = field(default=None, repr=False, compare=False)

    # --- opening ---------------------------------------------------------------------------
    @classmethod
    def open(cls, path: str | Path) -> TraceStore:
        """Open the store at ``path``, validated against the schema (exit 2 naming the missing
        or damaged part)."""
        path = Path(path)
        meta = read_meta(path)
        if meta is None:
            f = path / META_FILE
            size = f.stat().st_size if f.is_file() else None
            if size is not None and size > META_MAX_BYTES:
                what = f"its meta.json is {size:,} bytes, more than a store's {META_MAX_BYTES:,}"
            elif size is not None:
                what = "its meta.json is not a trace store's (damaged, or another program's)"
            else:
                what = "not a trace store (no meta.json)"
            raise StoreError(
                what,
                path=path,
                hint="create one with: traceinsight ingest TRACE -o " + str(path),
            )
        if meta.get("schema_version") != schema.SCHEMA_VERSION:
            raise StoreError(
                f"store has schema version {meta.get('schema_version')}, this traceinsight "
                f"reads version {schema.SCHEMA_VERSION}",
                path=path,
                hint="re-ingest the trace: traceinsight ingest TRACE -o STORE --force",
            )
        _check_meta(path, meta)
        if partitions.names(meta):  # one single-rank store per rank folder
            partitions.check(path, meta, _check_table)
        else:
            for name in meta["tables"]:
                _check_table(path, name)
        return cls(path, meta)

    @classmethod
    def in_memory(cls, meta: dict[str, Any], tables: dict[str, pa.Table]) -> TraceStore:
        return cls(Path("<memory>"), meta, dict(tables))

    # --- access ----------------------------------------------------------------------------
    def table(self, name: str, columns: list[str] | None = None) -> pa.Table:
        if name not in schema.TABLES:
            raise KeyError(name)
        t = self._tables.get(name)
        if t is None and self.row_counts.get(name) == 0:
            # a table the store counts no row of (in any partition) is not read from disk
            t = self._tables[name] = schema.empty_table(name)
        if t is None:
            f = self.path / f"{name}.parquet"
            if partitions.names(self.meta):
                if self.row_counts.get(name, 0) > CACHE_MAX_ROWS:  # per use, what is asked
                    return partitions.read_table(
                        self.path, self.meta, name, _restore_schema, columns
                    )
                t = partitions.read_table(self.path, self.meta, name, _restore_schema)
            elif not f.is_file():
                t = schema.empty_table(name)
            else:
                try:
                    if self.row_counts.get(name, 0) > CACHE_MAX_ROWS:  # per use, what is asked
                        return _restore_schema(
                            name, partitions.read_file(f, columns, None), columns
                        )
                    t = _restore_schema(name, partitions.read_file(f, None, None))
                except (pa.ArrowException, OSError, ValueError) as e:
                    raise StoreError(
                        f"{name}.parquet cannot be read ({str(e)[:120]})",
                        path=self.path,
                        hint=_REINGEST,
                    ) from None
            self._tables[name] = t
        return t.select(columns) if columns else t

    def rank_table(self, name: str, rank: int, columns: list[str] | None = None) -> pa.Table:
        """Rank ``rank``'s rows of table ``name``: read from the rank's partition alone when the
        store is partitioned and the whole table is not in memory (one file, not every
        rank's), else the whole table's rows of the rank."""
        parts = partitions.names(self.meta)
        name_of = partitions.folder_name(rank)
        src: TraceStore = self
        if parts and name not in self._tables and name_of in parts and self.path.is_dir():
            src = partitions.open_meta(self.path, name_of)  # (checked when this one opened)
        want = columns if columns is None or "rank" in columns else [*columns, "rank"]
        t = src.table(name, want)
        t = t.filter(pc.equal(t["rank"], rank)) if t.num_rows else t
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
        """The text of ``derived/NAME`` when this store on disk holds it, as it was written:
        a file whose content no longer matches the digest it was saved with (edited, cut,
        written by another version) is a miss, and is computed and saved again."""
        f = self.path / DERIVED_DIR / name
        try:
            if not self.path.is_dir() or f.stat().st_size > DERIVED_MAX_BYTES:
                return None
            raw = f.read_bytes()
        except OSError:
            return None
        head, sep, body = raw.partition(b"\n")
        if not sep or head != _derived_header(body):
            return None
        try:
            return body.decode("utf-8")
        except UnicodeDecodeError:
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
            body = text.encode("utf-8")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(_derived_header(body) + b"\n" + body)
                os.chmod(tmp, 0o644)  # as readable as the tables (mkstemp makes it private)
                os.replace(tmp, d / name)
            except OSError:
                Path(tmp).unlink(missing_ok=True)  # a full disk leaves no half-written file
                raise
            old = sorted(
                (p for p in d.iterdir() if not p.name.startswith(".")),
                key=lambda p: p.stat().st_mtime,
                reverse=True,
            )[DERIVED_KEEP:]
            for p in old:
                p.unlink(missing_ok=True)
            return True
        except OSError:
            return False


#: a derived file larger than this is never read back (a result is a few MB at most)
DERIVED_MAX_BYTES = 512 * 2**20


def _derived_header(body: bytes) -> bytes:
    """The first line of a derived file: what it is and the sha256 of the rest."""
    return b"traceinsight-derived sha256=" + hashlib.sha256(body).hexdigest().encode()


def _restore_schema(name: str, t: pa.Table, columns: list[str] | None = None) -> pa.Table:
    want = schema.TABLES[name].arrow_schema
    if columns:
        want = pa.schema([want.field(c) for c in columns])
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


_REINGEST = "the store is damaged: re-ingest the trace with -o STORE --force"
#: meta.json keys and the JSON type each must have
_META_TYPES: dict[str, type | tuple[type, ...]] = {
    "tables": dict,
    "ranks": list,
    "sources": list,
    "diagnostics": list,
    "event_counts": dict,
    "ingest_options": dict,
    "content_key": str,
}
META_MAX_BYTES = 64 << 20


def _check_meta(path: Path, meta: dict[str, Any]) -> None:
    """meta.json has the keys and types a store's reader relies on."""

    def bad(what: str) -> StoreError:
        return StoreError(f"meta.json is damaged: {what}", path=path, hint=_REINGEST)

    for key, typ in _META_TYPES.items():
        if key in meta and not isinstance(meta[key], typ):
            raise bad(f"{key!r} is not a JSON {'object' if typ is dict else 'value of its type'}")
    if "tables" not in meta:
        raise bad("no 'tables'")
    for name, rows in meta["tables"].items():
        if name not in schema.TABLES:
            raise bad(f"unknown table {name!r}")
        if not isinstance(rows, int) or isinstance(rows, bool) or rows < 0:
            raise bad(f"row count of {name!r} is not a count")
    for key in ("ranks", "sources", "diagnostics"):
        for item in meta.get(key, []):
            if not isinstance(item, dict):
                raise bad(f"an entry of {key!r} is not an object")
    for r in meta.get("ranks", []):
        if not isinstance(r.get("rank"), int) or isinstance(r.get("rank"), bool):
            raise bad("a rank without an integer 'rank'")
        for k, typ in (("devices", list), ("distributed", dict), ("span_ns", list)):
            if r.get(k) is not None and not isinstance(r[k], typ):
                raise bad(f"rank field {k!r} has the wrong type")
    for s in meta.get("sources", []):
        if not isinstance(s.get("name"), str):
            raise bad("a source without a 'name'")


def _check_table(path: Path, name: str) -> None:
    """``NAME.parquet`` exists, is parquet and has every column of the schema."""
    f = path / f"{name}.parquet"
    if not f.is_file():
        raise StoreError(
            f"store is incomplete: {name}.parquet is missing",
            path=path,
            hint="re-ingest the trace with --force",
        )
    try:
        have = pq.read_schema(f)
    except (pa.ArrowException, OSError, ValueError) as e:
        raise StoreError(
            f"{name}.parquet is not a readable parquet file ({str(e)[:120]})",
            path=path,
            hint=_REINGEST,
        ) from None
    missing = [c for c in schema.TABLES[name].column_names if c not in have.names]
    if missing:
        raise StoreError(
            f"table {name} lacks column {missing[0]}"
            + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""),
            path=path,
            hint=_REINGEST,
        )


def looks_like_store(path: Path) -> bool:
    """Whether the folder ``path`` claims to be a trace store: a ``meta.json`` whose first KB
    names the store format (however large or damaged the rest: opening it says what is
    wrong, instead of reading the folder as traces)."""
    f = Path(path) / META_FILE
    try:
        with open(f, "rb") as fh:
            head = fh.read(1024) if f.is_file() else b""
    except OSError:
        return False
    return b'"format"' in head and STORE_FORMAT.encode() in head


def read_meta(path: Path) -> dict[str, Any] | None:
    f = Path(path) / META_FILE
    if not f.is_file():
        return None
    try:
        if f.stat().st_size > META_MAX_BYTES:
            return None
        meta = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
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


def write_store(
    path: Path, meta: dict[str, Any], tables: dict[str, pa.Table | Path], *, replace: bool = False
) -> TraceStore:
    """Write tables and metadata to ``path`` atomically (temp directory + rename). A table
    given as a path is a finished parquet file of the store's schema (written as the trace was
    read, ``ingest/sink.py``): it is moved in (renamed on the same file system).

    ``path`` a symbolic link: the store is written where the link points, and the link
    stays (replacing the link itself would leave the old store behind it, and the link under
    another name)."""
    path = Path(path)
    if path.is_symlink():
        path = Path(os.path.realpath(path))
    parent = path.parent
    parent.mkdir(parents=True, exist_ok=True)
    if path.exists() and not replace:
        raise StoreError("already exists", path=path, hint="pass --force to replace it")
    clean_stale(parent, path.name, owned=owned_folder)  # what a killed run left behind
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-{os.getpid()}-", dir=parent))
    try:

        def write(item: tuple[str, pa.Table | Path]) -> tuple[str, int]:
            name, table = item
            if isinstance(table, Path):
                _move(table, tmp / f"{name}.parquet")
                return name, pq.ParquetFile(tmp / f"{name}.parquet").metadata.num_rows
            if not table.schema.equals(schema.TABLES[name].arrow_schema):
                table = schema.conform(
                    name, {c: table[c].combine_chunks() for c in table.column_names}
                )
            pq.write_table(
                table,
                tmp / f"{name}.parquet",
                compression="zstd",
                compression_level=1,
                use_dictionary=True,
                write_statistics=True,
                row_group_size=1_000_000,
            )
            return name, table.num_rows

        # parquet encoding releases the GIL: the tables are written two at a time
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=2) as pool:
            counts = dict(pool.map(write, sorted(tables.items(), key=_write_order)))
        counts = {name: counts[name] for name in tables}
        full = {
            "format": STORE_FORMAT,
            "schema_version": schema.SCHEMA_VERSION,
            **meta,
            "tables": counts,
        }
        (tmp / META_FILE).write_text(json.dumps(full, indent=1, sort_keys=False, default=str))
        commit_dir(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return TraceStore(
        path,
        json.loads((path / META_FILE).read_text()),
        {k: t for k, t in tables.items() if isinstance(t, pa.Table)},
    )


def _move(src: Path, dst: Path) -> None:
    """Rename ``src`` to ``dst``; copied when they lie on different file systems (a store
    written through a link to another disk)."""
    try:
        os.replace(src, dst)
    except OSError as e:
        if e.errno != errno.EXDEV:
            raise
        shutil.move(src, dst)


def _write_order(item: tuple[str, pa.Table | Path]) -> int:
    """Largest tables first (files to move go first)."""
    t = item[1]
    return -(t.num_rows if isinstance(t, pa.Table) else 1 << 62)


#: a rank partition's folder in a store (``rank=N``)
_PARTITION_RE = re.compile(r"rank=\d{1,9}")
#: what ``derived/`` holds: results and their atomic-write temporaries
_DERIVED_RE = re.compile(r"\.?[\w.=-]{1,200}")


def foreign_entries(path: Path, *, _depth: int = 0) -> list[str]:
    """The entries of the store folder ``path`` that traceinsight never writes there (a user's
    file saved inside, a folder of traces given a store's ``meta.json``): only a store made of
    the tool's own files may be replaced or removed. Names relative to ``path``."""
    tables = {f"{n}.parquet" for n in schema.TABLES}
    out: list[str] = []
    try:
        entries = sorted(os.scandir(path), key=lambda e: e.name)
    except OSError:
        return []
    for e in entries:
        if e.is_symlink():
            out.append(e.name)
        elif e.is_file() and (e.name == META_FILE or e.name in tables):
            continue
        elif e.is_dir() and e.name == DERIVED_DIR:
            try:
                inner = list(os.scandir(e.path))
            except OSError:
                inner = []
            out += [
                f"{DERIVED_DIR}/{x.name}"
                for x in inner
                if x.is_symlink() or not x.is_file() or not _DERIVED_RE.fullmatch(x.name)
            ]
        elif _depth == 0 and e.is_dir() and _PARTITION_RE.fullmatch(e.name):
            out += [f"{e.name}/{x}" for x in foreign_entries(Path(e.path), _depth=1)]
        else:
            out.append(e.name)
    return out


def owned_folder(path: Path) -> bool:
    """Whether the folder ``path`` holds the tool's store files only (a temporary or a
    replaced store a killed run left behind)."""
    return not foreign_entries(path)


def refuse_foreign(path: Path) -> None:
    """Refuse to replace the store folder ``path`` when it holds anything the tool did not
    write (see :func:`foreign_entries`)."""
    foreign = foreign_entries(path)
    if foreign:
        shown = ", ".join(foreign[:3]) + (
            f" and {len(foreign) - 3} more" if len(foreign) > 3 else ""
        )
        raise StoreError(
            f"holds files traceinsight did not write ({shown}); --force replaces only a trace "
            "store as traceinsight wrote it",
            path=path,
            hint="move those files out, or give the store a new folder name",
        )


def commit_dir(tmp: Path, path: Path) -> None:
    """Put the finished folder ``tmp`` in place of ``path`` (renames: never half a store).
    A folder already at ``path`` is replaced only when it holds the tool's files alone."""
    if path.exists():
        refuse_foreign(path)
        old = path.parent / f".{path.name}.old-{os.getpid()}"
        os.replace(path, old)
        os.replace(tmp, path)
        if old.is_symlink():  # what was renamed is removed, never what it points to
            old.unlink(missing_ok=True)
        else:
            shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, path)
