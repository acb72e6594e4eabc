"""Redaction: the patterns for what looks like a secret, the one marker that replaces it, and
the functions that apply them. Shared by the ingest's metadata filter, ``diagnose`` (the
command line) and the renderers (report prose, command lines). No heavy imports: rendering a
saved result uses it."""

from __future__ import annotations

import re
from typing import Any

#: what replaces a secret, everywhere (metadata, command lines, report prose)
REDACTED = "[redacted]"

SECRET_KEY_RE = re.compile(r"(?i)(token|secret|passw|key|auth|cookie|credential)")
#: credentials of known shapes (Hugging Face, GitHub, OpenAI-style, AWS, Slack, JWT)
_TOKENS = (r"hf_[A-Za-z0-9]{8,}|gh[pousr]_[A-Za-z0-9]{16,}|github_pat_[A-Za-z0-9_]{16,}"
           r"|sk-[A-Za-z0-9_\-]{16,}|AKIA[0-9A-Z]{16}|xox[abprs]-[A-Za-z0-9\-]{8,}"
           r"|eyJ[\w\-]{8,}\.[\w\-]{8,}\.[\w\-]{8,}")
#: a token of a known shape anywhere in free text (report prose, command lines)
TOKEN_RE = re.compile(f"({_TOKENS})")
#: metadata values: tokens, and long hex or base64 blobs (keys, signatures)
SECRET_VALUE_RE = re.compile(
    f"({_TOKENS}"
    r"|(?<![A-Za-z0-9])[A-Fa-f0-9]{40,}(?![A-Za-z0-9])|(?<![A-Za-z0-9+/])[A-Za-z0-9+/]{48,}={0,2})"
)
_HOME_RE = re.compile(r"(/home/|/Users/|/root/|C:\\Users\\)[^/\\\s\"']+")


def redact_text(text: str) -> str:
    """Replace credential-looking substrings with :data:`REDACTED` and home-directory user
    names with ``~``."""
    text = SECRET_VALUE_RE.sub(REDACTED, text)
    return _HOME_RE.sub(lambda m: m.group(1) + "~", text)


def redact_tokens(text: Any) -> str:
    """Free text that might quote trace content (report prose): tokens of known shapes only."""
    return TOKEN_RE.sub(REDACTED, str(text))


def redact_arg(arg: Any) -> str:
    """One command-line argument: tokens, and the value of a secret-named ``key=value``."""
    a = redact_tokens(arg)
    if "=" in a and SECRET_KEY_RE.search(a.split("=", 1)[0]):
        a = a.split("=", 1)[0] + "=" + REDACTED
    return a


def redact_value(obj: Any, key: str = "") -> Any:
    """Recursively redact a JSON-like value: secret-named keys and secret-looking strings."""
    if key and SECRET_KEY_RE.search(key):
        return REDACTED
    if isinstance(obj, dict):
        return {str(k): redact_value(v, str(k)) for k, v in obj.items()}
    if isinstance(obj, list):
        return [redact_value(v) for v in obj]
    if isinstance(obj, str):
        return redact_text(obj)
    return obj
