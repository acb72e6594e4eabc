"""Hashing input files while the rest of a command starts up.

A second ``diagnose`` of a trace finds its store (and the cached result in it) by the sha256 of
the trace's bytes (``ingest/cache.py``): for a large trace that hash takes as long as importing
the library. :func:`start` hashes the named files in background threads right at the start of
the command (hashlib releases the GIL, so the imports go on meanwhile); ``cache.file_digest``
takes a digest from here when the file's size, modification time and inode are what they were
before and after it was read, and hashes the file itself otherwise. Standard library only:
this module is imported before anything heavy.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Sequence
from pathlib import Path

__all__ = ["start", "take"]

#: files smaller than this are hashed where they are needed (a thread costs more)
MIN_BYTES = 8 << 20

_lock = threading.Lock()
_jobs: dict[str, tuple[threading.Thread, dict[str, object]]] = {}


def _stamp(st: os.stat_result) -> tuple[int, int, int, int]:
    return (st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev)


def _hash(path: str, out: dict[str, object]) -> None:
    try:
        before = _stamp(os.stat(path))
        h = hashlib.sha256()
        with open(path, "rb") as f:
            while chunk := f.read(8 << 20):
                h.update(chunk)
        if _stamp(os.stat(path)) == before:
            out["stamp"] = before
            out["digest"] = h.hexdigest()
    except OSError:
        pass


def start(paths: Sequence[str | Path]) -> None:
    """Hash each regular file of ``paths`` (not folders, not streams) in a background thread."""
    for p in paths:
        try:
            key = os.path.realpath(p)
            st = os.stat(key)
        except (OSError, ValueError):
            continue
        if not os.path.isfile(key) or st.st_size < MIN_BYTES:
            continue
        with _lock:
            if key in _jobs:
                continue
            out: dict[str, object] = {}
            t = threading.Thread(target=_hash, args=(key, out), daemon=True)
            _jobs[key] = (t, out)
        t.start()


def take(path: str | Path) -> str | None:
    """The digest of ``path`` hashed by :func:`start` (waiting for it), when the file is
    unchanged since; None otherwise (the caller hashes it)."""
    key = os.path.realpath(path)
    with _lock:
        job = _jobs.pop(key, None)
    if job is None:
        return None
    t, out = job
    t.join()
    try:
        now = _stamp(os.stat(key))
    except OSError:
        return None
    return out.get("digest") if out.get("stamp") == now else None  # type: ignore[return-value]


def pending() -> bool:
    """Whether a hashing thread may still run (no process may fork then)."""
    with _lock:
        return any(t.is_alive() for t, _ in _jobs.values())
