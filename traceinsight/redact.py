"""Patterns for what looks like a secret; shared by the ingest's metadata filter and the
renderers (report prose, command lines). No heavy imports: rendering a saved result uses it."""

from __future__ import annotations

import re

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
