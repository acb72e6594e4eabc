"""Text from a trace made safe for a terminal: control and bidi characters neutralised.

Names in a trace (kernels, ops, files) may carry raw control sequences: clear-screen, OSC 8
hyperlinks, BEL, carriage returns, or U+202E to reverse what follows. Every terminal view
passes its text through :func:`for_terminal`, which writes each such character as a visible
escape (``\\x1b``, ``\\u202e``); only newlines and tabs pass, and, when the view is coloured,
the SGR colour sequences the view itself added.
"""

from __future__ import annotations

import re

#: C0 controls but tab and newline, DEL, C1 controls, bidi marks, overrides and isolates,
#: and the Unicode line and paragraph separators
UNSAFE = "\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
UNSAFE_RE = re.compile(f"[{UNSAFE}]")
_WITH_SGR_RE = re.compile(f"\x1b\\[[0-9;]{{0,32}}m|[{UNSAFE}]")


def _escape(m: re.Match[str]) -> str:
    s = m.group(0)
    if len(s) > 1:  # an SGR colour sequence (only matched when colours are kept)
        return s
    c = ord(s)
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def for_terminal(text: str, *, keep_sgr: bool = False) -> str:
    """``text`` with every control or bidi character written as a visible escape; newlines
    and tabs kept, and SGR colour sequences too when ``keep_sgr``."""
    return (_WITH_SGR_RE if keep_sgr else UNSAFE_RE).sub(_escape, text)


def scrubbed(obj: object) -> object:
    """``obj`` (a document's view: dicts, lists, strings) with every string passed through
    :func:`for_terminal`, keys included: what a Markdown or HTML document shows of a trace's
    names reads as visible escapes there too, before any encoding (JSON, HTML) is applied."""
    if isinstance(obj, str):
        return for_terminal(obj) if UNSAFE_RE.search(obj) else obj
    if isinstance(obj, dict):
        return {scrubbed(k): scrubbed(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [scrubbed(v) for v in obj]
    return obj


#: the longest name (kernel, op, annotation, frame) kept whole, in characters: a longer one keeps
#: its first NAME_CAP characters and a digest of the whole, so distinct names stay distinct and
#: no classification pattern ever scans megabytes of one name
NAME_CAP = 8192


def cap_name(text: str, *, length: int | None = None, digest: str | None = None) -> str:
    """``text`` when it is at most :data:`NAME_CAP` characters, else its first NAME_CAP
    characters and ``…[N characters, sha256:XXXX]``. ``length`` and ``digest`` describe the
    whole when ``text`` is already its prefix (a reader that never loaded the rest)."""
    n = len(text) if length is None else length
    if n <= NAME_CAP:
        return text
    if digest is None:
        import hashlib

        digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{text[:NAME_CAP]}…[{n:,} characters, sha256:{digest[:16]}]"
