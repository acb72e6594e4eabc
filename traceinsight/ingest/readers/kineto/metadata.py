"""Trace metadata: what is kept (an allow-list), with shape checks and redaction.

Traces carry the recording machine's environment: host and user names, paths, environment
variables, tokens. The store keeps only allow-listed fields, and each kept value must have the
shape of its kind (:mod:`traceinsight.util.redact`): a version looks like a version, a backend is a
known name, a device name looks like one; anything else is replaced. Free text that must be
kept (names) is stripped of control characters and redacted; the profiler's own header log
lines are summarised (how many, from which source location), never echoed.
"""

from __future__ import annotations

import re
from pathlib import PurePath
from typing import Any

from traceinsight.diagnostics import DiagnosticLog, Severity
from traceinsight.errors import TraceFormatError
from traceinsight.util.redact import (
    UNRECOGNISED,
    backend_name,
    clean_text,
    device_name,
    time_unit,
    version_value,
    word,
)

DEVICE_KEYS = (
    "id",
    "name",
    "totalGlobalMem",
    "computeMajor",
    "computeMinor",
    "numSms",
    "warpSize",
    "maxThreadsPerBlock",
    "maxThreadsPerMultiprocessor",
    "regsPerBlock",
    "regsPerMultiprocessor",
    "sharedMemPerBlock",
    "sharedMemPerMultiprocessor",
    "sharedMemPerBlockOptin",
    "maxSharedMemoryPerMultiProcessor",
)
CAPTURE_FLAGS = ("record_shapes", "with_stack", "profile_memory", "with_flops", "with_modules")
VERSION_KEYS = (
    "cupti_version",
    "cuda_runtime_version",
    "cuda_driver_version",
    "roctracer_version",
    "hip_runtime_version",
    "hip_driver_version",
)
PG_KEYS = ("pg_name", "pg_desc", "backend_config", "pg_size", "ranks")

_RECORD_COUNTS_RE = re.compile(r"Record counts:(.*)")
_COUNT_PAIR_RE = re.compile(r"([A-Za-z][A-Za-z -]{0,40}?)\s*=\s*(\d{1,18})")
#: the profiler's own count of activity records it lost (a full CUPTI buffer)
_DROPPED_RE = re.compile(
    r"[Dd]ropped\s+(\d{1,18})\s+(?:activity\s+)?records?|(\d{1,18})\s+(?:activity\s+)?"
    r"records?\s+(?:were\s+)?dropped|CUPTI stopped early\?\s*=\s*([1-9]\d{0,17})"
)
_LOG_SOURCE_RE = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]{0,40}\.(?:cpp|cc|c|h|hpp|py)):(\d{1,6})\]")
#: distributedInfo fields that are counts (a rank must be a number in this range)
MAX_RANK = 2**31 - 1


def _num(v: Any) -> Any:
    """A number (or a numeric string as a number); None for anything else."""
    if isinstance(v, bool) or v is None:
        return v
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        return v if v == v and abs(v) != float("inf") else None
    if isinstance(v, str) and len(v) < 40:
        try:
            f = float(v)
        except ValueError:
            return None
        if f != f or abs(f) == float("inf"):
            return None
        return int(f) if f.is_integer() else f
    return None


def _count(v: Any, what: str, source: str | None = None) -> int | None:
    """A rank-like integer (0..2**31-1); a clear error for anything else."""
    n = _num(v)
    if n is None and v is None:
        return None
    if isinstance(n, float) and n.is_integer():
        n = int(n)
    if not isinstance(n, int) or isinstance(n, bool) or not 0 <= n <= MAX_RANK:
        shown = repr(v) if len(repr(v)) <= 40 else repr(v)[:37] + "..."
        raise TraceFormatError(
            f"distributedInfo.{what} is {shown}, not a {what} number",
            path=source,
            hint="fix distributedInfo, or remove it and name the file with its rank (rank-3.json)",
        )
    return n


def device_properties(props: Any) -> list[dict[str, Any]]:
    """Allow-listed ``deviceProperties`` (one dict per GPU), names shape-checked."""
    if not isinstance(props, list):
        return []
    out = []
    for p in props[:1024]:
        if not isinstance(p, dict):
            continue
        d = {}
        for k in DEVICE_KEYS:
            if k in p:
                v = p[k]
                d[k] = device_name(v) if k == "name" else _num(v)
        out.append(d)
    return out


def distributed_info(info: Any) -> dict[str, Any]:
    """Allow-listed ``distributedInfo``: numbers, a known backend, a version; a rank that is
    not a rank number is an error (it decides where the file's events go)."""
    if not isinstance(info, dict):
        return {}
    out: dict[str, Any] = {}
    if "rank" in info:
        out["rank"] = _count(info["rank"], "rank")
    for k in ("world_size", "pg_count"):
        if k in info:
            n = _num(info[k])
            out[k] = (
                int(n)
                if isinstance(n, (int, float))
                and not isinstance(n, bool)
                and 0 <= n <= MAX_RANK
                and float(n).is_integer()
                else None
            )
    if "backend" in info:
        out["backend"] = backend_name(info["backend"])
    if "nccl_version" in info:
        out["nccl_version"] = version_value(info["nccl_version"])
    pgs = info.get("pg_config")
    if isinstance(pgs, list):
        out["pg_config"] = [_pg(pg) for pg in pgs[:256] if isinstance(pg, dict)]
    return out


def _pg(pg: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k in PG_KEYS:
        if k not in pg:
            continue
        v = pg[k]
        if k == "ranks":
            out[k] = (
                [r for r in v[:65536] if isinstance(r, int) and not isinstance(r, bool)]
                if isinstance(v, list)
                else None
            )
        elif k == "pg_size":
            out[k] = _num(v)
        elif k == "backend_config":  # "cuda:nccl", "cpu:gloo,cuda:nccl": known backends only
            out[k] = backend_name(v) if isinstance(v, str) else None
        else:  # pg_name, pg_desc: PyTorch's identifiers ("0", "default_pg", "mesh_dp")
            out[k] = _identifier(v)
    return out


#: a process group's name or description as PyTorch writes them
_IDENT_RE = re.compile(r"[\w.:/-]{1,64}")
#: a trace id: hexadecimal digits, with the dashes of a UUID
_TRACE_ID_RE = re.compile(r"[0-9A-Fa-f-]{1,64}")


def _identifier(v: Any) -> str | None:
    """A short identifier; anything else (a host name, a setting, free text) is unrecognised."""
    if isinstance(v, bool) or not isinstance(v, (str, int)):
        return None
    text = str(v).strip()
    if _IDENT_RE.fullmatch(text) and clean_text(text, 64) == text:
        return text
    return UNRECOGNISED


def kineto_capture_info(
    header: dict[str, Any], diags: DiagnosticLog, source: str
) -> dict[str, Any]:
    """Capture flags, runtime versions, kineto's own log lines (summarised as diagnostics)."""
    flags = {}
    for k in CAPTURE_FLAGS:
        v = header.get(k)
        flags[k] = None if v is None else _flag(v)
    versions = {k: version_value(header[k]) for k in VERSION_KEYS if header.get(k) is not None}
    name = header.get("traceName")
    out: dict[str, Any] = {
        "capture_flags": flags,
        "versions": versions,
        "trace_name": clean_text(PurePath(str(name).replace("\\", "/")).name, 200)
        if name
        else None,
        "trace_id": (
            (t if _TRACE_ID_RE.fullmatch(t := str(header["trace_id"]).strip()) else UNRECOGNISED)
            if header.get("trace_id")
            else None
        ),
        "framework": word(header["Framework"]) if header.get("Framework") else None,
        "display_time_unit": time_unit(header.get("displayTimeUnit")),
        "schema_version": _num(header.get("schemaVersion")),
    }
    _log_lines(header, diags, source)
    return out


def _flag(v: Any) -> bool:
    if isinstance(v, str) and v.strip().lower() in ("true", "false"):
        return v.strip().lower() == "true"
    return bool(_num(v))


def _dropped_records(header: dict[str, Any], diags: DiagnosticLog, source: str) -> None:
    """A ``records-dropped`` diagnostic when the profiler's log says its activity buffer
    overflowed: records dropped (their count) or CUPTI stopping early."""
    dropped, early = 0, False
    for level in ("ERROR", "WARNING", "INFO"):
        lines = header.get(level)
        lines = [lines] if isinstance(lines, str) else lines
        if not isinstance(lines, list):
            continue
        for line in lines[:200]:
            for m in _DROPPED_RE.finditer(str(line)):
                if m.group(3):
                    early = True
                else:
                    dropped += int(m.group(1) or m.group(2))
    if not dropped and not early:
        return
    what = (
        f"the profiler dropped {dropped:,} activity records (its buffer overflowed)"
        if dropped
        else "CUPTI stopped recording early (its activity buffer filled)"
    )
    diags.add(
        "records-dropped",
        f"{what}: GPU work missing from the trace reads as idle, so GPU busy, the idle causes "
        "and the step figures rest on an incomplete record; the findings resting on GPU idle "
        "are capped at medium",
        severity="warning",
        source=source,
        count=dropped or None,
        hint="record fewer steps (a shorter active phase) or enlarge Kineto's GPU buffer "
        "(ACTIVITIES_MAX_GPU_BUFFER_SIZE_MB in its config)",
    )


def _log_lines(header: dict[str, Any], diags: DiagnosticLog, source: str) -> None:
    """Kineto's ERROR / WARNING / INFO header lines, summarised: how many and from which
    source locations (the text may quote the recording machine); of INFO only the activity
    record counts, rebuilt from their numbers, and only when one is not zero."""
    levels: tuple[tuple[str, Severity], ...] = (
        ("ERROR", "warning"),
        ("WARNING", "warning"),
        ("INFO", "info"),
    )
    _dropped_records(header, diags, source)
    for level, sev in levels:
        lines = header.get(level)
        if isinstance(lines, str):
            lines = [lines]
        if not isinstance(lines, list) or not lines:
            continue
        if level == "INFO":
            for line in lines[:200]:
                m = _RECORD_COUNTS_RE.search(str(line))
                pairs = _COUNT_PAIR_RE.findall(m.group(1)) if m else []
                if any(int(n) for _, n in pairs):
                    text = ", ".join(f"{k.strip()} = {n}" for k, n in pairs[:12])
                    diags.add(
                        "profiler-log",
                        f"profiler info: Record counts: {text}",
                        severity="warning",
                        source=source,
                    )
            continue
        where = sorted(
            {
                f"{m.group(1)}:{m.group(2)}"
                for x in lines[:200]
                if (m := _LOG_SOURCE_RE.search(str(x)))
            }
        )
        origin = f" (from {', '.join(where[:4])})" if where else ""
        n = len(lines)
        diags.add(
            "profiler-log",
            f"profiler {level.lower()}: {n} line{'s' if n != 1 else ''} "
            f"in the trace header{origin}; not shown, as they may quote the recording "
            "machine",
            severity=sev,
            source=source,
            hint="read them in the trace's header if the capture looks wrong",
        )
