"""Opening input files: content sniffing, gzip, streams, rank discovery in directories.

Files are recognised by content, never by extension alone: gzip magic ``1f 8b``, SQLite's
``SQLite format 3\\0``, Nsight report containers, then the first non-blank JSON byte. Only
regular files are read: a FIFO or a device named as input is refused (it could block or
never end), except stdin (``-``, ``/dev/stdin``) and process substitution (``<(...)``), which
are read once into a temporary file. gzip is decompressed as a stream with a size and ratio
guard, so a small bomb fails fast instead of filling memory.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import stat
import sys
import tempfile
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from traceinsight import settings
from traceinsight.errors import InputError, TraceFormatError

GZIP_MAGIC = b"\x1f\x8b"
SQLITE_MAGIC = b"SQLite format 3\x00"
NSYS_EXPORT_HINT = "convert it first: nsys export --type sqlite --output run.sqlite {name}"
#: gzip guard: content beyond this many times the compressed size (and beyond GZIP_FLOOR) is
#: refused as a decompression bomb; real traces compress 5-40x
GZIP_MAX_RATIO = settings.get("TRACEINSIGHT_GZIP_MAX_RATIO")
GZIP_FLOOR = 64 << 20
GZIP_MAX_BYTES = settings.get("TRACEINSIGHT_GZIP_MAX_BYTES")
#: a file read whole (a memory input, a damaged trace the streaming reader hands back) is in
#: memory at once, and its reader needs a few times that: content beyond this share of
#: TRACEINSIGHT_MAX_MEMORY_MB is refused (gzip is decompressed up to it, never beyond)
WHOLE_SHARE = 4
#: most bytes read from stdin or a pipe
STREAM_MAX_BYTES = settings.get("TRACEINSIGHT_STREAM_MAX_BYTES")
_STDIN = ("-", "/dev/stdin")
_FD_RE = re.compile(r"^/(?:dev/fd|proc/(?:self|\d+)/fd)/\d+$")


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
        """The file's size and mtime; a clear error when it is missing, unreadable or not a
        regular file or folder (a FIFO or a device could block or never end)."""
        try:
            st = path.stat()
        except FileNotFoundError:
            hint = (
                "the link points to a missing file"
                if path.is_symlink()
                else "check the path; traces are .json, .json.gz or a folder of them"
            )
            raise InputError("no such file or directory", path=path, hint=hint) from None
        except OSError as e:
            raise InputError(
                f"cannot read: {e.strerror}", path=path, hint="check the path and its permissions"
            ) from e
        kind = special_kind(st.st_mode)
        if kind:
            raise InputError(
                f"is {kind}, not a regular file",
                path=path,
                hint="save the trace to a file, or pipe it on stdin: "
                "traceinsight diagnose - < trace.json",
            )
        return cls(path, st.st_size, st.st_mtime_ns)


def special_kind(mode: int) -> str | None:
    """What a file that is neither a regular file nor a folder is (None for those two)."""
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a special file"


# --- stdin and pipes --------------------------------------------------------------------------


def is_stream(raw: str | Path) -> bool:
    """``-``, ``/dev/stdin`` or a ``/dev/fd/N`` pipe (process substitution ``<(...)``)."""
    text = str(raw)
    if text in _STDIN:
        return True
    if _FD_RE.match(text):
        try:
            return not stat.S_ISREG(os.stat(text).st_mode)
        except OSError:
            return False
    return False


@contextlib.contextmanager
def materialized(paths: Sequence[str | Path]) -> Iterator[list[Path]]:
    """``paths`` with each stream (stdin, a pipe) read once into a temporary file, which is
    removed on exit; other paths pass unchanged."""
    if not any(is_stream(p) for p in paths):
        yield [Path(p) for p in paths]
        return
    tmp = Path(tempfile.mkdtemp(prefix="traceinsight-stdin-"))
    try:
        out: list[Path] = []
        stdin_used = False
        for i, p in enumerate(paths):
            if not is_stream(p):
                out.append(Path(p))
                continue
            if str(p) in _STDIN:
                if stdin_used:
                    raise InputError(
                        "stdin is given twice",
                        path=str(p),
                        hint="stdin can be read once: pass '-' a single time",
                    )
                stdin_used = True
                name = "stdin.json"
            else:
                name = f"pipe-{i}.json"
            out.append(_drain(str(p), tmp / name))
        yield out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _drain(raw: str, target: Path) -> Path:
    """Copy stream ``raw`` into ``target`` (bounded by :data:`STREAM_MAX_BYTES`)."""
    try:
        if raw == "-":
            src = sys.stdin.buffer
            fd = src.fileno()
            close = False
        else:
            fd = os.open(raw, os.O_RDONLY)
            src = os.fdopen(fd, "rb")
            close = True
    except (OSError, ValueError, AttributeError) as e:
        raise InputError(
            f"cannot read: {getattr(e, 'strerror', None) or e}",
            path=raw,
            hint="pipe the trace on stdin: traceinsight diagnose - < trace.json",
        ) from None
    try:
        mode = os.fstat(fd).st_mode
        if os.isatty(fd):
            raise InputError(
                "stdin is a terminal",
                path=raw,
                hint="pipe a trace into it: traceinsight diagnose - < trace.json",
            )
        if not (stat.S_ISFIFO(mode) or stat.S_ISREG(mode) or stat.S_ISSOCK(mode)):
            raise InputError(
                f"is {special_kind(mode)}, not a trace stream",
                path=raw,
                hint="pipe a trace file: traceinsight diagnose - < trace.json",
            )
        n = 0
        with open(target, "wb") as f:
            while chunk := src.read(8 << 20):
                n += len(chunk)
                if n > STREAM_MAX_BYTES:
                    raise InputError(
                        f"stream is longer than {STREAM_MAX_BYTES:,} bytes",
                        path=raw,
                        hint="save the trace to a file first",
                    )
                f.write(chunk)
    except OSError as e:
        raise InputError(
            f"cannot read: {e.strerror}", path=raw, hint="check the command that writes the pipe"
        ) from None
    finally:
        if close:
            src.close()
    return target


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
    """The file's bytes as stored (compressed or not); only a regular file is read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise InputError("no such file", path=path, hint="check the path") from None
    except OSError as e:
        raise InputError(
            f"cannot read: {e.strerror}", path=path, hint="check the path and its permissions"
        ) from e
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise InputError(
                "is a directory", path=path, hint="pass the folder itself, not a file in it"
            )
        kind = special_kind(st.st_mode)
        if kind:
            raise InputError(
                f"is {kind}, not a regular file",
                path=path,
                hint="save the trace to a file, or pipe it on stdin",
            )
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read()
    except OSError as e:
        raise InputError(
            f"cannot read: {e.strerror}", path=path, hint="check the file and its permissions"
        ) from e
    finally:
        os.close(fd)


#: the leading bytes of common non-trace files -> what to call them
_MAGIC = (
    (b"PK\x03\x04", "a ZIP archive"),
    (b"\x89PNG", "a PNG image"),
    (b"%PDF", "a PDF document"),
    (b"\x7fELF", "an executable"),
    (b"PAR1", "a parquet file"),
    (b"BZh", "bzip2 data"),
    (b"\xfd7zXZ", "xz data"),
    (b"\x28\xb5\x2f\xfd", "zstd data"),
    (b"\x80", "a Python pickle"),
    (b"\xff\xd8\xff", "a JPEG image"),
)


def file_kind(data: bytes) -> str:
    """What kind of file ``data`` begins, in words, never quoting it: a file that is not a
    trace may hold anything (a password, a key), and none of it belongs in an error."""
    if not data:
        return "it is empty"
    for magic, what in _MAGIC:
        if data.startswith(magic):
            return f"it looks like {what}"
    head = data[:4096]
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as e:
        if e.start < len(head) - 4:  # not a multi-byte character cut at the end
            return "it is binary data"
        text = head[: e.start].decode("utf-8")
    printable = sum(c.isprintable() or c in "\r\n\t" for c in text)
    if text and printable >= 0.95 * len(text):
        return "it is plain text"
    return "it is binary data"


def whole_limit() -> int:
    """The most bytes of content a file read whole may hold (see :data:`WHOLE_SHARE`)."""
    return int(settings.get("TRACEINSIGHT_MAX_MEMORY_MB") * (1 << 20) / WHOLE_SHARE)


def too_large_whole(path: Path | str, what: str) -> TraceFormatError:
    """The error for content beyond :func:`whole_limit`."""
    mb = settings.get("TRACEINSIGHT_MAX_MEMORY_MB")
    return TraceFormatError(
        f"{what} is over {whole_limit():,} bytes, more than a file read whole may hold in "
        f"memory (a quarter of the {mb:g} MB memory limit)",
        path=path,
        hint="raise TRACEINSIGHT_MAX_MEMORY_MB to read it; damaged or hostile data can expand "
        "far beyond any real input, so check where the file came from",
    )


def gunzip(path: Path, data: bytes, *, salvage: bool = False) -> bytes:
    """The content of gzip bytes ``data``, decompressed as a stream (every member; NUL padding
    after the last is ignored). A clear error when the stream is damaged, and when it expands
    beyond :data:`GZIP_MAX_RATIO` times its size (a decompression bomb) or beyond
    :func:`whole_limit` (the content is in memory at once); with ``salvage`` a stream that
    ends early gives what it holds (the reader then keeps its complete events)."""
    cut = (lambda n: None) if salvage else None
    pieces = gunzip_pieces(
        path, io.BytesIO(data).read, len(data), on_truncated=cut, most=whole_limit()
    )
    return b"".join(pieces)


def gunzip_pieces(
    path: Path,
    read: Callable[[int], bytes],
    size: int,
    *,
    on_truncated: Callable[[int], None] | None = None,
    most: int | None = None,
) -> Iterator[bytes]:
    """The content of the gzip stream ``read`` returns (``size`` bytes in all), piece by piece
    (at most 16 MiB each): what :func:`gunzip` joins, for callers that write it on as it comes
    (a large trace is never whole in memory). The same checks and errors as :func:`gunzip`.

    ``on_truncated``: a stream that ends before its end-of-stream marker (a job killed while
    writing it) ends the content where the data ends instead of raising; the function is
    called once with the number of bytes decompressed (salvage). ``most``: content beyond
    this many bytes is refused (:func:`too_large_whole`)."""
    limit = min(GZIP_MAX_BYTES, max(GZIP_FLOOR, GZIP_MAX_RATIO * size))
    total = 0
    pending = b""  # input read but not yet given to a decompressor (the next member's start)
    try:
        while True:  # one gzip member at a time
            d = zlib.decompressobj(wbits=31)
            while not d.eof:
                if d.unconsumed_tail:
                    inp = d.unconsumed_tail
                elif pending:
                    inp, pending = pending, b""
                else:
                    inp = read(1 << 20)
                    if not inp:
                        raise EOFError
                out = d.decompress(inp, 16 << 20)
                total += len(out)
                if total > limit:
                    raise TraceFormatError(
                        f"gzip content expands beyond {limit:,} bytes, over {GZIP_MAX_RATIO}x "
                        f"the file's {size:,}: a decompression bomb, not a trace",
                        path=path,
                        hint="check where the file came from; real traces compress "
                        "5-40x (TRACEINSIGHT_GZIP_MAX_RATIO raises the limit)",
                    )
                if most is not None and total > most:
                    raise too_large_whole(path, "gzip content")
                if out:
                    yield out
            rest = d.unused_data  # the next member starts there
            while len(rest) < len(GZIP_MAGIC) and (more := read(1 << 20)):
                rest += more
            if rest.startswith(GZIP_MAGIC):
                pending = rest
                continue
            trailing, nul = len(rest), rest.count(0)
            while more := read(1 << 20):
                trailing += len(more)
                nul += more.count(0)
            if nul != trailing:  # NUL padding is allowed
                raise zlib.error(f"{trailing:,} bytes of trailing data after the stream")
            break
    except EOFError:
        if on_truncated is not None:
            on_truncated(total)
            return
        raise TraceFormatError(
            "gzip stream is truncated (the file ends before the end-of-stream marker)",
            path=path,
            hint="the copy is incomplete: copy or download it again, or pass --salvage to "
            "read the complete events of a trace",
        ) from None
    except zlib.error as e:
        raise TraceFormatError(
            f"corrupt gzip data ({e})",
            path=path,
            hint="the file is damaged: copy or download it again",
        ) from e


# --- rank discovery -------------------------------------------------------------------------

_RANK_RE = re.compile(r"(?:^|[^a-z0-9])rank[-_ ]?(\d+)", re.IGNORECASE)
_WORKER_RE = re.compile(r"(?:^|[^a-z0-9])worker[-_ ]?(\d+)", re.IGNORECASE)


def rank_from_filename(name: str) -> int | None:
    m = _RANK_RE.search(name) or _WORKER_RE.search(name)
    return int(m.group(1)) if m else None


def scan_folder(
    directory: Path,
    suffixes: tuple[str, ...],
    listing: list[tuple[str, bool]] | None = None,
) -> tuple[list[Path], list[tuple[Path, str]]]:
    """The candidate trace files of a folder (not recursive, names ending in one of
    ``suffixes``), sorted by name, and the candidates that cannot be read as regular files
    (a broken or looping link, a FIFO, a device, a folder, no read permission) with why.
    ``listing``, when given, receives every entry of the folder as (name, is a folder), in
    name order: the folder is listed once, and what it held besides traces is said from that."""
    files: list[Path] = []
    problems: list[tuple[Path, str]] = []
    try:
        entries = sorted(directory.iterdir())
    except OSError as e:
        raise InputError(
            f"cannot list the folder: {e.strerror}", path=directory, hint="check its permissions"
        ) from e
    for p in entries:
        if not p.name.lower().endswith(suffixes):
            if listing is not None:
                listing.append((p.name, p.is_dir()))
            continue
        try:
            st = p.stat()
        except FileNotFoundError:
            problems.append((p, "a link to a missing file"))
            if listing is not None:
                listing.append((p.name, False))
            continue
        except OSError as e:
            problems.append((p, (e.strerror or str(e)).lower()))
            if listing is not None:
                listing.append((p.name, p.is_dir()))
            continue
        if listing is not None:
            listing.append((p.name, stat.S_ISDIR(st.st_mode)))
        if stat.S_ISDIR(st.st_mode):
            problems.append((p, "a folder, not a trace file"))
        elif not stat.S_ISREG(st.st_mode):
            problems.append((p, f"{special_kind(st.st_mode)}, not a regular file"))
        elif not os.access(p, os.R_OK):
            problems.append((p, "permission denied"))
        else:
            files.append(p)
    return files, problems


def skipped_hint(messages: list[str], *, limit: int = 3) -> str | None:
    """Why the files of a folder were skipped, grouped by reason with a few names each
    ("200 skipped: file is empty (rank0.json, rank1.json, rank10.json and 197 more)"):
    one readable hint however many files there are. Messages read ``NAME skipped: REASON``."""
    groups: dict[str, list[str]] = {}
    for m in messages:
        name, sep, why = m.partition(" skipped: ")
        groups.setdefault(why if sep else m, []).append(name if sep else "")
    parts = []
    for why, names in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        shown = ", ".join(n for n in names[:limit] if n)
        more = f" and {len(names) - limit:,} more" if len(names) > limit else ""
        count = f"{len(names):,} skipped: " if len(names) > 1 else ("skipped: " if shown else "")
        parts.append(f"{count}{why}" + (f" ({shown}{more})" if shown else ""))
    return "; ".join(parts)[:600] or None
