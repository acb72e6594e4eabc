"""Reading a Kineto file from disk in bounded chunks, straight into parquet row groups.

The whole file is never in memory. Its header (the keys before and after the event list;
``baseTimeNanoseconds`` comes after the events) is read from the file's two ends; the event
list is cut into chunks of whole events by text (the first ``},{`` after each
:data:`~.decode.CHUNK_BYTES` mark, the same cut as the in-memory reader's). Each chunk is read
with ``pread``, decoded, turned into table rows and handed to a :class:`~..sink.TableSink`,
which writes row groups as they fill. With two cores a forked helper claims chunks too
(``parallel.in_order``); the rows reach the sink in chunk order either way, so the store does
not depend on which process read what.

A cut inside a string or a nested value makes its chunk fail to decode (the text before it is
then unbalanced); that chunk is read again up to a later cut. Anything else this path does not
handle (a damaged file, a layout without a findable event list, timestamps that need the exact
text path after rows were written) raises :class:`StreamFallback` or ``NeedExactText`` and the
caller reads the file another way; a rank's sink is discarded first, so no half-read rows
stay.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from traceinsight import settings
from traceinsight.diagnostics import DiagnosticLog
from traceinsight.errors import TraceFormatError
from traceinsight.ingest import parallel
from traceinsight.ingest.columns import build_tables
from traceinsight.ingest.readers.base import RankMeta
from traceinsight.ingest.readers.kineto.decode import (
    _EVENT_SEP,
    _header,
    _state_for,
    find_list_end,
    finish_meta,
    merge_summaries,
    summarize,
)
from traceinsight.ingest.readers.kineto.events import (
    Event,
    OpEvent,
    State,
    looks_ops_only,
    ops_only,
)
from traceinsight.ingest.readers.kineto.salvage import nul_tail, truncated_layout
from traceinsight.ingest.readers.kineto.tables import process_batch
from traceinsight.ingest.sink import TableSink
from traceinsight.ingest.source import json_start

ProgressFn = Callable[[str, float], None]

#: bytes of JSON per chunk: a chunk's text, events and rows are in memory at once (in each
#: process, and a few chunks' rows wait to be written); smaller chunks cost a little time each
CHUNK_BYTES = settings.get("TRACEINSIGHT_STREAM_CHUNK_BYTES")
#: most bytes read from the file's start to find the event list
HEAD_MAX = 64 << 20
_STEP = 1 << 20
_RETRIES = 3  #: later cuts tried when a chunk does not decode


class DuplicateEvents(Exception):
    """The document has a second ``traceEvents`` key: which list is the trace is ambiguous."""


def duplicate_events_error(source: str) -> TraceFormatError:
    return TraceFormatError(
        "has two 'traceEvents' lists (a JSON object with a repeated key): which one is the "
        "trace is ambiguous",
        path=source,
        hint="keep one traceEvents list (merging two captures by text makes such a file)",
    )


class StreamFallback(Exception):
    """This file must be read whole (damaged, or laid out in a way the chunk cutter refuses)."""

    stream_fallback = True  #: what the ingest looks for (``readers.StreamFn``)


class _Layout:
    """Where the event list of a file lies, and the header around it."""

    def __init__(self, header: dict[str, Any], layout: str, first: int, last: int) -> None:
        self.header = header
        self.layout = layout
        self.first = first  #: offset of the first event's '{' (-1: no events)
        self.last = last  #: offset just past the last event's '}'


def _pread(fd: int, n: int, at: int) -> bytes:
    out = os.pread(fd, n, at)
    while len(out) < n:  # pread may return less than asked on some file systems
        more = os.pread(fd, n - len(out), at + len(out))
        if not more:
            break
        out += more
    return out


def find_layout(fd: int, size: int) -> _Layout:
    """The header and the event list's byte range, from the file's ends."""
    head = _pread(fd, min(size, _STEP), 0)
    first = json_start(head[:4096])
    if first == b"[":
        a = head.find(b"[")
        tail_at = max(0, size - _STEP)
        tail = _pread(fd, size - tail_at, tail_at)
        end = tail.rfind(b"]")
        if end < 0 or tail[end + 1 :].strip() != b"":
            raise StreamFallback("no closing ']'")
        return _events_between(fd, a, tail_at + end, {}, "array")
    if first != b"{":
        raise StreamFallback("not JSON text")
    key = head.find(b'"traceEvents"')
    while key < 0 and len(head) < min(size, HEAD_MAX):
        head = _pread(fd, min(size, len(head) * 4), 0)
        key = head.find(b'"traceEvents"')
    if key < 0:
        raise StreamFallback("no traceEvents key")
    a = head.find(b"[", key)
    if a < 0 or head[key + len(b'"traceEvents"') : a].strip(b" \t\r\n:") != b"":
        raise StreamFallback("traceEvents is not a list")
    found = find_list_end(head[:a], a, size, lambda at, n: _pread(fd, n, at))
    if found is None:
        raise StreamFallback("no end of the event list")
    rest = _pread(fd, min(size - found[1], HEAD_MAX), found[1])
    if b'"traceEvents"' in rest:
        raise DuplicateEvents()
    return _events_between(fd, a, found[1], _header(found[0]), "object")


def _events_between(fd: int, a: int, end: int, header: dict[str, Any], layout: str) -> _Layout:
    """The first '{' after the list's '[' at ``a`` and the last '}' before its ']' at ``end``."""
    probe = _pread(fd, min(end - a, _STEP), a + 1)
    i = probe.find(b"{")
    if i < 0:
        if probe.strip(b" \t\r\n") and len(probe) < end - a - 1:
            raise StreamFallback("odd event list")
        if probe.strip(b" \t\r\n"):
            raise StreamFallback("event list without objects")
        return _Layout(header, layout, -1, -1)
    first = a + 1 + i
    back_at = max(first, end - _STEP)
    back = _pread(fd, end - back_at, back_at)
    j = back.rfind(b"}")
    if j < 0 or back[j + 1 :].strip(b" \t\r\n") != b"":
        raise StreamFallback("event list does not end with an event")
    return _Layout(header, layout, first, back_at + j + 1)


def chunk_bounds(fd: int, first: int, last: int, chunk_bytes: int) -> list[tuple[int, int]]:
    """Byte ranges of whole events: a cut at the first ``},{`` after each ``chunk_bytes`` mark
    (the in-memory reader's :func:`~.decode.fast_split` rule)."""
    bounds = []
    pos = first
    while pos < last:
        target = pos + chunk_bytes
        cut = _next_sep(fd, target, last) if target < last else None
        if cut is None:
            bounds.append((pos, last))
            break
        bounds.append((pos, cut[0] + 1))
        pos = cut[1] - 1
    return bounds


def _next_sep(fd: int, at: int, last: int) -> tuple[int, int] | None:
    """(start, end) of the first event separator at or after ``at`` (None: none before
    ``last``)."""
    window = 1 << 16
    while at < last:
        n = min(window, last - at)
        buf = _pread(fd, n + 64, at)  # 64 bytes of overlap: a separator across the edge
        m = _EVENT_SEP.search(buf, 0, len(buf))
        if m is not None and at + m.start() < last:
            return at + m.start(), at + m.end()
        at += n
        window = min(window * 4, 16 << 20)
    return None


def _decode_range(
    fd: int, a: int, b: int, exact_text: bool, ops: bool = False
) -> list[Event] | None:
    """The events of bytes ``[a, b)`` (whole events), None when they do not decode; ``ops``:
    as :class:`~.events.OpEvent` (the caller checks :func:`~.events.ops_only`)."""
    buf = bytearray(b - a + 2)
    buf[0] = 0x5B  # '['
    view = memoryview(buf)
    got = os.preadv(fd, [view[1:-1]], a) if hasattr(os, "preadv") else 0
    if got != b - a:
        view[1:-1] = _pread(fd, b - a, a)
    buf[-1] = 0x5D  # ']'
    dec = _decoder(exact_text, ops)
    try:
        return dec.decode(buf)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    finally:
        view.release()


_DECODERS: dict[tuple[bool, bool], msgspec.json.Decoder] = {}


def _decoder(exact_text: bool, ops: bool = False) -> msgspec.json.Decoder:
    dec = _DECODERS.get((exact_text, ops))
    if dec is None:
        dec = _DECODERS[(exact_text, ops)] = msgspec.json.Decoder(
            list[OpEvent] if ops else list[Event], float_hook=str if exact_text else None
        )
    return dec


def stream_kineto(
    path: Path,
    sink: TableSink,
    *,
    source: str,
    rank_hint: int | None,
    diags: DiagnosticLog,
    exact_text: bool,
    progress: ProgressFn | None,
    background: Callable[[], None] | None,
    salvage: bool = False,
) -> tuple[RankMeta, dict[str, int]]:
    """Read the plain (not gzip) Kineto file at ``path`` into ``sink``: its rank's metadata
    and event counts. Raises :class:`StreamFallback` and ``NeedExactText`` (see the module).
    ``salvage``: a file that ends inside its event list is read up to its last complete
    event (``salvage.py``)."""
    fd = os.open(path, os.O_RDONLY)
    cut: int | None = None
    try:
        size = os.fstat(fd).st_size
        try:
            lay = find_layout(fd, size)
        except DuplicateEvents:
            raise duplicate_events_error(source) from None
        except StreamFallback:
            got = truncated_layout(lambda at, n: _pread(fd, n, at), size) if salvage else None
            if got is None:
                raise
            lay, cut = _Layout(*got), size
            nul = nul_tail(lambda at, n: _pread(fd, n, at), size)
            if nul:
                diags.add(
                    "nul-tail",
                    f"the file ends with {nul:,} NUL bytes after byte {size - nul:,} (a crash "
                    "remnant: space allocated, text never written); ignored",
                    severity="info",
                    source=source,
                    count=nul,
                )
        st, dist = _state_for(lay.header, source, rank_hint, diags, exact_text)
        bounds = [] if lay.first < 0 else chunk_bounds(fd, lay.first, lay.last, CHUNK_BYTES)
        run = _Run(fd, bounds, st, sink, progress)
        helpers = parallel.workers() - 1 if len(bounds) >= 2 else 0
        parallel.in_order(len(bounds), run.work, run.emit, helpers=helpers, forked=background)
    finally:
        os.close(fd)
    if cut is not None:
        _salvaged(diags, source, run.events, lay, cut)
    summary = merge_summaries(run.summaries)
    meta = finish_meta(summary, lay.header, dist, st, lay.layout, rank_hint, run.events, source)
    return meta, dict(st.counts)


class _Run:
    """The chunks of one file: ``work`` parses one (in either process), ``emit`` takes them in
    order here."""

    def __init__(
        self,
        fd: int,
        bounds: list[tuple[int, int]],
        st: State,
        sink: TableSink,
        progress: ProgressFn | None,
    ) -> None:
        self.fd, self.bounds, self.st, self.sink, self.progress = fd, bounds, st, sink, progress
        self.events = 0
        self.summaries: list[dict[str, Any]] = []
        self.skip_to = 0  #: chunks before this were read as part of an earlier, longer chunk
        #: whether the last chunk this process read held CPU ops only (2021 traces write long
        #: runs of them): the next is then first decoded with their args (``OpEvent``)
        self.ops_ahead = False

    def parse(self, a: int, b: int) -> parallel.Part | None:
        evs: list | None = None
        if self.ops_ahead and not self.st.exact_text:
            evs = _decode_range(self.fd, a, b, False, ops=True)
            if evs is not None and not ops_only(evs):
                evs = None
        if evs is None:
            evs = _decode_range(self.fd, a, b, self.st.exact_text)
            if evs is None:
                self.ops_ahead = False
                return None
            self.ops_ahead = looks_ops_only(evs)
        else:
            self.ops_ahead = True
        cst = self.st.fresh()
        cst.args_dec = self.st.args_dec  # decoders are reused by every chunk of a process
        builders = cst.builders()
        process_batch(evs, cst, builders)
        n = len(evs)
        del evs
        # tables without rows are left out (each would cost an empty table per chunk)
        tables = build_tables({k: v for k, v in builders.items() if v.batches})
        return tables, {"state": cst.hand_back(), "events": n, "summary": summarize(tables)}

    def work(self, k: int) -> parallel.Part:
        a, b = self.bounds[k]
        return self.parse(a, b) or ({}, None)

    def emit(self, k: int, part: parallel.Part) -> None:
        if k < self.skip_to:
            return
        tables, extra = part
        if extra is None:  # a cut fell inside an event: read on to a later cut
            tables, extra = self._longer(k)
        self.st.merge(extra["state"])
        self.events += extra["events"]
        self.summaries.append(extra["summary"])
        for name, t in tables.items():
            self.sink.add(name, t)
        if self.progress:
            self.progress("parse", (k + 1) / len(self.bounds))

    def _longer(self, k: int) -> parallel.Part:
        a = self.bounds[k][0]
        for j in range(k + 1, min(k + 1 + _RETRIES, len(self.bounds))):
            got = self.parse(a, self.bounds[j][1])
            if got is not None:
                self.skip_to = j + 1
                return got
        raise StreamFallback(f"bytes {a:,}-{self.bounds[k][1]:,} do not decode")


def _salvaged(diags: DiagnosticLog, source: str, events: int, lay: _Layout, size: int) -> None:
    after = (
        ", and so are the keys written after the event list: baseTimeNanoseconds, traceName"
        if lay.layout == "object"
        else ""
    )
    diags.add(
        "truncated-salvaged",
        f"truncated file: read {events:,} complete events up to byte {lay.last:,} of "
        f"{size:,} (the events after the cut are lost{after})",
        source=source,
        count=size - lay.last,
        hint="the profiler stopped before finishing the file (or the copy is incomplete): "
        "what the cut lost cannot be diagnosed",
    )
