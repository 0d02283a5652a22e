"""BM25 on the statistics of what is searched: one scale across partitions, or one user's history.

Tantivy scores a query word by its IDF within one index, a tenant's month::

    idf(N, df) = ln(1 + (N - df + 0.5) / (df + 0.5))      N rows, df rows holding the word

Two searches want other statistics:

* **Several partitions** (a tenant scope over months): a small month inflates the scores of
  words common elsewhere. :func:`partition_scales` multiplies each partition's scores by
  ``Σ_t idf(N, df_t) / Σ_t idf(N_p, df_p,t)`` over the query's words, the sums taken over all
  partitions in the numerator: an approximation of one index over their union.
* **One user's history** (user and conversation scopes): the rows searched are that user's, so
  a word's weight should say how rare it is *there*. A partition holds many users; a word that
  is rare among all of them but fills this user's history (the name of the person they talk to,
  their project's name, a greeting) gets a high partition IDF and lets every row that merely
  mentions it outrank the one row that holds the query's other, rarer words.
  :func:`scoped_word_weights` gives per partition and stem the factor
  ``idf(N_u, df_u,t) / idf(N_p, df_p,t)`` (``N_u``, ``df_u,t``: the user's rows and those holding
  the word, summed over the searched partitions) that turns the partition's IDF into the
  user's; the factors also put the partitions on one scale, since every partition then weighs
  a word by the same IDF. The lexical index applies a word's factor to every clause it makes
  (stemmed, exact, identifier and exchange fields); the stemmed field's counts stand for all.

What it measured: docs/design/bm25.md.

Everything here is pure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

__all__ = ["TermStats", "idf", "partition_scales", "scope_idf", "scoped_word_weights"]

# (rows, rows holding each query stem), as LexicalIndex.term_stats reports them
TermStats = tuple[int, Sequence[int]]


def idf(rows: int, df: int) -> float:
    """BM25's (and tantivy's) inverse document frequency of a word held by ``df`` of ``rows``
    rows; always > 0 for 0 <= df <= rows."""
    if rows < 0 or df < 0 or df > rows:
        raise ValueError(f"document frequency {df} of {rows} rows is not a count")
    return math.log(1.0 + (rows - df + 0.5) / (df + 0.5))


def partition_scales(stats: Mapping[str, TermStats]) -> dict[str, float]:
    """Per partition (keyed as ``stats``), the factor that puts its BM25 scores on the scale of
    one index over all of them (see the module docstring); {} when no word or no row counts.
    On LoCoMo it lifted merged lexical recall@5 from .529 to .553 before user statistics."""
    total_rows = sum(rows for rows, _ in stats.values())
    width = max((len(dfs) for _, dfs in stats.values()), default=0)
    if width == 0 or total_rows == 0:
        return {}
    total_df = [sum(dfs[i] for _, dfs in stats.values() if i < len(dfs)) for i in range(width)]
    union = sum(idf(total_rows, df) for df in total_df)
    scales: dict[str, float] = {}
    for key, (rows, dfs) in stats.items():
        local = sum(idf(rows, df) for df in dfs)
        scales[key] = union / local if local > 0 else 1.0
    return scales


def scoped_word_weights(stems: Sequence[str], partition_stats: Mapping[str, TermStats],
                        scoped_stats: Mapping[str, TermStats]) -> dict[str, dict[str, float]]:
    """Per partition and stem, the factor ``idf(scope) / idf(partition)`` (module docstring).

    ``partition_stats[p]`` counts partition ``p``'s rows, ``scoped_stats[p]`` the scope's rows
    in it (the same keys, each with one count per stem, in ``stems`` order). Every factor is
    > 0; with one partition whose rows are all the scope's, every factor is 1."""
    if set(partition_stats) != set(scoped_stats):
        raise ValueError("partition and scope statistics name different partitions")
    for _, dfs in (*partition_stats.values(), *scoped_stats.values()):
        if len(dfs) != len(stems):
            raise ValueError(f"{len(dfs)} counts for {len(stems)} stems")
    wanted = scope_idf(stems, scoped_stats)
    return {key: {stem: wanted[stem] / idf(rows, dfs[i]) for i, stem in enumerate(stems)}
            for key, (rows, dfs) in partition_stats.items()}


def scope_idf(stems: Sequence[str], stats: Mapping[str, TermStats]) -> dict[str, float]:
    """Each stem's IDF over all the rows ``stats`` count (summed over its partitions, each
    with one count per stem in ``stems`` order)."""
    rows = sum(n for n, _ in stats.values())
    return {stem: idf(rows, sum(dfs[i] for _, dfs in stats.values()))
            for i, stem in enumerate(stems)}
