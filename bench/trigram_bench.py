"""Micro benchmark of lake.index.trigram: build time and query latency on synthetic texts.

Run: ``.venv/bin/python bench/trigram_bench.py [n_texts] [n_queries]``.  Texts are ~100 chars of
real words drawn by their frequency; queries are 1-4 mid-frequency words, half with one typo, and
3 of the 300 most common words (many docs share every query trigram: the exact-scoring budget).
"""

from __future__ import annotations

import re
import sys
import sysconfig
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from lake.index.trigram import TrigramIndex


def synthetic_texts(n: int, seed: int = 0) -> tuple[list[str], list[str]]:
    """``n`` texts of about 100 characters and their vocabulary, best first.

    Words follow the real frequencies of the words in the comments and docstrings of the
    standard library next to this Python (technical English); case and punctuation are mixed in.
    """
    counts: Counter[str] = Counter()
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        for doc, comment in re.findall(
            r'"""(.*?)"""|#([^\n]*)', path.read_text("utf-8", "replace"), re.S
        ):
            counts.update(re.findall(r"[A-Za-z][a-z]+", doc or comment))
    vocab = [w for w, _ in counts.most_common()]
    freq = np.array([counts[w] for w in vocab], np.float64)
    rng = np.random.default_rng(seed)
    picks = rng.choice(len(vocab), size=(n, 17), p=freq / freq.sum())
    marks = np.array([" ", " ", " ", ", ", ". ", " (", ": "])
    glue = rng.choice(marks, size=(n, 17))
    texts = [
        "".join(g + vocab[j] for j, g in zip(row, grow, strict=True))[1:111]
        for row, grow in zip(picks.tolist(), glue.tolist(), strict=True)
    ]
    return texts, vocab


def queries(vocab: list[str], count: int, seed: int = 1) -> list[str]:
    """1-4 word queries from ``vocab`` (ranks 50..5000), every other one with a dropped letter."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        words = [vocab[int(j)] for j in rng.integers(50, 5000, int(rng.integers(1, 5)))]
        if i % 2 and len(words[0]) > 3:
            cut = int(rng.integers(1, len(words[0]) - 1))
            words[0] = words[0][:cut] + words[0][cut + 1 :]
        out.append(" ".join(words))
    return out


def main() -> None:
    """Print build time, index size and p50/p90 latency for both modes, a scoped search and
    searches shaped like the service's (depth 100, threshold 0.5)."""
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    n_queries = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    texts, vocab = synthetic_texts(n)
    started, cpu_started = time.perf_counter(), time.process_time()
    index = TrigramIndex.build(texts)
    print(
        f"build {n} texts (~{sum(map(len, texts)) // n} chars): "
        f"{time.perf_counter() - started:.2f} s (cpu {time.process_time() - cpu_started:.2f} s)"
    )
    with tempfile.TemporaryDirectory() as tmp:
        index.save(Path(tmp))
        size = sum(p.stat().st_size for p in Path(tmp).iterdir())
        print(f"on disk: {size / 1e6:.1f} MB")
        index = TrigramIndex.load(Path(tmp))
        rng = np.random.default_rng(2)
        scope = np.sort(rng.choice(n, size=min(n, 5000), replace=False))
        mixed = queries(vocab, n_queries)
        one_word = [q for q in queries(vocab, 4 * n_queries, seed=3) if " " not in q][:n_queries]
        # what the search service asks of each partition: depth 100 at threshold 0.5; with
        # common words many docs share every query trigram, so the exact budget is spent
        service: dict[str, Any] = {"limit": 100, "threshold": 0.5}
        common = [" ".join(vocab[int(j)] for j in rng.integers(0, 300, 3))
                  for _ in range(n_queries)]
        runs: list[tuple[str, list[str], dict[str, Any]]] = [
            ("word, 1-4 words", mixed, {}),
            ("word, 1 word", one_word, {}),
            ("similarity, 1-4 words", mixed, {"mode": "similarity"}),
            ("word, 1-4 words, 5000-doc scope", mixed, {"allowed": scope}),
            ("word, 1-4 words, service depth", mixed, service),
            ("word, 3 common words, service depth", common, service),
        ]
        for label, batch, kwargs in runs:
            wall, cpu, hits = [], [], 0
            for query in batch:
                t0, c0 = time.perf_counter(), time.process_time()
                hits += len(index.search(query, **kwargs))
                wall.append(time.perf_counter() - t0)
                cpu.append(time.process_time() - c0)
            w, c = np.percentile(wall, [50, 90]) * 1000, np.percentile(cpu, [50, 90]) * 1000
            print(
                f"{label}: p50 {w[0]:.2f} ms (cpu {c[0]:.2f}), p90 {w[1]:.2f} ms (cpu {c[1]:.2f}),"
                f" {hits / len(batch):.1f} hits/q"
            )


if __name__ == "__main__":
    main()
