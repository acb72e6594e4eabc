"""Allocated and reserved memory of one rank's device over time, against its capacity.

The capacity line is drawn at its true height whenever the capacity fits a scale on which the
data still fills at least half the plot (:data:`CAPACITY_SCALE`); above that it is named in a
corner note, never drawn at a height it does not have. Points where allocated exceeds reserved
(impossible for the allocator, so a defect of the recorded totals) are counted for a
data-quality note.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from traceinsight.render.html.svg import Svg, path, ticks
from traceinsight.util import fmt

#: the capacity is drawn to scale when it is at most this multiple of the data's maximum
CAPACITY_SCALE = 2.0


def memory_chart(
    s: dict[str, Any], cap: float | None, *, x_unit: str = "ns", label: str | None = None
) -> dict[str, Any]:
    """The chart of one memory series (``ts_ns``, ``allocated``, ``reserved``), with its rank,
    device, number of points and how often allocated lies above reserved. ``x_unit``: ns (time
    since the first point) or actions (the position in an allocator trace without times)."""
    ts = [float(t) for t in s.get("ts_ns") or []]
    al = [float(v or 0) for v in s.get("allocated") or []]
    rs = [float(v or 0) for v in s.get("reserved") or []]
    n = min(len(ts), len(al), len(rs))
    ts, al, rs = ts[:n], al[:n], rs[:n]
    W, H, L, R, T, B = 960, 250, 78, 16, 18, 38
    pw, ph = W - L - R, H - T - B
    t0 = ts[0] if ts else 0.0
    span = (ts[-1] - t0) if n > 1 else 1.0
    span = span or 1.0
    dmax = max(rs + al + [1.0])
    capf = float(cap) if cap else 0.0
    on_scale = bool(cap) and capf <= CAPACITY_SCALE * dmax
    vmax = max(capf, dmax) * 1.04 if on_scale else dmax * 1.12
    svg = Svg(
        W,
        H,
        label
        or f"Memory of rank {s.get('rank')} device {s.get('device')}: "
        "allocated and reserved over time",
    )

    def X(t: float) -> float:
        return L + pw * (t - t0) / span

    def Y(v: float) -> float:
        return T + ph - ph * v / vmax

    byte_time_axes(
        svg,
        (L, T, pw, ph),
        X,
        Y,
        vmax,
        t0,
        span,
        (lambda v: fmt.fmt_ns(v) if v else "0") if x_unit == "ns" else (lambda v: f"{v:g}"),
    )
    if x_unit != "ns":
        svg.text(
            L + pw, T + ph + 32, "allocator actions (the snapshot records no times)", "axis", "end"
        )
    if n:
        base = Y(0)
        area = [(X(ts[0]), base)] + [(X(t), Y(a)) for t, a in zip(ts, al)] + [(X(ts[-1]), base)]
        svg.path(path(area) + "Z", "mem-alloc-area")
        svg.path(
            path((X(t), Y(a)) for t, a in zip(ts, al)),
            "mem-alloc",
            f"allocated (peak {fmt.fmt_bytes(max(al))})",
        )
        svg.path(
            path((X(t), Y(v)) for t, v in zip(ts, rs)),
            "mem-reserved",
            f"reserved (peak {fmt.fmt_bytes(max(rs))})",
        )
        i = max(range(n), key=lambda k: al[k])
        at = f"+{fmt.fmt_ns(ts[i] - t0)}" if x_unit == "ns" else f"action {int(ts[i] - t0)}"
        svg.circle(
            X(ts[i]),
            Y(al[i]),
            4,
            "mem-peak",
            f"peak allocated {fmt.fmt_bytes(al[i])} at {at}; reserved then {fmt.fmt_bytes(rs[i])}",
        )
    if cap and on_scale:
        yc = Y(capf)
        svg.line(L, yc, L + pw, yc, "mem-cap", f"device capacity {fmt.fmt_bytes(cap)}")
        # the label sits on the side of the line the data is not on: above it while the
        # series stay under the capacity (they always should), below it otherwise
        ylbl = yc - 4 if dmax <= capf else yc + 13
        svg.text(L + pw - 4, ylbl, f"capacity {fmt.fmt_bytes(cap)}", "axis cap-lbl", "end")
    elif cap:
        svg.text(
            L + pw - 4,
            T + 12,
            f"capacity {fmt.fmt_bytes(cap)}: above this scale (peak "
            f"{fmt.fmt_pct(100 * dmax / capf, 1)} of it)",
            "axis cap-lbl",
            "end",
        )
    svg.line(L, T + ph, L + pw, T + ph, "axis-line")
    above = [a - r for a, r in zip(al, rs) if a > r]
    return {
        "rank": s.get("rank"),
        "device": s.get("device"),
        "chart": svg.to_dict(),
        "points": n,
        "above_reserved": len(above),
        "above_reserved_max": max(above, default=0.0),
        "reserved_missing": n > 0 and not any(rs),
    }


def byte_time_axes(
    svg: Svg,
    box: tuple[float, float, float, float],
    X: Callable[[float], float],
    Y: Callable[[float], float],
    vmax: float,
    t0: float,
    span: float,
    x_text: Callable[[float], str],
) -> None:
    """The axes of a bytes-over-time chart in the plot ``box`` (left, top, width, height):
    grid lines and byte labels (one unit for the axis) up to ``vmax``, ``x_text`` labels along
    the time from ``t0`` over ``span``."""
    L, T, pw, ph = box
    scale, unit = _byte_unit(vmax)
    for v in ticks(vmax / scale, 4):
        y = Y(v * scale)
        svg.line(L, y, L + pw, y, "grid")
        svg.text(L - 6, y + 4, f"{v:g} {unit}", "axis", "end")
    for v in ticks(span, 8):
        svg.text(X(t0 + v), T + ph + 16, x_text(v), "axis", "middle")


def _byte_unit(v: float) -> tuple[float, str]:
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if v >= scale:
            return float(scale), unit
    return 1.0, "B"
