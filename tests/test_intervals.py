"""Interval algorithms against brute-force references."""

from __future__ import annotations

import random

import numpy as np
import pytest

from traceinsight.analysis import intervals as iv


def random_tree(rng: random.Random, n_roots: int = 30) -> list[tuple[int, int]]:
    """Properly nested intervals like a CPU op stack (with zero-length leaves and ties)."""
    out: list[tuple[int, int]] = []

    def grow(s: int, e: int, depth: int) -> None:
        out.append((s, e))
        if depth > 5 or e - s < 4:
            return
        t = s
        while t < e - 2 and rng.random() < 0.8:
            a = rng.randint(t, e - 1)
            b = rng.randint(a, min(e, a + (e - s) // 2))
            grow(a, b, depth + 1)
            t = b

    t = 0
    for _ in range(n_roots):
        s = t + rng.randint(0, 50)
        e = s + rng.randint(1, 500)
        grow(s, e, 0)
        t = e
    return out


def brute_innermost(ints: list[tuple[int, int]], t: int) -> int:
    best, best_len = -1, None
    for i, (s, e) in enumerate(ints):
        shorter = best_len is None or e - s < best_len or (e - s == best_len and i > best)
        if s <= t < e and shorter:
            best, best_len = i, e - s
    return best


@pytest.mark.parametrize("seed", range(5))
def test_nesting_matches_brute_force(seed: int) -> None:
    rng = random.Random(seed)
    ints = random_tree(rng)
    rng.shuffle(ints)
    s = np.array([a for a, _ in ints])
    e = np.array([b for _, b in ints])
    nest = iv.Nesting.build(s, e)
    queries = np.array([rng.randint(-5, int(e.max()) + 5) for _ in range(500)])
    got = nest.enclosing(queries)
    for q, g in zip(queries, got):
        want = brute_innermost(ints, int(q))
        if want == -1:
            assert g == -1
        else:
            # the innermost enclosing interval (ties between identical intervals: same span)
            assert g != -1 and ints[g] == ints[want], (q, ints[g], ints[want])
    # parents: the innermost interval that strictly contains each interval's start
    for i, (a, b) in enumerate(ints):
        p = nest.parent[i]
        if b == a:
            assert p == -1
            continue
        if p >= 0:
            ps, pe = ints[p]
            assert ps <= a and b <= pe


def test_child_ending_after_parent_is_clipped() -> None:
    # parent [0, 100) µs, child [10, 100.4) by producer rounding, sibling [100.2, 150)
    nest = iv.Nesting.build(np.array([0, 10_000, 100_200]), np.array([100_000, 100_400, 150_000]))
    assert nest.parent.tolist() == [-1, 0, -1]
    assert nest.clipped == 1


def test_union_intersect_subtract() -> None:
    u = iv.union(np.array([0, 5, 20, 22]), np.array([10, 12, 25, 30]))
    assert u[0].tolist() == [0, 20] and u[1].tolist() == [12, 30]
    v = iv.union(np.array([8, 24]), np.array([21, 26]))
    x = iv.intersect(u, v)
    assert list(zip(x[0].tolist(), x[1].tolist())) == [(8, 12), (20, 21), (24, 26)]
    d = iv.subtract(u, v)
    assert list(zip(d[0].tolist(), d[1].tolist())) == [(0, 8), (21, 24), (26, 30)]
    assert iv.length(u) == iv.length(x) + iv.length(d)
    w = iv.overlap_with_windows(u, np.array([0, 11, 100]), np.array([6, 23, 200]))
    assert w.tolist() == [6, 1 + 3, 0]


@pytest.mark.parametrize("seed", range(3))
def test_union_against_brute_force(seed: int) -> None:
    rng = random.Random(seed)
    s = np.array([rng.randint(0, 1000) for _ in range(300)])
    e = s + np.array([rng.randint(0, 40) for _ in range(300)])
    covered = set()
    for a, b in zip(s, e):
        covered.update(range(a, b))
    assert iv.total(s, e) == len(covered)
    ws = np.array([rng.randint(0, 1000) for _ in range(50)])
    we = ws + np.array([rng.randint(0, 300) for _ in range(50)])
    got = iv.overlap_with_windows(iv.union(s, e), ws, we)
    for a, b, g in zip(ws, we, got):
        assert g == len([t for t in range(a, b) if t in covered])
