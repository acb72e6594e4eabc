"""Trace metadata: what is kept (an allow-list), and redaction of anything secret-looking.

Traces carry the recording machine's environment: host and user names, paths, environment
variables, tokens. The store keeps only allow-listed fields; reports show only those. Free
text that must be kept (kineto's INFO/WARNING lines, names) goes through
:func:`traceinsight.redact.redact_text`.
"""

from __future__ import annotations

import re
from pathlib import PurePath
from typing import Any

from ..diagnostics import DiagnosticLog, Severity
from ..redact import redact_text, redact_value

DEVICE_KEYS = (
    "id", "name", "totalGlobalMem", "computeMajor", "computeMinor", "numSms", "warpSize",
    "maxThreadsPerBlock", "maxThreadsPerMultiprocessor", "regsPerBlock",
    "regsPerMultiprocessor", "sharedMemPerBlock", "sharedMemPerMultiprocessor",
    "sharedMemPerBlockOptin", "maxSharedMemoryPerMultiProcessor",
)
CAPTURE_FLAGS = ("record_shapes", "with_stack", "profile_memory", "with_flops", "with_modules")
VERSION_KEYS = (
    "cupti_version", "cuda_runtime_version", "cuda_driver_version", "roctracer_version",
    "hip_runtime_version", "hip_driver_version",
)
PG_KEYS = ("pg_name", "pg_desc", "backend_config", "pg_size", "ranks")

_RECORD_COUNTS_RE = re.compile(r"Record counts:.*")


def _num(v: Any) -> Any:
    if isinstance(v, bool) or v is None:
        return v
    if isinstance(v, (int, float)):
        return v
    if isinstance(v, str):
        try:
            f = float(v)
            return int(f) if f.is_integer() else f
        except ValueError:
            return redact_text(v)[:100]
    return None


def device_properties(props: Any) -> list[dict[str, Any]]:
    """Allow-listed ``deviceProperties`` (one dict per GPU)."""
    if not isinstance(props, list):
        return []
    out = []
    for p in props:
        if not isinstance(p, dict):
            continue
        d = {}
        for k in DEVICE_KEYS:
            if k in p:
                v = p[k]
                d[k] = redact_text(str(v))[:120] if k == "name" else _num(v)
        out.append(d)
    return out


def distributed_info(info: Any) -> dict[str, Any]:
    if not isinstance(info, dict):
        return {}
    out: dict[str, Any] = {}
    for k in ("backend", "rank", "world_size", "pg_count", "nccl_version"):
        if k in info:
            v = info[k]
            numeric = k in ("rank", "world_size", "pg_count")
            out[k] = _num(v) if numeric else redact_text(str(v))[:60]
    if isinstance(out.get("rank"), float):
        out["rank"] = int(out["rank"])
    pgs = info.get("pg_config")
    if isinstance(pgs, list):
        out["pg_config"] = []
        for pg in pgs[:256]:
            if isinstance(pg, dict):
                out["pg_config"].append({k: redact_value(pg[k], k) if k != "ranks" else pg[k]
                                         for k in PG_KEYS if k in pg})
    return out


def kineto_capture_info(header: dict[str, Any], diags: DiagnosticLog,
                        source: str) -> dict[str, Any]:
    """Capture flags, runtime versions, kineto's own log lines (as diagnostics)."""
    flags = {}
    for k in CAPTURE_FLAGS:
        v = header.get(k)
        flags[k] = None if v is None else bool(_num(v))
    versions = {k: _num(header[k]) for k in VERSION_KEYS if header.get(k) is not None}
    name = header.get("traceName")
    out: dict[str, Any] = {
        "capture_flags": flags,
        "versions": versions,
        "trace_name": PurePath(str(name).replace("\\", "/")).name[:200] if name else None,
        "trace_id": redact_text(str(header["trace_id"]))[:64] if header.get("trace_id") else None,
        "framework": str(header["Framework"])[:60] if header.get("Framework") else None,
        "display_time_unit": header.get("displayTimeUnit"),
        "schema_version": _num(header.get("schemaVersion")),
    }
    levels: tuple[tuple[str, Severity], ...] = (
        ("ERROR", "warning"), ("WARNING", "warning"), ("INFO", "info"))
    for level, sev in levels:
        lines = header.get(level)
        if isinstance(lines, str):
            lines = [lines]
        if not isinstance(lines, list):
            continue
        for line in lines[:200]:
            text = redact_text(str(line)).strip()[:300]
            if level == "INFO":
                # only the record counts matter: lost or unlinked activity records
                m = _RECORD_COUNTS_RE.search(text)
                if not m or not any(int(n) for n in re.findall(r"= (\d+)", m.group(0))):
                    continue
                text = m.group(0)
                sev = "warning"
            if text:
                diags.add("profiler-log", f"profiler {level.lower()}: {text}", severity=sev,
                          source=source)
    return out
