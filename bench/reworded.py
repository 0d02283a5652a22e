"""LoCoMo's questions asked in other words: a stand-in for histories searched by paraphrase.

LoCoMo's questions reuse the words of the conversations, which favours the lexical arm; a set
asked in other words favours the dense arm, and fixed fusion weights fitted to one fail the
other. Each question's content words (not stop words, not capitalised names, three letters or
more) are swapped for the nearest word of the all-MiniLM vocabulary (by the model's own
embedding of the single word, among the 50 nearest) whose stem differs and which does not
share the word's first four letters: "support group" becomes "assistance grupo", "research"
"studies". The result is crude (some swaps change the meaning: "sunrise" → "sunset") but
deterministic, and measures how fused search fares when the words do not match.

The evidence turns stay those of the original question; the swaps depend on the embedding
model only, never on the history searched.
"""

from __future__ import annotations

import re

import numpy as np

from bench.locomo import Question
from bench.relevance import dictionary
from lake.embedding.base import Embedder
from lake.index.lexical import ENGLISH_STOP_WORDS, word_stems

_TOKEN = re.compile(r"[A-Za-z']+|[^A-Za-z']+")
_NEAREST = 50


def reword(questions: list[Question], embedder: Embedder) -> list[Question]:
    """The questions with each content word swapped (see the module notes)."""
    vocabulary = [w for w in dictionary() if w not in ENGLISH_STOP_WORDS]
    vectors = embedder.encode(vocabulary, batch_size=256)
    stems = [tuple(word_stems(w)) for w in vocabulary]
    swaps: dict[str, str] = {}

    def swap(word: str) -> str:
        lower = word.lower()
        if not re.fullmatch(r"[a-z]{3,}", lower) or lower in ENGLISH_STOP_WORDS \
                or word[0].isupper():
            return word
        if lower not in swaps:
            own = tuple(word_stems(lower))
            nearest = np.argsort(-(vectors @ embedder.encode([lower])[0]))[:_NEAREST]
            swaps[lower] = next((vocabulary[i] for i in nearest.tolist()
                                 if stems[i] != own and not vocabulary[i].startswith(lower[:4])),
                                lower)
        return swaps[lower]

    return [Question(q.user_id, "".join(swap(t) for t in _TOKEN.findall(q.text)), q.evidence)
            for q in questions]
