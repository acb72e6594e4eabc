"""What the store cache holds, and how it is kept bounded: ``traceinsight cache list`` /
``cache clear`` and the least-recently-used eviction after each new entry.

An entry is one thing the tool wrote into the cache: a store under ``stores/`` (a folder named
by its 32-hex-digit content key, holding the tool's store files only) or an ``nsys export``
of a report under ``nsys-exports/`` (``KEY.sqlite``). Anything else in the cache folder (a
user's file, a store holding a file the tool never writes) is foreign: listed as such, never
removed. An entry's last use is its folder's (or file's) modification time: the cache
touches an entry each time it serves it (:func:`touch`).

The bound is ``TRACEINSIGHT_CACHE_MAX_GB`` (0: none): when a new entry takes the cache past
it, the entries used longest ago are removed until it fits, never the new entry, nor one used
in the last minute (a concurrent run may be reading it).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from traceinsight import settings
from traceinsight.ingest.cache import cache_root
from traceinsight.store.core import foreign_entries, looks_like_store

_KEY_RE = re.compile(r"[0-9a-f]{32}")
#: an entry used this recently is not evicted (a concurrent run may be reading it)
IN_USE_S = 60.0


@dataclass(frozen=True)
class Entry:
    """One cache entry: its path, kind (``store`` / ``nsys-export``), size in bytes, last use
    (epoch seconds) and whether the tool owns it (only owned entries are ever removed)."""

    path: Path
    kind: str
    size: int
    used: float
    owned: bool
    why: str = ""  #: why a foreign entry is not the tool's

    def age_days(self, now: float | None = None) -> float:
        return max(0.0, ((now or time.time()) - self.used) / 86400.0)


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, f)).st_size
    return total


def _used(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def entries(root: Path | None = None) -> list[Entry]:
    """Every entry of the cache at ``root`` (default: the cache's), most recently used first.
    Temporaries of running ingests (dot-names) are not entries."""
    root = root or cache_root()
    out: list[Entry] = []
    stores = root / "stores"
    for p in sorted(stores.iterdir()) if stores.is_dir() else []:
        if p.name.startswith("."):
            continue
        if p.is_symlink() or not p.is_dir() or not _KEY_RE.fullmatch(p.name):
            out.append(Entry(p, "other", _size(p), _used(p), False, "not a cache store's name"))
        elif not looks_like_store(p):
            out.append(Entry(p, "other", _size(p), _used(p), False, "not a trace store"))
        else:
            foreign = foreign_entries(p)
            why = f"holds files the tool did not write ({foreign[0]})" if foreign else ""
            out.append(Entry(p, "store", _size(p), _used(p), not foreign, why))
    exports = root / "nsys-exports"
    for p in sorted(exports.iterdir()) if exports.is_dir() else []:
        if p.name.startswith(".") or ".tmp-" in p.name:
            continue
        ok = p.is_file() and not p.is_symlink() and _KEY_RE.fullmatch(p.stem) is not None
        ok = ok and p.suffix == ".sqlite"
        why = "" if ok else "not an nsys export the tool wrote"
        out.append(Entry(p, "nsys-export" if ok else "other", _size(p), _used(p), ok, why))
    return sorted(out, key=lambda e: -e.used)


def touch(path: Path) -> None:
    """Mark the cache entry at ``path`` used now (its modification time; best effort)."""
    with contextlib.suppress(OSError):
        os.utime(path)


def remove(entry: Entry) -> bool:
    """Remove an owned entry (a store is renamed aside first: never half a store in place).
    False when it is not the tool's, or already gone."""
    if not entry.owned:
        return False
    p = entry.path
    try:
        if entry.kind == "nsys-export":
            p.unlink()
            return True
        if foreign_entries(p):  # checked again right before: it may have changed
            return False
        aside = p.parent / f".{p.name}.old-{os.getpid()}"
        os.replace(p, aside)
    except OSError:
        return False
    shutil.rmtree(aside, ignore_errors=True)
    return True


def clear(
    older_than_days: float | None = None, root: Path | None = None
) -> tuple[list[Entry], list[Entry]]:
    """Remove the tool's entries (those last used more than ``older_than_days`` ago, when
    given): (removed, kept foreign entries)."""
    now = time.time()
    removed, foreign = [], []
    for e in entries(root):
        if not e.owned:
            foreign.append(e)
        elif (older_than_days is None or e.age_days(now) > older_than_days) and remove(e):
            removed.append(e)
    return removed, foreign


def limit_bytes() -> int | None:
    """The cache's bound in bytes (``TRACEINSIGHT_CACHE_MAX_GB``; None: unbounded)."""
    gb = settings.get("TRACEINSIGHT_CACHE_MAX_GB")
    return None if not gb else int(gb * (1 << 30))


def evict(keep: Path, root: Path | None = None, limit: int | None = None) -> list[Entry]:
    """After ``keep`` was written: remove the least recently used owned entries until the
    cache fits its bound (never ``keep``, nor an entry used in the last :data:`IN_USE_S`
    seconds). The removed entries."""
    limit = limit_bytes() if limit is None else limit
    if limit is None:
        return []
    all_ = entries(root)
    total = sum(e.size for e in all_)
    now = time.time()
    removed = []
    for e in sorted(all_, key=lambda e: e.used):  # oldest use first
        if total <= limit:
            break
        if not e.owned or e.path == keep or now - e.used < IN_USE_S:
            continue
        if remove(e):
            removed.append(e)
            total -= e.size
    return removed
