"""Fused against its best single generator, with a paired bootstrap interval (bench.margins)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from bench.margins import fused_margins, paired_interval

# per-question recalls are shares of a question's evidence turns: 0, 1/3, 1/2, 1 ...
_recall = st.sampled_from([0.0, 1 / 4, 1 / 3, 1 / 2, 2 / 3, 3 / 4, 1.0])
_differences = arrays(np.float64, st.integers(1, 40), elements=st.sampled_from(
    [-1.0, -0.5, -1 / 3, 0.0, 1 / 3, 0.5, 1.0]))


def _plain_interval(values: np.ndarray, draws: int, level: float, seed: int
                    ) -> tuple[float, float]:
    """The bootstrap one draw at a time, with the same generator calls in the same order."""
    rng = np.random.default_rng(seed)
    means = []
    left = draws
    while left:  # paired_interval draws in batches of 500 rows; rows are drawn in order
        batch = min(500, left)
        picks = rng.integers(0, values.size, size=(batch, values.size))
        means += [sum(values[i] for i in row) / values.size for row in picks.tolist()]
        left -= batch
    ordered = sorted(means)
    tail = (1 - level) / 2

    def quantile(q: float) -> float:  # numpy's default (linear) rule, spelled out
        at = q * (len(ordered) - 1)
        below = int(np.floor(at))
        above = min(below + 1, len(ordered) - 1)
        return float(ordered[below] + (ordered[above] - ordered[below]) * (at - below))

    return quantile(tail), quantile(1 - tail)


@given(_differences, st.integers(1, 1200), st.sampled_from([0.5, 0.9, 0.95]),
       st.integers(0, 3))
def test_the_interval_is_the_plain_bootstrap(values: np.ndarray, draws: int, level: float,
                                             seed: int) -> None:
    low, high = paired_interval(values, draws=draws, level=level, seed=seed)
    plain_low, plain_high = _plain_interval(values, draws, level, seed)
    assert low == pytest.approx(plain_low, abs=1e-12)
    assert high == pytest.approx(plain_high, abs=1e-12)
    assert values.min() - 1e-12 <= low <= high <= values.max() + 1e-12


@given(_differences, st.sampled_from([-0.25, 0.0, 0.5]))
def test_the_interval_moves_with_the_differences_and_flips_with_them(values: np.ndarray,
                                                                     shift: float) -> None:
    low, high = paired_interval(values, draws=300)
    moved = paired_interval(values + shift, draws=300)
    assert moved == pytest.approx((low + shift, high + shift), abs=1e-9)
    assert paired_interval(-values, draws=300) == pytest.approx((-high, -low), abs=1e-9)


def test_equal_differences_have_no_width_and_a_wider_level_a_wider_interval() -> None:
    assert paired_interval(np.full(50, 0.25)) == (0.25, 0.25)
    rng = np.random.default_rng(7)
    values = rng.integers(-1, 2, 300).astype(float)
    narrow, wide = paired_interval(values, level=0.5), paired_interval(values, level=0.99)
    assert wide[0] < narrow[0] < narrow[1] < wide[1]
    assert paired_interval(values, seed=3) == paired_interval(values, seed=3)


@pytest.mark.parametrize(("values", "kwargs", "message"), [
    (np.zeros(0), {}, "no differences"),
    (np.array([0.0, np.nan]), {}, "difference 1 is not finite"),
    (np.zeros(3), {"draws": 0}, "draws must be at least 1"),
    (np.zeros(3), {"level": 1.0}, r"level must lie in \(0, 1\)"),
])
def test_bad_input_is_named(values: np.ndarray, kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        paired_interval(values, **kwargs)  # type: ignore[arg-type]


@given(st.integers(1, 30).flatmap(lambda n: st.tuples(
    *(arrays(np.float64, (n, 3), elements=_recall) for _ in range(3)))))
def test_each_k_is_compared_with_its_best_arm_question_by_question(
        arrays_: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
    fused, lexical, semantic = arrays_
    margins = fused_margins({"fused": fused, "semantic": semantic, "lexical": lexical},
                            (5, 10, 25), draws=200)
    assert [m.k for m in margins] == [5, 10, 25]
    for column, m in enumerate(margins):
        means = {"lexical": lexical[:, column].mean(), "semantic": semantic[:, column].mean()}
        # the better mean; on a tie, the first name in order
        best = "semantic" if means["semantic"] > means["lexical"] else "lexical"
        assert m.arm == best
        chosen = semantic if best == "semantic" else lexical
        assert m.difference == pytest.approx(fused[:, column].mean() - chosen[:, column].mean())
        assert (m.low, m.high) == paired_interval(fused[:, column] - chosen[:, column],
                                                  draws=200)


def test_a_real_loss_lies_wholly_below_zero_and_a_tie_straddles_it() -> None:
    rng = np.random.default_rng(1)
    arm = rng.integers(0, 2, (400, 1)).astype(float)
    worse = arm.copy()
    worse[:60] = 0.0  # fusion loses the answer of 60 questions the arm found
    (loss,) = fused_margins({"fused": worse, "lexical": arm}, (10,))
    assert loss.arm == "lexical" and loss.high < 0
    arm[[0, 1]] = [[1.0], [0.0]]
    swapped = arm.copy()
    swapped[[0, 1]] = [[0.0], [1.0]]  # one answer lost, another found: nothing to tell
    (tie,) = fused_margins({"fused": swapped, "lexical": arm}, (10,))
    assert tie.difference == 0.0 and tie.low < 0 < tie.high
    assert tie.to_json() == {"arm": "lexical", "fused_minus_arm": round(tie.difference, 4),
                             "low": round(tie.low, 4), "high": round(tie.high, 4)}


@pytest.mark.parametrize(("recalls", "message"), [
    ({"lexical": np.zeros((3, 1))}, "no 'fused' recalls"),
    ({"fused": np.zeros((3, 1))}, "no single generator"),
    ({"fused": np.zeros((3, 2)), "lexical": np.zeros((3, 2))}, "questions × 1 ks"),
    ({"fused": np.zeros((3, 1)), "lexical": np.zeros((2, 1))}, "'lexical' recalls have shape"),
])
def test_recalls_that_cannot_be_compared_are_named(recalls: dict[str, np.ndarray],
                                                   message: str) -> None:
    with pytest.raises(ValueError, match=message):
        fused_margins(recalls, (10,))
