"""The lifting step: the early stop changes no hit, and a lift cannot exceed its bound."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lake.errors import QueryError
from lake.search.fusion import recency_lift
from lake.search.lifts import Lift, by_age, lifted_top, under_cap


def _all_lifted(values: np.ndarray, kept: np.ndarray, lifts: list[Lift], k: int, cap: int
                ) -> list[tuple[str, str]]:
    """The oracle: every kept turn lifted, sorted, capped, cut at k."""
    scored = sorted(((float(values[j]) * math.prod(float(x.factors[j]) for x in lifts),
                      (f"c{j % 4}", f"t{j}")) for j in range(values.size) if kept[j]),
                    key=lambda s: (-s[0], s[1]))
    per: dict[str, int] = {}
    out = []
    for _, key in scored:
        if cap and per.get(key[0], 0) >= cap:
            continue
        per[key[0]] = per.get(key[0], 0) + 1
        out.append(key)
    return out[:k]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=120),
       st.lists(st.floats(0.0, 400.0), min_size=120, max_size=120),
       st.integers(1, 12), st.integers(0, 3), st.floats(0.0, 4.0), st.booleans(),
       st.integers(0, 2**31))
def test_the_early_stop_gives_the_top_of_lifting_every_turn(
        values: list[float], ages_days: list[float], k: int, cap: int, weight: float,
        named: bool, seed: int) -> None:
    fused = np.sort(np.array(values))[::-1].copy()
    n = fused.size
    rng = np.random.default_rng(seed)
    kept = rng.random(n) < 0.8
    ages = np.array(ages_days[:n]) * 86400.0
    lifts = [by_age(ages, 30 * 86400.0, weight)]
    if named:
        lifts.append(by_age(rng.random(n) * 10 * 86400.0, 3 * 86400.0, 2.0))

    def key(j: int) -> tuple[str, str]:
        return (f"c{j % 4}", f"t{j}")

    early = lifted_top(fused, kept, key, lifts, k, cap)
    got = [s.turn_key for s in itertools.islice(under_cap(early, cap), k)]
    assert got == _all_lifted(fused, kept, lifts, k, cap)
    every = lifted_top(fused, kept, key, lifts, k, cap, every=True)
    assert len(every) == int(kept.sum())


def test_a_lift_above_its_bound_is_refused() -> None:
    with pytest.raises(ValueError, match="exceeds"):
        Lift(np.array([1.0, 1.6]), 1.5)


@pytest.mark.parametrize("seconds", [0.0, 3600.0, 86400.0 * 40, -5.0])
def test_the_age_lift_is_the_scalar_recency_lift(seconds: float) -> None:
    lift = by_age(np.array([seconds]), 86400.0 * 7, 1.5)
    assert lift.factors[0] == pytest.approx(recency_lift(seconds, 86400.0 * 7, 1.5), abs=1e-15)
    assert lift.most == 2.5


def test_an_age_lift_rejects_nan_and_a_bad_weight() -> None:
    with pytest.raises(QueryError, match="NaN"):
        by_age(np.array([1.0, math.nan]), 86400.0, 1.0)
    with pytest.raises(QueryError, match="weight"):
        by_age(np.array([1.0]), 86400.0, -1.0)
    assert by_age(np.array([5.0]), 0.0, 1.0).most == 1.0
