"""Markdown text primitives both Markdown bodies use (the diagnosis' in ``markdown.py``, the
compare's in ``compare_markdown.py``): prose escaped so no renderer turns it into markup, names
as code spans, GFM tables."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from traceinsight.util import fmt

#: how a finding's severity is written
SEV_LABEL = {"high": "HIGH", "medium": "MEDIUM", "low": "LOW", "info": "INFO"}

_PROSE = re.compile(r"([\\`*\[\]<>|#~])")
_UNDERSCORE = re.compile(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")


def esc(text: Any) -> str:
    """Prose for Markdown: one line, the characters that could become markup escaped."""
    s = " ".join(str(text).split())
    s = _PROSE.sub(r"\\\1", s)
    return _UNDERSCORE.sub(r"\\_", s)


def code(text: Any, width: int = 90) -> str:
    """A name as a code span (its content is never markup); ``|`` escaped for GFM tables."""
    s = fmt.shorten(" ".join(str(text).split()), width)
    longest = max((len(m) for m in re.findall(r"`+", s)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if s.startswith("`") or s.endswith("`") or not s.strip() else ""
    return f"{fence}{pad}{s}{pad}{fence}".replace("|", "\\|")


def md_table(headers: Sequence[str], rows: list[list[str]], align: str) -> list[str]:
    """A GFM table's lines (``align``: one ``l`` or ``r`` per column)."""
    sep = ["---:" if a == "r" else "---" for a in align]
    out = ["| " + " | ".join(headers) + " |", "| " + " | ".join(sep) + " |"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out
