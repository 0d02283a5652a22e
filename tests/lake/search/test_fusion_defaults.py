"""The default generator weights, through the pure fusion functions."""

from __future__ import annotations

from lake.search.access import Principal
from lake.search.fusion import RankedRow, fuse
from lake.search.request import DEFAULT_WEIGHTS, FusionSettings, SearchRequest


def ranked(generator: str, turns: list[str]) -> list[RankedRow]:
    """Best-first rows with evenly spaced scores, one row per turn ('c', id)."""
    n = len(turns)
    return [RankedRow(f"{generator}:{t}", ("c", t), float(n - i)) for i, t in enumerate(turns)]


def order(lists: dict[str, list[RankedRow]], settings: FusionSettings) -> list[str]:
    fused = fuse(lists, dict(DEFAULT_WEIGHTS), k=settings.k, method=settings.method,
                 score_factor=settings.score_factor, zscore_floor=settings.zscore_floor)
    return [f.turn_key[1] for f in fused]


def lists_with(both_at: int) -> dict[str, list[RankedRow]]:
    """Lexical ranks A first, semantic ranks X first; B is at ``both_at`` in both lists."""
    lexical = ["A", *(f"l{i}" for i in range(1, 40))]
    semantic = ["X", *(f"s{i}" for i in range(1, 40))]
    lexical.insert(both_at - 1, "B")
    semantic.insert(both_at - 1, "B")
    return {"lexical": ranked("lexical", lexical), "semantic": ranked("semantic", semantic)}


def test_requests_use_the_default_weights() -> None:
    request = SearchRequest("q", Principal("t", "u"))
    assert dict(request.weights) == dict(DEFAULT_WEIGHTS)
    assert DEFAULT_WEIGHTS["semantic"] < DEFAULT_WEIGHTS["lexical"]


def test_rank_fusion_lets_agreement_win_but_not_a_dense_only_hit() -> None:
    rrf = FusionSettings(method="rrf")
    got = order(lists_with(both_at=20), rrf)
    # B, 20th in both lists, beats either list's first turn alone.
    assert got[:2] == ["B", "A"]
    # X, first only in the dense list, falls below every turn the lexical list holds.
    assert got.index("X") > max(got.index(f"l{i}") for i in range(1, 40))
    # Far enough down both lists, agreement no longer beats the lexical first.
    assert order(lists_with(both_at=35), rrf)[0] == "A"


def test_default_fusion_keeps_the_lexical_first_above_a_dense_only_first() -> None:
    settings = FusionSettings()
    got = order(lists_with(both_at=20), settings)
    assert got.index("A") < got.index("X")
    # At equal weights the two lists' firsts would tie: the weight alone decides.
    equal = {f.turn_key[1]: f.rrf for f in fuse(
        lists_with(both_at=20), {"lexical": 1.0, "semantic": 1.0}, k=settings.k,
        method=settings.method, score_factor=settings.score_factor,
        zscore_floor=settings.zscore_floor)}
    assert equal["A"] == equal["X"]
