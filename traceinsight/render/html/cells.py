"""Table cells and table views of the HTML reports.

A table view is columns ``{name, format, num, title}`` and rows of cells; a cell holds the text
(:func:`traceinsight.util.fmt.format_cell`), a sort key, a tooltip and its styling. The ``[N more]``
row of a capped rollup goes to the footer (it never sorts).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from typing import Any

from traceinsight.render.html.svg import num
from traceinsight.util.fmt import format_cell
from traceinsight.util.kernelname import short_names
from traceinsight.util.vocab import CLASSES, is_more_row

#: input dims longer than this (characters; about three lines of their cell) get a tooltip
DIMS_TITLE_OVER = 100
#: a demangled C++ kernel signature or a mangled name (what :mod:`kernelname` shortens)
_CXX_SIGNATURE = re.compile(r"[<(]|^_Z")
#: rows shown before a table folds the rest behind "show all"
TABLE_LIMIT = 25
#: column formats that hold numbers (right-aligned, sorted by value)
NUMERIC_FORMATS = {
    "ns",
    "bytes",
    "pct",
    "count",
    "ratio",
    "rate_flops",
    "rate_bytes",
    "share",
    "num",
    "dns",
    "dpct",
    "spct",
}
#: css class per contributor kind and per row status (``tag`` / ``status`` cells of a compare)
TAG_CLASS = {
    "layer": "k-layer",
    "op": "k-op",
    "class": "k-class",
    "concurrency": "k-concurrency",
    "comm": "k-comm",
    "memcpy": "k-memcpy",
    "memset": "k-memset",
    "idle": "k-idle",
    "new": "st-new",
    "gone": "st-gone",
    "same": "st-same",
}


def css_ident(s: str) -> str:
    """A kernel class as a css class suffix (``other`` for anything unknown)."""
    s = str(s).lower()
    return s if s in CLASSES else "other"


def tone(delta: Any, pct: Any = None, *, more_is_better: bool = False, ndigits: float = 1.0) -> str:
    """``bad`` / ``good`` / "" for a change (a change under ``ndigits`` % is no change)."""
    if delta is None or not float(delta):
        return ""
    if pct is not None and abs(float(pct)) < ndigits:
        return ""
    worse = float(delta) > 0
    if more_is_better:
        worse = not worse
    return "bad" if worse else "good"


def cell(v: Any, kind: str) -> dict[str, Any]:
    """One table cell: text, sort key, tooltip, styling."""
    c: dict[str, Any] = {
        "t": format_cell(v, kind),
        "v": "",
        "title": "",
        "kind": "text",
        "cls": "",
        "parent": "",
        "depth": 0,
        "bar": 0.0,
    }
    if v is None:
        c["kind"] = "num" if kind in NUMERIC_FORMATS else "text"
        return c
    if kind in NUMERIC_FORMATS:
        try:
            x = float(v)
        except (TypeError, ValueError):
            c["v"] = str(v)
            return c
        if not math.isfinite(x):
            c["kind"] = "num"
            return c
        c["kind"] = "share" if kind == "share" else "num"
        c["v"] = num(x, 6)
        if kind == "share":
            c["bar"] = round(max(0.0, min(100.0, x)), 1)
        elif kind in ("dns", "dpct") and x:  # a change of time: more is worse
            c["cls"] = "d-worse" if x > 0 else "d-better"
        return c
    s = str(v)
    c["v"] = s.lower()
    if kind == "kernel":
        c["kind"] = "kernel"
        if c["t"] != " ".join(s.split()):
            c["title"] = s
    elif kind == "class":
        c["kind"] = "class"
        c["cls"] = css_ident(s)
    elif kind in ("status", "tag"):  # compare: new/gone/same, contributor kind
        c["kind"] = kind
        c["cls"] = TAG_CLASS.get(s, "other")
    elif kind == "dims":  # input shapes: wrap anywhere, three lines at most (all in the tooltip)
        c["kind"] = "dims"
        c["title"] = c["t"] if len(c["t"]) > DIMS_TITLE_OVER else ""
    elif kind == "op":  # an op name: wraps anywhere rather than widen the table
        c["kind"] = "op"
    elif kind == "module":
        parts = s.split("/")
        c["kind"] = "module"
        c["t"] = parts[-1]
        c["parent"] = "/".join(parts[:-1]) + "/" if len(parts) > 1 else ""
        c["title"] = s
        c["v"] = s
    return c


def table(
    tid: str,
    columns: Sequence[dict[str, str] | tuple[str, str]],
    rows: Iterable[Sequence[Any]],
    *,
    limit: int = TABLE_LIMIT,
    filterable: bool = False,
    note: str = "",
    sortable: bool = True,
) -> dict[str, Any]:
    """A table view: columns ``{name, format}`` and rows of raw values; the ``[N more]`` row of
    a capped rollup goes to the footer (it never sorts)."""
    given = [c if isinstance(c, dict) else {"name": c[0], "format": c[1]} for c in columns]
    cols: list[dict[str, Any]] = [
        {
            "name": str(c["name"]),
            "format": str(c.get("format") or "text"),
            "num": str(c.get("format") or "text") in NUMERIC_FORMATS,
            "title": str(c.get("title") or ""),
        }
        for c in given
    ]
    body: list[list[dict[str, Any]]] = []
    foot: list[list[dict[str, Any]]] = []
    for r in rows:
        cells = [cell(v, c["format"]) for c, v in zip(cols, list(r) + [None] * len(cols))]
        first = r[0] if len(r) else None
        (foot if is_more_row(first) else body).append(cells)
    _short_kernel_cells(cols, body + foot)
    for i, c in enumerate(cols):  # share bars relative to the largest share in the column
        if c["format"] == "share":
            top = max((row[i]["bar"] for row in body), default=0.0) or 1.0
            for row in body + foot:
                row[i]["bar"] = round(min(100.0, 100.0 * row[i]["bar"] / top), 1)
    return {
        "id": tid,
        "columns": cols,
        "rows": body,
        "foot": foot,
        "limit": int(limit),
        "filter": bool(filterable) and len(body) > limit,
        "note": note,
        "sortable": sortable and len(body) > 1,
    }


def _short_kernel_cells(cols: list[dict[str, Any]], rows: list[list[dict[str, Any]]]) -> None:
    """Kernel cells read the table's distinct short names (:func:`kernelname.short_names`, as
    the terminal shows them), the full name on hover. Only C++ kernel signatures (template
    arguments, an argument list, a mangled name) are shortened: an operator in a mixed column
    (``aten::mm``) keeps its namespace."""
    for i, c in enumerate(cols):
        if c["format"] != "kernel":
            continue
        cells = [row[i] for row in rows if row[i]["kind"] == "kernel"]
        full = {id(x): x["title"] or x["t"] for x in cells}
        cells = [x for x in cells if _CXX_SIGNATURE.search(full[id(x)])]
        short = short_names(full[id(x)] for x in cells)
        for x in cells:
            name = full[id(x)]
            x["t"] = short.get(name, x["t"])
            x["title"] = name if x["t"] != " ".join(name.split()) else ""


def evidence_columns(cols: list[dict[str, Any]]) -> list[dict[str, str]]:
    """A finding's evidence columns, with text columns of kernels, classes and dims typed."""
    out = []
    for c in cols:
        name, f = str(c.get("name", "")), str(c.get("format") or "text")
        if f == "text" and name in ("kernel", "kernels"):
            f = "kernel"
        elif f == "text" and name == "class":
            f = "class"
        elif f == "text" and name in ("shapes", "input dims", "dims", "input_dims"):
            f = "dims"
        out.append({"name": name, "format": f})
    return out
