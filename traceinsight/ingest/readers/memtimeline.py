"""Reader for the torch.profiler memory-timeline raw export
(``prof.export_memory_timeline("x.raw.json.gz", device=...)``).

A JSON list of ``[t_ns, action, num_bytes, category]`` rows (PyTorch
``torch/profiler/_memory_profiler.py``): ``t_ns`` is -1 for memory that existed before the
profiling window; actions 1 PREEXISTING, 2 CREATE, 3 INCREMENT_VERSION (a tensor changes
category: a row removing its bytes from the old category, then one adding them to the new),
4 DESTROY; categories by index. Recognised by content (a JSON list whose first item is a list of
numbers); a memory input like a snapshot: its rows join a trace's rank. It fills
``memory_categories``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa

from traceinsight.errors import EmptyTraceError, TraceFormatError
from traceinsight.ingest.readers.base import RankMeta, RankRead, RankStreamed, Reader
from traceinsight.ingest.source import json_start
from traceinsight.store import schema

FORMAT = "memory-timeline"
ACTIONS = {1: "preexisting", 2: "create", 3: "increment_version", 4: "destroy"}
CATEGORIES = (
    "parameter",
    "optimizer_state",
    "input",
    "temporary",
    "activation",
    "gradient",
    "autograd_detail",
    "unknown",
)
_HEAD = re.compile(rb"^\[\s*\[\s*-?\d")
_ROWS = msgspec.json.Decoder(list[tuple[int, int, int, int]])
#: bytes of the export's text decoded at a time (its rows as Python objects are ~5x that)
CHUNK_BYTES = 1 << 20
#: the most text a row may take (a real row is under 100 bytes): text without a row end
#: beyond a chunk and this is not an export
ROW_TEXT_MAX = 1 << 20


def sniff(head: bytes) -> bool:
    """A JSON list whose first item is a list that starts with a number."""
    start = head.lstrip(b" \t\r\n\xef\xbb\xbf")
    return json_start(head) == b"[" and bool(_HEAD.match(start))


def read_timeline(
    data: bytes,
    *,
    source: str,
    rank_hint: int | None = None,
    salvage: bool = False,
    progress: Callable[[str, float], None] | None = None,
    background: Callable[[], None] | None = None,
) -> RankRead:
    """The ``memory_categories`` rows of one export held in memory (``data``), decoded
    :data:`CHUNK_BYTES` of text at a time into int64 columns (a Python object per row would
    take several times the file)."""
    if background:
        background()
    view = memoryview(data)
    pieces = (view[i : i + CHUNK_BYTES] for i in range(0, len(view), CHUNK_BYTES))
    tables: list[pa.Table] = []
    meta, n = _read(pieces, len(data), source, rank_hint, tables.append, progress)
    view.release()
    out = {name: schema.empty_table(name) for name in schema.TABLES}
    out["memory_categories"] = pa.concat_tables(tables).combine_chunks()
    return RankRead(out, meta, {"memory_categories": n})


def stream_timeline(
    path: Path,
    sink: Any,
    *,
    source: str,
    rank_hint: int | None = None,
    progress: Callable[[str, float], None] | None = None,
    background: Callable[[], None] | None = None,
    salvage: bool = False,
) -> RankStreamed:
    """The ``memory_categories`` rows of the plain export at ``path``, read
    :data:`CHUNK_BYTES` at a time (never the whole file) and handed to ``sink`` as they are
    decoded: memory holds a chunk of text and the sink's pending rows, whatever the size."""
    if background:
        background()
    size = path.stat().st_size
    with open(path, "rb") as f:
        pieces = iter(lambda: f.read(CHUNK_BYTES), b"")
        meta, n = _read(
            pieces, size, source, rank_hint, lambda t: sink.add("memory_categories", t), progress
        )
    return RankStreamed(meta, {"memory_categories": n})


def _read(
    pieces: Iterable[bytes | memoryview],
    size: int,
    source: str,
    rank_hint: int | None,
    put: Callable[[pa.Table], None],
    progress: Callable[[str, float], None] | None,
) -> tuple[RankMeta, int]:
    """The export's text arriving as ``pieces`` (``size`` bytes in all), its rows handed to
    ``put`` as ``memory_categories`` tables (one per decoded chunk); its rank's metadata and
    row count."""
    rank = rank_hint if rank_hint is not None else 0
    n = 0
    lo: int | None = None
    hi: int | None = None
    for t, act, nbytes, cat, done in _decode(pieces, source):
        k = len(t)
        known = t >= 0
        if known.any():
            a, b = int(t[known].min()), int(t[known].max())
            lo, hi = (a, b) if lo is None or hi is None else (min(lo, a), max(hi, b))
        cols = {
            "rank": pa.array(np.full(k, rank, np.int32)),
            "device": pa.nulls(k, pa.int32()),
            "seq": pa.array(np.arange(n, n + k, dtype=np.int64)),
            "ts_ns": pa.array(t, mask=~known),
            "action": _dict(act - 1, list(ACTIONS.values())),
            "delta_bytes": pa.array(nbytes),
            "category": _dict(cat, list(CATEGORIES)),
        }
        del t, act, nbytes, cat, known
        put(schema.conform("memory_categories", cols))
        del cols
        n += k
        if progress:
            progress("parse", min(0.99, done / size) if size else 0.99)
    if not n:
        raise EmptyTraceError(
            "memory-timeline export holds no rows",
            path=source,
            hint="record with profile_memory, record_shapes and with_stack",
        )
    meta = RankMeta(
        rank=rank,
        rank_source="file name" if rank_hint is not None else "default",
        source=source,
        format=FORMAT,
        time_origin="epoch" if lo is not None else "trace",
        span_ns=[lo, hi] if lo is not None and hi is not None else None,
    )
    if progress:
        progress("parse", 1.0)
    return meta, n


def _dict(codes: np.ndarray, names: list[str]) -> pa.DictionaryArray:
    return pa.DictionaryArray.from_arrays(pa.array(codes.astype(np.int32)), pa.array(names))


_BLANK = b" \t\r\n\0"
#: blanks and commas before a row
_LEAD = re.compile(rb"[ \t\r\n,]*")


def _decode(
    pieces: Iterable[bytes | memoryview], source: str
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]]:
    """The columns of the export's rows, one batch per chunk of text (time, action, bytes as
    int64; action and category as int8, checked), with the bytes read so far.

    Each chunk is appended to the text carried from the one before, in one buffer that starts
    with ``[``; it is cut after the last row end (``]``) but one (the last may close the list),
    closed with ``]`` and decoded in place; what follows the cut is carried on. Memory holds
    the buffer and its rows, never the file."""
    done = 0
    carry = b""
    started = False
    for raw in pieces:
        done += len(raw)
        doc = bytearray(b"[")
        doc += carry
        doc += raw
        del raw
        if not started:
            a = doc.find(b"[", 1)
            if a < 0:
                if doc[1:].strip(_BLANK + b"\xef\xbb\xbf"):
                    raise _bad(source, "no JSON list")
                carry = b""
                continue
            del doc[1 : _LEAD.match(doc, a + 1).end()]  # type: ignore[union-attr]
            started = True
        last = doc.rfind(b"]")
        cut = doc.rfind(b"]", 0, last) if last > 0 else -1
        if cut < 0:
            if len(doc) > CHUNK_BYTES + ROW_TEXT_MAX:
                raise _bad(source, f"no row ends within {len(doc):,} bytes")
            carry = bytes(doc[1:])
            continue
        carry = bytes(doc[_LEAD.match(doc, cut + 1).end() :])  # type: ignore[union-attr]
        del doc[cut + 1 :]
        doc += b"]"
        rows = _rows(doc, source)
        del doc
        yield (*rows, done)
    if not started:
        raise _bad(source, "no JSON list")
    end = carry.rstrip(_BLANK)
    if not end.endswith(b"]"):
        raise _bad(source, "truncated")
    if end[:-1].strip(b" \t\r\n,"):
        yield (*_rows(b"[" + end, source), done)


def _rows(
    doc: bytes | bytearray, source: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The rows of ``doc`` (a JSON list of rows), checked."""
    try:
        got = _ROWS.decode(doc)
    except msgspec.DecodeError as e:
        raise _bad(source, str(e)) from None
    rows = np.array(got, dtype=np.int64).reshape(-1, 4)
    del got
    act, cat = rows[:, 1], rows[:, 3]
    bad = np.flatnonzero((act < 1) | (act > len(ACTIONS)) | (cat < 0) | (cat >= len(CATEGORIES)))
    if len(bad):
        raise TraceFormatError(
            f"is not a memory-timeline export (a row {rows[bad[0]].tolist()} has an "
            "unknown action or category)",
            path=source,
            hint="expected actions 1-4 and categories 0-7",
        )
    return (
        np.ascontiguousarray(rows[:, 0]),
        rows[:, 1].astype(np.int8),
        np.ascontiguousarray(rows[:, 2]),
        rows[:, 3].astype(np.int8),
    )


def _bad(source: str, text: str) -> TraceFormatError:
    what = (
        "is truncated (the JSON ends early)"
        if "truncated" in text.lower()
        else f"is not a memory-timeline export ({text[:120]})"
    )
    return TraceFormatError(
        what,
        path=source,
        hint="expected prof.export_memory_timeline(...) raw output: a "
        "JSON list of [time_ns, action, bytes, category]",
    )


READER = Reader(
    name=FORMAT,
    title="Memory timeline export",
    doc="torch.profiler `export_memory_timeline` raw output (`.raw.json.gz`): a JSON list of "
    "`[time_ns, action, bytes, category]`. A memory input: with a trace its rows join the "
    "trace's rank. Only `memory_categories` is filled.",
    suffixes=(),
    sniff=sniff,
    looks_for="a JSON list of [time_ns, action, bytes, category] rows",
    read=read_timeline,
    stream=stream_timeline,
    memory=True,
    column_sources={
        "memory_categories": {
            "rank": "the trace's rank (with a trace), else the rank in the file name, else 0",
            "device": "not recorded (the export is of one device, chosen when it was written)",
            "seq": "the row's index",
            "ts_ns": "`t_ns` (-1 -> null)",
            "action": "1 preexisting, 2 create, 3 increment_version, 4 destroy",
            "delta_bytes": "`num_bytes`",
            "category": "0 parameter, 1 optimizer_state, 2 input, 3 temporary, 4 activation, "
            "5 gradient, 6 autograd_detail, 7 unknown",
        }
    },
)
