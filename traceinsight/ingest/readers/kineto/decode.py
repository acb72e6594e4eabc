"""Decoding a Kineto JSON file: whole, in batches or chunks, in one or two processes.

Small files are decoded in one call. Above :data:`BATCH_BYTES` the event list is cut into
chunks of whole events by text (:func:`fast_split`), or, when a layout defeats the text cutter,
decoded as raw event slices and processed in batches, so peak memory stays near the file size
plus one batch; large files are shared with a forked helper (``ingest/parallel.py``). Every path
feeds the same :func:`~.tables.process_batch` and gives the same rows.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec
import pyarrow as pa
import pyarrow.compute as pc

from traceinsight import settings
from traceinsight.diagnostics import DiagnosticLog
from traceinsight.errors import EmptyTraceError, TraceFormatError
from traceinsight.ingest import parallel
from traceinsight.ingest.columns import TableBuilder, build_tables
from traceinsight.ingest.readers.base import RankMeta, RankRead
from traceinsight.ingest.readers.kineto import repair
from traceinsight.ingest.readers.kineto.events import NULL, Event, State
from traceinsight.ingest.readers.kineto.metadata import (
    device_properties,
    distributed_info,
    kineto_capture_info,
)
from traceinsight.ingest.readers.kineto.tables import process_batch
from traceinsight.ingest.source import json_start

ProgressFn = Callable[[str, float], None]

#: the reader's name: the ``format`` of its sources and ranks
FORMAT = "kineto"

#: Above this many bytes of JSON, events are decoded in batches to bound memory.
BATCH_BYTES = settings.get("TRACEINSIGHT_BATCH_BYTES")
BATCH_EVENTS = 200_000
#: bytes of JSON decoded at a time when a file is split into chunks
CHUNK_BYTES = settings.get("TRACEINSIGHT_CHUNK_BYTES")

_TOP_FIELDS: dict[str, Any] = {
    "schemaVersion": Any,
    "deviceProperties": Any,
    "distributedInfo": Any,
    "baseTimeNanoseconds": Any,
    "displayTimeUnit": Any,
    "traceName": Any,
    "record_shapes": Any,
    "with_stack": Any,
    "profile_memory": Any,
    "with_flops": Any,
    "with_modules": Any,
    "trace_id": Any,
    "cupti_version": Any,
    "cuda_runtime_version": Any,
    "cuda_driver_version": Any,
    "roctracer_version": Any,
    "hip_runtime_version": Any,
    "hip_driver_version": Any,
    "INFO": Any,
    "WARNING": Any,
    "ERROR": Any,
    "Framework": Any,
    # only to recognise non-trace JSON (Execution Trace: schema + nodes)
    "nodes": msgspec.Raw,
    "schema": Any,
}


def _top_struct(events_type: Any) -> type:
    fields: list[tuple[str, Any, Any]] = [("traceEvents", events_type | None, None)]
    for k, t in _TOP_FIELDS.items():
        fields.append((k, t, NULL if t is msgspec.Raw else None))
    return msgspec.defstruct("_Top", fields)


_TopEvents = _top_struct(list[Event])
_TopRaw = _top_struct(list[msgspec.Raw])
_TOP_DEC: msgspec.json.Decoder = msgspec.json.Decoder(_TopEvents)
_EVENT_SEP = re.compile(rb"\}\s*,\s*\{")


def _header(top: Any) -> dict[str, Any]:
    return {k: getattr(top, k) for k in _TOP_FIELDS if k not in ("nodes", "schema")}


def _decode_top(
    data: bytes,
    source: str,
    diags: DiagnosticLog,
    *,
    exact_text: bool,
    batched: bool,
    salvage: bool,
) -> Any:
    typ: Any
    if json_start(data[:4096]) == b"[":
        typ = list[msgspec.Raw] if batched else list[Event]
    else:
        typ = _TopRaw if batched else _TopEvents
    dec = msgspec.json.Decoder(typ, float_hook=str if exact_text else None)
    try:
        try:
            return repair.decode_checked(dec.decode, data, source)
        except msgspec.ValidationError:
            raise
        except msgspec.DecodeError as e:
            return repair.recover(data, str(e), dec.decode, source, diags, salvage=salvage)
    except msgspec.ValidationError as e:
        raise TraceFormatError(
            f"JSON but not a PyTorch profiler trace ({e})",
            path=source,
            hint="expected an object with a 'traceEvents' list of events (or a bare list of "
            "events)",
        ) from e


def _events_and_header(top: Any, source: str) -> tuple[list, dict[str, Any], str]:
    if isinstance(top, list):
        return top, {}, "array"
    events = top.traceEvents
    if events is None:
        tag = top.schema if isinstance(top.schema, str) else None
        if tag is not None and tag.startswith("traceinsight"):
            raise TraceFormatError(
                "is a traceinsight result, not a trace (its schema tag is not one this "
                "version reads)",
                path=source,
                hint="write it again with traceinsight diagnose --json, or pass the trace",
            )
        what = (
            "a PyTorch Execution Trace (nodes), not a profiler trace"
            if top.nodes is not NULL
            else "JSON without a 'traceEvents' list"
        )
        raise TraceFormatError(
            f"is {what}",
            path=source,
            hint="pass the Kineto trace written by torch.profiler "
            "(export_chrome_trace / tensorboard_trace_handler)",
        )
    return events, _header(top), "object"


# --- cutting the event list by text ---------------------------------------------------------

_WS = b" \t\r\n"
#: most bytes at the end of a file searched for the end of its event list
TAIL_MAX = 64 << 20


def _tail_header(prefix: bytes, tail: bytes) -> tuple[Any, int] | None:
    """The decoded header and the offset (in ``tail``) of the ']' closing the event list.

    Candidates are the ']' that follow an event's '}' (or the list's '['); the object must
    decode with the list emptied. Keys after the list may hold lists of objects too (TraceLens
    writes ``deviceProperties`` there), whose ']' also passes: the leftmost candidate that
    decodes is the list's end (a ']' inside an event leaves the rest unbalanced)."""
    end = len(tail)
    tries = 0
    found = None
    while tries < 64:
        end = tail.rfind(b"]", 0, end)
        if end < 0:
            break
        i = end - 1
        while i >= 0 and tail[i] in _WS:
            i -= 1
        if i < 0 or tail[i] == 0x7D:  # '}'
            tries += 1
            try:
                found = _TOP_DEC.decode(prefix + b"[]" + tail[end + 1 :]), end
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue
    return found


def find_list_end(
    prefix: bytes, a: int, size: int, read: Callable[[int, int], bytes]
) -> tuple[Any, int] | None:
    """The header and the offset of the ']' closing the event list that opens at ``a`` (the
    '[' after ``prefix``), searched in growing windows at the end of the ``size`` bytes that
    ``read(at, n)`` returns."""
    want = 1 << 20
    while True:
        at = max(a + 1, size - want)
        found = _tail_header(prefix, read(at, size - at))
        if found is not None:
            return found[0], at + found[1]
        if at == a + 1 or want >= TAIL_MAX:
            return None
        want *= 4


class SplitFailed(Exception):
    """A chunk boundary fell inside a string: use the exact (raw-list) path instead."""


@dataclass
class Split:
    header: Any
    layout: str
    bounds: list[tuple[int, int]]


def fast_split(data: bytes, chunk_bytes: int) -> Split | None:
    """Cut the event list into byte ranges of whole events without parsing it.

    The header (everything but the event list) is decoded on its own; chunk boundaries are the
    first ``},{`` after each ``chunk_bytes`` mark. A boundary inside a string (or anything odd)
    makes a chunk fail to decode, and the caller falls back to splitting with the parser.
    """
    first = json_start(data[:4096])
    if first == b"[":
        a = data.find(b"[")
        end = data.rfind(b"]")
        header, layout = None, "array"
        if end <= a:
            return None
    elif first == b"{":
        key = data.find(b'"traceEvents"')
        if key < 0:
            return None
        a = data.find(b"[", key)
        if a < 0 or data[key + len(b'"traceEvents"') : a].strip(b" \t\r\n:") != b"":
            return None
        found = find_list_end(data[:a], a, len(data), lambda at, n: data[at : at + n])
        if found is None:
            return None
        header, end = found
        layout = "object"
    else:
        return None
    start = data.find(b"{", a, end)
    bounds: list[tuple[int, int]] = []
    if start < 0:
        return Split(header, layout, bounds)
    close = data.rfind(b"}", start, end) + 1
    pos = start
    while pos < close:
        target = pos + chunk_bytes
        m = _EVENT_SEP.search(data, target, close) if target < close else None
        if m is None:
            bounds.append((pos, close))
            break
        bounds.append((pos, m.start() + 1))
        pos = m.end() - 1
    return Split(header, layout, bounds)


def _run_chunks(
    data: bytes,
    bounds: list[tuple[int, int]],
    st: State,
    builders: dict[str, TableBuilder],
    progress: ProgressFn | None,
    done: Callable[[int, int], None] | None = None,
) -> int:
    """Decode and process byte ranges of whole events; returns the number of events.
    ``done(a, b)`` is told each range once it has been read."""
    dec = msgspec.json.Decoder(list[Event], float_hook=str if st.exact_text else None)
    n = 0
    for i, (a, b) in enumerate(bounds):
        try:
            batch = dec.decode(b"[" + data[a:b] + b"]")
        except (msgspec.DecodeError, msgspec.ValidationError):
            raise SplitFailed() from None
        if done:
            done(a, b)
        n += len(batch)
        process_batch(batch, st, builders)
        del batch
        if progress:
            progress("parse", (i + 1) / len(bounds))
    return n


def _run_batches(
    events: list,
    lo: int,
    hi: int,
    st: State,
    builders: dict[str, TableBuilder],
    progress: ProgressFn | None,
) -> None:
    """Decode and process the raw events ``events[lo:hi]`` batch by batch (bounded memory)."""
    dec = msgspec.json.Decoder(list[Event], float_hook=str if st.exact_text else None)
    for start in range(lo, hi, BATCH_EVENTS):
        chunk = events[start : min(start + BATCH_EVENTS, hi)]
        batch = dec.decode(b"[" + b",".join(chunk) + b"]")
        del chunk
        process_batch(batch, st, builders)
        del batch
        if progress:
            progress("parse", min(1.0, (start + BATCH_EVENTS - lo) / max(1, hi - lo)))


# --- two processes ---------------------------------------------------------------------------


def chunks_two_processes(
    data: bytes,
    bounds: list[tuple[int, int]],
    st: State,
    progress: ProgressFn | None,
    background: Callable[[], None] | None,
) -> tuple[dict[str, pa.Table], int]:
    """This process parses the first half of the chunks while a forked helper parses the
    second half (it gives back its pages of the first half, and of each chunk once read)."""
    k = (len(bounds) + 1) // 2

    def helper(_i: int) -> parallel.Part:
        hst = st.fresh()
        hst_builders = hst.builders()
        parallel.release_pages(data, 0, bounds[k][0])  # the parent's half
        n = _run_chunks(
            data,
            bounds[k:],
            hst,
            hst_builders,
            None,
            lambda a, b: parallel.release_pages(data, a, b),
        )
        return build_tables(hst_builders), {**hst.hand_back(), "events": n}

    n_here = 0

    def here() -> dict[str, pa.Table]:
        nonlocal n_here
        builders = st.builders()
        n_here = _run_chunks(
            data,
            bounds[:k],
            st,
            builders,
            (lambda stage, f: progress(stage, 0.5 * f)) if progress else None,
        )
        return build_tables(builders)

    tables, states = parallel.fork_and_join(helper, 1, here=here, forked=background)
    st.merge(states[0])
    if progress:
        progress("parse", 1.0)
    return tables, n_here + states[0]["events"]


def events_in_processes(
    events: list, st: State, workers: int, progress: ProgressFn | None
) -> dict[str, pa.Table]:
    """Parse contiguous parts of the raw event list in forked helpers and join their tables
    in event order."""
    n = len(events)
    bounds = [n * i // workers for i in range(workers + 1)]

    def helper(i: int) -> parallel.Part:
        hst = st.fresh()
        builders = hst.builders()
        _run_batches(events, bounds[i], bounds[i + 1], hst, builders, None)
        return build_tables(builders), hst.hand_back()

    done = (lambda i: progress("parse", (i + 1) / workers)) if progress else None
    tables, states = parallel.fork_and_join(helper, workers, done=done)
    for s in states:
        st.merge(s)
    return tables


# --- one file --------------------------------------------------------------------------------


def _state_for(
    header: dict[str, Any],
    source: str,
    rank_hint: int | None,
    diags: DiagnosticLog,
    exact_text: bool,
) -> tuple[State, dict[str, Any]]:
    base_ns = 0
    base = header.get("baseTimeNanoseconds")
    if base is not None:
        try:
            base_ns = int(base)
        except (TypeError, ValueError, OverflowError):
            diags.add(
                "bad-base-time", "baseTimeNanoseconds is not an integer; ignored", source=source
            )
        else:
            # a Unix time in ns: negative, or past the year 2262 of int64 ns, is no clock
            if isinstance(base, bool) or not 0 <= base_ns < 2**62:
                diags.add(
                    "bad-base-time",
                    f"baseTimeNanoseconds {base_ns} is not a time (negative or beyond int64 "
                    "nanoseconds); ignored: times are the file's own",
                    source=source,
                )
                base_ns = 0
    dist = distributed_info(header.get("distributedInfo"))
    rank = dist.get("rank") if dist.get("rank") is not None else rank_hint
    st = State(
        source=source,
        rank=int(rank) if rank is not None else 0,
        base_ns=base_ns,
        exact_text=exact_text,
        diags=diags,
    )
    return st, dist


#: a ``traceEvents`` key (inside a string value its quotes would be escaped)
_EVENTS_KEY_RE = re.compile(rb'"traceEvents"\s*:')


def _repeated_events_key(data: bytes) -> bool:
    """Whether one JSON object holds two ``traceEvents`` keys (inside a string value the quotes
    would be escaped, so only a key matches); a second document appended after the first one
    (trailing data, reported as such) is not a repeated key."""
    keys = list(_EVENTS_KEY_RE.finditer(data))
    if len(keys) < 2:
        return False
    end = data.rfind(b"}", 0, keys[1].start())
    try:
        msgspec.json.decode(data[: end + 1])
    except (msgspec.DecodeError, RecursionError):
        return True  # the first document is still open where the second key starts
    return False


def read(
    data: bytes,
    source: str,
    rank_hint: int | None,
    diags: DiagnosticLog,
    *,
    exact_text: bool,
    salvage: bool,
    progress: ProgressFn | None,
    background: Callable[[], None] | None = None,
    force_exact_split: bool = False,
) -> RankRead:
    """Parse one file (raises :class:`~..timeconv.NeedExactText` for a re-read as text)."""
    if data[:3] == b"\xef\xbb\xbf":  # a UTF-8 byte-order mark (Windows editors write one)
        data = data[3:]
    if _repeated_events_key(data):
        from traceinsight.ingest.readers.kineto.stream import duplicate_events_error

        raise duplicate_events_error(source)
    batched = len(data) > BATCH_BYTES
    split = fast_split(data, CHUNK_BYTES) if batched and not force_exact_split else None
    if split is not None:
        return _read_split(
            data,
            split,
            source,
            rank_hint,
            diags,
            exact_text=exact_text,
            progress=progress,
            background=background,
            salvage=salvage,
        )
    top = _decode_top(data, source, diags, exact_text=exact_text, batched=batched, salvage=salvage)
    events, header, layout = _events_and_header(top, source)
    del top
    n_events = len(events)
    st, dist = _state_for(header, source, rank_hint, diags, exact_text)
    workers = parallel.workers(n_events) if batched and not force_exact_split else 1
    if workers > 1:
        tables = events_in_processes(events, st, workers, progress)
        if background:
            background()  # after the helpers: no thread may run while the process forks
    else:
        if background:
            background()
        builders = st.builders()
        if batched:
            _run_batches(events, 0, n_events, st, builders, progress)
        else:
            process_batch(events, st, builders)
            if progress:
                progress("parse", 1.0)
        tables = build_tables(builders)
    del events
    return _finish(tables, header, dist, st, layout, rank_hint, n_events, source)


def _read_split(
    data: bytes,
    split: Split,
    source: str,
    rank_hint: int | None,
    diags: DiagnosticLog,
    *,
    exact_text: bool,
    progress: ProgressFn | None,
    background: Callable[[], None] | None,
    salvage: bool,
) -> RankRead:
    """The fast path for large files: chunks of whole events, two processes when worthwhile."""
    header = {} if split.header is None else _header(split.header)
    st, dist = _state_for(header, source, rank_hint, diags, exact_text)
    try:
        if len(split.bounds) >= 2 and parallel.workers() > 1:
            tables, n_events = chunks_two_processes(data, split.bounds, st, progress, background)
        else:
            if background:
                background()
            builders = st.builders()
            n_events = _run_chunks(data, split.bounds, st, builders, progress)
            tables = build_tables(builders)
    except SplitFailed:
        diags.add(
            "split-fallback",
            "event chunks could not be cut by text; parsed with the slower exact splitter",
            severity="info",
            source=source,
        )
        return read(
            data,
            source,
            rank_hint,
            diags,
            exact_text=exact_text,
            salvage=salvage,
            progress=progress,
            background=None,
            force_exact_split=True,
        )
    return _finish(tables, header, dist, st, split.layout, rank_hint, n_events, source)


def _finish(
    tables: dict[str, pa.Table],
    header: dict[str, Any],
    dist: dict[str, Any],
    st: State,
    layout: str,
    rank_hint: int | None,
    n_events: int,
    source: str,
) -> RankRead:
    meta = finish_meta(summarize(tables), header, dist, st, layout, rank_hint, n_events, source)
    return RankRead(tables=tables, meta=meta, counts=dict(st.counts))


def finish_meta(
    summary: dict[str, Any],
    header: dict[str, Any],
    dist: dict[str, Any],
    st: State,
    layout: str,
    rank_hint: int | None,
    n_events: int,
    source: str,
) -> RankMeta:
    """The rank's metadata once every event is read (raises for a trace without activity)."""
    if n_events == 0:
        raise EmptyTraceError(
            "trace holds no events",
            path=source,
            hint="the profiler window may have been empty: check the schedule "
            "(wait/warmup/active) and that prof.step() is called",
        )
    if st.counts.get("invalid") == n_events:
        raise TraceFormatError(
            "is JSON but holds no trace events (no 'ph' field)",
            path=source,
            hint="pass the Kineto trace written by torch.profiler",
        )
    real = sum(v for k, v in st.counts.items() if k not in ("meta", "invalid"))
    if real == 0:
        raise EmptyTraceError(
            "trace holds only metadata events, no activity",
            path=source,
            hint="the profiler window may have been empty",
        )
    _diagnose_ingest(st)
    return _rank_meta(header, dist, st, summary, layout, rank_hint)


def _diagnose_ingest(st: State) -> None:
    d, src = st.diags, st.source
    if st.tstats.rounded:
        d.add(
            "timestamps-rounded",
            "timestamps with more than 3 fractional µs digits were rounded to the nearest ns",
            severity="info",
            source=src,
            count=st.tstats.rounded,
        )
    if st.tstats.invalid:
        d.add(
            "timestamps-invalid", "non-numeric ts/dur values", source=src, count=st.tstats.invalid
        )
    if st.negative_durations:
        d.add(
            "negative-durations",
            "negative durations clamped to 0",
            source=src,
            count=st.negative_durations,
        )
    if st.missing_durations:
        d.add(
            "missing-durations",
            "complete events without a readable dur read as 0 µs",
            source=src,
            count=st.missing_durations,
        )
    if st.negative_ts:
        d.add(
            "negative-timestamps",
            "events with a negative ts (before the trace's time "
            "origin) kept as recorded: the span and the step windows may be wrong",
            source=src,
            count=st.negative_ts,
        )
    for what, n in st.bad.items():
        d.add("invalid-values", f"events or values dropped: {what}", source=src, count=n)


# --- per-rank metadata -----------------------------------------------------------------------

_SPAN_TABLES = ("gpu_activities", "cpu_ops", "runtime_calls", "ranges", "python_frames")


def summarize(tables: dict[str, pa.Table]) -> dict[str, Any]:
    """What the rank's metadata needs from its tables: the span of its activity, the GPUs
    used, runtime-call names and kernel categories (:func:`merge_summaries` joins parts)."""
    spans = []
    for name in _SPAN_TABLES:
        t = tables.get(name)
        if t is not None and t.num_rows:
            start, dur = t["start_ns"], t["dur_ns"]
            if start.null_count or dur.null_count:
                spans.append((pc.min(start).as_py(), pc.max(pc.add(start, dur)).as_py()))
            else:  # numpy: a pyarrow compute call costs more on a chunk's rows
                s = start.to_numpy()
                spans.append((int(s.min()), int((s + dur.to_numpy()).max())))
    gpu = tables.get("gpu_activities")
    if gpu is not None and not gpu.num_rows:
        gpu = None
    rt = tables.get("runtime_calls")
    return {
        "span": [min(s[0] for s in spans), max(s[1] for s in spans)] if spans else None,
        "devices": set(pc.unique(gpu["device"]).to_pylist()) - {None} if gpu is not None else set(),
        "rt_names": set(pc.unique(rt["name"].cast(pa.string())).to_pylist())
        if rt is not None and rt.num_rows
        else set(),
        "gpu_cats": set(pc.unique(gpu["cat_raw"].cast(pa.string())).to_pylist())
        if gpu is not None
        else set(),
    }


def merge_summaries(parts: list[dict[str, Any]]) -> dict[str, Any]:
    spans = [p["span"] for p in parts if p["span"] is not None]
    return {
        "span": [min(s[0] for s in spans), max(s[1] for s in spans)] if spans else None,
        "devices": set().union(*(p["devices"] for p in parts)),
        "rt_names": set().union(*(p["rt_names"] for p in parts)),
        "gpu_cats": set().union(*(p["gpu_cats"] for p in parts)),
    }


def _rank_meta(
    header: dict[str, Any],
    dist: dict[str, Any],
    st: State,
    summary: dict[str, Any],
    layout: str,
    rank_hint: int | None,
) -> RankMeta:
    span = summary["span"]
    info = kineto_capture_info(header, st.diags, st.source)
    return RankMeta(
        rank=st.rank,
        rank_source="distributedInfo"
        if dist.get("rank") is not None
        else ("file name" if rank_hint is not None else "default"),
        source=st.source,
        format=FORMAT,
        layout=layout,
        vendor=_vendor(header, summary),
        base_time_ns=st.base_ns or None,
        time_origin="epoch" if (st.base_ns or (span and span[0] > 10**15)) else "trace",
        span_ns=span,
        devices=device_properties(header.get("deviceProperties")),
        devices_used=sorted(summary["devices"]),
        distributed=dist,
        exact_text_timestamps=st.exact_text,
        process_names=st.process_names,
        process_labels=st.process_labels,
        thread_names=st.thread_names,
        diagnostics=st.diags,
        **info,
    )


def _vendor(header: dict[str, Any], summary: dict[str, Any]) -> str:
    if any(header.get(k) is not None for k in ("roctracer_version", "hip_runtime_version")):
        return "amd"
    names = summary["rt_names"]
    if names:
        if any(isinstance(n, str) and n.startswith("hip") for n in names):
            return "amd"
        if any(isinstance(n, str) and (n.startswith("cuda") or n.startswith("cu")) for n in names):
            return "nvidia"
    props = header.get("deviceProperties") or []
    for p in props if isinstance(props, list) else []:
        nm = str(p.get("name", "")) if isinstance(p, dict) else ""
        if "AMD" in nm or "Instinct" in nm or "Radeon" in nm:
            return "amd"
        if "NVIDIA" in nm or "Tesla" in nm or "Quadro" in nm or "GeForce" in nm:
            return "nvidia"
        if nm:
            return "other"
    if "mtia_ccp_events" in summary["gpu_cats"]:
        return "mtia"
    return "unknown"
