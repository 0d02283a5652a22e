"""The BM25 statistics helpers: IDF, partition scales and a user's word weights (pure)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lake.search.bm25 import idf, partition_scales, scoped_word_weights


@st.composite
def counts(draw: st.DrawFn, words: int) -> tuple[int, list[int]]:
    rows = draw(st.integers(0, 10_000))
    return rows, [draw(st.integers(0, rows)) for _ in range(words)]


@st.composite
def lake_stats(draw: st.DrawFn) -> tuple[list[str], dict[str, tuple[int, list[int]]],
                                         dict[str, tuple[int, list[int]]]]:
    """Stems, then per partition its counts and a user's counts within them."""
    stems = [f"w{i}" for i in range(draw(st.integers(1, 5)))]
    partitions: dict[str, tuple[int, list[int]]] = {}
    scoped: dict[str, tuple[int, list[int]]] = {}
    for p in range(draw(st.integers(1, 4))):
        rows, dfs = draw(counts(len(stems)))
        mine = draw(st.integers(0, rows))
        # the user's rows holding a word are at most the user's rows and the partition's
        user_dfs = [draw(st.integers(max(0, df - (rows - mine)), min(df, mine))) for df in dfs]
        partitions[f"p{p}"] = (rows, dfs)
        scoped[f"p{p}"] = (mine, user_dfs)
    return stems, partitions, scoped


def test_idf_is_tantivys() -> None:
    assert idf(100, 10) == pytest.approx(math.log(1 + 90.5 / 10.5))
    with pytest.raises(ValueError, match="not a count"):
        idf(10, 11)


@given(st.integers(0, 10_000), st.data())
def test_idf_is_positive_and_falls_as_a_word_spreads(rows: int, data: st.DataObject) -> None:
    df = data.draw(st.integers(0, rows))
    assert idf(rows, df) > 0
    if df < rows:
        assert idf(rows, df + 1) < idf(rows, df)


@given(lake_stats())
def test_weights_turn_each_partitions_idf_into_the_users(
        stats: tuple[list[str], dict[str, tuple[int, list[int]]],
                     dict[str, tuple[int, list[int]]]]) -> None:
    stems, partitions, scoped = stats
    weights = scoped_word_weights(stems, partitions, scoped)
    user_rows = sum(rows for rows, _ in scoped.values())
    for i, stem in enumerate(stems):
        user_idf = idf(user_rows, sum(dfs[i] for _, dfs in scoped.values()))
        for key, (rows, dfs) in partitions.items():
            assert weights[key][stem] > 0
            # the same IDF in every partition: one scale across them
            assert weights[key][stem] * idf(rows, dfs[i]) == pytest.approx(user_idf)


@given(st.data())
def test_a_partition_that_is_all_the_users_keeps_its_scores(data: st.DataObject) -> None:
    rows, dfs = data.draw(counts(3))
    weights = scoped_word_weights(["a", "b", "c"], {"p": (rows, dfs)}, {"p": (rows, dfs)})
    assert weights == {"p": {"a": pytest.approx(1.0), "b": pytest.approx(1.0),
                             "c": pytest.approx(1.0)}}


def test_a_word_common_in_the_users_history_weighs_less_than_in_the_partition() -> None:
    # A name the user's rows are full of, rare in the partition; a word rare for the user
    # but common among other users.
    weights = scoped_word_weights(["jon", "turtl"], {"p": (10_000, [40, 900])},
                                  {"p": (100, [40, 1])})["p"]
    assert weights["jon"] < 0.5 < 1.0 < weights["turtl"]


def test_scoped_weights_refuse_mismatched_statistics() -> None:
    with pytest.raises(ValueError, match="different partitions"):
        scoped_word_weights(["a"], {"p": (1, [0])}, {"q": (1, [0])})
    with pytest.raises(ValueError, match="2 counts for 1 stems"):
        scoped_word_weights(["a"], {"p": (1, [0, 0])}, {"p": (1, [0, 0])})


def test_partition_scales_put_a_small_month_on_the_union_scale() -> None:
    scales = partition_scales({"big": (10_000, [100]), "small": (100, [1])})
    union = idf(10_100, 101)
    assert scales["big"] == pytest.approx(union / idf(10_000, 100))
    assert scales["small"] == pytest.approx(union / idf(100, 1))
    assert partition_scales({}) == {}
    assert partition_scales({"p": (0, [0])}) == {}
    assert partition_scales({"p": (5, [])}) == {}
