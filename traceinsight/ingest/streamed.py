"""Reading files without holding them whole, and joining the ranks' tables into the store's.

Per file: gzip is decompressed as a stream into a temporary file beside the store (never a
whole decompressed copy in memory); a reader with a ``stream`` entry (Kineto) reads the plain
file in bounded chunks into a per-rank :class:`~.sink.TableSink`; other readers, and files the
stream entry hands back (damaged, odd layouts), are read whole as before and their tables go
to a sink right away. The file's sha256 is computed from disk in a thread meanwhile. At the end
the ranks' files are joined in rank order (:func:`store_tables`).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from traceinsight import settings
from traceinsight.errors import InputError, TraceFormatError
from traceinsight.ingest import prehash, readers
from traceinsight.ingest.readers.base import RankRead
from traceinsight.ingest.sink import StoredTable, TableSink, join_parts
from traceinsight.ingest.source import GZIP_MAGIC, gunzip_pieces
from traceinsight.store import schema

__all__ = ["FileHasher", "Parts", "head_of", "read_streamed", "store_tables"]

#: bytes read from a file's start to sniff it (and to tell a damaged trace from other JSON)
HEAD_BYTES = 65536


class Parts:
    """The working folder of one ingest, beside the store it writes (same file system, so
    finished files are moved into the store): one sink per rank, decompressed temporaries.
    Its name marks it as a temporary of this process, so a killed run's folder is cleaned."""

    def __init__(self, parent: Path, name: str) -> None:
        parent.mkdir(parents=True, exist_ok=True)
        self.path = Path(tempfile.mkdtemp(prefix=f".{name}.tmp-{os.getpid()}-parts-", dir=parent))
        self._n = 0

    def sink(self) -> TableSink:
        self._n += 1
        return TableSink(self.path / f"rank{self._n}")

    def temp(self, name: str) -> Path:
        self._n += 1
        return self.path / f"{self._n}-{name}"

    def cleanup(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def head_of(p: Path) -> bytes:
    """The first bytes of file ``p`` (a clear error when it cannot be read)."""
    try:
        with open(p, "rb") as f:
            return f.read(HEAD_BYTES)
    except FileNotFoundError:
        raise InputError("no such file", path=p, hint="check the path") from None
    except IsADirectoryError:
        raise InputError(
            "is a directory", path=p, hint="pass the folder itself, not a file in it"
        ) from None
    except OSError as e:
        raise InputError(
            f"cannot read: {e.strerror}", path=p, hint="check the file and its permissions"
        ) from e


class FileHasher:
    """sha256 of a file read from disk in a background thread once ``start`` is called
    (``result`` computes it in place if it never was); with ``resume`` (what the start-up
    hashing had read, ``prehash.pause``) it goes on from there when the file is unchanged."""

    def __init__(self, path: Path, resume: prehash.Partial | None = None) -> None:
        self.path = path
        self._resume = resume
        self._digest: str | None = None
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None

    @property
    def started(self) -> bool:
        return self._thread is not None

    def start(self) -> None:
        if self._thread is None and self._digest is None:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()

    def _run(self) -> None:
        try:
            part, self._resume = self._resume, None
            h = hashlib.sha256()
            with open(self.path, "rb", buffering=0) as f:
                if part is not None and part.resumable(self.path):
                    h = part.h
                    f.seek(part.offset)
                prehash.hash_file(h, f)
            self._digest = h.hexdigest()
        except BaseException as e:
            self._error = e

    def result(self) -> str:
        if self._thread is not None:
            self._thread.join()
        elif self._digest is None and self._error is None:
            self._run()
        if self._error is not None:
            why = getattr(self._error, "strerror", None) or self._error
            raise InputError(
                f"cannot read: {why}", path=self.path, hint="check the file and its permissions"
            )
        assert self._digest is not None
        return self._digest


def _gunzip_to(p: Path, parts: Parts, salvage: bool) -> tuple[Path, int | None]:
    """Decompress gzip file ``p`` into a temporary file (piece by piece), and with ``salvage``
    the bytes decompressed when the stream ends early (None: it ends as a stream ends)."""
    out = parts.temp(p.name + ".json")
    size = p.stat().st_size
    cut: list[int] = []
    with open(p, "rb") as src, open(out, "wb") as dst:
        for piece in gunzip_pieces(p, src.read, size, on_truncated=cut.append if salvage else None):
            dst.write(piece)
    return out, (cut[0] if cut else None)


def _read_whole(p: Path) -> bool:
    """Whether the gzip file ``p`` holds a format without a stream entry (a memory input),
    from its first decompressed bytes: it is decompressed once, by the whole-file reader
    (bounded there), not first into a temporary."""
    try:
        r = readers.reader_for(p)
    except TraceFormatError:
        return False  # named by the stream path's own error
    return r.stream is None


def _gzip_cut(diags: Any, p: Path, content: int) -> None:
    diags.add(
        "gzip-truncated",
        f"the gzip stream ends early (no end-of-stream marker, a job killed while writing "
        f"it): {content:,} bytes decompressed, read up to the last complete event",
        source=p.name,
        hint="the copy or the capture is incomplete; the events after the cut are lost",
    )


def read_streamed(
    p: Path,
    head: bytes,
    parts: Parts,
    *,
    salvage: bool = False,
    rank_hint: int | None,
    progress: Callable[[str, float], None] | None,
    background: Callable[[], None] | None,
    wrap: Callable[[Callable[[], Any]], Any],
) -> RankRead | None:
    """Read file ``p`` (first bytes ``head``) through its reader's ``stream`` entry; None when
    it has none or hands the file back (the caller reads it whole). ``wrap(fn)`` calls ``fn``
    and turns a reader's errors into user-facing ones."""
    plain = p
    cut: int | None = None
    if head.startswith(GZIP_MAGIC):
        if not settings.get("TRACEINSIGHT_STREAM") or _read_whole(p):
            return None
        plain, cut = _gunzip_to(p, parts, salvage)
        with open(plain, "rb") as f:
            inner = f.read(HEAD_BYTES)
    else:
        inner = head
    try:
        reader = readers.reader_for(plain)
    except TraceFormatError:
        if plain is not p:  # named by the file given, not the decompressed copy
            raise readers.unclaimed(p, inner, compressed=True) from None
        raise
    stream = reader.stream
    if stream is None or reader.opens_path or not settings.get("TRACEINSIGHT_STREAM"):
        _drop(plain, p)
        return None
    sink = parts.sink()
    try:
        got = wrap(
            lambda: stream(
                plain,
                sink,
                source=p.name,
                rank_hint=rank_hint,
                progress=progress,
                background=background,
                **({"salvage": True} if salvage else {}),
            )
        )
    except Exception as e:
        sink.discard()
        if getattr(e, "stream_fallback", False):
            return None
        raise
    finally:
        _drop(plain, p)
    if cut is not None:
        _gzip_cut(got.meta.diagnostics, p, cut)
    return RankRead(tables={}, meta=got.meta, counts=got.counts, stored=sink.close())


def _drop(plain: Path, p: Path) -> None:
    if plain is not p:
        plain.unlink(missing_ok=True)


def store_tables(ranks: list[RankRead], parts: Parts) -> tuple[dict[str, Any], dict[str, int]]:
    """The store's tables of ``ranks`` (in the order given): parquet files to move into the
    store (``store.write_store`` takes paths), and the row count of each."""
    files: list[dict[str, StoredTable]] = []
    for r in ranks:
        extra = {n: t for n, t in r.tables.items() if t.num_rows}
        if r.stored and not extra:
            files.append(r.stored)
            continue
        sink = parts.sink()
        for name in schema.TABLES:
            if name in r.stored and r.stored[name].rows:
                _copy_into(sink, name, r.stored[name])
            t = r.tables.get(name)
            if t is not None and t.num_rows:
                sink.add(name, t)
        r.tables.clear()
        files.append(sink.close())
    joined = join_parts(files, parts.path / "joined")
    return (
        {name: s.path for name, s in joined.items()},
        {name: s.rows for name, s in joined.items()},
    )


def _copy_into(sink: TableSink, name: str, stored: StoredTable) -> None:
    import pyarrow.parquet as pq

    f = pq.ParquetFile(stored.path)
    for i in range(f.num_row_groups):
        sink.add(name, f.read_row_group(i))
    f.close()
