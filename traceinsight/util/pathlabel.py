"""Short labels that tell paths apart: each the shortest suffix of its path's parts that no
other path shares.

``h100/Qwen.json.gz`` and ``mi300/Qwen.json.gz`` are labelled by their folder, not both
``Qwen.json.gz``; paths whose names already differ keep the bare name. Paths that are equal
part for part (the same file given twice) keep their full form."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import PurePath


def distinct_labels(paths: Sequence[str | PurePath]) -> list[str]:
    """One label per path: its last ``k`` parts (``/``-separated), ``k`` the smallest for which
    no other, different path ends in the same ``k`` parts (at least the file name)."""
    parts = [PurePath(p).parts for p in paths]
    out = []
    for i, p in enumerate(parts):
        others = [q for q in parts if q != p]
        k = 1
        while k < len(p) and any(q[-k:] == p[-k:] for q in others):
            k += 1
        out.append("/".join(x for x in p[-k:] if x != "/") or str(paths[i]))
    return out


def distinct_pair(a: str | PurePath, b: str | PurePath) -> tuple[str, str]:
    """:func:`distinct_labels` of two paths."""
    x, y = distinct_labels([a, b])
    return x, y
