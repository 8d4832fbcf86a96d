"""Interval arithmetic against hand-built cases and a brute-force reference on an integer grid."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fsdpbench.trace import intervals as iv


def arr(*xs: int) -> np.ndarray:
    return np.array(xs, dtype=np.int64)


def test_nested_intervals_merge_into_the_outer_one():
    s, e = iv.union(arr(0, 2, 3), arr(10, 5, 4))
    assert s.tolist() == [0] and e.tolist() == [10]


def test_touching_intervals_merge_like_hta():
    s, e = iv.union(arr(0, 5), arr(5, 9))
    assert (s.tolist(), e.tolist()) == ([0], [9])


def test_disjoint_intervals_stay_apart_and_sorted():
    s, e = iv.union(arr(20, 0), arr(30, 10))
    assert (s.tolist(), e.tolist()) == ([0, 20], [10, 30])


def test_empty_and_zero_length_inputs_give_zero():
    assert iv.length(iv.union(arr(), arr())) == 0
    assert iv.length(iv.union(arr(3), arr(3))) == 0
    assert iv.intersection_length(iv.empty(), iv.union(arr(0), arr(5))) == 0


def test_intersection_over_several_streams():
    # compute on two streams overlapping each other, comm on a third
    comp = iv.union(arr(0, 5, 30), arr(10, 15, 40))  # ∪ = [0,15) ∪ [30,40)
    comm = iv.union(arr(12, 35), arr(32, 50))  # ∪ = [12,32) ∪ [35,50)
    assert iv.length(comp) == 25 and iv.length(comm) == 35
    # overlap = [12,15) + [30,32) + [35,40) = 3 + 2 + 5
    assert iv.intersection_length(comp, comm) == 10


def test_intersection_with_shared_edges_counts_no_phantom_time():
    a = iv.union(arr(0, 10), arr(10, 20))
    b = iv.union(arr(10), arr(10))
    assert iv.intersection_length(a, b) == 0
    assert iv.intersection_length(a, iv.union(arr(5), arr(15))) == 10


def test_clip_restricts_to_window():
    s, e = iv.clip(iv.union(arr(0, 20), arr(10, 30)), 5, 25)
    assert (s.tolist(), e.tolist()) == ([5, 20], [10, 25])


def _grid(starts, ends, size):
    g = np.zeros(size, dtype=bool)
    for s, e in zip(starts, ends, strict=True):
        g[s:e] = True
    return g


intervals_st = st.lists(st.tuples(st.integers(0, 60), st.integers(0, 25)), max_size=12)


@settings(max_examples=150, deadline=None)
@given(intervals_st, intervals_st)
def test_union_and_intersection_match_a_brute_force_grid(a, b):
    sa, ea = arr(*[s for s, _ in a]), arr(*[s + d for s, d in a])
    sb, eb = arr(*[s for s, _ in b]), arr(*[s + d for s, d in b])
    ga, gb = _grid(sa, ea, 100), _grid(sb, eb, 100)
    ua, ub = iv.union(sa, ea), iv.union(sb, eb)
    assert iv.length(ua) == ga.sum()
    assert iv.intersection_length(ua, ub) == (ga & gb).sum()
    assert iv.length(iv.union_of(ua, ub)) == (ga | gb).sum()
    # a union is sorted, disjoint and non-touching
    assert np.all(ua[0][1:] > ua[1][:-1])
