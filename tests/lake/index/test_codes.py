"""lake.index.codes: a code is one code however its parts are separated."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from lake.index.codes import MAX_CODE_RUNS, code_pattern, code_runs, holding_codes, spellings


def test_a_code_is_held_whole_whatever_separates_its_parts() -> None:
    texts = ["see INC-3147 now", "INC3147", "PR #4560 merged", "ticket 12-34", "AINC-3147",
             "INC-31470", "v1.2 ships"]

    def holders(code: str) -> list[int]:
        return np.flatnonzero(holding_codes([code], texts)).tolist()

    # written with another separator, or with none, in any case
    for code in ("INC-3147", "INC3147", "inc 3147", "Inc_3147", "INC:3147"):
        assert holders(code) == [0, 1], code
    assert holders("PR4560") == holders("pr-4560") == [2]
    # a part alone is held where its span is bounded by separators
    assert holders("3147") == [0, 4]
    assert holders("4560") == [2]
    # another number, or a longer one, is another code; so are two numbers run together
    for code in ("INC3148", "INC-314", "1234", "v12"):
        assert holders(code) == [], code
    assert holders("12.34") == [3] and holders("V1-2") == [6]
    # a code of no letter or digit holds nothing
    assert code_pattern("?!") is None
    assert holding_codes(["?!"], texts).tolist() == [False] * len(texts)
    assert holding_codes(["INC9999", "#4560"], texts).tolist() == [
        False, False, True, False, False, False, False]


_runs = st.lists(st.one_of(st.text("abcXYZé", min_size=1, max_size=4),
                           st.text("0123456789", min_size=1, max_size=5)),
                 min_size=1, max_size=4)
_separators = st.lists(st.sampled_from(["", "-", "_", ".", "#", "/", ":", " ", " #", "--"]),
                       min_size=4, max_size=4)


def _written(runs: list[str], separators: list[str]) -> str:
    out = runs[0]
    for before, run, separator in zip(runs, runs[1:], separators, strict=False):
        same_kind = before[-1].isdigit() == run[0].isdigit()
        # runs of one kind need a separator to stay apart: "12" and "34" run together are 1234
        out += ((separator or "-") if same_kind else separator) + run
    return out


@given(_runs, _separators, _separators, st.sampled_from(["", " ", "(", "\n", "see "]))
def test_a_code_written_with_any_separators_is_held_by_text_writing_it_with_others(
        runs: list[str], asked: list[str], written: list[str], before: str) -> None:
    code, text = _written(runs, asked), before + _written(runs, written) + "."
    assert holding_codes([code.upper()], [text])[0], (code, text)
    # a digit more at the end is a longer number, a different code
    longer = code + ("0" if runs[-1][-1].isdigit() else "q")
    assert not holding_codes([longer], [text])[0], (longer, text)


def test_a_code_word_is_searched_in_its_other_spellings() -> None:
    assert code_runs("INC-3147") == ["INC", "3147"] and code_runs("#4560") == ["4560"]
    assert code_runs("Straße9") == ["Straße", "9"]
    assert spellings("inc3147") == (["inc", "3147"], "inc3147")
    assert spellings("inc-3147") == (["inc", "3147"], "inc3147")
    assert spellings("gpt4o") == (["gpt", "4", "o"], "gpt4o")
    # no other spelling: one run, runs of one kind side by side, no digit or no letter
    for word in ("3147", "inc", "12-34", "v2.3.1", "foo-bar", "e-mail", "#", ""):
        assert spellings(word) is None, word


@given(st.lists(st.one_of(st.text("abcé", min_size=1, max_size=3),
                          st.text("0123", min_size=1, max_size=3)), min_size=1, max_size=5),
       st.sampled_from(["", "-", ".", "_"]))
def test_spellings_join_alternating_runs_whatever_separates_them(runs: list[str],
                                                                   separator: str) -> None:
    word = separator.join(runs)
    got = spellings(word)
    kinds = [r[0].isdigit() for r in code_runs(word)]
    alternating = len(kinds) > 1 and all(a != b for a, b in itertools.pairwise(kinds))
    assert (got is not None) == alternating
    if got is not None:
        assert got[1] == "".join(got[0]) == "".join(code_runs(word))
        # a text holding any spelling of it holds it whole
        assert holding_codes([word], [f"see {'-'.join(got[0])} and"])[0]


def test_text_of_more_runs_than_a_code_has_is_not_one_code() -> None:
    code = "-".join(f"a{i}" for i in range(MAX_CODE_RUNS // 2))  # MAX_CODE_RUNS runs
    assert code_pattern(code) is not None and spellings(code.replace("-", "")) is not None
    assert holding_codes([code], [f"see {code.upper()}."])[0]
    longer = code + "-b"
    assert code_pattern(longer) is None and spellings(longer.replace("-", "")) is None
    assert not holding_codes([longer], [f"see {longer}."])[0]
