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
    """The ``memory_categories`` rows of one export."""
    if background:
        background()
    try:
        rows = _ROWS.decode(data)
    except msgspec.DecodeError as e:
        text = str(e)
        what = (
            "is truncated (the JSON ends early)"
            if "truncated" in text.lower()
            else f"is not a memory-timeline export ({text[:120]})"
        )
        raise TraceFormatError(
            what,
            path=source,
            hint="expected prof.export_memory_timeline(...) raw output: a "
            "JSON list of [time_ns, action, bytes, category]",
        ) from None
    if not rows:
        raise EmptyTraceError(
            "memory-timeline export holds no rows",
            path=source,
            hint="record with profile_memory, record_shapes and with_stack",
        )
    rank = rank_hint if rank_hint is not None else 0
    bad = [r for r in rows if r[1] not in ACTIONS or not 0 <= r[3] < len(CATEGORIES)]
    if bad:
        raise TraceFormatError(
            f"is not a memory-timeline export (a row {list(bad[0])} has an "
            "unknown action or category)",
            path=source,
            hint="expected actions 1-4 and categories 0-7",
        )
    n = len(rows)
    ts = [r[0] if r[0] >= 0 else None for r in rows]
    cols = {
        "rank": pa.array([rank] * n, pa.int32()),
        "device": pa.nulls(n, pa.int32()),
        "seq": pa.array(range(n), pa.int64()),
        "ts_ns": pa.array(ts, pa.int64()),
        "action": pa.array([ACTIONS[r[1]] for r in rows]),
        "delta_bytes": pa.array([r[2] for r in rows], pa.int64()),
        "category": pa.array([CATEGORIES[r[3]] for r in rows]),
    }
    table = schema.conform("memory_categories", cols)
    tables = {name: schema.empty_table(name) for name in schema.TABLES}
    tables["memory_categories"] = table
    known = [t for t in ts if t is not None]
    meta = RankMeta(
        rank=rank,
        rank_source="file name" if rank_hint is not None else "default",
        source=source,
        format=FORMAT,
        time_origin="epoch" if known else "trace",
        span_ns=[min(known), max(known)] if known else None,
    )
    if progress:
        progress("parse", 1.0)
    return RankRead(tables, meta, {"memory_categories": n})


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
