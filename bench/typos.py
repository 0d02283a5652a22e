"""LoCoMo's questions asked with a typo: the query class the trigram arm is there for.

Neither development set holds a misspelled question, so on them the trigram arm measures at
zero; a person typing into the workbench misspells names and long words. Each question's
longest content word (five letters or more, not a stop word) has two neighbouring inner
letters swapped ("Caroline" → "Carloine", "adoption" → "adotpion"), the pair chosen by a
generator seeded with the question's text: deterministic, and independent of the history.
The evidence turns stay the original question's.
"""

from __future__ import annotations

import random
import re
import zlib

from bench.locomo import Question
from lake.index.lexical import ENGLISH_STOP_WORDS

_TOKEN = re.compile(r"[A-Za-z]+|[^A-Za-z]+")
MIN_LETTERS = 5


def misspelled(text: str) -> str:
    """``text`` with its longest content word given one transposition of inner letters;
    unchanged when it holds no word of :data:`MIN_LETTERS` letters that is not a stop word."""
    tokens = _TOKEN.findall(text)
    words = [i for i, t in enumerate(tokens)
             if t.isalpha() and len(t) >= MIN_LETTERS and t.lower() not in ENGLISH_STOP_WORDS]
    if not words:
        return text
    at = max(words, key=lambda i: (len(tokens[i]), -i))  # the first of the longest
    word = tokens[at]
    rng = random.Random(zlib.crc32(text.encode()))
    # inner letters only: a changed first or last letter is a rarer slip
    j = rng.randrange(1, len(word) - 2)
    if word[j] == word[j + 1]:  # swapping equal letters changes nothing: take the next pair
        j = j + 1 if j + 2 < len(word) - 1 else j - 1
    tokens[at] = word[:j] + word[j + 1] + word[j] + word[j + 2:]
    return "".join(tokens)


def with_typos(questions: list[Question]) -> list[Question]:
    """The questions, each :func:`misspelled`."""
    return [Question(q.user_id, misspelled(q.text), q.evidence) for q in questions]
