"""The semantic arm's turn values: the exchange's cosine, held to plain per-turn arithmetic."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from lake.embedding.hashing import HashingEmbedder
from lake.index.manifest import local_build
from lake.index.partition import PartitionIndex
from lake.index.status import partition_statuses
from lake.search.exchange import by_exchange, exchange_cosines
from lake.settings import Settings
from lake.store import LakeStore
from lake.tables import EXCHANGE_ROLES
from pipeline.jobs import run_ingest
from tests.factories import make_record, rich_record, write_jsonl

DIM = 8


# Components of 0 or at least 1e-100 in size: rows of ~1e-161 (which Hypothesis found) square
# into subnormal floats, where neither the code nor this oracle's sums keep their precision;
# embedding rows are unit vectors, nowhere near.
_COMPONENTS = st.floats(-1, 1).filter(lambda x: x == 0 or abs(x) >= 1e-100)


@given(arrays(np.float64, st.tuples(st.integers(0, 12), st.just(DIM)),
              elements=_COMPONENTS),
       st.data())
def test_exchange_cosines_are_the_cosine_with_each_groups_sum(vectors: np.ndarray,
                                                              data: st.DataObject) -> None:
    count = data.draw(st.integers(1, 4))
    # each group's rows one run, the runs in any order
    groups = np.sort(np.array(data.draw(st.lists(st.integers(0, count - 1),
                                                 min_size=len(vectors), max_size=len(vectors))),
                              np.int64))
    groups = (groups + data.draw(st.integers(0, count - 1))) % count
    query = np.ones(DIM) / math.sqrt(DIM)
    got = exchange_cosines(query, vectors, groups, count)
    for g in range(count):
        total = [sum(float(v[i]) for v, n in zip(vectors, groups, strict=True) if n == g)
                 for i in range(DIM)]
        squared = sum(x * x for x in total)
        own = sum(float(v @ v) for v, n in zip(vectors, groups, strict=True) if n == g)
        if squared <= 1e-13 * own or own == 0:  # a zero sum, up to rounding of its rows
            assert got[g] == -math.inf
        elif squared >= 1e-6 * own:  # well away from cancellation
            assert got[g] == pytest.approx(sum(x * q for x, q in zip(total, query, strict=True))
                                           / math.sqrt(squared), abs=1e-9)
        else:  # nearly cancelled: a cosine or a zero sum, never anything else
            assert got[g] == -math.inf or -1.0 - 1e-6 <= got[g] <= 1.0 + 1e-6


def test_exchange_cosines_refuse_unmatched_groups() -> None:
    with pytest.raises(ValueError, match="2 vectors for 1 group"):
        exchange_cosines(np.ones(DIM), np.ones((2, DIM)), np.zeros(1, np.int64), 1)
    with pytest.raises(ValueError, match="one run"):
        exchange_cosines(np.ones(DIM), np.ones((3, DIM)), np.array([0, 1, 0]), 2)


@pytest.fixture
def part(hashing_settings: Settings, tmp_path: Path) -> PartitionIndex:
    records = [rich_record(0, conversation="c-rich")]
    records += [make_record(t, conversation=f"c-{t % 3}", prompt=f"what about the {w} plan",
                            answer=f"the {w} forecast moved to tuesday")
                for t, w in enumerate(["budget", "travel", "hiring", "budget", "launch",
                                       "travel", "audit"], start=1)]
    records.append(make_record(9, user="u-ben", conversation="c-ben",
                               prompt="budget plan for ben", answer="ben's budget"))
    run_ingest(hashing_settings, [write_jsonl(tmp_path / "in.jsonl", records)])
    store = LakeStore(hashing_settings.lake)
    (status,) = partition_statuses(store).values()
    assert status.manifest is not None
    return PartitionIndex(local_build(store.root, status.manifest), status.manifest)


@pytest.mark.parametrize("longs", [False, True])
@pytest.mark.parametrize("roles", [None, ("user",), ("assistant", "anchor", "summary")])
@pytest.mark.parametrize("query", ["budget plan", "tuesday forecast", "openpyxl workbook"])
def test_turn_values_follow_their_definition(part: PartitionIndex, query: str,
                                             roles: tuple[str, ...] | None,
                                             longs: bool) -> None:
    cols = part.columns
    allowed = cols.docs_of_user("u-ana")
    if roles is not None:
        mask = cols.role_mask(roles)
        assert mask is not None
        allowed = allowed[mask[cols.role_codes[allowed]]]
    q = HashingEmbedder(64).encode([query])[0]
    assert part.semantic is not None
    found = part.semantic.search(q, allowed=allowed, limit=6)
    # rows marked long (with passages) stand alone, whatever their role
    long_rows = allowed[::3] if longs else np.zeros(0, np.int64)
    got = by_exchange([(part, allowed, found)], q, [long_rows])[0]

    # the plain version: per turn of a found row, walk its docs one at a time
    role_of = [cols.roles[c] for c in cols.role_codes.tolist()]
    turn_of = cols.turn_numbers.tolist()
    have, stored = part.semantic.vectors(allowed)
    vectors = {d: stored[i] for i, d in enumerate(have.tolist())}
    expected: dict[int, tuple[int, float]] = {}
    for doc, _ in found:  # best first: a turn's first found row shows it
        turn = turn_of[doc]
        if turn in expected:
            continue
        exchange = [vectors[d] for d in allowed.tolist()
                    if turn_of[d] == turn and role_of[d] in EXCHANGE_ROLES and d in vectors]
        value = -math.inf
        if exchange:
            total = np.sum(np.array(exchange, np.float64), axis=0)
            value = float(total @ q) / float(np.linalg.norm(total))
        alone = [s for d, s in found if turn_of[d] == turn
                 and (role_of[d] not in EXCHANGE_ROLES or d in long_rows.tolist())]
        expected[turn] = (doc, max([value, *alone]))
    # equal texts give equal values, which float32 and float64 sums round apart: the order
    # is checked on the values themselves, best first and ties by doc
    want = dict(expected.values())
    assert sorted(d for d, _ in got) == sorted(want)
    assert [v for _, v in got] == pytest.approx([want[d] for d, _ in got], abs=1e-6)
    assert got == sorted(got, key=lambda item: (-item[1], item[0]))
    assert len({turn_of[d] for d, _ in got}) == len(got)  # one entry per turn


def test_a_turn_is_valued_by_its_exchange_not_its_best_row(part: PartitionIndex) -> None:
    cols = part.columns
    allowed = cols.docs_of_user("u-ana")
    assert part.semantic is not None
    found, vectors = part.semantic.vectors(allowed)
    users = found[[cols.roles[c] == "user" for c in cols.role_codes[found]]]
    prompt = users[1]
    # a query halfway between a turn's prompt and its answer matches the pair best
    answer = next(d for d in found.tolist() if d != prompt and
                  cols.turn_numbers[d] == cols.turn_numbers[prompt])
    v = {d: vectors[i] for i, d in enumerate(found.tolist())}
    q = (v[int(prompt)] + v[answer]) / np.linalg.norm(v[int(prompt)] + v[answer])
    (doc, value), *_ = by_exchange([(part, allowed, part.semantic.search(q, allowed=allowed))],
                                    q)[0]
    assert cols.turn_numbers[doc] == cols.turn_numbers[prompt]
    assert value == pytest.approx(1.0, abs=1e-5)
    assert max(float(v[int(prompt)] @ q), float(v[answer] @ q)) < value


def test_rows_of_other_roles_stay_out_of_the_exchange(part: PartitionIndex) -> None:
    cols = part.columns
    allowed = cols.docs_of_user("u-ana")
    assert part.semantic is not None
    found, vectors = part.semantic.vectors(allowed)
    roles = [cols.roles[c] for c in cols.role_codes[found]]
    rich_turn = next(cols.turn_numbers[d] for d, r in zip(found, roles, strict=True)
                     if r == "anchor")
    exchange = [i for i, (d, r) in enumerate(zip(found, roles, strict=True))
                if cols.turn_numbers[d] == rich_turn and r in EXCHANGE_ROLES]
    assert len(exchange) >= 2  # the rich record's prompt, follow-up and answer
    total = vectors[exchange].sum(axis=0)
    q = total / np.linalg.norm(total)
    (doc, value), *_ = by_exchange([(part, allowed, part.semantic.search(q, allowed=allowed))],
                                    q)[0]
    assert cols.turn_numbers[doc] == rich_turn
    assert value == pytest.approx(1.0, abs=1e-5)
