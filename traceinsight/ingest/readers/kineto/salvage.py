"""Salvage of a truncated Kineto file read from disk: the complete events, never the whole file.

A job killed while the profiler writes its trace leaves a file that ends inside the event list
(no ``]``, none of the keys Kineto writes after the events: ``baseTimeNanoseconds``,
``traceName``). With ``--salvage`` the streaming reader reads it up to its last complete event:
the header is what precedes the event list, and the last complete event is found from the
file's end in growing windows (an event separator ``},{`` starts a run of whole events; the
rightmost ``}`` after it that closes that run is the last event's end). Only those windows are
decoded here; the events themselves go through the streaming reader's chunks as any file's do.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import islice
from typing import Any

import msgspec

from traceinsight.ingest.readers.kineto.decode import _EVENT_SEP, _TOP_DEC, _header
from traceinsight.ingest.source import json_start

Read = Callable[[int, int], bytes]  #: ``read(at, n)``: n bytes of the file from offset at

WINDOW = 1 << 20  #: the first window searched for the last complete event (x4 each time)
WINDOW_MAX = 64 << 20  #: the largest window: an event longer than this is not salvaged
HEAD_MAX = 64 << 20  #: most bytes read from the start to find the event list
TRIES = 64  #: closing braces tried per window (the cut event's nested objects end in some)
_DEC = msgspec.json.Decoder()


def truncated_layout(read: Read, size: int) -> tuple[dict[str, Any], str, int, int] | None:
    """(header, layout, offset of the first event, offset just past the last complete event)
    of a file of ``size`` bytes that ends inside its event list; None when no complete event
    is found (or the file is cut before its event list)."""
    head = read(0, min(size, WINDOW))
    first = json_start(head[:4096])
    if first == b"[":
        a, header, layout = head.find(b"["), {}, "array"
    elif first == b"{":
        key = head.find(b'"traceEvents"')
        while key < 0 and len(head) < min(size, HEAD_MAX):
            head = read(0, min(size, len(head) * 4))
            key = head.find(b'"traceEvents"')
        if key < 0:
            return None
        a = head.find(b"[", key)
        if a < 0 or head[key + len(b'"traceEvents"') : a].strip(b" \t\r\n:") != b"":
            return None
        try:  # the keys before the event list, the list emptied and the object closed
            header = _header(_TOP_DEC.decode(head[:a] + b"[]}"))
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            return None
        layout = "object"
    else:
        return None
    probe = read(a + 1, min(size - a - 1, WINDOW))
    i = probe.find(b"{")
    if i < 0:
        return None
    start = a + 1 + i
    last = last_event_end(read, start, size)
    if last is None:
        return None
    # a cut file goes on with the next event's start (or nothing): what else follows the
    # last complete event (the list's ']', other text) is no truncation, the whole-file
    # reader names it
    rest = read(last, min(size - last, 4096)).lstrip(b" \t\r\n\0")
    if rest[:1] not in (b"", b","):
        return None
    return header, layout, start, last


def last_event_end(read: Read, first: int, end: int) -> int | None:
    """The offset just past the last complete event of the events that start at ``first``
    and are cut before ``end``."""
    want = WINDOW
    while True:
        at = max(first, end - want)
        buf = read(at, end - at)
        starts = [0] if at == first else [m.end() - 1 for m in islice(_EVENT_SEP.finditer(buf), 3)]
        for s in starts:
            got = _closing(buf, s)
            if got is not None:
                return at + got
        if at == first or want >= WINDOW_MAX:
            return None
        want *= 4


def _closing(buf: bytes, s: int) -> int | None:
    """Just past the rightmost ``}`` of ``buf`` that closes a run of whole events from ``s``."""
    end = len(buf)
    for _ in range(TRIES):
        end = buf.rfind(b"}", s, end)
        if end < 0:
            return None
        try:
            _DEC.decode(b"[" + buf[s : end + 1] + b"]")
        except (msgspec.DecodeError, RecursionError):
            continue
        return end + 1
    return None


def nul_tail(read: Read, size: int) -> int:
    """How many NUL bytes end the file (a crash remnant: space allocated, text never
    written), counted backwards a MiB at a time."""
    n = 0
    at = size
    while at > 0:
        k = min(WINDOW, at)
        buf = read(at - k, k)
        kept = len(buf.rstrip(b"\0"))
        n += len(buf) - kept
        if kept:
            break
        at -= k
    return n
