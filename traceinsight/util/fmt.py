"""Value formatting and plain-text tables: the one home for how a number reads, shared by the
terminal, Markdown and HTML output and the rule engine's messages.

Signed changes (``signed_ns``, ``signed_pct``, the ``dns``/``dpct``/``spct`` cells) use the true
minus sign (U+2212) everywhere.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import textwrap
from collections.abc import Sequence
from typing import Any

#: duration units, smallest first, with their size in ns
DURATION_UNITS = (("ns", 1.0), ("µs", 1e3), ("ms", 1e6), ("s", 1e9))


def fmt_ns(ns: float | int | None, *, digits: int = 3) -> str:
    """Nanoseconds as a human duration: ``812 ns``, ``14.2 µs``, ``3.51 ms``, ``2.04 s``.

    The one unit rule for every duration the tool prints: the largest unit in which the value
    is at least 1, shown with ``digits`` significant digits (``2151.9 µs`` reads ``2.15 ms``);
    a value that would round up to 1000 of a unit moves to the next one (``1.00 ms``, never
    ``1000 µs``). Seconds are the largest unit."""
    if ns is None:
        return "–"
    v = float(ns)
    if v == 0:
        return "0"
    a = abs(v)
    for i, (unit, scale) in enumerate(DURATION_UNITS):
        last = i == len(DURATION_UNITS) - 1
        if not last and a >= DURATION_UNITS[i + 1][1]:
            continue
        x = v / scale
        places = 0 if unit == "ns" else max(0, digits - len(str(int(abs(x)))))
        text = f"{x:.{places}f}"
        if not last and abs(float(text)) >= 1000:  # rounded up into the next unit
            continue
        return f"{text} {unit}"
    return f"{v / 1e9:.0f} s"  # pragma: no cover


def fmt_bytes(n: float | int | None) -> str:
    if n is None:
        return "–"
    v = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(v) < 1024 or unit == "TiB":
            return f"{v:.0f} {unit}" if unit == "B" else f"{v:.2f} {unit}"
        v /= 1024
    return f"{v:.2f} TiB"  # pragma: no cover


def fmt_pct(p: float | None, digits: int = 1) -> str:
    return "–" if p is None else f"{p:.{digits}f}%"


def fmt_num(x: float | int | None, digits: int = 2) -> str:
    if x is None:
        return "–"
    if isinstance(x, int) or (float(x).is_integer() and abs(x) < 1e15):
        return f"{int(x):,}"
    return f"{x:,.{digits}f}"


def fmt_rate(x: float | None, unit: str) -> str:
    """FLOP/s or B/s with a metric prefix: ``312 TFLOP/s``, ``1.55 TB/s``."""
    if x is None:
        return "–"
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.3g} {prefix}{unit}"
    return f"{x:.3g} {unit}"


def shorten(text: str, width: int) -> str:
    """Cut to ``width`` characters; paths (``a/b/c``) keep their head and tail."""
    text = " ".join(str(text).split())
    if len(text) <= width:
        return text
    if "/" in text and " " not in text and width >= 16:  # a path, not prose with an "I/O"
        parts = text.split("/")
        tail = parts[-1]
        head = parts[0]
        if len(head) + len(tail) + 3 <= width:
            # keep as many trailing components as fit
            out = tail
            for p in reversed(parts[1:-1]):
                if len(head) + len(out) + len(p) + 4 > width:
                    break
                out = p + "/" + out
            return f"{head}/…/{out}"
        return "…" + text[-(width - 1) :]
    return text[: max(1, width - 1)] + "…"


def short_kernel_name(name: str) -> str:
    """A readable kernel name: no ``void``, no argument list (templates are kept)."""
    s = " ".join(str(name).split())
    if s.startswith("void "):
        s = s[5:]
    if s.endswith(")"):
        depth = 0
        for i in range(len(s) - 1, -1, -1):
            c = s[i]
            if c == ")":
                depth += 1
            elif c == "(":
                depth -= 1
                if depth == 0:
                    if i > 0:
                        s = s[:i]
                    break
    return s


def terminal_width(default: int = 120) -> int:
    return max(60, min(200, shutil.get_terminal_size((default, 24)).columns))


def shorten_middle(text: str, width: int) -> str:
    """Cut to ``width`` characters in the middle (``head…tail``): names that differ at their
    end (template arguments, tile sizes) stay apart."""
    text = " ".join(str(text).split())
    if len(text) <= width:
        return text
    if width < 8:
        return text[: max(1, width - 1)] + "…"
    tail = (width - 1) // 2
    return text[: width - 1 - tail] + "…" + text[-tail:]


def distinct_cuts(values: Sequence[str], width: int) -> dict[str, str]:
    """Each of ``values`` cut to ``width`` in the middle (:func:`shorten_middle`); values that
    would then read the same show, after their head, the part where they differ from the
    others (``igemm_wrw_gtcx3_…bt128x256x32_wt32…``), so distinct names stay distinct."""
    norm = {v: " ".join(str(v).split()) for v in values}
    out = {v: shorten_middle(n, width) for v, n in norm.items()}
    groups: dict[str, list[str]] = {}
    for v, c in out.items():
        groups.setdefault(c, []).append(v)
    head = max(4, width // 3)
    for group in (g for g in groups.values() if len(set(norm[v] for v in g)) > 1):
        for v in group:
            s = norm[v]
            d = max(_common(s, norm[o]) for o in group if norm[o] != s)
            start = max(head + 1, d - 4)
            if len(s) <= width or start >= len(s):
                continue
            shown = s[:head] + "…" + s[start:]
            out[v] = shown if len(shown) <= width else shown[: width - 1] + "…"
    seen: dict[str, list[str]] = {}  # still alike (they differ in several places): numbered
    for v in values:
        if norm[v] not in seen.setdefault(out[v], []):
            seen[out[v]].append(norm[v])
    for v in values:
        alike = seen.get(out[v], [])
        if len(alike) > 1:
            tag = f"#{alike.index(norm[v]) + 1}"
            out[v] = out[v][: max(1, width - len(tag) - 1)].rstrip("…") + "…" + tag
    return out


def _common(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def table(
    rows: Sequence[Sequence[Any]],
    headers: Sequence[str],
    *,
    align: str | None = None,
    max_width: int | None = None,
    flex: int | Sequence[int] | None = None,
    wrap: bool = False,
    middle: Sequence[int] = (),
) -> str:
    """A plain-text table. ``align``: one of l/r per column; ``flex``: the column (or columns)
    that shrink (usually names) when the table is wider than ``max_width``: the widest of them
    first, so their widths end balanced; cut short (in the middle for the columns in
    ``middle``), or with ``wrap`` (for prose, one flex column) continued on the next lines, so
    no sentence is ever cut."""
    cells = [[str(c) for c in r] for r in rows]
    ncol = len(headers)
    align = align or "l" + "r" * (ncol - 1)
    widths = [len(h) for h in headers]
    for r in cells:
        for i, c in enumerate(r):
            widths[i] = max(widths[i], len(c))
    max_width = max_width or terminal_width()
    total = sum(widths) + 2 * (ncol - 1)
    flexes = [flex] if isinstance(flex, int) else list(flex or [])
    if flexes and total > max_width and wrap:
        f = flexes[0]
        widths[f] = max(24, widths[f] - (total - max_width))
        wrapped: list[list[str]] = []
        for r in cells:
            parts = textwrap.wrap(r[f], widths[f], break_on_hyphens=False) or [""]
            first = list(r)
            first[f] = parts[0]
            wrapped.append(first)
            wrapped += [[p if i == f else "" for i in range(ncol)] for p in parts[1:]]
        cells = wrapped
    elif flexes and total > max_width:
        floor = {i: max(12, min(len(headers[i]), 24)) for i in flexes}
        excess = total - max_width
        while excess > 0:
            wide = max(flexes, key=lambda i: widths[i] - floor[i])
            if widths[wide] <= floor[wide]:
                break
            widths[wide] -= 1
            excess -= 1
        cut = {i: distinct_cuts([r[i] for r in cells], widths[i]) for i in middle if i in flexes}
        cells = [
            [
                cut[i][c] if i in cut else shorten(c, widths[i]) if i in flexes else c
                for i, c in enumerate(r)
            ]
            for r in cells
        ]

    def line(vals: Sequence[str]) -> str:
        out = []
        for i, v in enumerate(vals):
            out.append(v.rjust(widths[i]) if align[i] == "r" else v.ljust(widths[i]))
        return "  ".join(out).rstrip()

    sep = "  ".join("─" * w for w in widths)
    return "\n".join([line(headers), sep] + [line(r) for r in cells])


def signed_ns(v: Any) -> str:
    """A change of time with its sign: ``+1.20 ms``, ``−350 µs``, ``0``."""
    if v is None:
        return "–"
    x = float(v)
    if not math.isfinite(x):
        return "–"
    if x == 0:
        return "0"
    return ("+" if x > 0 else "−") + fmt_ns(abs(x))


def signed_pct(p: Any, digits: int = 1) -> str:
    if p is None:
        return "–"
    x = float(p)
    if not math.isfinite(x):
        return "–"
    return f"{x:+.{digits}f}%".replace("-", "−")


# --- cells and metric values ------------------------------------------------------------------


def compact_dims(v: Any) -> str:
    """Input dims as one line in the one shape format, ``[8, 1024]×[1024, 4096]`` (traces may
    hold them as indented JSON; anything that is not a list of shapes stays as it is, on one
    line)."""
    if v is None:
        return "–"
    return shapes_text(v if isinstance(v, str) else json.dumps(v), 10_000) or "–"


def shapes_text(dims: str | None, limit: int = 60) -> str:
    """Input dims (a JSON list) as ``[8, 512]×[512, 512]`` (the shape of each tensor input,
    empty ones left out), cut to ``limit`` characters."""
    if not isinstance(dims, str) or not dims:
        return ""
    try:
        val = json.loads(dims)
        if not isinstance(val, list):
            raise ValueError
        text = "×".join(
            "[" + ", ".join(str(d) for d in x) + "]"
            if isinstance(x, list) and all(isinstance(d, int) for d in x)
            else json.dumps(x, separators=(", ", ": "))
            for x in val
            if x not in ([], "", None)
        )
    except (ValueError, RecursionError):
        text = re.sub(r"\s+", "", dims).replace("],[", "], [")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def format_cell(v: Any, kind: str) -> str:
    """A raw table value as text by its column format (``ns``, ``bytes``, ``pct``, ``share``,
    ``count``, ``ratio``, ``num``, ``rate_flops``, ``rate_bytes``, the signed ``dns`` / ``dpct`` /
    ``spct``, ``kernel``, ``dims``; anything else is text on one line)."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "–"
    try:
        if kind == "ns":
            return fmt_ns(v)
        if kind == "bytes":
            return fmt_bytes(v)
        if kind in ("pct", "share"):
            return fmt_pct(v)
        if kind == "count":
            return fmt_num(v, 0)
        if kind == "ratio":
            return f"{float(v):.2f}"
        if kind == "num":
            return fmt_num(v)
        if kind == "rate_flops":
            return fmt_rate(v, "FLOP/s")
        if kind == "rate_bytes":
            return fmt_rate(v, "B/s")
        if kind == "dns":
            return signed_ns(v)
        if kind in ("dpct", "spct"):
            return signed_pct(v)
    except (TypeError, ValueError):
        pass
    if kind == "kernel":
        return short_kernel_name(str(v))
    if kind == "dims":
        return compact_dims(v)
    return " ".join(str(v).split()) if isinstance(v, str) else str(v)


#: metric units that read like a table column format
_UNIT_FORMATS = {"%": "pct", "ns": "ns", "bytes": "bytes", "ratio": "ratio"}


def format_metric(v: float | None, unit: str) -> str:
    """A measured metric value by its registry unit (rule messages and evidence)."""
    if v is None:
        return "–"
    if unit in _UNIT_FORMATS:
        return format_cell(v, _UNIT_FORMATS[unit])
    if unit in ("count", "rank", "bool"):
        return f"{v:,.0f}" if float(v).is_integer() or abs(v) >= 10 else f"{v:,.1f}"
    if unit in ("TFLOP/s", "GB/s"):
        return f"{v:,.1f} {unit}"
    return f"{v:.3g}"


def format_threshold(v: float, unit: str) -> str:
    """A rule threshold by its unit: whole percentages without decimals."""
    if unit == "%":
        return fmt_pct(v, 0 if float(v).is_integer() else 1)
    if unit == "bytes":
        return fmt_bytes(v)
    if unit == "ns":
        return fmt_ns(v)
    return f"{v:g}"


def short_site(site: str | None) -> str:
    """``dir/file.py:line function`` from a stored frame (the last two path parts)."""
    if not site:
        return "–"
    path, _, rest = site.partition(":")
    parts = path.replace("\\", "/").split("/")
    return "/".join(parts[-2:]) + (":" + rest if rest else "")


def join_words(items: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    items = [str(x) for x in items if str(x)]
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]
