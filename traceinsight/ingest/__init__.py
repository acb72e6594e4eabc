"""Ingestion: trace files -> a parquet trace store (readers -> store).

``ingest()`` reads one trace file, several per-rank files, or a directory of them, and writes
(or reuses) a store, in three steps: resolve the inputs, look up a store that already holds
them (the content-addressed cache, or the ``-o`` target), else read every file through the
reader that claims it (``readers.reader_for``) and write the store. ``load()`` is what every command
uses: it accepts a store directory or trace paths, so a second ``diagnose`` of the same trace
reads parquet instead of re-parsing JSON.
"""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from traceinsight import __version__
from traceinsight.diagnostics import DiagnosticLog
from traceinsight.errors import (
    InputError,
    StoreError,
    TraceFormatError,
    TraceInsightError,
    no_space,
)
from traceinsight.ingest import cache, cache_admin, prehash, ranks, readers, streamed
from traceinsight.ingest.cache import cache_root
from traceinsight.ingest.columns import arrow_without_pandas
from traceinsight.ingest.memory_inputs import join as join_memory
from traceinsight.ingest.memory_inputs import with_memory
from traceinsight.ingest.readers import check_whole, open_trace, suffixes
from traceinsight.ingest.readers.base import RankRead, Reader
from traceinsight.ingest.source import (
    SourceFile,
    materialized,
    rank_from_filename,
    read_raw,
    scan_folder,
    skipped_hint,
)
from traceinsight.store.core import (
    TraceStore,
    is_valid_store,
    looks_like_store,
    read_meta,
    refuse_foreign,
    write_store,
)
from traceinsight.util.distributed import current as current_runner
from traceinsight.util.outputs import check_store_target
from traceinsight.util.pathlabel import distinct_labels
from traceinsight.util.progress import Progress

#: the diagnostic of a rank file in a folder that could not be read
RANK_MISSING = "rank-missing"

__all__ = ["RankRead", "Reader", "cache_root", "ingest", "load", "resolve_inputs"]


@dataclass(frozen=True)
class Inputs:
    """The trace files of one run, whether they came from a directory, the candidate files of
    that directory that could not be read (name, why), and every entry of that directory
    (name, is a folder; None without one)."""

    files: list[Path]
    from_directory: Path | None
    unreadable: list[tuple[str, str]] = field(default_factory=list)
    listing: list[tuple[str, bool]] | None = None

    @property
    def display(self) -> str:
        if self.from_directory is not None:
            return self.from_directory.name
        return ", ".join(distinct_labels(self.files))


def resolve_inputs(paths: Sequence[str | Path]) -> Inputs:
    if not paths:
        raise InputError("no input given", hint="pass a trace file, a folder of traces or a store")
    files: list[Path] = []
    directory = None
    unreadable: list[tuple[str, str]] = []
    listing: list[tuple[str, bool]] | None = None
    for raw in paths:
        p = Path(raw)
        SourceFile.stat(p)  # a clear error for missing, unreadable and special files
        if p.is_dir():
            if len(paths) > 1:
                raise InputError(
                    "a folder must be the only input",
                    path=p,
                    hint="pass either one folder of per-rank files or the files",
                )
            directory = p
            listing = []
            found, problems = scan_folder(p, suffixes(), listing)
            files = found
            unreadable = [(q.name, why) for q, why in problems]
            if not files:
                shown = ", ".join(s for s in suffixes() if s != ".gz")
                what = (
                    f"no readable trace files ({unreadable[0][0]}: {unreadable[0][1]})"
                    if unreadable
                    else f"no trace files ({shown})"
                )
                raise InputError(
                    f"folder holds {what}",
                    path=p,
                    hint="point at a trace file or a folder of per-rank trace files",
                )
        else:
            files.append(p)
    return Inputs(files, directory, unreadable, listing)


def load(
    paths: Sequence[str | Path],
    *,
    salvage: bool = False,
    quiet: bool = False,
    use_cache: bool = True,
    strict: bool = False,
    memory: Sequence[str | Path] = (),
) -> TraceStore:
    """Open a store, or ingest traces (reusing the cache when the inputs are unchanged).

    ``strict``: a rank file that could not be read is an error, not a warning. ``memory``:
    memory snapshots (or memory-timeline exports) of the same run, joined to the traces."""
    paths = with_memory(paths, memory)
    if len(paths) == 1 and Path(paths[0]).is_dir() and looks_like_store(Path(paths[0])):
        return check_strict(TraceStore.open(paths[0]), strict)
    return ingest(paths, None, salvage=salvage, quiet=quiet, use_cache=use_cache, strict=strict)


def check_strict(store: TraceStore, strict: bool) -> TraceStore:
    """``store``, or with ``strict`` an error when one of its rank files could not be read."""
    if strict:
        missing = [d for d in store.diagnostics if d.code == RANK_MISSING]
        if missing:
            raise InputError(
                f"--strict: {missing[0].message}",
                path=store.path,
                hint="fix or remove the unreadable file, or run without --strict "
                "to diagnose the ranks that could be read",
            )
    return store


def ingest(
    paths: Sequence[str | Path],
    out: str | Path | None = None,
    *,
    force: bool = False,
    salvage: bool = False,
    quiet: bool = False,
    use_cache: bool = True,
    progress: Progress | None = None,
    strict: bool = False,
) -> TraceStore:
    """Ingest trace files into a store at ``out`` (default: the content-addressed cache).

    An existing store built from the same file contents (and options) is reused. An existing
    ``out`` built from other inputs is replaced only with ``force``, and only when it is a
    store. ``-`` (and ``/dev/stdin``, ``<(...)``) reads a trace from a stream.
    """
    with materialized(paths) as real:
        if out is not None:
            check_store_target(Path(out), real, force=force)
            if force and Path(out).is_dir():
                refuse_foreign(Path(out))  # before any work: --force never deletes a user's file
        inputs = resolve_inputs(real)
        options: dict[str, Any] = {"salvage": bool(salvage)}
        if inputs.unreadable:  # a store without those ranks is another store
            options["unreadable"] = sorted(n for n, _ in inputs.unreadable)
        job = _Job(
            inputs,
            Path(out) if out is not None else None,
            options,
            force=force,
            use_cache=use_cache and not current_runner().fresh,
        )
        found = _lookup(job)
        if found is None:
            _ensure_folder(
                job.out.parent if job.out is not None else cache.store_path("-").parent,
                cache=job.out is None,
            )
            found = _read_and_write(job, progress or Progress("ingest", quiet=quiet))
    found.listing = inputs.listing  # what the input folder held, listed once, here
    return check_strict(found, strict)


@dataclass
class _Job:
    """One ingest: inputs, target and options, and the files' sha256 digests once known."""

    inputs: Inputs
    out: Path | None
    options: dict[str, Any]
    force: bool
    use_cache: bool
    digests: list[str | None] = field(default_factory=list)
    #: what the start-up hashing had read of each file without a digest (``prehash.pause``)
    partials: list[prehash.Partial | None] = field(default_factory=list)
    _key: str | None = None

    def __post_init__(self) -> None:
        self.digests = [None] * len(self.inputs.files)
        self.partials = [None] * len(self.inputs.files)

    @property
    def key(self) -> str:
        """The content key, built once (files without a digest yet are hashed first)."""
        if self._key is None:
            files = self.inputs.files
            digests = [
                d if d is not None else cache.file_digest(p) for p, d in zip(files, self.digests)
            ]
            self.digests = list(digests)
            self._key = cache.content_key(files, digests, self.options)
        return self._key


# --- 2. look up a store that already holds the inputs ---------------------------------------


def _lookup(job: _Job) -> TraceStore | None:
    """The store that holds these inputs already, found by hashing their bytes (never by
    size and mtime) without parsing them (None: read)."""
    if job.out is not None:
        return _lookup_target(job, job.out)
    if not job.use_cache:
        return None
    cached = cache.store_path(job.key)
    if not job.force and read_meta(cached) is not None and is_valid_store(cached):
        cache_admin.touch(cached)  # its last use, for the cache's least-recently-used bound
        return TraceStore.open(cached)
    return None


def _lookup_target(job: _Job, out: Path) -> TraceStore | None:
    """The ``-o`` store when it holds these inputs; refuses to replace another without force
    (``check_store_target`` has refused anything that is not a store)."""
    meta = read_meta(out)
    if meta is None or job.force:
        return None
    if meta.get("content_key") == job.key and is_valid_store(out):
        return TraceStore.open(out) if job.use_cache else None  # --no-cache: read again
    raise InputError(
        "already exists and holds other traces",
        path=out,
        hint="pass --force to replace it, or choose another -o path",
    )


# --- 3. read every file and write the store -------------------------------------------------


def _ensure_folder(folder: Path, *, cache: bool) -> None:
    """The folder the store goes to exists (made if need be) and is writable; a clear error
    before any reading when it is not."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        ok = os.access(folder, os.W_OK | os.X_OK)
    except OSError as e:
        problem = e.strerror or str(e)
    else:
        if ok:
            return
        problem = "not writable"
    where = (
        "the store cache (TRACEINSIGHT_CACHE_DIR or ~/.cache/traceinsight)"
        if cache
        else "the store's folder"
    )
    raise InputError(
        f"cannot write {where}: {problem}",
        path=folder,
        hint="point TRACEINSIGHT_CACHE_DIR at a writable folder"
        if cache
        else "choose an -o path in a writable folder",
    )


@dataclass
class _Read:
    path: Path
    digest: str
    result: RankRead


def _read_and_write(job: _Job, prog: Progress) -> TraceStore:
    # hashed while the command started; no thread may run when the reader forks, so a file's
    # hashing is stopped here (one file: the reader's hashing thread goes on from where it
    # stopped once the parse helper has forked; several rank files: waited for)
    several = ranks.applies(job.inputs.files)
    for i, p in enumerate(job.inputs.files):
        if job.digests[i] is None:
            got = prehash.take(p) if several else prehash.pause(p)
            if isinstance(got, prehash.Partial):
                job.partials[i] = got
            else:
                job.digests[i] = got
    parent = job.out.parent if job.out is not None else cache.store_path("-").parent
    try:
        if several:  # several rank files: one task and partition each
            return ranks.read_and_write(job, prog)
        parts = streamed.Parts(parent, job.out.name if job.out is not None else "ingest")
        try:
            return _read_and_write_parts(job, prog, parts)
        finally:
            parts.cleanup()  # the temporaries of this ingest (what it wrote, nothing else)
    except OSError as e:
        if not no_space(e):
            raise
        raise disk_full(job, parent) from None


def disk_full(job: _Job, parent: Path) -> StoreError:
    """The one-line error for a disk that filled while the store was written (its
    temporaries are removed already: nothing half-written stays)."""
    where = "the cache folder" if job.out is None else "the store's folder"
    return StoreError(
        "no space left on the device while the store was written (nothing was kept)",
        path=job.out if job.out is not None else parent,
        hint=f"free space in {where}, or write the store elsewhere"
        + (" (TRACEINSIGHT_CACHE_DIR sets the cache's place)" if job.out is None else " (-o)"),
    )


def _read_and_write_parts(job: _Job, prog: Progress, parts: streamed.Parts) -> TraceStore:
    reads, skipped = _read_all(job, prog, parts)
    key = job.key
    target = job.out if job.out is not None else cache.store_path(key)
    if job.out is None:
        cache.clean()
        same = cached_twin(job, target) if not job.force and job.use_cache else None
        if same is not None:
            return same
    _assign_ranks(reads, job.inputs)
    prog.update("write", 1.0)
    reads = sorted(reads, key=lambda r: r.result.meta.rank)
    tables, rows = streamed.store_tables([r.result for r in reads], parts)
    meta = _store_meta(reads, skipped, key, job.options)
    try:
        store = write_store(target, meta, tables, replace=True)
    except OSError as e:
        if no_space(e):
            raise
        same = cached_twin(job, target)  # another run of the same trace wrote it first
        if same is not None:
            return same
        where = "the cache folder" if job.out is None else "the store folder"
        raise InputError(
            f"cannot write the store: {e.strerror or e}",
            path=target,
            hint=f"check that {where} is writable (TRACEINSIGHT_CACHE_DIR sets the cache's place)",
        ) from None
    if job.out is None:
        cache_admin.evict(target)  # the cache's size bound: least recently used entries go
    prog.done(f"{rows['gpu_activities']:,} GPU activities, {len(reads)} rank(s) -> {target}")
    return store


def cached_twin(job: _Job, target: Path) -> TraceStore | None:
    """The cache's store at ``target`` when it holds these inputs (same content key,
    complete): read instead of written again, also when a concurrent run of the same inputs
    wrote it while this one read them (the second writer reuses it instead of failing)."""
    if job.out is not None:
        return None
    meta = read_meta(target)
    if meta is not None and meta.get("content_key") == job.key and is_valid_store(target):
        cache_admin.touch(target)
        return TraceStore.open(target)
    return None


def _identity(p: Path) -> tuple[int, int, int] | None:
    """(inode, size, mtime ns) of a file, to tell whether it changed while it was read."""
    try:
        st = os.stat(p)
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def _unchanged(p: Path, before: tuple[int, int, int] | None) -> None:
    """Refuse a file rewritten while it was read: its tables would blend two versions."""
    after = _identity(p)
    if before is not None and after is not None and after != before:
        grew = f" ({before[1]:,} → {after[1]:,} bytes)" if after[1] != before[1] else ""
        raise InputError(
            f"changed while it was read{grew}",
            path=p,
            hint="wait until the profiler has finished writing it (or copy it first), then "
            "run again",
        )


def _read_all(
    job: _Job, prog: Progress, parts: streamed.Parts
) -> tuple[list[_Read], DiagnosticLog]:
    """Each file through its reader; in a folder of several, files no reader can read are
    skipped with a diagnostic. Files are hashed while they are parsed."""
    inputs = job.inputs
    total = sum(_size(p) for p in inputs.files) or 1
    warm = _warm_up_arrow()  # while the first file is read
    done = 0
    reads: list[_Read] = []
    skipped = DiagnosticLog()
    for name, why in inputs.unreadable:
        _rank_missing(skipped, name, why)
    for i, p in enumerate(inputs.files):
        size = _size(p)
        base = done
        before = _identity(p)

        def step(stage: str, frac: float, _b: int = base, _s: int = size) -> None:
            prog.update(stage, (_b + frac * _s) / total)

        step("read", 0.0)
        in_folder = inputs.from_directory is not None and len(inputs.files) > 1
        try:
            head = streamed.head_of(p)
        except InputError as e:
            if not in_folder:
                raise
            _rank_missing(skipped, p.name, e.message)
            continue
        warm.join()  # before the parser forks: no thread may run then
        # hash the file in a thread while it is parsed (hashlib releases the GIL); the parser
        # starts it once it has forked its helper process
        hasher = streamed.FileHasher(p, job.partials[i]) if job.digests[i] is None else None
        job.partials[i] = None
        try:
            r = streamed.read_streamed(
                p,
                head,
                parts,
                salvage=bool(job.options["salvage"]),
                rank_hint=rank_from_filename(p.name),
                progress=step,
                background=hasher.start if hasher else None,
                wrap=functools.partial(_reader_errors, p),
            )
            if r is None:  # read whole: the readers without a stream entry, damaged files
                if hasher and hasher.started:
                    job.digests[i] = hasher.result()  # no thread may run when the reader forks
                    hasher = None
                check_whole(p, head, size)
                raw = read_raw(p)
                reader, data = open_trace(p, raw, salvage=bool(job.options["salvage"]))
                del raw
                r = _read_one(
                    reader,
                    data,
                    p,
                    bool(job.options["salvage"]),
                    step,
                    hasher.start if hasher else None,
                )
                del data
        except TraceFormatError as e:
            if in_folder:
                if _looks_like_trace(head):
                    _rank_missing(skipped, p.name, e.message)
                else:
                    skipped.add(
                        "file-skipped",
                        f"{p.name} skipped: {e.message}",
                        severity="info",
                        source=p.name,
                    )
                done += size
                continue
            raise
        if hasher:
            job.digests[i] = hasher.result()
        _unchanged(p, before)
        reads.extend(_Read(p, job.digests[i] or "", part) for part in r.parts())
        done += size
    if not reads:
        formats = " or ".join(r.title for r in readers.READERS)
        raise TraceFormatError(
            f"no {formats} trace found among the files",
            path=inputs.display,
            hint=skipped_hint([d.message for d in skipped.items]),
        )
    reads = join_memory(reads, inputs.display)  # a snapshot joins its trace's rank
    _one_format(reads, inputs)
    return reads, skipped


def _one_format(reads: list[_Read], inputs: Inputs) -> None:
    """Refuse a run whose files are of different formats (one reader per run)."""
    first: dict[str, str] = {}
    for r in reads:
        first.setdefault(r.result.meta.format, r.path.name)
    if len(first) > 1:
        listing = ", ".join(f"{name} ({fmt})" for fmt, name in first.items())
        raise InputError(
            f"the files mix trace formats: {listing}",
            path=inputs.display,
            hint="diagnose each format on its own (one folder or file list per "
            "format); compare can put the two results side by side",
        )


def _read_one(
    reader: Reader, data: bytes, p: Path, salvage: bool, step: Any, background: Any
) -> RankRead:
    """``reader.read`` of one file (errors as :func:`_reader_errors` makes them)."""
    kw = {"path": p} if reader.opens_path else {}
    return _reader_errors(
        p,
        lambda: reader.read(
            data,
            source=p.name,
            rank_hint=rank_from_filename(p.name),
            **kw,
            salvage=salvage,
            progress=step,
            background=background,
        ),
    )


def _reader_errors(p: Path, fn: Callable[[], Any]) -> Any:
    """``fn()``, a reader at work on file ``p``; values no table can hold (beyond int64,
    nested too deep) become a clear error naming the file instead of an internal error."""
    try:
        return fn()
    except TraceInsightError as e:
        if e.path is None:  # raised where the file name is not known
            e.path = p.name
        raise
    except RecursionError:
        raise TraceFormatError(
            "holds values nested too deeply to read (thousands of levels)",
            path=p.name,
            hint="check how the file was produced",
        ) from None
    except (
        OverflowError,
        pa.ArrowInvalid,
        pa.ArrowNotImplementedError,
        ValueError,
        TypeError,
    ) as e:
        raise TraceFormatError(
            f"holds a value out of the range traceinsight reads ({type(e).__name__}: "
            f"{str(e).splitlines()[0][:120] if str(e) else 'no detail'})",
            path=p.name,
            hint="a time, id or count is beyond 64-bit integers or not a number; fix or drop "
            "that event (--debug shows where)",
        ) from e


def _size(p: Path) -> int:
    try:
        return p.stat().st_size
    except OSError:
        return 0


def _looks_like_trace(raw: bytes) -> bool:
    """Whether a file's first bytes look like a Kineto trace (a damaged rank file, not some
    other JSON that happens to sit in the folder)."""
    head = raw[:65536]
    if head.startswith(b"\x1f\x8b"):
        return True  # a damaged gzip: it was a trace file
    return b'"traceEvents"' in head or b'"ph"' in head


def _rank_missing(log: DiagnosticLog, name: str, why: str) -> None:
    """A rank file of a folder that could not be read: a warning every output shows."""
    log.add(
        RANK_MISSING,
        f"rank file {name} could not be read ({why}); its rank is missing from every figure",
        severity="warning",
        source=name,
        hint="fix or remove the file; --strict makes this an error",
    )


def _warm_up_arrow() -> threading.Thread:
    """Arrow's first Python-list conversion looks for pandas, an import the ingest never needs
    (0.2-0.45 s): that look is made now, without pandas (``columns.arrow_without_pandas``).
    Returns a finished thread (callers join it before forking)."""
    arrow_without_pandas()
    t = threading.Thread(target=lambda: None, daemon=True)
    t.start()
    return t


def _source_name(r: _Read) -> str:
    """The file's name, and the rank's label when the file holds several ranks."""
    label = r.result.meta.label
    return f"{r.path.name} ({label})" if label else r.path.name


def _assign_ranks(reads: list[_Read], inputs: Inputs) -> None:
    names = distinct_labels([r.path for r in reads])  # same-named files of two folders differ
    if len(reads) > 1:
        unknown = [n for r, n in zip(reads, names) if r.result.meta.rank_source == "default"]
        if unknown:
            listing = ", ".join(unknown[:8]) + (" ..." if len(unknown) > 8 else "")
            raise InputError(
                f"cannot tell the rank of {len(unknown)} of {len(reads)} files: {listing}",
                path=inputs.display,
                hint="the traces have no distributedInfo; name the files with their rank "
                "(e.g. rank-0.json.gz, rank-1.json.gz)",
            )
    seen: dict[int, str] = {}
    for r, name in zip(reads, names):
        rank = r.result.meta.rank
        if rank in seen:
            raise InputError(
                f"two files claim rank {rank}: {seen[rank]} and {name}",
                path=inputs.display,
                hint="keep one trace per rank in the folder (or pass the files of one run)",
            )
        seen[rank] = name


def _store_meta(
    reads: list[_Read], skipped: DiagnosticLog, key: str, options: dict[str, Any]
) -> dict[str, Any]:
    """``meta.json`` of a store of ``reads`` (in rank order), less the table counts."""
    diags = DiagnosticLog()
    diags.extend(skipped)
    for r in reads:
        diags.extend(r.result.meta.diagnostics)
    meta = {
        "tool_version": __version__,
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "content_key": key,
        "ingest_options": options,
        "sources": [
            {
                "name": _source_name(r),
                "path": str(r.path.resolve()),
                "sha256": r.digest,
                "bytes": r.path.stat().st_size,
                "mtime_ns": r.path.stat().st_mtime_ns,
                "rank": r.result.meta.rank,
                "format": r.result.meta.format,
            }
            for r in reads
        ],
        "ranks": [r.result.meta.to_dict() for r in reads],
        "event_counts": {
            str(r.result.meta.rank): dict(sorted(r.result.counts.items())) for r in reads
        },
        "diagnostics": diags.to_list(),
    }
    return meta
