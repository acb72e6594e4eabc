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
    def stat(cls, path: Path) -> SourceFile:
        try:
            st = path.stat()
        except FileNotFoundError:
            raise InputError("no such file or directory", path=path,
                             hint="check the path; traces are .json, .json.gz or a folder of "
                                  "them") from None
        except OSError as e:
            raise InputError(f"cannot read: {e.strerror}", path=path,
                             hint="check permissions") from e
        return cls(path, st.st_size, st.st_mtime_ns)


def json_start(head: bytes) -> bytes:
    """The first byte of JSON text after blanks and a byte-order mark (b"" if none)."""
    return head.lstrip(b" \t\r\n\xef\xbb\xbf")[:1]


def sniff(head: bytes) -> str:
    """Classify a file from its first bytes: gzip | sqlite | nsys-rep | json | empty | unknown."""
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    if head.startswith(SQLITE_MAGIC):
        return "sqlite"
    if b"NVIDIA Tegra Profiler Report" in head[:256] or head.startswith(b"QDSTRM"):
        return "nsys-rep"
    first = json_start(head)
    if not first:
        return "empty"
    if first in (b"{", b"["):
        return "json"
    return "unknown"


def read_raw(path: Path) -> bytes:
    """The file's bytes as stored (compressed or not)."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise InputError("no such file", path=path, hint="check the path") from None
    except IsADirectoryError:
        raise InputError("is a directory", path=path,
                         hint="pass the folder itself, not a file in it") from None
    except OSError as e:
        raise InputError(f"cannot read: {e.strerror}", path=path,
                         hint="check permissions") from e


def unreadable(path: Path, data: bytes, *, compressed: bool) -> TraceFormatError:
    """The error for bytes no reader claims (``data``: gzip removed when ``compressed``)."""
    kind = sniff(data[:4096])
    if kind == "empty":
        return TraceFormatError(
            "file is empty", path=path,
            hint="the profiler wrote nothing; check that it ran and stopped cleanly")
    if kind == "sqlite":
        return UnsupportedTraceVersion(
            "is an SQLite database (an Nsight Systems export?); this version reads Kineto JSON "
            "only", path=path,
            hint="record with torch.profiler, or wait for the Nsight Systems reader")
    if compressed:
        return TraceFormatError(
            "gzip file does not contain JSON text", path=path,
            hint="expected a PyTorch profiler trace (.json or .json.gz)")
    if kind == "json":
        return TraceFormatError("is JSON text no registered reader recognises", path=path,
                                hint="expected a PyTorch profiler trace (.json or .json.gz)")
    if kind == "nsys-rep":
        return UnsupportedTraceVersion(
            "is an Nsight Systems report (.nsys-rep), a binary container", path=path,
            hint=NSYS_EXPORT_HINT.format(name=path.name))
    return TraceFormatError(
        f"is not JSON text (first bytes: {data[:16]!r})", path=path,
        hint="expected a PyTorch profiler trace (.json or .json.gz)")


def gunzip(path: Path, data: bytes) -> bytes:
    """The content of gzip bytes ``data`` (a clear error when the stream is damaged)."""
    try:
        return gzip.decompress(data)
    except EOFError:
        raise TraceFormatError(
            "gzip stream is truncated (the file ends before the end-of-stream marker)", path=path,
            hint="the copy is incomplete: copy or download it again") from None
    except (gzip.BadGzipFile, zlib.error, OSError) as e:
        raise TraceFormatError(f"corrupt gzip data ({e})", path=path,
                               hint="the file is damaged: copy or download it again") from e


# --- rank discovery -------------------------------------------------------------------------

_RANK_RE = re.compile(r"(?:^|[^a-z0-9])rank[-_ ]?(\d+)", re.IGNORECASE)
_WORKER_RE = re.compile(r"(?:^|[^a-z0-9])worker[-_ ]?(\d+)", re.IGNORECASE)


def rank_from_filename(name: str) -> int | None:
    m = _RANK_RE.search(name) or _WORKER_RE.search(name)
    return int(m.group(1)) if m else None


def list_trace_files(directory: Path, suffixes: tuple[str, ...]) -> list[Path]:
    """Candidate trace files of a directory (not recursive, names ending in one of
    ``suffixes``), sorted by name."""
    files = [p for p in sorted(directory.iterdir())
             if p.is_file() and p.name.lower().endswith(suffixes)]
    if not files:
        shown = ", ".join(s for s in suffixes if s != ".gz")
        raise InputError(f"folder holds no trace files ({shown})", path=directory,
                         hint="point at a trace file or a folder of per-rank trace files")
    return files


def cache_key_for(paths: list[Path]) -> str:
    """A quick key from path, size and mtime (used to find the content hash without reading)."""
    h = hashlib.sha256()
    for p in sorted(paths):
        st = p.stat()
        h.update(f"{os.path.abspath(p)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()
