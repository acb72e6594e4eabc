"""The content-addressed store cache: where ingested stores are kept and how they are found.

A store in the cache is named by its content key: a hash of the schema version, the ingest
options and every input file's sha256 with its rank hint, so a copy of a trace seen before
needs no parsing. An index maps a quick key (paths, sizes, mtimes) to the content key, so an
unchanged file is found without even being read.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path
from typing import Any

from .. import schema
from ..errors import InputError
from .source import cache_key_for, rank_from_filename

INDEX_MAX = 2000  #: entries kept in the index (the newest half survives a trim)


def cache_root() -> Path:
    env = os.environ.get("TRACEINSIGHT_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "traceinsight"


def store_path(key: str) -> Path:
    """Where the cache keeps the store of content key ``key``."""
    return cache_root() / "stores" / key


def content_key(files: list[Path], digests: list[str], options: dict[str, Any]) -> str:
    """The content key of input ``files`` with sha256 ``digests`` read with ``options``."""
    h = hashlib.sha256()
    h.update(f"schema={schema.SCHEMA_VERSION};".encode())
    h.update(json.dumps(options, sort_keys=True).encode())
    for d in sorted(f"{d}:{rank_from_filename(p.name)}" for p, d in zip(files, digests)):
        h.update(d.encode())
    return h.hexdigest()[:32]


def quick_key(files: list[Path], options: dict[str, Any]) -> str:
    """A key from the files' paths, sizes and mtimes and the options (no reading)."""
    return cache_key_for(files) + json.dumps(options, sort_keys=True)


def _index_path() -> Path:
    return cache_root() / "index.json"


def _read_index() -> dict[str, str]:
    try:
        data = json.loads(_index_path().read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def indexed(quick: str) -> str | None:
    """The content key last stored for quick key ``quick``."""
    return _read_index().get(quick)


def remember(quick: str, key: str) -> None:
    """Index content key ``key`` under quick key ``quick`` (best effort)."""
    idx = _read_index()
    idx[quick] = key
    if len(idx) > INDEX_MAX:  # keep the index small: drop the oldest entries
        idx = dict(list(idx.items())[-(INDEX_MAX // 2):])
    p = _index_path()
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_suffix(f".tmp-{os.getpid()}")
        tmp.write_text(json.dumps(idx))
        os.replace(tmp, p)
    except OSError:
        pass  # the cache is an optimisation


def file_digest(path: Path) -> str:
    """sha256 of a file, read in 8 MiB pieces."""
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            while chunk := f.read(8 << 20):
                h.update(chunk)
    except OSError as e:
        raise InputError(f"cannot read: {e.strerror}", path=path,
                         hint="check permissions") from e
    return h.hexdigest()


class Hasher:
    """sha256 of a byte string, computed in a background thread once ``start`` is called
    (``result`` computes it in place if it never was)."""

    def __init__(self, data: bytes) -> None:
        self._data: bytes | None = data
        self._digest: str | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None and self._digest is None:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()

    def _run(self) -> None:
        assert self._data is not None
        self._digest = hashlib.sha256(self._data).hexdigest()
        self._data = None

    def result(self) -> str:
        if self._thread is not None:
            self._thread.join()
        elif self._digest is None:
            self._run()
        assert self._digest is not None
        return self._digest


def same_stat(meta: dict[str, Any], files: list[Path], options: dict[str, Any]) -> bool:
    """Whether store metadata ``meta`` was made from ``files`` as they are now (path, size and
    mtime) with ``options``."""
    if meta.get("ingest_options") != options:
        return False
    srcs = {s.get("path"): s for s in meta.get("sources", [])}
    if len(srcs) != len(files):
        return False
    for p in files:
        s = srcs.get(str(p.resolve()))
        st = p.stat()
        if not s or s.get("bytes") != st.st_size or s.get("mtime_ns") != st.st_mtime_ns:
            return False
    return True
