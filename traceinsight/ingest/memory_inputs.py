"""Memory inputs beside traces: an allocator snapshot or a memory-timeline export joins the
rank of the trace it was recorded with.

``diagnose trace.json.gz --memory-snapshot snap.pickle`` ingests both files into one store.
The memory file is not a rank of its own: its rows take the rank of its trace (the rank in its
file name, else the only rank of the run), and the trace's rank metadata lists it under
``memory.inputs``. Without traces, memory files are the run: a snapshot and a timeline export
of the same rank are joined the same way. A memory file whose wall-clock times lie far from
its trace's (another run, another year) is not joined: a diagnostic says why. A streamed memory
input (a timeline export: its table already on disk) joins a streamed trace's rank on disk.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa

from traceinsight.errors import InputError, TraceFormatError
from traceinsight.ingest import readers
from traceinsight.ingest.readers.base import RankRead
from traceinsight.ingest.source import rank_from_filename
from traceinsight.store.core import read_meta


class _ReadLike(Protocol):
    path: Path
    digest: str
    result: RankRead


def with_memory(paths: Sequence[str | Path], memory: Sequence[str | Path]) -> list[Path]:
    """The inputs of ``diagnose PATHS --memory-snapshot MEMORY``: the trace files (a folder's
    files listed) and the memory files, each checked to be a memory input by its content."""
    if not memory:
        return [Path(p) for p in paths]
    out: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir() and read_meta(p) is not None:
            raise InputError(
                "a memory snapshot joins traces, not a store",
                path=p,
                hint="pass the trace files with --memory-snapshot",
            )
        if p.is_dir():  # its trace files, as a folder input lists them
            sfx = readers.suffixes()
            out.extend(
                sorted(q for q in p.iterdir() if q.is_file() and q.name.lower().endswith(sfx))
            )
        else:
            out.append(p)
    for raw in memory:
        p = Path(raw)
        _check_memory_file(p)
        out.append(p)
    return out


def _check_memory_file(p: Path) -> None:
    """``p`` is read by a memory reader (:func:`readers.reader_for`)."""
    try:
        with open(p, "rb"):
            pass
    except FileNotFoundError:
        raise InputError("no such file", path=p, hint="check the --memory-snapshot path") from None
    except OSError as e:
        raise InputError(f"cannot read: {e.strerror}", path=p, hint="check the path") from None
    try:
        r = readers.reader_for(p)
    except TraceFormatError:
        raise InputError(
            "is not a memory snapshot or memory-timeline export",
            path=p,
            hint="--memory-snapshot takes torch.cuda.memory._dump_snapshot() output",
        ) from None
    if not r.memory:
        raise InputError(
            f"is a {r.title} file, not a memory snapshot",
            path=p,
            hint="--memory-snapshot takes torch.cuda.memory._dump_snapshot() "
            "output or a memory-timeline export; pass traces as inputs",
        )


def is_memory(read: _ReadLike) -> bool:
    """Whether ``read`` came from a memory reader (snapshot, timeline)."""
    fmt = read.result.meta.format
    return any(r.memory and r.name == fmt for r in readers.READERS)


def join(reads: list[Any], display: str) -> list[Any]:
    """``reads`` with each memory read joined to its rank's read (see the module)."""
    mem = [r for r in reads if is_memory(r)]
    if not mem:
        return reads
    ranks = [r for r in reads if not is_memory(r)]
    with_trace = bool(ranks)  #: a trace's clock to check the memory files' times against
    if not ranks:  # a memory-only run: the first snapshot per rank carries the others
        ranks, mem = _primaries(mem)
    by_rank = {r.result.meta.rank: r for r in ranks}
    taken: dict[tuple[int, str], str] = {}
    for m in mem:
        hint = rank_from_filename(m.path.name)
        if hint is not None and hint in by_rank:
            target = by_rank[hint]
        elif len(by_rank) == 1:
            target = next(iter(by_rank.values()))
        else:
            raise InputError(
                f"cannot tell which rank {m.path.name} belongs to",
                path=display,
                hint="name the memory file with its rank (e.g. snapshot_rank-3.pickle)",
            )
        key = (target.result.meta.rank, m.result.meta.format)
        if key in taken:
            raise InputError(
                f"two {m.result.meta.format} files for rank {key[0]}: "
                f"{taken[key]} and {m.path.name}",
                path=display,
                hint="give one memory snapshot (and one timeline) per rank",
            )
        why = implausible_times(target.result.meta, m.result.meta) if with_trace else None
        if why:
            target.result.meta.diagnostics.add(
                "memory-input-not-joined",
                f"{m.path.name} was not joined to rank {key[0]}: {why}",
                source=m.path.name,
                hint="pass the memory file recorded with this trace (the same run and "
                "profiler session)",
            )
            continue
        taken[key] = m.path.name
        _join_one(target, m)
    return ranks


#: times at or above this many ns are wall-clock (epoch) times, after 2001-09-09; below it a
#: clock of its own (a trace relative to its start), which cannot be compared
EPOCH_MIN_NS = 10**18
#: memory recorded with a trace lies within this of it (a snapshot's history may start before
#: the trace), or within the two spans' own length when that is longer
NEAR_NS = 3600 * 10**9


def implausible_times(trace: Any, mem: Any) -> str | None:
    """Why the memory input ``mem`` (a rank's meta) cannot have been recorded with the trace
    ``trace``: both on the wall clock and farther apart than :data:`NEAR_NS` (or the spans'
    length); None when they are close or cannot be compared."""
    a, b = trace.span_ns, mem.span_ns
    if not a or not b or min(a[0], b[0]) < EPOCH_MIN_NS:
        return None
    gap = max(b[0] - a[1], a[0] - b[1], 0)
    if gap <= max(NEAR_NS, (a[1] - a[0]) + (b[1] - b[0])):
        return None
    return (
        f"its times ({_day(b[0])}) are {_far(gap)} from the trace's ({_day(a[0])}), so it was "
        "recorded in another run"
    )


def _day(ns: int) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(ns / 1e9, dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def _far(ns: int) -> str:
    days = ns / 86_400e9
    if days >= 2:
        return f"{days:,.0f} days"
    return f"{ns / 3600e9:,.1f} hours"


def _primaries(mem: list[Any]) -> tuple[list[Any], list[Any]]:
    """Without traces: one read per rank carries the rank (snapshots first), others join it."""
    order = sorted(mem, key=lambda r: r.result.meta.format != "cuda-memory-snapshot")
    first: dict[int, Any] = {}
    rest = []
    for r in order:
        rank = r.result.meta.rank
        if rank in first or (r.result.meta.rank_source == "default" and first):
            rest.append(r)
        else:
            first[rank] = r
    for r in order:  # a file that carries a rank records its own origin too
        if r in first.values():
            r.result.meta.memory.setdefault("inputs", []).append(_origin(r))
    return list(first.values()), rest


def _origin(m: Any) -> dict[str, Any]:
    meta = m.result.meta
    return {
        "name": m.path.name,
        "format": meta.format,
        "sha256": m.digest,
        "bytes": _size(m.path),
        "layout": meta.memory.get("snapshot_layout"),
        "span_ns": meta.span_ns,
    }


def _join_one(target: Any, m: Any) -> None:
    t, src = target.result, m.result
    rank = t.meta.rank
    for name, table in [*_stored(src, t), *src.tables.items()]:
        if not table.num_rows:
            continue
        table = table.set_column(
            table.schema.get_field_index("rank"),
            "rank",
            pa.array([rank] * table.num_rows, pa.int32()),
        )
        have = t.tables.get(name)
        t.tables[name] = (
            pa.concat_tables([have, table], promote_options="default")
            if have is not None and have.num_rows
            else table
        )
    mem = t.meta.memory
    for k, v in src.meta.memory.items():
        if k != "inputs":
            mem.setdefault(k, v)
    mem.setdefault("inputs", []).append(_origin(m))
    for name, n in src.counts.items():
        t.counts[name] = t.counts.get(name, 0) + n
    t.meta.diagnostics.extend(src.meta.diagnostics)


def _stored(src: RankRead, target: RankRead) -> list[tuple[str, pa.Table]]:
    """The tables a streaming memory reader wrote (a timeline export), joined to ``target``:
    when ``target``'s own rows of that table are stored and empty (a streamed trace), the file
    is rewritten with the target's rank a row group at a time and stored in its place (memory
    holds a row group); otherwise read back whole, to join as tables are."""
    import pyarrow.parquet as pq

    out = []
    for name, stored in src.stored.items():
        if not stored.rows:
            continue
        mine = target.stored.get(name)
        if mine is not None and not mine.rows:
            target.stored[name] = _with_rank(name, stored, target.meta.rank)
        else:
            out.append((name, pq.read_table(stored.path)))
    src.stored = {}
    return out


def _with_rank(name: str, stored: Any, rank: int) -> Any:
    """The parquet file of ``stored`` rewritten beside it with every row's rank ``rank``."""
    import numpy as np
    import pyarrow.parquet as pq

    from traceinsight.ingest.sink import StoredTable
    from traceinsight.ingest.sink import _write_options as write_options
    from traceinsight.store import schema

    sch = schema.TABLES[name].arrow_schema
    path = stored.path.with_name(f"{stored.path.stem}.rank{rank}.parquet")
    f = pq.ParquetFile(stored.path)
    with pq.ParquetWriter(path, sch, **write_options(sch)) as w:
        for i in range(f.num_row_groups):
            g = f.read_row_group(i)
            k = sch.get_field_index("rank")
            g = g.set_column(k, sch.field(k), pa.array(np.full(g.num_rows, rank, np.int32)))
            w.write_table(g, row_group_size=max(1, g.num_rows))
            del g
    f.close()
    stored.path.unlink()
    return StoredTable(path, stored.rows)


def _size(p: Path) -> int | None:
    try:
        return p.stat().st_size
    except OSError:
        return None
