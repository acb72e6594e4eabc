"""The content-addressed store cache: where ingested stores are kept and how they are found.

A store in the cache is named by its content key: a hash of the schema version, the ingest
options and every input file's sha256 with its rank hint. The key is always computed from the
bytes (sha256 reads about 1 GB/s, far less than a parse), never from sizes or modification
times: a trace rewritten in place with its size and mtime kept (``touch -r``) is a new trace.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from traceinsight import settings
from traceinsight.errors import InputError
from traceinsight.ingest.source import rank_from_filename
from traceinsight.store import schema
from traceinsight.store.core import owned_folder
from traceinsight.util.outputs import clean_stale


def cache_root() -> Path:
    env = settings.get("TRACEINSIGHT_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "traceinsight"


def store_path(key: str) -> Path:
    """Where the cache keeps the store of content key ``key``."""
    return cache_root() / "stores" / key


def clean() -> None:
    """Remove the temporaries of killed ingests from the cache (best effort)."""
    clean_stale(cache_root() / "stores", owned=owned_folder)


def content_key(files: list[Path], digests: list[str], options: dict[str, Any]) -> str:
    """The content key of input ``files`` with sha256 ``digests`` read with ``options``."""
    h = hashlib.sha256()
    h.update(f"schema={schema.SCHEMA_VERSION};".encode())
    h.update(json.dumps(options, sort_keys=True).encode())
    for d in sorted(f"{d}:{rank_from_filename(p.name)}" for p, d in zip(files, digests)):
        h.update(d.encode())
    return h.hexdigest()[:32]


def file_digest(path: Path) -> str:
    """sha256 of a file, read piece by piece (or taken from ``prehash``, which may have
    hashed the unchanged file while the command started)."""
    from traceinsight.ingest.prehash import hash_file, take

    got = take(path)
    if got is not None:
        return got
    h = hashlib.sha256()
    try:
        with open(path, "rb", buffering=0) as f:
            hash_file(h, f)
    except OSError as e:
        raise InputError(f"cannot read: {e.strerror}", path=path, hint="check permissions") from e
    return h.hexdigest()
