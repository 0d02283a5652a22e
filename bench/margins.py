"""How far fused recall stands from the best single generator, with an interval.

Issue #22 asks that fusion be at least as good as the best generator alone at every k. On a
few hundred questions a difference of one evidence turn moves recall by ~.001, so a figure a
hair under the arm's says little by itself. This module puts a paired bootstrap interval on
each difference: the questions of a split are drawn with replacement, the same draw for fused
and the arm (each question's recalls stay paired), and the middle ``level`` of the resampled
mean differences is the interval. An interval that holds 0 is a difference the questions
cannot tell from none; one wholly below 0 is a real loss.

The best arm is chosen per k by its mean recall over the split (ties to the first name in
order), as the figures that compare them do. Everything here is pure; the draws come from a
seeded generator, so a report is reproducible.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["FUSED", "Margin", "fused_margins", "paired_interval"]

FUSED = "fused"
DRAWS = 4000
LEVEL = 0.95
_DRAWS_AT_ONCE = 500  # resampled means per batch: bounds the index array to 500 × questions


@dataclass(frozen=True)
class Margin:
    """Fused recall@k minus the best single generator's, over one split's questions."""

    k: int
    arm: str  # the generator with the best mean recall@k alone
    difference: float  # mean over questions of fused minus that arm
    low: float  # the paired bootstrap interval of ``difference``
    high: float

    def to_json(self) -> dict[str, float | str]:
        """The margin as bench results store it (``k`` is the key it is stored under)."""
        return {"arm": self.arm, "fused_minus_arm": round(self.difference, 4),
                "low": round(self.low, 4), "high": round(self.high, 4)}


def paired_interval(differences: np.ndarray, *, draws: int = DRAWS, level: float = LEVEL,
                    seed: int = 0) -> tuple[float, float]:
    """The percentile bootstrap interval, at ``level``, of the mean of ``differences`` (one
    per question, already paired): ``draws`` resamples of the questions with replacement.
    Raises ValueError for no differences, a non-finite one, ``draws`` < 1 or a ``level``
    outside (0, 1)."""
    values = np.asarray(differences, np.float64).ravel()
    if values.size == 0:
        raise ValueError("no differences to resample")
    if not np.isfinite(values).all():
        raise ValueError(f"difference {int(np.flatnonzero(~np.isfinite(values))[0])} is "
                         "not finite")
    if draws < 1:
        raise ValueError(f"draws must be at least 1, got {draws}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    rng = np.random.default_rng(seed)
    means = np.concatenate([
        values[rng.integers(0, values.size, size=(min(_DRAWS_AT_ONCE, draws - at),
                                                  values.size))].mean(axis=1)
        for at in range(0, draws, _DRAWS_AT_ONCE)])
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(means, [tail, 1.0 - tail])
    return float(low), float(high)


def fused_margins(recalls: Mapping[str, np.ndarray], ks: Sequence[int], *,
                  draws: int = DRAWS, level: float = LEVEL, seed: int = 0) -> list[Margin]:
    """For each k (column of every array in ``recalls``: questions × ks, the same questions in
    the same order), fused recall minus the best other configuration's, with its paired
    bootstrap interval. ``recalls`` must hold :data:`FUSED` and at least one generator alone;
    ValueError otherwise, or when the arrays' shapes differ or do not match ``ks``."""
    if FUSED not in recalls:
        raise ValueError(f"no {FUSED!r} recalls to compare")
    arms = sorted(name for name in recalls if name != FUSED)
    if not arms:
        raise ValueError("no single generator to compare fusion with")
    fused = np.asarray(recalls[FUSED], np.float64)
    if fused.ndim != 2 or fused.shape[1] != len(ks):
        raise ValueError(f"recalls must be questions × {len(ks)} ks, got shape {fused.shape}")
    for name in arms:
        if np.shape(recalls[name]) != fused.shape:
            raise ValueError(f"{name!r} recalls have shape {np.shape(recalls[name])}, "
                             f"fused {fused.shape}")
    out = []
    for column, k in enumerate(ks):
        # the first name among equal means: sorted names, and max keeps the first it meets
        best = max(arms, key=lambda name: float(np.mean(recalls[name][:, column])))
        differences = fused[:, column] - np.asarray(recalls[best], np.float64)[:, column]
        low, high = paired_interval(differences, draws=draws, level=level, seed=seed)
        out.append(Margin(int(k), best, float(differences.mean()), low, high))
    return out
