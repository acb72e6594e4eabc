"""SVG primitives of the HTML reports: shapes as plain data, axis ticks, compact numbers.

A chart is an :class:`Svg` of shapes with attributes; the template writes them (attributes are
escaped by ``xmlattr``, texts by autoescape), so no chart builder ever writes markup.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any


def num(x: float, digits: int = 1) -> str:
    """A compact number for SVG attributes and sort keys."""
    if x == int(x) and abs(x) < 1e15:
        return str(int(x))
    return f"{x:.{digits}g}" if digits > 3 else f"{x:.{digits}f}".rstrip("0").rstrip(".")


class Svg:
    """Shapes with attributes; the template writes them (attributes escaped by ``xmlattr``)."""

    def __init__(self, w: int, h: int, label: str) -> None:
        self.w, self.h, self.label = w, h, label
        self.items: list[dict[str, Any]] = []

    def _add(self, el: str, attrs: dict[str, Any], text: str = "", title: str = "") -> None:
        a = {
            k.replace("_", "-"): (num(v) if isinstance(v, float) else v)
            for k, v in attrs.items()
            if v is not None and v != ""
        }
        self.items.append({"el": el, "a": a, "text": text, "title": title})

    def rect(
        self, x: float, y: float, w: float, h: float, cls: str, title: str = "", **kw: Any
    ) -> None:
        self._add(
            "rect",
            {
                "x": float(x),
                "y": float(y),
                "width": float(max(w, 0.0)),
                "height": float(max(h, 0.0)),
                "class": cls,
                **kw,
            },
            title=title,
        )

    def line(self, x1: float, y1: float, x2: float, y2: float, cls: str, title: str = "") -> None:
        self._add(
            "line",
            {"x1": float(x1), "y1": float(y1), "x2": float(x2), "y2": float(y2), "class": cls},
            title=title,
        )

    def text(
        self, x: float, y: float, text: str, cls: str = "lbl", anchor: str = "start", **kw: Any
    ) -> None:
        self._add(
            "text",
            {
                "x": float(x),
                "y": float(y),
                "class": cls,
                "text_anchor": anchor if anchor != "start" else None,
                **kw,
            },
            text=text,
        )

    def circle(self, cx: float, cy: float, r: float, cls: str, title: str = "") -> None:
        self._add(
            "circle", {"cx": float(cx), "cy": float(cy), "r": float(r), "class": cls}, title=title
        )

    def path(self, d: str, cls: str, title: str = "") -> None:
        self._add("path", {"d": d, "class": cls}, title=title)

    def polyline(
        self, points: Iterable[tuple[float, float]], cls: str, title: str = "", **kw: Any
    ) -> None:
        pts = " ".join(f"{num(x)},{num(y)}" for x, y in points)
        self._add("polyline", {"points": pts, "class": cls, **kw}, title=title)

    def to_dict(self) -> dict[str, Any]:
        return {"w": self.w, "h": self.h, "label": self.label, "items": self.items}


def nice_step(span: float, n: int = 5) -> float:
    """A round axis step (1, 2, 2.5 or 5 x 10^k) that cuts ``span`` into about ``n`` parts."""
    if span <= 0:
        return 1.0
    raw = span / max(1, n)
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


def ticks(vmax: float, n: int = 4) -> list[float]:
    """Axis ticks from 0 to ``vmax``."""
    step = nice_step(vmax, n)
    out, v = [], 0.0
    while v <= vmax * 1.0001:
        out.append(v)
        v += step
    return out


def ticks_between(lo: float, hi: float, n: int = 6) -> list[float]:
    """Axis ticks from the first round value at or above ``lo`` to ``hi``."""
    step = nice_step(hi - lo, n)
    v = math.ceil(lo / step - 1e-9) * step
    out = []
    while v <= hi * 1.0000001 + 1e-9:
        out.append(v)
        v += step
    return out


def path(points: Iterable[tuple[float, float]]) -> str:
    """An SVG path through ``points`` (``M x y L x y ...``)."""
    return "".join(
        ("M" if i == 0 else "L") + f"{num(x)} {num(y)}" for i, (x, y) in enumerate(points)
    )
