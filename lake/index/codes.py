"""Codes (tickets, invoices, versions: "INC-3147", "PR #4560", "utf8") are one code however
their parts are separated: people type "INC3147" for INC-3147 and "inc 3147" for either.

A code's parts are its runs of letters and of digits (:func:`code_runs`). Two spellings are
one code when their runs are the same, in order and in any case, and two runs of one kind
are separated in both (two numbers run together are one number: "1234" is not "12-34"). The
lexical index searches a query word's other spellings (:func:`spellings`), and the relevance
floor counts a text holding the query's code in another spelling as holding it whole
(:func:`code_pattern`, lake.search.relevance; only for a query without a word, and "inc 3147"
holds the word "inc", so it is judged by meaning there).
"""

from __future__ import annotations

import itertools
import re

import numpy as np

__all__ = ["MAX_CODE_RUNS", "code_pattern", "code_runs", "codes_held", "holding_codes",
           "spellings"]

# A code has at most this many runs (a UUID has 10, a file ref of conv:fi: ~15); longer text is
# not one code, and its pattern would cost: a pasted run of 2,000 tickets took 84 ms to compile.
MAX_CODE_RUNS = 64

# what may stand between the parts of a code ("INC-3147", "PR #4560", "v1.2", "INV_12")
_SEPARATORS = r"[-_.#/:\s]"
_RUN = re.compile(r"[^\W\d_]+|\d+")  # a run of letters (any script) or of digits
_ALNUM = r"[^\W_]"


def code_runs(text: str) -> list[str]:
    """The runs of letters and of digits of ``text``, in order: "INC-3147" and "inc3147" give
    ``["INC", "3147"]`` and ``["inc", "3147"]``."""
    return _RUN.findall(text)


def _mixed(runs: list[str]) -> bool:
    """Whether the runs hold letters and digits, each run of another kind than the last."""
    kinds = [run[0].isdigit() for run in runs]
    return len(runs) > 1 and all(a != b for a, b in itertools.pairwise(kinds))


def spellings(word: str) -> tuple[list[str], str] | None:
    """A query word's code, as the other spelling the lexical index must look for: its runs
    (a phrase of word tokens: "inc3147" is one token, a text writing "INC-3147" holds "inc" and
    "3147") and them joined (one token: a text writing "INC3147" holds "inc3147", which the
    word "inc-3147" is not). None for a word that is not a code of letters and digits
    alternating ("12-34", "foo-bar", "v2.3.1" have no other spelling), or of more than
    :data:`MAX_CODE_RUNS` runs."""
    runs = code_runs(word)
    return (runs, "".join(runs)) if _mixed(runs) and len(runs) <= MAX_CODE_RUNS else None


def code_pattern(code: str) -> re.Pattern[str] | None:
    """What a text holding ``code`` whole, separators aside, holds: the code's runs in order,
    in any case, up to two separators (``- _ . # / :`` or white space) between a run of
    letters and one of digits, one or two between runs of one kind, the whole span neither
    preceded nor followed by a letter or digit. "INC3147", "inc-3147" and "INC 3147" are each
    held by "INC-3147" and "INC3147"; "3147" is held by "INC-3147" but not by "INC3147". None
    for a code with no letter or digit, or with more than :data:`MAX_CODE_RUNS` runs."""
    runs = code_runs(code)
    if not runs or len(runs) > MAX_CODE_RUNS:
        return None
    pattern = [f"(?<!{_ALNUM})"]
    for before, run in zip([None, *runs], runs, strict=False):
        if before is not None:
            least = 1 if before[0].isdigit() == run[0].isdigit() else 0
            pattern.append(f"{_SEPARATORS}{{{least},2}}")
        pattern.append(re.escape(run))
    pattern.append(f"(?!{_ALNUM})")
    return re.compile("".join(pattern), re.IGNORECASE)


def codes_held(codes: list[str], texts: list[str]) -> list[frozenset[str]]:
    """Per text, the ones of ``codes`` it holds whole in any spelling (:func:`code_pattern`)."""
    patterns = [(code, p) for code in codes if (p := code_pattern(code)) is not None]
    return [frozenset(code for code, p in patterns if p.search(text)) for text in texts]


def holding_codes(codes: list[str], texts: list[str]) -> np.ndarray:
    """Per text, whether it holds one of ``codes`` whole in any spelling (:func:`codes_held`)."""
    return np.fromiter((bool(held) for held in codes_held(codes, texts)), np.bool_, len(texts))
