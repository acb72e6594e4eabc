"""Vectorised interval algorithms on int64 nanoseconds (numpy, no per-event Python loops).

- :func:`union` merges intervals; :func:`total` is the length of a union;
  :func:`intersect` / :func:`subtract` combine two unions; :func:`clip` restricts to a window.
- :class:`Nesting` recovers the call tree of properly nested intervals (CPU ops on one thread)
  and answers "innermost interval enclosing time t" queries, all with sorts and binary
  searches: the level of every interval comes from a sweep (cumulative sum of +1 at starts,
  -1 at ends), and the parent of an interval at level L is the latest interval at level L-1
  that started before it, which under proper nesting is still open.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

I64 = np.int64


def take(values: np.ndarray, idx: np.ndarray, fill: Any) -> np.ndarray:
    """``values[idx]`` where ``idx >= 0``, else ``fill`` (safe when ``values`` is empty). ``fill``
    is any scalar, None included (numpy's stubs type no operand of ``where`` as None)."""
    idx = np.asarray(idx, dtype=np.int64)
    values = np.asarray(values)
    ok = idx >= 0
    if len(values) == 0 or not ok.any():
        dtype = (
            object
            if fill is None or isinstance(fill, str)
            else np.result_type(values.dtype, type(fill))
        )
        return np.full(len(idx), fill, dtype=dtype)
    got = values[np.where(ok, idx, 0)]
    if fill is None or isinstance(fill, str):
        got = got.astype(object)
    return np.where(ok, got, fill)


def union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merge intervals [start, end) into disjoint sorted intervals (touching ones merge)."""
    s = np.asarray(starts, dtype=I64)
    e = np.asarray(ends, dtype=I64)
    keep = e > s
    s, e = s[keep], e[keep]
    if len(s) == 0:
        return np.empty(0, I64), np.empty(0, I64)
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    run_end = np.maximum.accumulate(e)
    # a new merged interval starts where the start is beyond everything seen so far
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    new[1:] = s[1:] > run_end[:-1]
    idx = np.flatnonzero(new)
    m_s = s[idx]
    last = np.append(idx[1:] - 1, len(s) - 1)
    m_e = run_end[last]
    return m_s, m_e


def total(starts: np.ndarray, ends: np.ndarray) -> int:
    s, e = union(starts, ends)
    return int((e - s).sum())


def length(u: tuple[np.ndarray, np.ndarray]) -> int:
    return int((u[1] - u[0]).sum())


def any_ancestor(idx: np.ndarray, parent: np.ndarray, flag: np.ndarray) -> np.ndarray:
    """Whether node ``idx`` or any of its ancestors (``parent``: each node's parent index, -1 at
    a root) has ``flag`` set (idx -1 -> False)."""
    out = np.zeros(len(idx), dtype=bool)
    if not len(flag):
        return out
    cur = idx.copy()
    for _ in range(512):
        ok = cur >= 0
        if not ok.any():
            break
        out[ok] |= flag[cur[ok]]
        cur = np.where(ok, parent[np.clip(cur, 0, None)], -1)
    return out


def intersect(
    a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """Intersection of two unions (each disjoint and sorted)."""
    as_, ae = a
    bs, be = b
    if len(as_) == 0 or len(bs) == 0:
        return np.empty(0, I64), np.empty(0, I64)
    # candidate pairs: for each a-interval, the b-intervals that may overlap it
    lo = np.searchsorted(be, as_, side="right")
    hi = np.searchsorted(bs, ae, side="left")
    counts = np.maximum(hi - lo, 0)
    if counts.sum() == 0:
        return np.empty(0, I64), np.empty(0, I64)
    ai = np.repeat(np.arange(len(as_)), counts)
    offs = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    bi = np.repeat(lo, counts) + offs
    s = np.maximum(as_[ai], bs[bi])
    e = np.minimum(ae[ai], be[bi])
    keep = e > s
    return s[keep], e[keep]


def subtract(
    a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """Parts of union ``a`` not covered by union ``b``."""
    if len(a[0]) == 0 or len(b[0]) == 0:
        return a
    # complement of b inside [min, max] then intersect
    lo = min(int(a[0][0]), int(b[0][0]))
    hi = max(int(a[1][-1]), int(b[1][-1]))
    cs = np.concatenate(([lo], b[1]))
    ce = np.concatenate((b[0], [hi]))
    keep = ce > cs
    return intersect(a, (cs[keep], ce[keep]))


def clip(u: tuple[np.ndarray, np.ndarray], start: int, end: int) -> tuple[np.ndarray, np.ndarray]:
    s = np.maximum(u[0], start)
    e = np.minimum(u[1], end)
    keep = e > s
    return s[keep], e[keep]


def overlap_with_windows(
    u: tuple[np.ndarray, np.ndarray], ws: np.ndarray, we: np.ndarray
) -> np.ndarray:
    """Length of union ``u`` inside each window [ws[i], we[i]) (windows may overlap)."""
    s, e = u
    if len(s) == 0 or len(ws) == 0:
        return np.zeros(len(ws), dtype=I64)
    # prefix sums of covered length allow O(log n) per window
    cum = np.concatenate(([0], np.cumsum(e - s)))

    def covered_before(t: np.ndarray) -> np.ndarray:
        # covered length in (-inf, t)
        k = np.searchsorted(s, t, side="right")  # intervals starting at or before t
        full = cum[np.maximum(k - 1, 0)]
        last_s = s[np.maximum(k - 1, 0)]
        last_e = e[np.maximum(k - 1, 0)]
        part = np.clip(np.minimum(t, last_e) - last_s, 0, None)
        return np.where(k > 0, full + part, 0)

    return covered_before(np.asarray(we, I64)) - covered_before(np.asarray(ws, I64))


@dataclass
class Nesting:
    """The call tree of intervals on one timeline (one thread), built without Python loops.

    Intervals with zero length are not part of the tree (they cannot contain anything); use
    :meth:`enclosing` on their start to find their parent. ``parent[i]`` is -1 for roots and
    for zero-length intervals. ``clipped`` counts children that ended after their parent by
    less than the tolerance and were clipped to it.
    """

    starts: np.ndarray
    ends: np.ndarray
    level: np.ndarray
    parent: np.ndarray
    clipped: int
    misnested: int
    _key_s: np.ndarray
    _key_idx: np.ndarray
    _sorted_starts: np.ndarray
    _sorted_ends: np.ndarray
    _base: int
    _scale: int

    @classmethod
    def build(cls, starts: np.ndarray, ends: np.ndarray, tolerance_ns: int = 1000) -> Nesting:
        s = np.asarray(starts, I64)
        e = np.asarray(ends, I64).copy()
        n = len(s)
        level, parent = cls._levels(s, e)
        # clip children that end a little after their parent (producer rounding), then redo
        clipped = 0
        if n:
            for _ in range(4):
                has = parent >= 0
                over = np.zeros(n, dtype=bool)
                over[has] = e[has] > e[parent[has]]
                if not over.any():
                    break
                small = over.copy()
                small[has] &= (e[has] - e[parent[has]]) <= tolerance_ns
                if not small.any():
                    break
                clipped += int(small.sum())
                e[small] = e[parent[small]]
                level, parent = cls._levels(s, e)
        has = parent >= 0
        misnested = int((e[has] > e[parent[has]]).sum()) if n else 0
        pos = e > s
        base = int(s.min()) if n else 0
        span = int(max(e.max(), s.max()) - base + 1) if n else 1
        maxlevel = int(level.max()) + 2 if n else 2
        if span * maxlevel >= 2**62:  # pragma: no cover - would need a years-long trace
            raise OverflowError("trace span too long for nesting keys")
        idx = np.flatnonzero(pos)
        key = level[idx].astype(I64) * span + (s[idx] - base)
        order = np.argsort(key, kind="stable")
        return cls(
            s,
            e,
            level,
            parent,
            clipped,
            misnested,
            key[order],
            idx[order],
            np.sort(s[pos]),
            np.sort(e[pos]),
            base,
            span,
        )

    @staticmethod
    def _levels(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n = len(s)
        level = np.full(n, -1, dtype=np.int32)
        parent = np.full(n, -1, dtype=I64)
        pos = np.flatnonzero(e > s)
        if len(pos) == 0:
            return level, parent
        ps, pe = s[pos], e[pos]
        m = len(pos)
        # sweep events: closes (kind 0) before opens (kind 1) at equal times; among opens at
        # the same time the longer interval first (it encloses the shorter one)
        times = np.concatenate((ps, pe))
        kind = np.concatenate((np.ones(m, np.int8), np.zeros(m, np.int8)))
        tie = np.concatenate((-pe, -ps))  # opens: longer first; closes: later-started first
        which = np.concatenate((np.arange(m), np.arange(m)))
        order = np.lexsort((tie, kind, times))
        delta = np.where(kind[order] == 1, 1, -1)
        depth = np.cumsum(delta)
        is_open = kind[order] == 1
        lv = np.empty(m, dtype=np.int32)
        lv[which[order][is_open]] = depth[is_open] - 1  # roots have level 0
        # parent: latest open (in sweep order) at level-1 before this open
        open_pos = np.empty(m, dtype=I64)
        open_pos[which[order][is_open]] = np.flatnonzero(is_open)
        key = lv.astype(I64) * (2 * m + 1) + open_pos
        korder = np.argsort(key, kind="stable")
        ksorted = key[korder]
        q = (lv.astype(I64) - 1) * (2 * m + 1) + open_pos
        j = np.searchsorted(ksorted, q, side="left") - 1
        par = np.full(m, -1, dtype=I64)
        ok = (lv > 0) & (j >= 0)
        cand = korder[np.clip(j, 0, None)]
        ok &= lv[cand] == lv - 1
        par[ok] = pos[cand[ok]]
        level[pos] = lv
        parent[pos] = par
        return level, parent

    def enclosing(self, t: np.ndarray) -> np.ndarray:
        """Index of the innermost interval with start <= t < end, or -1."""
        t = np.asarray(t, I64)
        if len(self._key_s) == 0 or len(t) == 0:
            return np.full(len(t), -1, dtype=I64)
        depth = np.searchsorted(self._sorted_starts, t, side="right") - np.searchsorted(
            self._sorted_ends, t, side="right"
        )
        lvl = depth.astype(I64) - 1
        q = lvl * self._scale + (t - self._base)
        j = np.searchsorted(self._key_s, q, side="right") - 1
        out = np.full(len(t), -1, dtype=I64)
        ok = (lvl >= 0) & (j >= 0)
        cand = self._key_idx[np.clip(j, 0, None)]
        ok &= self.level[cand] == lvl
        ok &= (self.starts[cand] <= t) & (t < self.ends[cand])
        out[ok] = cand[ok]
        return out
