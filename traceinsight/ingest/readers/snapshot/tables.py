"""A snapshot's plain data -> the store's ``memory_segments``, ``memory_blocks`` and
``memory_actions`` tables.

Layouts (docs/FORMATS.md §2.3): PyTorch >= 2.1 writes blocks with ``address``,
``requested_size`` and ``frames``; 2.0 writes ``history: [{addr, real_size, frames}]`` instead
(and block addresses follow from the sizes); 1.13 pickles a bare list of segments. The shape is
checked as it is read: anything else is refused in one line. Every container is visited once
per reference, against a row budget, and frame lists are converted once per list object.
"""

from __future__ import annotations

import math
import re
from typing import Any

import pyarrow as pa

from traceinsight.errors import TraceFormatError
from traceinsight.store import schema
from traceinsight.util.redact import UNRECOGNISED, redact_text

#: what the snapshot's block states mean in the store
STATES = {
    "active_allocated": "allocated",
    "active_pending_free": "pending_free",
    "active_awaiting_free": "pending_free",
    "inactive": "inactive",
}
MAX_FRAMES = 32  #: frames kept per stack (innermost first)
INT64_MAX = (1 << 63) - 1
#: interpreter and unwinder frames, as PyTorch's own viewer omits them (_memory_viz.py)
_OMIT = re.compile(
    r"unwind::unwind|CapturedTraceback::gather|gather_with_cpp|^_start$|"
    r"__libc_start_main|PyEval_|PyObject_|PyFunction_"
)
_OMIT_FILES = re.compile(
    r"core/boxing|/Register|/Redispatch|pythonrun\.c|Modules/main\.c|"
    r"Objects/call\.c|Objects/methodobject\.c|pycore_ceval\.h|ceval\.c|"
    r"cpython/abstract\.h"
)
#: frames that are not the caller's code: torch itself, the runtime, C++
_NOT_USER = re.compile(r"[/\\]torch[/\\]|^<|[/\\]python3\.\d+[/\\][^/\\]+\.py$")
_SETTING_KEY = re.compile(r"^[A-Za-z0-9_]{1,64}$")


class NotASnapshot(TraceFormatError):
    """A pickle of another shape."""


def convert(
    obj: Any, path: str, rank: int, *, row_budget: int
) -> tuple[dict[str, pa.Table], dict[str, Any]]:
    """The tables of snapshot ``obj`` (rows on ``rank``) and a summary for the rank's metadata:
    layout, devices, row counts, time span, allocator settings, diagnostics."""
    conv = _Converter(path, rank, row_budget)
    traces: Any
    if isinstance(obj, list):
        segments, traces, layout = obj, [], "1.13"
        settings: Any = None
    elif isinstance(obj, dict):
        if "segments" not in obj:
            keys = ", ".join(repr(k)[:24] for k in list(obj)[:4]) or "none"
            raise NotASnapshot(
                f"is a pickle, but not a CUDA memory snapshot (a dict without "
                f"'segments'; its keys: {keys})",
                path=path,
                hint=_SHAPE_HINT,
            )
        segments, traces = obj["segments"], obj.get("device_traces") or []
        settings = obj.get("allocator_settings")
        layout = None
    else:
        raise NotASnapshot(
            f"is a pickle, but not a CUDA memory snapshot (it holds a "
            f"{type(obj).__name__}, not a dict of segments)",
            path=path,
            hint=_SHAPE_HINT,
        )
    if not isinstance(segments, list):
        raise conv.bad("'segments' is not a list")
    if not isinstance(traces, list):
        raise conv.bad("'device_traces' is not a list")
    for i, seg in enumerate(segments):
        layout = conv.segment(i, seg, layout)
    for device, entries in enumerate(traces):
        if not isinstance(entries, list):
            raise conv.bad(f"device_traces[{device}] is not a list")
        for j, e in enumerate(entries):
            conv.action(device, j, e)
    tables = {name: _table(name, cols) for name, cols in conv.cols.items()}
    ts = [t for t in conv.cols["memory_actions"]["ts_ns"] if t is not None]
    info = {
        "layout": layout or ("2.1+" if isinstance(obj, dict) else "1.13"),
        "devices": sorted(conv.devices),
        "counts": {n: t.num_rows for n, t in tables.items()},
        "span_ns": [min(ts), max(ts)] if ts else None,
        "allocator": _settings(settings),
        "diagnostics": conv.diagnostics,
    }
    return tables, info


_SHAPE_HINT = (
    "expected the pickle of torch.cuda.memory._dump_snapshot() (a dict with "
    "'segments' and 'device_traces')"
)
_COLUMNS = {
    "memory_segments": (
        "rank",
        "device",
        "address",
        "total_bytes",
        "allocated_bytes",
        "active_bytes",
        "requested_bytes",
        "stream",
        "pool",
        "pool_id",
        "expandable",
        "call_site",
        "frames",
    ),
    "memory_blocks": (
        "rank",
        "device",
        "segment_address",
        "address",
        "size_bytes",
        "requested_bytes",
        "state",
        "call_site",
        "frames",
    ),
    "memory_actions": (
        "rank",
        "device",
        "seq",
        "ts_ns",
        "action",
        "addr",
        "size_bytes",
        "stream",
        "device_free_bytes",
        "call_site",
        "frames",
    ),
}


class _Converter:
    def __init__(self, path: str, rank: int, row_budget: int) -> None:
        self.path, self.rank, self.budget = path, rank, row_budget
        self.cols: dict[str, dict[str, list[Any]]] = {
            t: {c: [] for c in cols} for t, cols in _COLUMNS.items()
        }
        self.devices: set[int] = set()
        self.diagnostics: list[dict[str, Any]] = []
        self._stacks: dict[int, tuple[str | None, str | None]] = {}
        self._frames: dict[int, tuple[str, str, bool] | None] = {}  # id -> (text, file, .py)
        self._by_frames: dict[tuple[int, ...], tuple[str | None, str | None]] = {}
        self._keep: list[Any] = []  # the lists cached by id stay alive while ids are reused

    def bad(self, what: str) -> NotASnapshot:
        return NotASnapshot(
            f"is a pickle, but not a CUDA memory snapshot: {what}", path=self.path, hint=_SHAPE_HINT
        )

    def _row(self) -> None:
        self.budget -= 1
        if self.budget < 0:
            raise NotASnapshot(
                "the pickle repeats shared data into more rows than a snapshot "
                "of its size holds; not a plain memory snapshot",
                path=self.path,
                hint=_SHAPE_HINT,
            )

    # --- segments and blocks ---------------------------------------------------------------
    def segment(self, i: int, seg: Any, layout: str | None) -> str | None:
        if not isinstance(seg, dict):
            raise self.bad(f"segment {i} is not a dict")
        total = _int(seg.get("total_size"))
        blocks = seg.get("blocks")
        if total is None or total < 0 or not isinstance(blocks, list):
            raise self.bad(f"segment {i} has no total_size or no blocks")
        self._row()
        device = _int(seg.get("device")) or 0
        self.devices.add(device)
        address = _addr(seg.get("address"))
        call_site, frames = self.stack(seg.get("frames"))
        pool = seg.get("segment_type")
        pool_id = seg.get("segment_pool_id")
        c = self.cols["memory_segments"]
        c["rank"].append(self.rank)
        c["device"].append(device)
        c["address"].append(address)
        c["total_bytes"].append(total)
        c["allocated_bytes"].append(_int(seg.get("allocated_size")))
        c["active_bytes"].append(_int(seg.get("active_size")))
        c["requested_bytes"].append(_int(seg.get("requested_size")))
        c["stream"].append(_addr(seg.get("stream")))
        c["pool"].append(
            pool if pool in ("small", "large") else ("small" if total <= 2 << 20 else "large")
        )
        c["pool_id"].append(
            ",".join(str(_int(x)) for x in pool_id)
            if isinstance(pool_id, (tuple, list)) and len(pool_id) <= 4
            else None
        )
        c["expandable"].append(bool(seg.get("is_expandable")) if "is_expandable" in seg else None)
        c["call_site"].append(call_site)
        c["frames"].append(frames)
        offset = 0
        for j, b in enumerate(blocks):
            if not isinstance(b, dict):
                raise self.bad(f"block {j} of segment {i} is not a dict")
            layout = self.block(i, j, b, device, address, offset, layout)
            offset += _int(b.get("size")) or 0
        if offset != total:
            self.diagnostics.append(
                {
                    "code": "snapshot-segment-sizes",
                    "severity": "warning",
                    "message": f"segment {i}: its blocks cover {offset:,} of {total:,} bytes",
                }
            )
        return layout

    def block(
        self,
        i: int,
        j: int,
        b: dict[str, Any],
        device: int,
        seg_addr: int | None,
        offset: int,
        layout: str | None,
    ) -> str | None:
        size = _int(b.get("size"))
        state = STATES.get(b.get("state"))  # type: ignore[arg-type]
        if size is None or size < 0 or state is None:
            raise self.bad(
                f"block {j} of segment {i} has no size or an unknown state "
                f"{str(b.get('state'))[:40]!r}"
            )
        self._row()
        if "requested_size" in b or "frames" in b or "address" in b:
            layout = layout or "2.1+"
            requested = _int(b.get("requested_size"))
            frames_obj = b.get("frames")
        else:
            hist = b.get("history")
            first = hist[0] if isinstance(hist, list) and hist and isinstance(hist[0], dict) else {}
            layout = layout or "2.0"
            requested = _int(first.get("real_size"))
            frames_obj = first.get("frames")
        if state == "inactive":
            requested = None
        elif requested is None:
            requested = size
        address = _addr(b.get("address"))
        if address is None and seg_addr is not None:
            address = seg_addr + offset
        call_site, frames = self.stack(frames_obj)
        c = self.cols["memory_blocks"]
        c["rank"].append(self.rank)
        c["device"].append(device)
        c["segment_address"].append(seg_addr)
        c["address"].append(address)
        c["size_bytes"].append(size)
        c["requested_bytes"].append(requested)
        c["state"].append(state)
        c["call_site"].append(call_site)
        c["frames"].append(frames)
        return layout

    # --- the trace -------------------------------------------------------------------------
    def action(self, device: int, j: int, e: Any) -> None:
        if not isinstance(e, dict) or not isinstance(e.get("action"), str):
            raise self.bad(f"device_traces[{device}][{j}] has no action")
        self._row()
        self.devices.add(device)
        t = e.get("time_us")
        ts = (
            int(t * 1000)
            if isinstance(t, (int, float))
            and not isinstance(t, bool)
            and 0 <= t < INT64_MAX // 1000
            else None
        )
        call_site, frames = self.stack(e.get("frames"))
        c = self.cols["memory_actions"]
        c["rank"].append(self.rank)
        c["device"].append(device)
        c["seq"].append(j)
        c["ts_ns"].append(ts)
        c["action"].append(e["action"][:32])
        c["addr"].append(_addr(e.get("addr")))
        c["size_bytes"].append(_int(e.get("size")))
        c["stream"].append(_addr(e.get("stream")))
        c["device_free_bytes"].append(_int(e.get("device_free")))
        c["call_site"].append(call_site)
        c["frames"].append(frames)

    # --- frames ----------------------------------------------------------------------------
    def _frame(self, f: Any) -> tuple[str, str, bool] | None:
        """(text, file name, is Python) of one frame, or None to omit it; once per frame
        object (PyTorch shares the frames of its symbolized stacks)."""
        key = id(f)
        if key in self._frames:
            return self._frames[key]
        out = None
        if isinstance(f, dict):
            name, filename = str(f.get("name", ""))[:200], str(f.get("filename", ""))[:400]
            if not (_OMIT.search(name) or _OMIT_FILES.search(filename)):
                out = (
                    _frame_text((filename, f.get("line"), name)),
                    filename,
                    filename.endswith(".py"),
                )
        self._frames[key] = out
        self._keep.append(f)
        return out

    def stack(self, frames: Any) -> tuple[str | None, str | None]:
        """(call site, frames text) of a frame list; each list object is converted once."""
        if not isinstance(frames, list) or not frames:
            return None, None
        hit = self._stacks.get(id(frames))
        if hit is not None:
            return hit
        ids = tuple(map(id, frames))  # equal stacks share their frame objects
        hit = self._by_frames.get(ids)
        if hit is not None:
            self._stacks[id(frames)] = hit
            self._keep.append(frames)
            return hit
        kept = []
        for f in frames:
            one = self._frame(f)
            if one is not None:
                kept.append(one)
                if len(kept) >= MAX_FRAMES:
                    break
        out: tuple[str | None, str | None] = (None, None)
        if kept:
            out = (kept[_call_site(kept)][0], "\n".join(k[0] for k in kept))
        self._stacks[id(frames)] = self._by_frames[ids] = out
        self._keep.append(frames)
        return out


def _table(name: str, cols: dict[str, list[Any]]) -> pa.Table:
    """Python lists -> the schema's table (strings dictionary-encoded)."""
    types = {
        c.name: (pa.string() if pa.types.is_dictionary(c.type) else c.type)
        for c in schema.TABLES[name].columns
    }
    return schema.conform(name, {c: pa.array(v, types[c]) for c, v in cols.items()})


def _call_site(frames: list[tuple[str, str, bool]]) -> int:
    """The innermost Python frame outside torch and the runtime, else the innermost Python
    frame, else the innermost frame."""
    py = [i for i, (_, _, is_py) in enumerate(frames) if is_py]
    for i in py:
        if not _NOT_USER.search(frames[i][1]):
            return i
    return py[0] if py else 0


def _frame_text(f: tuple[str, Any, str]) -> str:
    filename, line, name = f
    line_text = str(line) if isinstance(line, int) and not isinstance(line, bool) else "?"
    return redact_text(f"{filename}:{line_text} {name}".replace("\n", " "))


def _int(v: Any) -> int | None:
    if isinstance(v, bool) or not isinstance(v, int) or not -INT64_MAX <= v <= INT64_MAX:
        return None
    return v


def _addr(v: Any) -> int | None:
    return _int(v)


#: an allocator configuration string: ``option:value`` pairs, comma-separated (or one word)
_CONF_RE = re.compile(
    r"[\w.+-]{0,64}|[A-Za-z_]\w{0,63}:[\w.+-]{1,32}(,[A-Za-z_]\w{0,63}:[\w.+-]{1,32}){0,31}"
)


def _settings(s: Any) -> dict[str, Any]:
    """Allocator settings as recorded, allow-listed: short keys with scalar values (text
    redacted), or short lists of numbers."""
    if not isinstance(s, dict):
        return {}
    out: dict[str, Any] = {}
    for k, v in list(s.items())[:64]:
        if not isinstance(k, str) or not _SETTING_KEY.match(k):
            continue
        if isinstance(v, bool) or (isinstance(v, (int, float)) and math.isfinite(v)):
            out[k] = v
        elif isinstance(v, str) and len(v) <= 200:
            # an allocator configuration ("expandable_segments:True,max_split_size_mb:128"):
            # options and their values only; any other text (a path, a host, a secret) is
            # unrecognised
            out[k] = v if _CONF_RE.fullmatch(v.strip()) else UNRECOGNISED
        elif (
            isinstance(v, (list, tuple))
            and len(v) <= 64
            and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v)
        ):
            out[k] = list(v)
    return out
