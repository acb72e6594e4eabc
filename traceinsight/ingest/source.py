"""Opening input files: content sniffing, gzip, hashing, rank discovery in directories.

Files are recognised by content, never by extension alone: gzip magic ``1f 8b``, SQLite's
``SQLite format 3\\0``, Nsight report containers, then the first non-blank JSON byte.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import re
import zlib
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError, TraceFormatError, UnsupportedTraceVersion

GZIP_MAGIC = b"\x1f\x8b"
SQLITE_MAGIC = b"SQLite format 3\x00"
NSYS_EXPORT_HINT = "convert it first: nsys export --type sqlite --output run.sqlite {name}"


@dataclass(frozen=True, slots=True)
class SourceFile:
    path: Path
    size: int
    mtime_ns: int

    @property
    def name(self) -> str:
        return self.path.name

    @classmethod
    def stat(cls, path: Path) -> "SourceFile":
        try:
            st = path.stat()
        except FileNotFoundError:
            raise InputError("no such file or directory", path=path,
                             hint="check the path; traces are .json, .json.gz or a folder of them")
        except OSError as e:
            raise InputError(f"cannot read: {e.strerror}", path=path, hint="check permissions")
        return cls(path, st.st_size, st.st_mtime_ns)


def sniff(head: bytes) -> str:
    """Classify a file from its first bytes: gzip | sqlite | nsys-rep | json | empty | unknown."""
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    if head.startswith(SQLITE_MAGIC):
        return "sqlite"
    if b"NVIDIA Tegra Profiler Report" in head[:256] or head.startswith(b"QDSTRM"):
        return "nsys-rep"
    stripped = head.lstrip(b" \t\r\n\xef\xbb\xbf")
    if not stripped:
        return "empty"
    if stripped[:1] in (b"{", b"["):
        return "json"
    return "unknown"


def read_raw(path: Path) -> bytes:
    """The file's bytes as stored (compressed or not)."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise InputError("no such file", path=path, hint="check the path")
    except IsADirectoryError:
        raise InputError("is a directory", path=path, hint="pass the folder itself, not a file in it")
    except OSError as e:
        raise InputError(f"cannot read: {e.strerror}", path=path, hint="check permissions")


def read_trace_bytes(path: Path, raw: bytes | None = None) -> bytes:
    """Return the (decompressed) JSON bytes of a Kineto trace (``raw``: the file, if read).

    Raises a :class:`TraceFormatError` naming the problem for anything that is not JSON text.
    """
    data = read_raw(path) if raw is None else raw
    kind = sniff(data[:4096])
    if kind == "gzip":
        data = _gunzip(path, data)
        inner = sniff(data[:4096])
        if inner == "sqlite":
            kind = "sqlite"
        elif inner in ("json", "empty"):
            kind = inner
        else:
            raise TraceFormatError(
                "gzip file does not contain JSON text", path=path,
                hint="expected a PyTorch profiler trace (.json or .json.gz)")
    if kind == "json":
        return data
    if kind == "empty":
        raise TraceFormatError("file is empty", path=path,
                               hint="the profiler wrote nothing; check that it ran and stopped cleanly")
    if kind == "sqlite":
        raise UnsupportedTraceVersion(
            "is an SQLite database (an Nsight Systems export?); this version reads Kineto JSON only",
            path=path, hint="record with torch.profiler, or wait for the Nsight Systems reader")
    if kind == "nsys-rep":
        raise UnsupportedTraceVersion(
            "is an Nsight Systems report (.nsys-rep), a binary container", path=path,
            hint=NSYS_EXPORT_HINT.format(name=path.name))
    raise TraceFormatError(
        "is not JSON text (first bytes: %r)" % data[:16], path=path,
        hint="expected a PyTorch profiler trace (.json or .json.gz)")


def _gunzip(path: Path, data: bytes) -> bytes:
    try:
        return gzip.decompress(data)
    except EOFError:
        raise TraceFormatError(
            "gzip stream is truncated (the file ends before the end-of-stream marker)", path=path,
            hint="the copy is incomplete: copy or download it again")
    except (gzip.BadGzipFile, zlib.error, OSError) as e:
        raise TraceFormatError(f"corrupt gzip data ({e})", path=path,
                               hint="the file is damaged: copy or download it again")


# --- rank discovery -------------------------------------------------------------------------

_RANK_RE = re.compile(r"(?:^|[^a-z0-9])rank[-_ ]?(\d+)", re.IGNORECASE)
_WORKER_RE = re.compile(r"(?:^|[^a-z0-9])worker[-_ ]?(\d+)", re.IGNORECASE)
TRACE_SUFFIXES = (".json", ".json.gz", ".gz")


def rank_from_filename(name: str) -> int | None:
    m = _RANK_RE.search(name) or _WORKER_RE.search(name)
    return int(m.group(1)) if m else None


def list_trace_files(directory: Path) -> list[Path]:
    """Candidate trace files of a directory (not recursive), sorted by name."""
    files = [p for p in sorted(directory.iterdir())
             if p.is_file() and p.name.lower().endswith(TRACE_SUFFIXES)]
    if not files:
        raise InputError("folder holds no trace files (.json, .json.gz)", path=directory,
                         hint="point at a trace file or a folder of per-rank trace files")
    return files


def cache_key_for(paths: list[Path]) -> str:
    """A quick key from path, size and mtime (used to find the content hash without reading)."""
    h = hashlib.sha256()
    for p in sorted(paths):
        st = p.stat()
        h.update(f"{os.path.abspath(p)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()
