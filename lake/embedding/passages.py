"""Texts longer than the model reads: embedded as passages, kept, and pooled into one vector.

all-MiniLM-L6-v2 reads 256 word pieces (254 besides its two markers) and drops the rest, so a
long completion or attachment was findable by meaning only through its opening. A text longer
than that is cut into the fewest passages of near-equal length that each fit, cut where a word
starts. Its vector is the normalized sum of the passages' unit vectors, the same pooling the
semantic arm gives a turn's exchange (lake.search.exchange), so a row still has one vector and
texts that fit keep the vectors they had. The passages' own vectors are kept beside it
(``content_rows.passage_embeddings``, :func:`passage_column`), and the index scores a long row
by its best passage too (lake.index.passage_index), since the sum blurs a row that says many things:
the row stands alone as another role's row does, its turn worth the larger of its exchange
and its best passage. What it measured: docs/design/passages.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lake.errors import EmbeddingError

if TYPE_CHECKING:
    from tokenizers import Tokenizer

# A cut moves back at most this many word pieces to the start of its word; planning passages
# that much under the window leaves room for it, so no passage overflows.
_WORD_SLACK = 16
# How many passages of one text are embedded at most (Settings.embed_max_passages): past it, a
# text is embedded by its opening and an even sample of the rest (:func:`sampled_parts`).
DEFAULT_MAX_PASSAGES = 32
# Characters a word piece is taken to span when a text's length is judged before tokenizing
# it: English runs ~4.5, so a text under the bound by this measure is about the bound.
_CHARS_PER_PIECE = 4


def sampled_parts(text: str, *, window: int, max_passages: int) -> list[str] | None:
    """The parts of ``text`` that are embedded when it is longer than ``max_passages``
    passages of ``window`` word pieces would hold (judged at 4 characters a piece, without
    tokenizing it): its opening, half the budget, then ``max_passages // 2`` excerpts of one
    window each, spread evenly over the rest, each cut where a word starts. None for a text
    within the bound, which is embedded whole. The same text always gives the same parts,
    so a search finds a passage again without cutting the whole text."""
    part = window * _CHARS_PER_PIECE
    if len(text) <= max_passages * part:
        return None
    head = max(max_passages // 2, 1) * part
    samples = max(max_passages - max_passages // 2, 1)
    rest = len(text) - head
    parts = [_to_word_end(text, 0, head)]
    for i in range(samples):
        start = _to_word_start(text, head + i * rest // samples)
        parts.append(_to_word_end(text, start, min(start + part, len(text))))
    return [p for p in parts if p.strip()]


def _at_most(passages: list[str], most: int) -> list[str]:
    """``passages`` when there are at most ``most``, else the first half of ``most`` and an
    even sample of the rest (a sampled text's parts held more word pieces than their
    length promised: dense text such as code or CJK)."""
    if len(passages) <= most:
        return passages
    head = max(most // 2, 1)
    rest, wanted = len(passages) - head, most - head
    return passages[:head] + [passages[head + i * rest // wanted] for i in range(wanted)]


def _to_word_start(text: str, at: int) -> int:
    """``at``, or the start of the next word when ``at`` falls inside one (within 64
    characters; text without spaces is cut where planned)."""
    if at == 0 or text[at - 1].isspace():
        return at
    space = next((i for i in range(at, min(at + 64, len(text))) if text[i].isspace()), None)
    if space is None:  # the text's last word, or text without spaces
        return len(text) if at + 64 >= len(text) else at
    return space + 1


def _to_word_end(text: str, start: int, end: int) -> str:
    """``text[start:end]``, its end moved back to the end of a word (within 64 characters)."""
    if end >= len(text) or text[end].isspace():
        return text[start:end]
    space = next((i for i in range(end, max(end - 64, start), -1) if text[i].isspace()), None)
    return text[start:end if space is None else space]


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

    def __init__(self, tokenizer: Tokenizer, window: int, *,
                 max_passages: int = DEFAULT_MAX_PASSAGES) -> None:
        if max_passages < 1:
            raise EmbeddingError(f"embed_max_passages must be >= 1, not {max_passages}")
        self._tokenizer = tokenizer
        self.window = window
        self.max_passages = max_passages

    @classmethod
    def for_model(cls, folder: Path, max_length: int, *,
                  max_passages: int = DEFAULT_MAX_PASSAGES) -> PassageSplitter | None:
        """The splitter of a model folder that reads ``max_length`` word pieces with its two
        markers; None when the folder has no fast tokenizer (``tokenizer.json``), whose texts
        are then truncated by the model as before."""
        if not (folder / "tokenizer.json").is_file():
            return None
        tokenizer = load_tokenizer(folder)
        tokenizer.no_truncation()
        tokenizer.no_padding()
        return cls(tokenizer, max(max_length - 2, 1), max_passages=max_passages)

    def sampled(self, text: str) -> bool:
        """Whether ``text`` is too long to embed whole (:func:`sampled_parts`): its vector
        stands for its opening and a sample of the rest, while all of it stays in the
        lexical and trigram indexes."""
        return sampled_parts(text, window=self.window,
                             max_passages=self.max_passages) is not None

    def split(self, texts: Sequence[str]) -> list[list[str]]:
        """Each text's passages, in order (a text that fits is its own single passage); a
        text past the bound is cut into the passages of its :func:`sampled_parts`, so its
        cost is bounded whatever its length.

        Only texts of more UTF-8 bytes than the window are tokenized: a word piece spans at
        least one byte (accents are stripped, a word too long for the vocabulary is one
        unknown piece), so a shorter text fits (a property test holds the tokenizer to it).
        A short query costs 0.5 µs here instead of the ~22 µs of a second tokenizer pass."""
        parts: list[str] = []
        owner: list[int] = []  # the text each part is of
        for i, text in enumerate(texts):
            mine = sampled_parts(text, window=self.window, max_passages=self.max_passages)
            for part in mine or [text]:
                parts.append(part)
                owner.append(i)
        cut: list[list[str]] = [[part] for part in parts]
        for i, (offsets, starts) in self._longer(parts).items():
            part = parts[i]
            cut[i] = [part[offsets[a][0]:offsets[b - 1][1]]
                      for a, b in passage_bounds(starts, self.window)]
        out: list[list[str]] = [[] for _ in texts]
        for i, passages in zip(owner, cut, strict=True):
            out[i].extend(passages)
        return [_at_most(passages, self.max_passages) for passages in out]

    def head(self, text: str) -> str:
        """What the model reads of ``text``: all of it when it fits, else its first ``window``
        word pieces, cut back to the start of a word when one is at most 16 pieces back."""
        longer = self._longer([text])
        if not longer:
            return text
        offsets, starts = longer[0]
        cut = next((c for c in range(self.window, max(self.window - _WORD_SLACK, 0), -1)
                    if starts[c]), self.window)
        return text[:offsets[cut - 1][1]]

    def _longer(self, texts: Sequence[str]
                ) -> dict[int, tuple[list[tuple[int, int]], list[bool]]]:
        """Per text of more word pieces than the window, by position: its pieces' character
        offsets and whether each begins a word (what spaces separate: "service-15" is one,
        though the tokenizer reads three)."""
        long = [i for i, text in enumerate(texts)
                if len(text) * 4 > self.window and len(text.encode("utf-8", "surrogatepass"))
                > self.window]
        if not long:
            return {}
        out = {}
        for i, encoding in zip(long, self._tokenizer.encode_batch(
                [texts[i] for i in long], add_special_tokens=False), strict=True):
            if len(encoding.ids) <= self.window:
                continue
            offsets = encoding.offsets
            out[i] = (offsets, [j == 0 or offsets[j][0] > offsets[j - 1][1]
                                for j in range(len(offsets))])
        return out


def splitter_of(embedder: object) -> PassageSplitter | None:
    """The passage splitter an embedder cuts long texts with (``passage_splitter``); None for
    one that has none (a test embedder, a model folder without ``tokenizer.json``)."""
    splitter = getattr(embedder, "passage_splitter", None)
    return splitter if isinstance(splitter, PassageSplitter) else None


def pooled(passages: np.ndarray) -> np.ndarray:
    """The unit vector of a text cut into ``passages`` (their unit vectors, one per row): the
    normalized sum, as the semantic arm pools a turn's exchange; zero when they cancel."""
    summed = np.asarray(passages, np.float64).sum(axis=0)
    norm = float(np.linalg.norm(summed))
    out: np.ndarray = (summed / norm if norm > 0 else np.zeros_like(summed)).astype(np.float32)
    return out


def encode_passages(encode: Callable[[list[str]], np.ndarray], texts: Sequence[str],
                    splitter: PassageSplitter | None
                    ) -> tuple[np.ndarray, list[np.ndarray | None]]:
    """``encode``'s unit vectors for ``texts``, a long text's :func:`pooled` over its passages,
    and per text its passages' unit vectors (``(passages, dim)``; None for a text that fits).
    All passages go to ``encode`` in one call; without a splitter, or when every text fits,
    that call is exactly ``encode(texts)``."""
    items = list(texts)
    split = None if splitter is None else splitter.split(items)
    if split is None or all(len(p) == 1 for p in split):
        return encode(items), [None] * len(items)
    vectors = encode([p for passages in split for p in passages])
    out = np.empty((len(items), vectors.shape[1]), dtype=np.float32)
    kept: list[np.ndarray | None] = []
    at = 0
    for i, passages in enumerate(split):
        mine = vectors[at:at + len(passages)]
        at += len(passages)
        if len(passages) == 1:
            out[i] = mine[0]
            kept.append(None)
        else:
            out[i] = pooled(mine)
            kept.append(np.array(mine, np.float32))
    return out, kept


def encode_long(encode: Callable[[list[str]], np.ndarray], texts: Sequence[str],
                splitter: PassageSplitter | None) -> np.ndarray:
    """``encode``'s unit vectors for ``texts``, a long text's being the normalized sum of its
    passages' vectors (:func:`encode_passages` without the passages)."""
    return encode_passages(encode, texts, splitter)[0]


def passage_column(passages: Sequence[np.ndarray | None] | None, n: int) -> pa.Array:
    """The ``passage_embeddings`` column of ``n`` rows: each row's passage vectors one after
    another, null for a row without (``passages`` None: every row)."""
    if passages is None or all(p is None for p in passages):
        return pa.nulls(n, type=pa.list_(pa.float32()))
    sizes = np.array([0 if p is None else p.size for p in passages], np.int64)
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(sizes, out=offsets[1:])
    flat = np.concatenate([np.asarray(p, np.float32).reshape(-1) for p in passages
                           if p is not None])
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat),
                                    mask=pa.array([p is None for p in passages]))


def column_passages(column: pa.ChunkedArray | pa.Array, dim: int,
                    rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The passage vectors a ``passage_embeddings`` column holds, as ``(at, vectors)``: each
    vector (a row of ``vectors``, ``(passages, dim)``) and the number of the row it is of
    (``at``, ascending). Only the rows ``rows`` (a bool mask) when given; a list that is not
    whole vectors of ``dim`` was never written so and is left out."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    lengths = pc.list_value_length(array).fill_null(0).to_numpy(zero_copy_only=False)
    keep = (lengths > 0) & (lengths % max(dim, 1) == 0)
    if rows is not None:
        keep &= np.asarray(rows, np.bool_)
    if not keep.any() or dim < 1:
        return np.zeros(0, np.int64), np.zeros((0, max(dim, 0)), np.float32)
    kept = array.filter(pa.array(keep))
    flat = pc.list_flatten(kept).to_numpy(zero_copy_only=False).astype(np.float32, copy=False)
    at = np.repeat(np.flatnonzero(keep), lengths[keep] // dim).astype(np.int64)
    return at, flat.reshape(-1, dim)
