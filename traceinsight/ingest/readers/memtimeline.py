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
from collections.abc import Callable

import msgspec
import numpy as np
import pyarrow as pa

from traceinsight.errors import EmptyTraceError, TraceFormatError
from traceinsight.ingest.readers.base import RankMeta, RankRead, Reader
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
CHUNK_BYTES = 4 << 20


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
    """The ``memory_categories`` rows of one export, decoded :data:`CHUNK_BYTES` of text at a
    time into int64 columns (a Python object per row would take several times the file)."""
    if background:
        background()
    t, act, size, cat = _decode(data, source, progress)
    n = len(t)
    if not n:
        raise EmptyTraceError(
            "memory-timeline export holds no rows",
            path=source,
            hint="record with profile_memory, record_shapes and with_stack",
        )
    rank = rank_hint if rank_hint is not None else 0
    known = t >= 0
    cols = {
        "rank": pa.array(np.full(n, rank, np.int32)),
        "device": pa.nulls(n, pa.int32()),
        "seq": pa.array(np.arange(n, dtype=np.int64)),
        "ts_ns": pa.array(t, mask=~known),
        "action": _dict(act - 1, list(ACTIONS.values())),
        "delta_bytes": pa.array(size),
        "category": _dict(cat, list(CATEGORIES)),
    }
    del act, size, cat
    table = schema.conform("memory_categories", cols)
    tables = {name: schema.empty_table(name) for name in schema.TABLES}
    tables["memory_categories"] = table
    any_known = bool(known.any())
    meta = RankMeta(
        rank=rank,
        rank_source="file name" if rank_hint is not None else "default",
        source=source,
        format=FORMAT,
        time_origin="epoch" if any_known else "trace",
        span_ns=[int(t[known].min()), int(t[known].max())] if any_known else None,
    )
    if progress:
        progress("parse", 1.0)
    return RankRead(tables, meta, {"memory_categories": n})


def _dict(codes: np.ndarray, names: list[str]) -> pa.DictionaryArray:
    return pa.DictionaryArray.from_arrays(pa.array(codes.astype(np.int32)), pa.array(names))


def _decode(
    data: bytes, source: str, progress: Callable[[str, float], None] | None
) -> list[np.ndarray]:
    """The columns of the export (time, action, bytes as int64; action and category as int8,
    checked): the list's text cut after a row's ``]`` every :data:`CHUNK_BYTES`, each piece
    decoded on its own."""
    view = memoryview(data)
    a = data.find(b"[")
    z = len(data.rstrip(b" \t\r\n\0")) - 1
    if a < 0 or z <= a or data[z : z + 1] != b"]":
        raise _bad(source, "truncated" if a >= 0 else "no JSON list")
    parts: list[list[np.ndarray]] = [[], [], [], []]
    pos = a + 1
    while pos < z:
        cut = data.find(b"]", min(pos + CHUNK_BYTES, z), z) if pos + CHUNK_BYTES < z else -1
        end = z if cut < 0 else cut + 1
        piece = bytes(view[pos:end]).lstrip(b" \t\r\n,")
        pos = end
        if not piece.strip():
            continue
        try:
            got = _ROWS.decode(b"[" + piece + b"]")
        except msgspec.DecodeError as e:
            raise _bad(source, str(e)) from None
        rows = np.array(got, dtype=np.int64).reshape(-1, 4)
        del got
        act, cat = rows[:, 1], rows[:, 3]
        bad = np.flatnonzero(
            (act < 1) | (act > len(ACTIONS)) | (cat < 0) | (cat >= len(CATEGORIES))
        )
        if len(bad):
            raise TraceFormatError(
                f"is not a memory-timeline export (a row {rows[bad[0]].tolist()} has an "
                "unknown action or category)",
                path=source,
                hint="expected actions 1-4 and categories 0-7",
            )
        for i, col in enumerate(parts):
            col.append(rows[:, i].astype(np.int8 if i in (1, 3) else np.int64))
        del rows
        if progress:
            progress("parse", min(0.99, pos / len(data)))
    view.release()
    kinds = (np.int64, np.int8, np.int64, np.int8)
    return [np.concatenate(c) if c else np.zeros(0, k) for c, k in zip(parts, kinds, strict=True)]


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
