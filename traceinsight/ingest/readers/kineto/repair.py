"""Repairs for the invalid JSON real profilers write, and clear errors for what cannot be fixed.

Seen in the wild (docs/FORMATS.md §1.12): unescaped ``"`` inside names (pytorch/pytorch#146900),
Windows paths with lone backslashes (pytorch/pytorch#98432), control characters and invalid
UTF-8 (pytorch/pytorch#130622), bare ``N/A`` values, ``NaN`` / ``Infinity`` literals, a tail of
NUL bytes left by a crash (the file's space was allocated, its text never written) and data
after the end of the document. Each repair is counted and reported as a diagnostic; the
repaired bytes are decoded by the same fast decoder. Every step runs over whole byte strings in
C (regular expressions with fixed replacements, ``bytes.replace``, an incremental UTF-8
decoder): memory stays proportional to the input and there is no Python callback per byte.
"""

from __future__ import annotations

import codecs
import re
from collections import Counter
from collections.abc import Callable
from typing import TypeVar

import msgspec

from traceinsight.diagnostics import DiagnosticLog
from traceinsight.errors import TraceFormatError

T = TypeVar("T")

_NA_RE = re.compile(rb"(?<=[:,\[])(\s*)N/A(?=\s*[,}\]])")
_NAN_RE = re.compile(rb"(?<=[:,\[])(\s*)(?:-?Infinity|NaN)(?=\s*[,}\]])")
_NAN_KEY_RE = re.compile(rb'"([^"\\]{1,64})"\s*:\s*(?:-?Infinity|NaN)(?=\s*[,}\]])')
_SAFE_KEY_RE = re.compile(r"^[A-Za-z0-9 _.#%/-]{1,40}$")
_LONE_BACKSLASH_RE = re.compile(rb'\\(?![\\"/bfnrtu])')
_CTRL_RE = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f]")
_CTRL_BYTES = [c for c in range(0x20) if c not in (0x09, 0x0A, 0x0D)]
_BYTE_RE = re.compile(r"\(byte (\d+)\)")
MAX_QUOTE_FIXES = 200
#: more damaged bytes than this share of the file: binary data, not a damaged trace
MAX_DAMAGED_SHARE = 0.01
_UTF8_CHUNK = 16 << 20


def _offset(err: str) -> int | None:
    m = _BYTE_RE.search(err)
    return int(m.group(1)) if m else None


def _too_damaged(n: int, size: int, what: str, source: str) -> TraceFormatError | None:
    if n > max(1000, MAX_DAMAGED_SHARE * size):
        return TraceFormatError(
            f"holds {n:,} {what} in {size:,} bytes: binary data, not a damaged JSON trace",
            path=source,
            hint="check that this is the trace file the profiler wrote",
        )
    return None


def recover(
    data: bytes,
    err: str,
    decode: Callable[[bytes], T],
    source: str,
    diags: DiagnosticLog,
    *,
    salvage: bool,
) -> T:
    """Decode JSON ``data`` that failed with ``err``: drop a tail of NUL bytes, stop at the end
    of the document when data follows it, repair known defects, and with ``salvage`` read the
    complete events of a truncated file. Raises a one-line :class:`TraceFormatError` otherwise.
    ``decode`` may also raise ``msgspec.ValidationError`` (passed through)."""
    body = data
    nul = len(data) - len(data.rstrip(b"\0"))
    if nul:
        body = data[: len(data) - nul].rstrip()
        diags.add(
            "nul-tail",
            f"the file ends with {nul:,} NUL bytes after byte {len(body):,} "
            "(a crash remnant: space allocated, text never written); ignored",
            severity="info",
            source=source,
            count=nul,
        )
        try:
            return decode_checked(decode, body, source)
        except msgspec.ValidationError:
            raise
        except msgspec.DecodeError as e:
            err = str(e)
    if "trailing characters" in err:
        return _after_document(body, err, decode, source, diags)
    if "truncated" in err:
        return _truncated(body, decode, source, diags, salvage=salvage, nul=nul)
    fixed = repair_json(body, err, source, diags)
    try:
        return decode_checked(decode, fixed, source)
    except msgspec.ValidationError:
        raise
    except msgspec.DecodeError as e2:
        if "truncated" in str(e2):
            if _closed(body):
                # the file ends as a document ends: the first error stands (a stray token in a
                # complete file); the "truncation" is an artefact of the attempted repair
                raise explain_decode_error(body, err, source) from None
            return _truncated(fixed, decode, source, diags, salvage=salvage, nul=nul)
        if "trailing characters" in str(e2):
            return _after_document(fixed, str(e2), decode, source, diags)
        raise explain_decode_error(body, str(e2), source) from None


def _closed(data: bytes) -> bool:
    """Whether ``data`` ends the way its document began: ``{ ... }`` or ``[ ... ]``."""
    head, tail = data.lstrip()[:1], data.rstrip()[-1:]
    return (head, tail) in ((b"{", b"}"), (b"[", b"]"))


def decode_checked(decode: Callable[[bytes], T], data: bytes, source: str) -> T:
    """``decode(data)``, with a clear error for nesting deeper than the decoder's stack."""
    try:
        return decode(data)
    except RecursionError:
        raise TraceFormatError(
            "JSON is nested too deeply to read (thousands of levels: not a profiler trace)",
            path=source,
            hint="check how the file was produced",
        ) from None


def _after_document(
    data: bytes, err: str, decode: Callable[[bytes], T], source: str, diags: DiagnosticLog
) -> T:
    """The document that ends before byte ``offset(err)``; what follows is reported."""
    off = _offset(err)
    if off is None or off <= 1:
        raise explain_decode_error(data, err, source)
    off -= 1  # the decoder counts the first trailing byte as read
    try:
        obj = decode_checked(decode, data[:off], source)
    except msgspec.ValidationError:
        raise
    except msgspec.DecodeError as e:
        raise explain_decode_error(data, str(e), source) from None
    extra = len(data) - off
    diags.add(
        "trailing-data",
        f"{extra:,} bytes ({_describe(data[off : off + 256])}) after the "
        f"end of the JSON document at byte {off:,} ignored",
        source=source,
        count=extra,
        hint="the file was appended to or concatenated with another; the trace itself is complete",
    )
    return obj


def _describe(tail: bytes) -> str:
    """What trailing bytes look like, in a few words (never their text)."""
    t = tail.lstrip()
    if t[:1] in (b"{", b"["):
        return "another JSON value"
    if t and not t.strip(b"\0"):
        return "NUL bytes"
    printable = sum(32 <= b < 127 or b in (9, 10, 13) for b in t)
    return "text" if t and printable >= 0.9 * len(t) else "binary data"


def _truncated(
    data: bytes,
    decode: Callable[[bytes], T],
    source: str,
    diags: DiagnosticLog,
    *,
    salvage: bool,
    nul: int,
) -> T:
    if salvage:
        cut = salvage_truncated(data, diags, source)
        if cut is not None:
            return decode_checked(decode, cut, source)
        raise TraceFormatError(
            f"JSON is truncated at byte {len(data):,} and holds no complete event to salvage",
            path=source,
            hint="the profiler stopped before writing any event; record again",
        )
    raise explain_truncated(data, source, nul=nul)


def repair_json(data: bytes, err: str, source: str, diags: DiagnosticLog) -> bytes:
    """Return repaired bytes (or ``data`` unchanged when nothing applies)."""
    if "truncated" in err:
        return data
    fixed = _valid_utf8(data, source, diags)
    fixed, n = _NA_RE.subn(rb"\1null", fixed)
    if n:
        diags.add("json-repaired", "bare N/A values read as null", source=source, count=n)
    fixed = _nan_to_null(fixed, source, diags)
    fixed, n = _LONE_BACKSLASH_RE.subn(rb"\\\\", fixed)
    if n:
        diags.add(
            "json-repaired", "lone backslashes (Windows paths) escaped", source=source, count=n
        )
    fixed, n = _escape_controls(fixed, source)
    if n:
        diags.add("json-repaired", "raw control characters escaped", source=source, count=n)
    return _fix_quotes(fixed, source, diags)


def _valid_utf8(data: bytes, source: str, diags: DiagnosticLog) -> bytes:
    """``data`` with invalid UTF-8 replaced by U+FFFD, decoded in chunks (bounded memory)."""
    try:
        data.decode("utf-8")
        return data
    except UnicodeDecodeError:
        pass
    dec = codecs.getincrementaldecoder("utf-8")("replace")
    parts: list[bytes] = []
    n = 0
    for i in range(0, len(data), _UTF8_CHUNK):
        text = dec.decode(data[i : i + _UTF8_CHUNK], final=i + _UTF8_CHUNK >= len(data))
        n += text.count("\ufffd")
        err = _too_damaged(n, len(data), "invalid UTF-8 sequences", source)
        if err:
            raise err
        parts.append(text.encode("utf-8"))
    diags.add("json-repaired", "invalid UTF-8 bytes replaced by U+FFFD", source=source, count=n)
    return b"".join(parts)


def _nan_to_null(data: bytes, source: str, diags: DiagnosticLog) -> bytes:
    """``NaN`` / ``Infinity`` literals (not JSON) read as missing values, the fields named."""
    fixed, n = _NAN_RE.subn(rb"\1null", data)
    if not n:
        return data
    keys: Counter[str] = Counter()
    for i, m in enumerate(_NAN_KEY_RE.finditer(data)):
        if i >= 10_000:
            break
        k = m.group(1).decode("utf-8", "replace")
        keys[k if _SAFE_KEY_RE.match(k) else "(other)"] += 1
    fields = ", ".join(f"{k} ×{c:,}" for k, c in keys.most_common(5)) or "list items"
    diags.add(
        "non-finite-values",
        f"NaN/Infinity literals (not valid JSON) read as missing values: {fields}",
        source=source,
        count=n,
        hint="the producer wrote non-finite numbers; those values are unknown",
    )
    return fixed


def _escape_controls(data: bytes, source: str) -> tuple[bytes, int]:
    """Raw control bytes written as ``\\u00XX`` escapes (one ``bytes.replace`` per byte value)."""
    if not _CTRL_RE.search(data):
        return data, 0
    n = 0
    for c in _CTRL_BYTES:
        b = bytes((c,))
        k = data.count(b)
        if k:
            n += k
            err = _too_damaged(n, len(data), "raw control bytes", source)
            if err:
                raise err
            data = data.replace(b, b"\\u%04x" % c)
    return data, n


def _fix_quotes(fixed: bytes, source: str, diags: DiagnosticLog) -> bytes:
    """Unescaped quotes inside strings: escape the quote right before each parse error."""
    quotes = 0
    dec = msgspec.json.Decoder()
    buf = bytearray(fixed)
    limit = MAX_QUOTE_FIXES if len(buf) < 64 << 20 else 16
    for _ in range(limit):
        try:
            dec.decode(buf)
            break
        except RecursionError:
            break
        except msgspec.DecodeError as e:
            off = _offset(str(e))
            if off is None or "truncated" in str(e) or "trailing" in str(e):
                break
            q = _quote_before(buf, off)
            if q is None:
                break
            buf[q:q] = b"\\"
            quotes += 1
    if quotes:
        diags.add(
            "json-repaired", "unescaped quotes inside names escaped", source=source, count=quotes
        )
        return bytes(buf)
    return fixed


def _quote_before(buf: bytearray, off: int) -> int | None:
    """Index of the quote that closed a string too early, if the error follows one."""
    i = off - 1
    while i >= 0 and buf[i] in b" \t\r\n":
        i -= 1
    if i < 1 or buf[i] != ord('"'):
        # the error sits inside the text that followed the premature closing quote
        j = off - 1
        while j >= 0 and buf[j] not in b'"\n':
            j -= 1
        if j <= 0 or buf[j] != ord('"') or buf[j - 1] == ord("\\"):
            return None
        return j
    if buf[i - 1] == ord("\\"):
        return None
    return i


def explain_truncated(data: bytes, source: str, *, nul: int = 0) -> TraceFormatError:
    """The error for a file that ends inside its event list."""
    tail = data.rstrip()[-1:]
    padding = f", followed by {nul:,} NUL bytes (a crash remnant)" if nul else ""
    return TraceFormatError(
        f"JSON is truncated: the text ends at byte {len(data):,} inside the event list"
        + (f" (last character {tail.decode('latin-1')!r})" if tail else "")
        + padding,
        path=source,
        hint="the profiler probably stopped before finishing the file, or the copy is "
        "incomplete; re-export it, or pass --salvage to read the complete events",
    )


def explain_decode_error(data: bytes, err: str, source: str) -> TraceFormatError:
    """A one-line error for JSON that could not be decoded even after the repairs."""
    if "truncated" in err:
        return explain_truncated(data, source)
    off = _offset(err)
    where = f" at byte {off:,}" if off is not None else ""
    context = ""
    if off is not None:
        snippet = data[max(0, off - 30) : off + 30].decode("utf-8", "replace")
        context = " near {!r}".format(snippet.replace("\n", " "))
    return TraceFormatError(
        f"invalid JSON{where}{context} ({err.split(' (byte')[0]})",
        path=source,
        hint="the file is damaged or not a trace; check how it was produced or copied",
    )


def salvage_truncated(
    data: bytes, diags: DiagnosticLog, source: str, max_tries: int = 64
) -> bytes | None:
    """Cut a truncated Kineto file after its last complete event and close the JSON.

    Tries the last ``max_tries`` event boundaries (``}`` followed by ``,``); returns None if
    no prefix decodes.
    """
    dec = msgspec.json.Decoder()
    end = len(data)
    obj_layout = data.lstrip()[:1] == b"{"
    for _ in range(max_tries):
        end = data.rfind(b"}", 0, end)
        if end < 0:
            return None
        candidate = data[: end + 1] + (b"]}" if obj_layout else b"]")
        try:
            dec.decode(candidate)
        except (msgspec.DecodeError, RecursionError):
            continue
        diags.add(
            "truncated-salvaged",
            f"truncated file: read up to byte {end + 1:,} of {len(data):,} (the events "
            "after the cut are lost)",
            source=source,
            count=len(data) - end - 1,
        )
        return candidate
    return None
