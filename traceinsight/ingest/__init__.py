"""Ingestion: trace files -> a parquet trace store (readers -> store).

``ingest()`` reads one trace file, several per-rank files, or a directory of them, and writes
(or reuses) a store. ``load()`` is what every command uses: it accepts a store directory or
trace paths, and for traces looks up the content-addressed cache first, so a second
``diagnose`` of the same trace reads parquet instead of re-parsing JSON.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import pyarrow as pa

from .. import __version__, schema
from ..diagnostics import DiagnosticLog
from ..errors import InputError, TraceFormatError
from ..progress import Progress
from ..store import TraceStore, is_valid_store, read_meta, write_store
from .kineto import KinetoRead, read_kineto
from .source import (
    SourceFile,
    cache_key_for,
    list_trace_files,
    rank_from_filename,
    read_raw,
    read_trace_bytes,
)

__all__ = ["ingest", "load", "resolve_inputs", "cache_root"]


def cache_root() -> Path:
    env = os.environ.get("TRACEINSIGHT_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "traceinsight"


@dataclass(frozen=True)
class Inputs:
    """The trace files of one run, and whether they came from a directory."""

    files: list[Path]
    from_directory: Path | None

    @property
    def display(self) -> str:
        if self.from_directory is not None:
            return self.from_directory.name
        return ", ".join(p.name for p in self.files)


def resolve_inputs(paths: Sequence[str | Path]) -> Inputs:
    if not paths:
        raise InputError("no input given", hint="pass a trace file, a folder of traces or a store")
    files: list[Path] = []
    directory = None
    for raw in paths:
        p = Path(raw)
        SourceFile.stat(p)  # raises a clear error for missing files
        if p.is_dir():
            if len(paths) > 1:
                raise InputError("a folder must be the only input", path=p,
                                 hint="pass either one folder of per-rank files or the files")
            directory = p
            files = list_trace_files(p)
        else:
            files.append(p)
    return Inputs(files, directory)


def _content_key(digests: list[str], options: dict[str, Any]) -> str:
    h = hashlib.sha256()
    h.update(f"schema={schema.SCHEMA_VERSION};".encode())
    h.update(json.dumps(options, sort_keys=True).encode())
    for d in sorted(digests):
        h.update(d.encode())
    return h.hexdigest()[:32]


def _index_path() -> Path:
    return cache_root() / "index.json"


def _read_index() -> dict[str, str]:
    try:
        data = json.loads(_index_path().read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _write_index(quick: str, key: str) -> None:
    idx = _read_index()
    idx[quick] = key
    if len(idx) > 2000:  # keep the index small: drop the oldest entries
        idx = dict(list(idx.items())[-1000:])
    p = _index_path()
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_suffix(f".tmp-{os.getpid()}")
        tmp.write_text(json.dumps(idx))
        os.replace(tmp, p)
    except OSError:
        pass  # the cache is an optimisation


def load(paths: Sequence[str | Path], *, salvage: bool = False, quiet: bool = False,
         use_cache: bool = True) -> TraceStore:
    """Open a store, or ingest traces (reusing the cache when the inputs are unchanged)."""
    if len(paths) == 1 and Path(paths[0]).is_dir() and read_meta(Path(paths[0])) is not None:
        return TraceStore.open(paths[0])
    return ingest(paths, None, salvage=salvage, quiet=quiet, use_cache=use_cache)


def ingest(paths: Sequence[str | Path], out: str | Path | None = None, *, force: bool = False,
           salvage: bool = False, quiet: bool = False, use_cache: bool = True,
           progress: Progress | None = None) -> TraceStore:
    """Ingest trace files into a store at ``out`` (default: the content-addressed cache).

    An existing store built from the same file contents (and options) is reused. An existing
    ``out`` built from other inputs is replaced only with ``force``.
    """
    inputs = resolve_inputs(paths)
    options = {"salvage": bool(salvage)}
    out_path = Path(out) if out is not None else None
    quick = cache_key_for(inputs.files) + json.dumps(options, sort_keys=True)

    # 1. reuse without reading the inputs: same path, size and mtime as a store already made
    if out_path is None and use_cache:
        key = _read_index().get(quick)
        if key and is_valid_store(cache_root() / "stores" / key):
            return TraceStore.open(cache_root() / "stores" / key)
    if out_path is not None and out_path.exists():
        meta = read_meta(out_path)
        if meta is None and any(out_path.iterdir()) if out_path.is_dir() else meta is None:
            if not force:
                raise InputError("exists and is not a trace store", path=out_path,
                                 hint="choose another output path or pass --force")
        elif (meta is not None and not force and _same_stat(meta, inputs.files, options)
              and is_valid_store(out_path)):
            return TraceStore.open(out_path)

    # 2. reuse after hashing (only when a store exists at the target: hash before parsing)
    target_known = out_path if out_path is not None else None
    digests: list[str | None] = [None] * len(inputs.files)
    if target_known is not None and read_meta(target_known) is not None and not force:
        digests = [_file_digest(p) for p in inputs.files]
        key = _content_key([f"{d}:{rank_from_filename(p.name)}" for p, d in zip(inputs.files, digests)],
                           options)
        meta = read_meta(target_known)
        if meta is not None and meta.get("content_key") == key and is_valid_store(target_known):
            return TraceStore.open(target_known)
        raise InputError("already exists and holds other traces", path=target_known,
                         hint="pass --force to replace it, or choose another -o path")
    if target_known is None and use_cache:
        # the cache is keyed by content: a copy of a trace seen before needs no parsing
        digests = [_file_digest(p) for p in inputs.files]
        key = _content_key([f"{d}:{rank_from_filename(p.name)}" for p, d in zip(inputs.files, digests)],
                           options)
        cached = cache_root() / "stores" / key
        if not force and read_meta(cached) is not None and is_valid_store(cached):
            _write_index(quick, key)
            return TraceStore.open(cached)

    prog = progress or Progress("ingest", quiet=quiet)
    total = sum(p.stat().st_size for p in inputs.files) or 1
    warm = _warm_up_arrow()  # while the first file is read
    done = 0
    reads: list[tuple[Path, str, KinetoRead]] = []
    skipped = DiagnosticLog()
    for i, p in enumerate(inputs.files):
        size = p.stat().st_size
        base = done

        def step(stage: str, frac: float, _b=base, _s=size) -> None:
            prog.update(stage, (_b + frac * _s) / total)

        step("read", 0.0)
        raw = read_raw(p)
        warm.join()  # before the parser forks: no thread may run then
        # hash the file in a thread while it is parsed (hashlib releases the GIL); the parser
        # starts it once it has forked its helper process
        hasher = _Hasher(raw) if digests[i] is None else None
        try:
            data = read_trace_bytes(p, raw)
            rank_hint = rank_from_filename(p.name)
            r = read_kineto(data, source=p.name, rank_hint=rank_hint, salvage=salvage,
                            progress=step, background=hasher.start if hasher else None)
            del data
        except TraceFormatError as e:
            if inputs.from_directory is not None and len(inputs.files) > 1:
                skipped.add("file-skipped", f"{p.name} skipped: {e.message}", severity="info",
                            source=p.name)
                done += size
                continue
            raise
        finally:
            del raw
        digests[i] = hasher.result() if hasher else digests[i]
        reads.append((p, digests[i], r))
        done += size

    if not reads:
        raise TraceFormatError("no Kineto trace found among the files", path=inputs.display,
                               hint="; ".join(d.message for d in skipped.items)[:300] or None)
    all_digests = [d if d is not None else _file_digest(p) for p, d in zip(inputs.files, digests)]
    key = _content_key([f"{d}:{rank_from_filename(p.name)}" for p, d in zip(inputs.files, all_digests)],
                       options)
    target = out_path if out_path is not None else cache_root() / "stores" / key
    if out_path is None and target.exists() and not force:
        meta = read_meta(target)
        if meta is not None and meta.get("content_key") == key and is_valid_store(target):
            _write_index(quick, key)
            return TraceStore.open(target)

    _assign_ranks(reads, inputs)
    prog.update("write", 1.0)
    tables, meta = _assemble(reads, skipped, key, options)
    store = write_store(target, meta, tables, replace=True)
    if out_path is None:
        _write_index(quick, key)
    prog.done(f"{sum(r.tables['gpu_activities'].num_rows for _, _, r in reads):,} GPU activities, "
              f"{len(reads)} rank(s) -> {target}")
    return store


def _warm_up_arrow():
    """Arrow imports pandas on its first Python-list conversion (~0.45 s). Do it in a thread
    while the trace file is read, so the parser (and the helper it forks) start warm."""
    import threading

    def run() -> None:
        import pyarrow as pa

        pa.array([0])

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


class _Hasher:
    """sha256 of a byte string, computed in a background thread once ``start`` is called
    (``result`` computes it in place if it never was)."""

    def __init__(self, data: bytes) -> None:
        self._data: bytes | None = data
        self._digest: str | None = None
        self._thread = None

    def start(self) -> None:
        import threading

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


def _file_digest(path: Path) -> str:
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            while chunk := f.read(8 << 20):
                h.update(chunk)
    except OSError as e:
        raise InputError(f"cannot read: {e.strerror}", path=path, hint="check permissions")
    return h.hexdigest()


def _same_stat(meta: dict[str, Any], files: list[Path], options: dict[str, Any]) -> bool:
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


def _assign_ranks(reads: list[tuple[Path, str, KinetoRead]], inputs: Inputs) -> None:
    multi = len(reads) > 1
    if multi:
        unknown = [p.name for p, _, r in reads if r.rank_meta["rank_source"] == "default"]
        if unknown:
            listing = ", ".join(unknown[:8]) + (" ..." if len(unknown) > 8 else "")
            raise InputError(
                f"cannot tell the rank of {len(unknown)} of {len(reads)} files: {listing}",
                path=inputs.display,
                hint="the traces have no distributedInfo; name the files with their rank "
                     "(e.g. rank-0.json.gz, rank-1.json.gz)")
    seen: dict[int, str] = {}
    for p, _, r in reads:
        rank = r.rank_meta["rank"]
        if rank in seen:
            raise InputError(
                f"two files claim rank {rank}: {seen[rank]} and {p.name}", path=inputs.display,
                hint="keep one trace per rank in the folder (or pass the files of one run)")
        seen[rank] = p.name


def _assemble(reads: list[tuple[Path, str, KinetoRead]], skipped: DiagnosticLog, key: str,
              options: dict[str, Any]) -> tuple[dict[str, pa.Table], dict[str, Any]]:
    reads = sorted(reads, key=lambda x: x[2].rank_meta["rank"])
    tables = {}
    for name in schema.TABLES:
        parts = [r.tables[name] for _, _, r in reads]
        tables[name] = pa.concat_tables(parts, promote_options="default") if len(parts) > 1 else parts[0]
    diags = DiagnosticLog()
    diags.extend(skipped)
    for _, _, r in reads:
        diags.extend(r.diagnostics)
    meta = {
        "tool_version": __version__,
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "content_key": key,
        "ingest_options": options,
        "sources": [
            {"name": p.name, "path": str(p.resolve()), "sha256": d, "bytes": p.stat().st_size,
             "mtime_ns": p.stat().st_mtime_ns, "rank": r.rank_meta["rank"], "format": "kineto"}
            for p, d, r in reads
        ],
        "ranks": [r.rank_meta for _, _, r in reads],
        "event_counts": {str(r.rank_meta["rank"]): dict(sorted(r.counts.items())) for _, _, r in reads},
        "diagnostics": diags.to_list(),
    }
    return tables, meta
