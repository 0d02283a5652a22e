"""Texts longer than the model reads: embedded as passages, the text's vector their sum.

all-MiniLM-L6-v2 reads 256 word pieces (254 besides its two markers) and drops the rest, so a
long completion or attachment was findable by meaning only through its opening. A text longer
than that is cut into the fewest passages of near-equal length that each fit, cut where a word
starts, and its vector is the normalized sum of the passages' unit vectors. That is the same
pooling the semantic arm gives a turn's exchange (lake.search.exchange): one vector per row, so
indexes, tables and the vectors of texts that fit are as they were.

Measured with ``make bench`` (section ``locomo_long``) on LoCoMo made long: each session's
turns joined in runs of 16 into one turn (bench.locomo.join_turns; completions of ~580 word
pieces at the median, ~940 at the 90th percentile), no floor, recall@5/10/25, first 254 word
pieces → passages. Chosen on the tune split (conversations 0-4): semantic arm alone
.503/.677/.942 → .546/.720/.968, fused .851/.921/.989 → .860/.919/.989; LoCoMo's questions
reworded (bench/reworded.py), semantic .448/.649/.941 → .462/.682/.956, fused .514/.708/.958 →
.521/.732/.958. The report split (5-9): semantic .440/.567/.910 → .511/.659/.952, fused
.843/.907/.988 → .842/.916/.990; reworded, semantic .410/.544/.895 → .464/.625/.939, fused
.500/.648/.928 → .543/.709/.952.

The best passage's cosine (one vector per passage, MaxP) reads a long row more sharply still:
in a plainer harness (the tune split's joined turns as one text each, ranked by cosine alone)
recall@5/10/25 was .502/.656/.930 for the opening, .619/.817/.984 for the sum, .694/.823/.981
for the best passage and .688/.850/.985 for the mean of the two. It needs several vectors per
row in the content rows, the partition and segment builds and vector reuse; the sum keeps one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from lake.errors import EmbeddingError

if TYPE_CHECKING:
    from tokenizers import Tokenizer

# A cut moves back at most this many word pieces to the start of its word; planning passages
# that much under the window leaves room for it, so no passage overflows.
_WORD_SLACK = 16


def passage_bounds(word_starts: Sequence[bool], window: int) -> list[tuple[int, int]]:
    """Token ranges ``[start, end)`` of the passages of a text of ``len(word_starts)`` tokens
    (``word_starts[i]``: token ``i`` begins a word): one range when the text fits in
    ``window``, else the fewest near-equal ranges of at most ``window - 16`` tokens, each cut
    moved back to the start of its word when one is at most 16 tokens back (text without
    spaces, such as Japanese, is cut where planned)."""
    if window < 1:
        raise ValueError(f"window must be >= 1, not {window}")
    n = len(word_starts)
    if n <= window:
        return [(0, n)]
    count = math.ceil(n / max(window - _WORD_SLACK, 1))
    cuts = [0]
    for i in range(1, count):
        planned = round(i * n / count)
        cut = next((c for c in range(planned, max(planned - _WORD_SLACK, cuts[-1]), -1)
                    if word_starts[c]), planned)
        cuts.append(cut)
    return list(zip(cuts, [*cuts[1:], n], strict=True))


def load_tokenizer(folder: Path) -> Tokenizer:
    """The fast tokenizer of a model folder (its ``tokenizer.json``); any failure is an
    :class:`EmbeddingError` naming the folder."""
    try:
        from tokenizers import Tokenizer

        return Tokenizer.from_file(str(folder / "tokenizer.json"))
    except Exception as exc:  # a missing or broken file, or no tokenizers package
        raise EmbeddingError(f"could not load the tokenizer of {folder}: "
                             f"{type(exc).__name__}: {exc}") from exc


class PassageSplitter:
    """Cuts texts into passages a model reads whole, with the model's own tokenizer."""

    def __init__(self, tokenizer: Tokenizer, window: int) -> None:
        self._tokenizer = tokenizer
        self.window = window

    @classmethod
    def for_model(cls, folder: Path, max_length: int) -> PassageSplitter | None:
        """The splitter of a model folder that reads ``max_length`` word pieces with its two
        markers; None when the folder has no fast tokenizer (``tokenizer.json``), whose texts
        are then truncated by the model as before."""
        if not (folder / "tokenizer.json").is_file():
            return None
        tokenizer = load_tokenizer(folder)
        tokenizer.no_truncation()
        tokenizer.no_padding()
        return cls(tokenizer, max(max_length - 2, 1))

    def split(self, texts: Sequence[str]) -> list[list[str]]:
        """Each text's passages, in order (a text that fits is its own single passage).

        Only texts of more UTF-8 bytes than the window are tokenized: a word piece spans at
        least one byte (accents are stripped, a word too long for the vocabulary is one
        unknown piece), so a shorter text fits (a property test holds the tokenizer to it).
        A short query costs 0.5 µs here instead of the ~22 µs of a second tokenizer pass."""
        out: list[list[str]] = [[text] for text in texts]
        long = [i for i, text in enumerate(texts)
                if len(text) * 4 > self.window and len(text.encode("utf-8", "surrogatepass"))
                > self.window]
        if not long:
            return out
        for i, encoding in zip(long, self._tokenizer.encode_batch(
                [texts[i] for i in long], add_special_tokens=False), strict=True):
            text = texts[i]
            if len(encoding.ids) <= self.window:
                continue
            offsets = encoding.offsets
            # a word here is what spaces separate: "service-15" is one, though the
            # tokenizer reads three
            starts = [i == 0 or offsets[i][0] > offsets[i - 1][1] for i in range(len(offsets))]
            out[i] = [text[offsets[a][0]:offsets[b - 1][1]]
                      for a, b in passage_bounds(starts, self.window)]
        return out


def splitter_of(embedder: object) -> PassageSplitter | None:
    """The passage splitter an embedder cuts long texts with (``passage_splitter``); None for
    one that has none (a test embedder, a model folder without ``tokenizer.json``)."""
    splitter = getattr(embedder, "passage_splitter", None)
    return splitter if isinstance(splitter, PassageSplitter) else None


def encode_long(encode: Callable[[list[str]], np.ndarray], texts: Sequence[str],
                splitter: PassageSplitter | None) -> np.ndarray:
    """``encode``'s unit vectors for ``texts``, a long text's being the normalized sum of its
    passages' vectors (all passages go to ``encode`` in one call). Without a splitter, or
    when every text fits, exactly ``encode(texts)``."""
    items = list(texts)
    if splitter is None:
        return encode(items)
    split = splitter.split(items)
    if all(len(p) == 1 for p in split):
        return encode(items)
    vectors = encode([p for passages in split for p in passages])
    out = np.empty((len(items), vectors.shape[1]), dtype=np.float32)
    at = 0
    for i, passages in enumerate(split):
        summed = vectors[at:at + len(passages)].astype(np.float64).sum(axis=0)
        at += len(passages)
        norm = float(np.linalg.norm(summed))
        out[i] = summed / norm if norm > 0 else 0.0
    return out
