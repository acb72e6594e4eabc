"""Allocated and reserved memory of one rank's device over time, against its capacity."""

from __future__ import annotations

from typing import Any

from .... import fmt
from ..svg import Svg, path, ticks


def memory_chart(s: dict[str, Any], cap: float | None) -> dict[str, Any]:
    """The chart of one ``memory.timeline`` series (``ts_ns``, ``allocated``, ``reserved``), with
    its rank, device and number of points."""
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
    on_scale = bool(cap) and capf <= 1.6 * dmax
    vmax = (capf * 1.04) if on_scale else dmax * 1.12
    scale, unit = _byte_unit(vmax)
    svg = Svg(W, H, f"Memory of rank {s.get('rank')} device {s.get('device')}: allocated and "
                    "reserved over time")

    def X(t: float) -> float:
        return L + pw * (t - t0) / span

    def Y(v: float) -> float:
        return T + ph - ph * v / vmax

    for v in ticks(vmax / scale, 4):
        y = Y(v * scale)
        svg.line(L, y, L + pw, y, "grid")
        svg.text(L - 6, y + 4, f"{v:g} {unit}", "axis", "end")
    for v in ticks(span, 8):
        svg.text(X(t0 + v), T + ph + 16, fmt.fmt_ns(v) if v else "0", "axis", "middle")
    if n:
        base = Y(0)
        area = [(X(ts[0]), base)] + [(X(t), Y(a)) for t, a in zip(ts, al)] + [(X(ts[-1]), base)]
        svg.path(path(area) + "Z", "mem-alloc-area")
        svg.path(path((X(t), Y(a)) for t, a in zip(ts, al)), "mem-alloc",
                 f"allocated (peak {fmt.fmt_bytes(max(al))})")
        svg.path(path((X(t), Y(v)) for t, v in zip(ts, rs)), "mem-reserved",
                 f"reserved (peak {fmt.fmt_bytes(max(rs))})")
        i = max(range(n), key=lambda k: al[k])
        svg.circle(X(ts[i]), Y(al[i]), 4, "mem-peak",
                   f"peak allocated {fmt.fmt_bytes(al[i])} at +{fmt.fmt_ns(ts[i] - t0)}; "
                   f"reserved then {fmt.fmt_bytes(rs[i])}")
    if cap:
        yc = Y(float(cap)) if on_scale else T + 1
        svg.line(L, yc, L + pw, yc, "mem-cap" if on_scale else "mem-cap off-scale",
                 f"device capacity {fmt.fmt_bytes(cap)}")
        lbl = (f"capacity {fmt.fmt_bytes(cap)}" if on_scale else
               f"capacity {fmt.fmt_bytes(cap)} ↑ off scale (peak reserved "
               f"{fmt.fmt_pct(100 * dmax / float(cap), 1)})")
        svg.text(L + pw - 4, yc + 13, lbl, "axis cap-lbl", "end")
    svg.line(L, T + ph, L + pw, T + ph, "axis-line")
    return {"rank": s.get("rank"), "device": s.get("device"), "chart": svg.to_dict(),
            "points": n}


def _byte_unit(v: float) -> tuple[float, str]:
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if v >= scale:
            return float(scale), unit
    return 1.0, "B"
