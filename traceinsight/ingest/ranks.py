"""Per-rank ingest: the rank files of a run read in parallel, each into its own partition.

A folder (or list) of several trace files is ingested one task per file: the task runs the
single-file ingest of that file into a temporary folder, which becomes the file's partition of
the store (``partitions.py``: the ``rank=N/`` layout), so a partition is exactly the store
``traceinsight ingest FILE`` writes. Tasks run in local worker processes (``--jobs``, one per
core by default) or on a Dask cluster (``distributed.py``); only each store's ``meta.json``
comes back. This process then checks the ranks (every file's rank known, no rank twice, one
format), names the folders ``rank=N``, writes the top-level ``meta.json`` and renames the whole
folder into place. Peak memory is the workers times the largest single rank, never the job.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from traceinsight import __version__
from traceinsight.diagnostics import DiagnosticLog
from traceinsight.errors import InputError, TraceFormatError
from traceinsight.ingest import cache, readers
from traceinsight.ingest.source import skipped_hint
from traceinsight.store import partitions, schema
from traceinsight.store.core import (
    META_FILE,
    STORE_FORMAT,
    TraceStore,
    commit_dir,
)
from traceinsight.util.distributed import current
from traceinsight.util.pathlabel import distinct_labels
from traceinsight.util.progress import Progress

if TYPE_CHECKING:
    from traceinsight.ingest import _Job

__all__ = ["applies", "read_and_write"]

#: bytes of a file's head read to tell its reader before the fan-out
_HEAD = 65536


def applies(files: list[Path]) -> bool:
    """Whether the per-rank ingest reads these files: several trace files, none of them a
    memory input (snapshots join a trace's rank, which the single-process ingest does)."""
    if len(files) < 2:
        return False
    return not any(_is_memory_input(p) for p in files)


def _is_memory_input(p: Path) -> bool:
    """Whether the reader that claims ``p`` reads a memory input."""
    return readers.is_memory_input(p)


# --- one task: one file ----------------------------------------------------------------------


@dataclass(frozen=True)
class RankTask:
    """Read file ``path`` into a single-rank store under ``folder``."""

    index: int
    path: str
    options: dict[str, Any]
    folder: str
    in_folder: bool
    #: runs in a worker process: parse in it alone (the ranks are the parallelism)
    in_worker: bool = False


@dataclass
class RankDone:
    """What a task hands back: small, whatever the file's size."""

    index: int
    path: str
    digest: str = ""
    #: the store folder the task wrote and its ``meta.json`` (None: nothing written)
    folder: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    #: the file could not be read: why, as a rank-missing or a file-skipped diagnostic
    missing: str | None = None
    skipped: str | None = None
    #: any other error, raised by the caller
    error: BaseException | None = None


def read_rank(task: RankTask) -> RankDone:
    """Ingest one file as its own store (runs in a worker): the single-file ingest, so a
    partition is exactly what ``traceinsight ingest FILE`` writes.

    Errors a folder's ingest turns into diagnostics come back as data; others are raised by
    the caller."""
    from traceinsight.ingest import _looks_like_trace, ingest

    if task.in_worker:
        os.environ["TRACEINSIGHT_WORKERS"] = "1"
    p = Path(task.path)
    done = RankDone(task.index, task.path)
    folder = Path(task.folder) / f"part-{task.index}"
    try:
        ingest([p], folder, salvage=bool(task.options.get("salvage")), quiet=True, use_cache=False)
    except TraceFormatError as e:
        if not task.in_folder:
            done.error = e
        elif _looks_like_trace(_head(p)):
            done.missing = e.message
        else:
            done.skipped = e.message
        return done
    except InputError as e:
        if task.in_folder:
            done.missing = e.message
        else:
            done.error = e
        return done
    done.folder = folder.name
    done.meta = json.loads((folder / META_FILE).read_text(encoding="utf-8"))
    done.digest = next((s.get("sha256") or "" for s in done.meta.get("sources", [])), "")
    return done


def _head(p: Path) -> bytes:
    try:
        with open(p, "rb") as f:
            return f.read(_HEAD)
    except OSError:
        return b""


# --- the fan-out -----------------------------------------------------------------------------


def read_and_write(job: _Job, prog: Progress) -> TraceStore:
    """Ingest ``job``'s files one task per file into a rank-partitioned store."""
    from traceinsight.ingest import _rank_missing

    inputs = job.inputs
    target_dir = job.out.parent if job.out is not None else cache.store_path("x").parent
    target_dir.mkdir(parents=True, exist_ok=True)
    if job.out is None:
        cache.clean()
    tmp = Path(tempfile.mkdtemp(prefix=f".ranks.tmp-{os.getpid()}-", dir=target_dir))
    try:
        in_folder = inputs.from_directory is not None
        runner = current()
        worker = bool(runner.scheduler) or runner.workers > 1
        tasks = [
            RankTask(i, str(p), dict(job.options), str(tmp), in_folder, worker)
            for i, p in enumerate(inputs.files)
        ]
        n = len(tasks)
        prog.update(f"0/{n} ranks", 0.0)

        def tick(k: int, total: int) -> None:
            prog.update(f"{k}/{total} ranks", k / total)

        results = runner.map(read_rank, tasks, tick)
        skipped = DiagnosticLog()
        for name, why in inputs.unreadable:
            _rank_missing(skipped, name, why)
        for d in results:
            if d.error is not None:
                raise d.error
            if d.digest:
                job.digests[d.index] = d.digest
            name = Path(d.path).name
            if d.missing is not None:
                _rank_missing(skipped, name, d.missing)
            elif d.skipped is not None:
                skipped.add(
                    "file-skipped", f"{name} skipped: {d.skipped}", severity="info", source=name
                )
        parts = [d for d in results if d.folder is not None]
        if not parts:
            formats = " or ".join(r.title for r in readers.READERS)
            raise TraceFormatError(
                f"no {formats} trace found among the files",
                path=inputs.display,
                hint=skipped_hint([x.message for x in skipped.items]),
            )
        _check_ranks(parts, inputs.display)
        key = job.key
        target = job.out if job.out is not None else cache.store_path(key)
        from traceinsight.ingest import cached_twin

        same = cached_twin(job, target) if not job.force and job.use_cache else None
        if same is not None:
            return same
        prog.update("write", 1.0)
        _finish(tmp, parts, skipped, key, job.options)
        try:
            commit_dir(tmp, target)
        except OSError as e:
            same = cached_twin(job, target)  # another run of the same trace wrote it first
            if same is not None:
                return same
            where = "the cache folder" if job.out is None else "the store folder"
            raise InputError(
                f"cannot write the store: {e.strerror or e}",
                path=target,
                hint=f"check that {where} is writable (TRACEINSIGHT_CACHE_DIR "
                "sets the cache's place)",
            ) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if job.out is None:
        from traceinsight.ingest.cache_admin import evict

        evict(target)  # the cache's size bound: least recently used entries go
    store = TraceStore.open(target)
    gpu = store.row_counts.get("gpu_activities", 0)
    prog.done(f"{gpu:,} GPU activities, {len(store.ranks)} rank(s) in {runner.label} -> {target}")
    return store


def _ranks_of(d: RankDone) -> list[dict[str, Any]]:
    return list(d.meta.get("ranks") or [])


def _check_ranks(parts: list[RankDone], display: str) -> None:
    """Every file's rank known, no rank claimed twice, one format (as the one-process ingest
    checks them). A single trace left (the folder's other trace-named files skipped: a stray
    non-Nsight ``.sqlite``) needs no rank, as a single file does not."""
    names = distinct_labels([Path(d.path) for d in parts])  # same-named files of two folders
    unknown = [
        name
        for d, name in zip(parts, names)
        for r in _ranks_of(d)
        if r.get("rank_source") == "default"
    ]
    total = sum(len(_ranks_of(d)) for d in parts)
    if unknown and total > 1:
        listing = ", ".join(unknown[:8]) + (" ..." if len(unknown) > 8 else "")
        raise InputError(
            f"cannot tell the rank of {len(unknown)} of {total} files: {listing}",
            path=display,
            hint="the traces have no distributedInfo; name the files with their rank "
            "(e.g. rank-0.json.gz, rank-1.json.gz)",
        )
    seen: dict[int, str] = {}
    formats: dict[str, str] = {}
    for d, name in zip(parts, names):
        for r in _ranks_of(d):
            if r["rank"] in seen:
                raise InputError(
                    f"two files claim rank {r['rank']}: {seen[r['rank']]} and {name}",
                    path=display,
                    hint="keep one trace per rank in the folder (or pass the files of one run)",
                )
            seen[r["rank"]] = name
            formats.setdefault(str(r.get("format")), name)
    if len(formats) > 1:
        listing = ", ".join(f"{name} ({fmt})" for fmt, name in formats.items())
        raise InputError(
            f"the files mix trace formats: {listing}",
            path=display,
            hint="diagnose each format on its own (one folder or file list per "
            "format); compare can put the two results side by side",
        )


def _finish(
    tmp: Path, parts: list[RankDone], skipped: DiagnosticLog, key: str, options: dict[str, Any]
) -> None:
    """Name the rank folders (a file of several ranks: by its first) and write the top-level
    ``meta.json``: the ranks' metadata in rank order, their row counts summed."""
    parts = sorted(parts, key=lambda d: min(r["rank"] for r in _ranks_of(d)))
    totals = {name: 0 for name in schema.TABLES}
    sources: list[Any] = []
    ranks: list[Any] = []
    counts: dict[str, Any] = {}
    diags = skipped.to_list()
    names = []
    for d in parts:
        name = partitions.folder_name(min(r["rank"] for r in _ranks_of(d)))
        os.replace(tmp / str(d.folder), tmp / name)
        names.append(name)
        sources += d.meta.get("sources", [])
        ranks += _ranks_of(d)
        counts.update(d.meta.get("event_counts", {}))
        diags += d.meta.get("diagnostics", [])
        for t, n in (d.meta.get("tables") or {}).items():
            totals[t] = totals.get(t, 0) + int(n)
    full = {
        "format": STORE_FORMAT,
        "schema_version": schema.SCHEMA_VERSION,
        "tool_version": __version__,
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "content_key": key,
        "ingest_options": options,
        "sources": sources,
        "ranks": ranks,
        "event_counts": counts,
        "diagnostics": diags,
        "tables": totals,
        "partitions": names,
    }
    (tmp / META_FILE).write_text(json.dumps(full, indent=1, default=str), encoding="utf-8")
