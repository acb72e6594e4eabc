"""Hashing input files while the rest of a command starts up.

A second ``diagnose`` of a trace finds its store (and the cached result in it) by the sha256 of
the trace's bytes (``ingest/cache.py``): for a large trace that hash takes as long as importing
the library. :func:`start` hashes the named files in background threads right at the start of
the command (hashlib releases the GIL, so the imports go on meanwhile); ``cache.file_digest``
takes a digest from here when the file's size, modification time and inode are what they were
before and after it was read, and hashes the file itself otherwise. Standard library only:
this module is imported before anything heavy.

An ingest that needs the digest only once the file is read (a store written to ``-o``) does not
wait for the thread: :func:`pause` stops it between two pieces and hands over what it has read
(:class:`Partial`), and the reader's own hashing thread goes on from there once the parse
helper has forked (no thread may run at the fork).
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["Partial", "hash_file", "pause", "start", "take"]

#: files smaller than this are hashed where they are needed (a thread costs more)
MIN_BYTES = 8 << 20
#: bytes hashed between two looks at the stop flag (:func:`pause` waits at most one piece)
PIECE = 2 << 20

Stamp = tuple[int, int, int, int]

_lock = threading.Lock()
_jobs: dict[str, tuple[threading.Thread, dict[str, object], threading.Event]] = {}


class Partial:
    """A hash stopped part way: the sha256 of the file's first ``offset`` bytes, as they were
    when the file had ``stamp`` (size, mtime, inode, device)."""

    def __init__(self, h: Any, offset: int, stamp: Stamp) -> None:
        self.h, self.offset, self.stamp = h, offset, stamp

    def resumable(self, path: str | Path) -> bool:
        """Whether the file at ``path`` is still the one hashed (the same stamp)."""
        try:
            return stamp_of(path) == self.stamp
        except OSError:
            return False


def stamp_of(path: str | Path) -> Stamp:
    return _stamp(os.stat(path))


def _stamp(st: os.stat_result) -> Stamp:
    return (st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev)


def hash_file(h: Any, f: Any, stop: threading.Event | None = None) -> int:
    """Feed the rest of the unbuffered binary file ``f`` to ``h``, piece by piece into one
    reused buffer (a new 8 MiB bytes object per piece cost a third more CPU: fresh pages);
    returns the bytes read. With ``stop``: returns after the piece in which it was set."""
    buf = bytearray(PIECE)
    view = memoryview(buf)
    done = 0
    try:
        while n := f.readinto(buf):
            h.update(view[:n])
            done += n
            if stop is not None and stop.is_set():
                break
    finally:
        view.release()
    return done


def _hash(path: str, out: dict[str, object], stop: threading.Event) -> None:
    try:
        before = _stamp(os.stat(path))
        h = hashlib.sha256()
        with open(path, "rb", buffering=0) as f:
            done = hash_file(h, f, stop)
            if stop.is_set() and f.read(1):  # more to read: hand over what was hashed
                out["partial"] = Partial(h, done, before)
                return
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
            stop = threading.Event()
            t = threading.Thread(target=_hash, args=(key, out, stop), daemon=True)
            _jobs[key] = (t, out, stop)
        t.start()


def take(path: str | Path) -> str | None:
    """The digest of ``path`` hashed by :func:`start` (waiting for it), when the file is
    unchanged since; None otherwise (the caller hashes it)."""
    got = _end(path, stop=False)
    return None if got is None else _digest(*got)


def pause(path: str | Path) -> str | Partial | None:
    """Stop hashing ``path`` after the piece being read (no thread runs once this returns):
    its digest when the thread had finished and the file is unchanged, else what it had
    hashed (:class:`Partial`), or None (not hashed here: the caller hashes it)."""
    got = _end(path, stop=True)
    if got is None:
        return None
    part = got[1].get("partial")
    if isinstance(part, Partial):
        return part
    return _digest(*got)


def _end(path: str | Path, *, stop: bool) -> tuple[str, dict[str, object]] | None:
    """The hashing job of ``path`` taken off the list and its thread joined (``stop``: asked
    to stop after the piece being read first): the file's real path and the thread's output;
    None when :func:`start` hashes no such file."""
    key = os.path.realpath(path)
    with _lock:
        job = _jobs.pop(key, None)
    if job is None:
        return None
    t, out, ev = job
    if stop:
        ev.set()
    t.join()
    return key, out


def _digest(key: str, out: dict[str, object]) -> str | None:
    try:
        now = _stamp(os.stat(key))
    except OSError:
        return None
    return out.get("digest") if out.get("stamp") == now else None  # type: ignore[return-value]


def pending() -> bool:
    """Whether a hashing thread may still run (no process may fork then)."""
    with _lock:
        return any(t.is_alive() for t, _, _ in _jobs.values())
