"""Codes a history holds against codes of the same shape it does not: does the floor tell them
apart, and is a held code found however it is written? (issue #22, the relevance floor).

Run: ``.venv/bin/python -m bench.codes [--tmp]``.

An agent asks "did we discuss INC-9999?" and needs "no" when the history holds INC-9124 and
INC-3147 but not INC-9999. The demo lake (pipeline.demo, its default 12 users and 600 turns,
all-MiniLM-L6-v2 embeddings) writes tickets (INC-1234), invoices (INV-12345) and pull requests
(#123) into its turns. Each user's own codes are that user's probes, searched in user scope with
the default floor:

* held, as written and in lower case: found when the first hit's turn holds the code (its
  text, in any case) and passes the floor;
* absent, another number: the code's prefix with a number of the same width that none of the
  user's rows holds; empty when no hit passes the floor;
* absent, a near miss: the code with its last digit changed, again to a code none of the
  user's rows holds (INC-3147 to INC-3148): the hardest case, a code one keystroke from a
  real one;
* two codes, one held: the code and the near miss in one query ("INC-3147 INC-3148"): found
  when the first hit's turn holds the held one; two codes, neither held: the other number and
  the near miss, empty;
* a code written without its separator, as people type it ("INC3147" for INC-3147): found
  first when held, and the near miss written so ("INC3148"): empty. Pull requests ("#123")
  have no separator to drop;
* a held code asked in words (:data:`IN_WORDS`: "what happened with INC-3147", "INC-3147
  status"), as written and without its separator: found first. These are judged by meaning
  (they hold a word), so they measure the ranking, not the floor's rule for codes.

The probes are drawn from the history with a fixed seed; nothing here is fitted, so there is no
tuning split to keep apart (the rule it measures, lake.search.relevance.literal_relevance, has
no parameter).
"""

from __future__ import annotations

import random
import re
import sys
import tempfile
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.scale import NOW
from lake.embedding.base import Embedder
from lake.search.access import Principal
from lake.search.request import SearchRequest
from lake.search.service import SearchService
from lake.settings import Settings
from lake.store import LakeStore
from lake.tables import Table
from pipeline.demo import generate_lines
from pipeline.demo_texts import DRAWN_SLOTS
from pipeline.jobs import run_ingest

# the demo's numbered slots written as a prefix and a number: "INC-{}", "INV-{}", "#{}"
_PREFIXES = [fmt[:-2] for _, fmt, _, _ in DRAWN_SLOTS if fmt.endswith("{}") and len(fmt) > 2]
CODE = re.compile("|".join(rf"(?<![\w#-]){re.escape(p)}(\d+)\b" for p in _PREFIXES))
PER_USER = 8  # codes drawn per user (of ~20-60 each holds)
# each kind of probe and its label in plots
KINDS = {"as_written": "held code,\nas written", "lower_case": "held code,\nlower case",
         "other_number": "absent code,\nanother number",
         "near_miss": "absent code,\nlast digit changed",
         "two_codes_one_held": "two codes,\none held",
         "two_codes_none_held": "two codes,\nneither held",
         "no_separator": "held code,\nno separator",
         "no_separator_near_miss": "absent code,\nno separator",
         "in_words": "held code\nin words",
         "in_words_no_separator": "held code in words,\nno separator"}
# how a code is asked in words (two ways, so that no one phrasing stands for all)
IN_WORDS = ("what happened with {}", "{} status")
# kinds answered by no hit
NONE_HELD = ("other_number", "near_miss", "two_codes_none_held", "no_separator_near_miss")


@dataclass(frozen=True)
class CodeProbe:
    """One query of codes asked in one user's scope: found when ``held`` (a code the user's
    history holds) is in the first hit's turn, or, ``held`` None, when no hit comes back."""

    tenant: str
    user_id: str
    query: str
    kind: str  # one of KINDS
    held: str | None


def codes_in(text: str) -> list[tuple[str, str]]:
    """The (prefix, number) of every code in ``text``: "INC-", "INV-" or "#" and its digits."""
    return [(_PREFIXES[m.lastindex - 1], m[m.lastindex]) for m in CODE.finditer(text)
            if m.lastindex is not None]


def probes(texts_by_user: dict[tuple[str, str], list[str]], *, per_user: int = PER_USER,
           seed: int = 1) -> list[CodeProbe]:
    """Up to ``per_user`` of each user's codes, each asked the ways :data:`KINDS` names."""
    rng = random.Random(seed)
    out: list[CodeProbe] = []
    for (tenant, user), texts in sorted(texts_by_user.items()):
        held = {code for text in texts for code in codes_in(text)}
        for prefix, number in rng.sample(sorted(held), min(per_user, len(held))):
            code = prefix + number
            out.append(CodeProbe(tenant, user, code, "as_written", code))
            if code.lower() != code:
                out.append(CodeProbe(tenant, user, code.lower(), "lower_case", code))
            width = len(number)
            other = _first_unheld(held, prefix, [
                str(rng.randrange(10 ** (width - 1), 10 ** width)) for _ in range(50)])
            near = _first_unheld(held, prefix,
                                 [number[:-1] + d for d in "0123456789" if d != number[-1]])
            for kind, n in (("other_number", other), ("near_miss", near)):
                if n is not None:
                    out.append(CodeProbe(tenant, user, prefix + n, kind, None))
            joined = prefix.rstrip("-")  # "INC-" written as "INC", "#" has nothing to drop
            for words in IN_WORDS:
                out.append(CodeProbe(tenant, user, words.format(code), "in_words", code))
            if joined != prefix:
                out.append(CodeProbe(tenant, user, joined + number, "no_separator", code))
                for words in IN_WORDS:
                    out.append(CodeProbe(tenant, user, words.format(joined + number),
                                         "in_words_no_separator", code))
                if near is not None:
                    out.append(CodeProbe(tenant, user, joined + near, "no_separator_near_miss",
                                         None))
            if near is not None:
                out.append(CodeProbe(tenant, user, f"{code} {prefix}{near}",
                                     "two_codes_one_held", code))
                if other is not None:
                    out.append(CodeProbe(tenant, user, f"{prefix}{other} {prefix}{near}",
                                         "two_codes_none_held", None))
    return out


def _first_unheld(held: set[tuple[str, str]], prefix: str, numbers: Sequence[str]
                  ) -> str | None:
    return next((n for n in numbers if (prefix, n) not in held), None)


def demo_lake(root: Path, embedder: Embedder) -> Settings:
    """The demo lake with ``embedder``'s vectors, indexes built (reused when already there)."""
    settings = Settings(lake=root, embedding_model=embedder.name)
    if not (root / "indexes").exists():
        run_ingest(settings, records=list(generate_lines(now=NOW)), embedder=embedder)
    return settings


def measure(root: Path, embedder: Embedder) -> dict[str, Any]:
    """Per kind of probe, the share answered right (the held code found first, or no hit when
    none is held) at the default floor, and how many probes there were."""
    settings = demo_lake(root, embedder)
    store = LakeStore(settings.lake)
    rows = store.read(Table.CONTENT_ROWS,
                      columns=["tenant", "user_id", "conversation_id", "turn_id", "text"])
    texts_by_user: dict[tuple[str, str], list[str]] = defaultdict(list)
    turn_text: dict[tuple[str, str, str], str] = defaultdict(str)
    for row in rows.to_pylist():
        texts_by_user[(row["tenant"], row["user_id"])].append(row["text"])
        turn_text[(row["tenant"], row["conversation_id"], row["turn_id"])] += \
            "\n" + row["text"].lower()
    service = SearchService(store, embedder=embedder)
    right: dict[str, list[bool]] = {kind: [] for kind in KINDS}
    for probe in probes(texts_by_user):
        hits = service.search(SearchRequest(probe.query,
                                            Principal(probe.tenant, probe.user_id),
                                            as_of=NOW)).hits
        if probe.held is None:
            right[probe.kind].append(not hits)
        else:
            first = hits[0] if hits else None
            right[probe.kind].append(first is not None and probe.held.lower() in turn_text[
                (first.tenant, first.conversation_id, first.turn_id)])
    return {kind: {"probes": len(v), "right": round(sum(v) / max(len(v), 1), 4)}
            for kind, v in right.items()}


def main(argv: Sequence[str]) -> None:
    import argparse

    from bench.cache import CACHE_DIR, CachedEmbedder
    from lake.embedding.sentence import SentenceTransformerEmbedder

    parser = argparse.ArgumentParser(prog="python -m bench.codes", description=(
        "Codes the demo lake holds against codes of the same shape it does not, at the "
        "default relevance floor."))
    parser.add_argument("--tmp", action="store_true",
                        help="build the demo lake in a temporary directory, not bench/.cache")
    args = parser.parse_args(argv)
    embedder = CachedEmbedder(SentenceTransformerEmbedder())
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "codes-demo" if args.tmp else CACHE_DIR / "codes-demo"
        figures = measure(root, embedder)
    embedder.save()
    for kind, f in figures.items():
        what = "empty" if kind in NONE_HELD else "found first"
        print(f"{kind:>22}: {f['right']:.1%} {what} ({f['probes']} probes)")


if __name__ == "__main__":
    main(sys.argv[1:])
