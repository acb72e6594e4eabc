"""Repairs for the invalid JSON real profilers write, and clear errors for what cannot be fixed.

Seen in the wild (docs/FORMATS.md §1.12): unescaped ``"`` inside names (pytorch/pytorch#146900),
Windows paths with lone backslashes (pytorch/pytorch#98432), control characters and invalid
UTF-8 (pytorch/pytorch#130622), bare ``N/A`` values. Each repair is counted and reported as a
diagnostic; the repaired bytes are decoded by the same fast decoder.
"""

from __future__ import annotations

import re

import msgspec

from ..diagnostics import DiagnosticLog
from ..errors import TraceFormatError

_NA_RE = re.compile(rb"(?<=[:,\[])(\s*)N/A(?=\s*[,}\]])")
_LONE_BACKSLASH_RE = re.compile(rb'\\(?![\\"/bfnrtu])')
_CTRL_RE = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f]")
_BYTE_RE = re.compile(r"\(byte (\d+)\)")
MAX_QUOTE_FIXES = 200


def _offset(err: str) -> int | None:
    m = _BYTE_RE.search(err)
    return int(m.group(1)) if m else None


def repair_json(data: bytes, err: str, source: str, diags: DiagnosticLog) -> bytes:
    """Return repaired bytes (or ``data`` unchanged when nothing applies)."""
    if "truncated" in err:
        return data
    fixed = data
    try:
        fixed.decode("utf-8")
    except UnicodeDecodeError:
        text = fixed.decode("utf-8", errors="replace")
        n = text.count("\ufffd")
        fixed = text.encode("utf-8")
        diags.add("json-repaired", "invalid UTF-8 bytes replaced by U+FFFD", source=source, count=n)
    fixed, n = _NA_RE.subn(rb"\1null", fixed)
    if n:
        diags.add("json-repaired", "bare N/A values read as null", source=source, count=n)
    fixed, n = _LONE_BACKSLASH_RE.subn(rb"\\\\", fixed)
    if n:
        diags.add("json-repaired", "lone backslashes (Windows paths) escaped", source=source,
                  count=n)
    fixed, n = _CTRL_RE.subn(lambda m: b"\\u%04x" % m.group(0)[0], fixed)
    if n:
        diags.add("json-repaired", "raw control characters escaped", source=source, count=n)
    # unescaped quotes inside strings: escape the quote right before each parse error
    quotes = 0
    dec = msgspec.json.Decoder()
    buf = bytearray(fixed)
    for _ in range(MAX_QUOTE_FIXES):
        try:
            dec.decode(bytes(buf))
            break
        except msgspec.DecodeError as e:
            off = _offset(str(e))
            if off is None or "truncated" in str(e):
                break
            q = _quote_before(buf, off)
            if q is None:
                break
            buf[q:q] = b"\\"
            quotes += 1
    if quotes:
        diags.add("json-repaired", "unescaped quotes inside names escaped", source=source,
                  count=quotes)
        fixed = bytes(buf)
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


def explain_decode_error(data: bytes, err: str, source: str) -> TraceFormatError:
    """A one-line error for JSON that could not be decoded even after the repairs."""
    if "truncated" in err:
        tail = data.rstrip()[-1:]
        return TraceFormatError(
            f"JSON is truncated: the file ends at byte {len(data):,} inside the event list"
            + (f" (last character {tail.decode('latin-1')!r})" if tail else ""),
            path=source,
            hint="the profiler probably stopped before finishing the file, or the copy is "
                 "incomplete; re-export it, or pass --salvage to read the complete events")
    off = _offset(err)
    where = f" at byte {off:,}" if off is not None else ""
    context = ""
    if off is not None:
        snippet = data[max(0, off - 30):off + 30].decode("utf-8", "replace")
        context = " near {!r}".format(snippet.replace("\n", " "))
    return TraceFormatError(
        f"invalid JSON{where}{context} ({err.split(' (byte')[0]})", path=source,
        hint="the file is damaged or not a trace; check how it was produced or copied")


def salvage_truncated(data: bytes, diags: DiagnosticLog, source: str,
                      max_tries: int = 64) -> bytes | None:
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
        candidate = data[:end + 1] + (b"]}" if obj_layout else b"]")
        try:
            dec.decode(candidate)
        except msgspec.DecodeError:
            continue
        diags.add("truncated-salvaged",
                  f"truncated file: read up to byte {end + 1:,} of {len(data):,} (the events "
                  "after the cut are lost)", source=source, count=len(data) - end - 1)
        return candidate
    return None
