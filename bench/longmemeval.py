"""LongMemEval_S development questions: turn-level recall@k and all@k, per generator and fused.

Mapping (from shared/eval/longmemeval-dev/README.md): one question = one user of the tenant
``longmemeval``, one haystack session = one conversation ``<question_id>.<session_id>``; a
turn = a run of user utterances (the first the prompt, later ones follow-ups) and the
assistant utterances after them (joined by a newline as the completion), turn n at the
session's date + n minutes. Evidence = the turns holding an utterance marked ``has_answer`` in
an answer session, or every turn of an answer session that marks none.

The questions are split by id (sorted): even positions tune, odd positions report. Tuning code
reads :func:`questions` with ``split="tune"`` only. The data is read from ../shared at run time
(TURNLAKE_LONGMEMEVAL names another folder of question files) and never copied into the
project.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from bench.cache import CACHE_DIR as CACHE
from bench.cache import CachedEmbedder
from bench.locomo import MissingEvalData, ingested_lake
from bench.questions import KS, Asking, Found, Question, ask
from lake.embedding.base import Embedder
from lake.search.service import SearchService
from lake.settings import Settings
from lake.store import LakeStore
from pipeline.jobs import run_ingest

LONGMEMEVAL = Path(os.environ.get("TURNLAKE_LONGMEMEVAL") or Path(__file__).resolve().parents[2]
                   / "shared" / "eval" / "longmemeval-dev")
TENANT = "longmemeval"
SPLITS = ("tune", "report", "all")


class MissingLongMemEval(MissingEvalData):
    """The LongMemEval question files are not where the benchmarks look for them."""


@dataclass(frozen=True)
class Haystack:
    """One question's history as turn records, and the question scored against it."""

    question_id: str
    question_type: str
    records: list[dict[str, Any]]
    question: Question
    asked_at: datetime  # the question date, or the last turn when the history runs past it


def question_files(folder: Path | None = None) -> list[Path]:
    """The question files of ``folder`` (else :data:`LONGMEMEVAL`), sorted by question id;
    MissingLongMemEval naming the folder when it holds none."""
    where = folder or LONGMEMEVAL
    files = sorted(where.glob("*.json")) if where.is_dir() else []
    if not files:
        raise MissingLongMemEval(f"no LongMemEval question files (*.json) in {where}: put them "
                                 "there or name the folder with TURNLAKE_LONGMEMEVAL")
    return files


def split_files(split: str, folder: Path | None = None, *, limit: int | None = None
                ) -> list[Path]:
    """The question files of one split: "tune" (even positions of the sorted ids), "report"
    (odd positions) or "all". ``limit``: only the first ``limit`` questions of a seeded
    shuffle of the whole set that fall in the split (so a smaller run keeps each question in
    its half and mixes the question types)."""
    if split not in SPLITS:
        raise ValueError(f"unknown LongMemEval split {split!r}; splits are {', '.join(SPLITS)}")
    files = question_files(folder)
    half = {f: ("tune" if i % 2 == 0 else "report") for i, f in enumerate(files)}
    order = list(files)
    random.Random(0).shuffle(order)
    if limit is not None:
        order = order[:limit]
    return sorted(f for f in order if split == "all" or half[f] == split)


def load(path: Path) -> Haystack:
    """One question file as turn records and its scored question; ValueError naming the
    file and the field for a file of another shape."""
    try:
        data = json.loads(path.read_text())
        return _haystack(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{path}: not a LongMemEval question ({type(exc).__name__}: {exc})"
                         ) from exc


def _when(value: str) -> datetime:
    # "2023/05/28 (Sun) 13:10": the weekday in brackets says nothing the date does not
    day, _, clock = value.partition(")")
    return datetime.strptime(f"{day.split(' (')[0]} {clock.strip()}",
                             "%Y/%m/%d %H:%M").replace(tzinfo=UTC)


def _haystack(data: dict[str, Any]) -> Haystack:
    qid = str(data["question_id"])
    answer_sessions = set(map(str, data["answer_session_ids"]))
    records: list[dict[str, Any]] = []
    evidence: set[tuple[str, str]] = set()
    last = _when(data["question_date"])
    seen: set[str] = set()
    for sid, date, session in zip(data["haystack_session_ids"], data["haystack_dates"],
                                  data["haystack_sessions"], strict=True):
        if str(sid) in seen:  # a few haystacks hold a session twice, at two dates: keep one
            continue
        seen.add(str(sid))
        cid = f"{qid}-{sid}"  # "." is not allowed in conversation ids
        start = _when(date)
        marked: list[str] = []
        turn_ids: list[str] = []
        for n, (asked, answered) in enumerate(_turns(session)):
            tid = f"t-{n + 1:03d}"
            at = start + timedelta(minutes=n)
            last = max(last, at + timedelta(seconds=30))
            turn_ids.append(tid)
            if any(u.get("has_answer") for u in asked + answered):
                marked.append(tid)
            records.append({
                "schema": "turnlake.turn.v1", "tenant": TENANT, "app": "longmemeval",
                "agent": "longmemeval", "user_id": qid, "conversation_id": cid,
                "turn_id": tid, "writer": "minimal", "started_at": at.isoformat(),
                "ended_at": (at + timedelta(seconds=30)).isoformat(),
                "submissions": [{"text": str(u["content"]),
                                 "event_type": "prompt" if i == 0 else "followup",
                                 "batch": i, "arrived_at": at.isoformat()}
                                for i, u in enumerate(asked or [{"content": ""}])],
                "completion": {"text": "\n".join(str(u["content"]) for u in answered),
                               "at": (at + timedelta(seconds=20)).isoformat()},
                "ttl_days": 36_500,
            })
        if str(sid) in answer_sessions:
            evidence |= {(cid, t) for t in (marked or turn_ids)}
    if not evidence:
        raise ValueError("no evidence turn: the answer sessions are not in the haystack")
    return Haystack(qid, str(data["question_type"]), records,
                    Question(qid, str(data["question"]), frozenset(evidence)),
                    max(_when(data["question_date"]), last))


def _turns(session: Sequence[dict[str, Any]]
           ) -> Iterator[tuple[list[dict[str, Any]], list[dict[str, Any]]]]:
    """(user run, assistant run) pairs in order. A session the assistant opens (450 of the
    dev set's, none holding evidence) gives that run as a turn without a prompt, so that no
    text is dropped."""
    i = 0
    while i < len(session):
        asked: list[dict[str, Any]] = []
        while i < len(session) and session[i]["role"] == "user":
            asked.append(session[i])
            i += 1
        answered: list[dict[str, Any]] = []
        while i < len(session) and session[i]["role"] != "user":
            answered.append(session[i])
            i += 1
        yield asked, answered


def haystacks(split: str, folder: Path | None = None, *, limit: int | None = None
              ) -> list[Haystack]:
    """The questions of one split (:func:`split_files`) loaded as haystacks."""
    return [load(f) for f in split_files(split, folder, limit=limit)]


def scored(stacks: Sequence[Haystack]) -> list[Question]:
    """The haystacks' questions, each asked at its own time and labelled by its type."""
    return [Question(h.question.user_id, h.question.text, h.question.evidence,
                     h.question_type, h.asked_at) for h in stacks]


def warm(embedder: CachedEmbedder, *, limit: int | None = None,
         folder: Path | None = None) -> None:
    """Embed the histories of the first ``limit`` questions of the seeded order into the
    cache, one question at a time (saved after each), so that a long warm-up that is stopped
    keeps what it did. Progress on stderr."""
    order = split_files("all", folder)
    chosen = set(split_files("all", folder, limit=limit))
    shuffled = list(order)
    random.Random(0).shuffle(shuffled)
    todo = [f for f in shuffled if f in chosen]
    for n, path in enumerate(todo, 1):
        started = time.perf_counter()
        before = embedder.misses
        with tempfile.TemporaryDirectory(prefix="lme-warm-") as tmp:
            report = run_ingest(Settings(lake=Path(tmp), embedding_model=embedder.name),
                                records=[json.dumps(r) for r in load(path).records],
                                embedder=embedder, index=False).ingest
        if report.quarantined:
            first = report.quarantined[0]
            raise ValueError(f"{path}: {len(report.quarantined)} turns refused, the first "
                             f"(line {first.line}) for {first.reason}")
        embedder.save()
        print(f"[{n}/{len(todo)}] {path.stem}: {embedder.misses - before} new texts in "
              f"{time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)


def question_recalls(embedder: Embedder, *, splits: Sequence[str] = ("tune", "report"),
                     limit: int | None = None, asking: Asking | None = None,
                     workdir: Path | None = None, folder: Path | None = None,
                     configs: Mapping[str, Mapping[str, bool]] | None = None
                     ) -> dict[str, dict[str, Found]]:
    """Per split and configuration, the questions' :class:`~bench.questions.Found`, on one
    lake holding every asked question's history (each question sees only its own user's)."""
    stacks = {s: haystacks(s, folder, limit=limit) for s in splits}
    every = {h.question_id: h for hs in stacks.values() for h in hs}
    ids = sorted(every)
    tag = hashlib.sha1(" ".join(ids).encode()).hexdigest()[:10]
    root = Path(workdir or tempfile.mkdtemp(prefix="lme-")) / f"minimal-{len(ids)}-{tag}"
    ingested_lake(root, [r for q in ids for r in every[q].records], embedder)
    service = SearchService(LakeStore(root), embedder=embedder)
    far = max(h.asked_at for h in every.values())
    return {s: ask(service, TENANT, scored(hs), far, asking=asking, configs=configs)
            for s, hs in stacks.items()}


def figures(found: Mapping[str, Found], kinds: Sequence[str]) -> dict[str, Any]:
    """Recall@k and all@k per configuration, overall and by question type, rounded."""
    def means(values: np.ndarray) -> dict[str, float]:
        return {str(k): round(float(v), 3) for k, v in zip(KS, values.mean(axis=0),
                                                           strict=True)}

    out: dict[str, Any] = {}
    for name, f in found.items():
        by_kind = {}
        for kind in sorted(set(kinds)):
            rows = np.array([k == kind for k in kinds])
            by_kind[kind] = {"questions": int(rows.sum()), "recall": means(f.recall[rows]),
                             "all": means(f.every[rows])}
        out[name] = {"recall": means(f.recall), "all": means(f.every), "by_type": by_kind}
    return out


def run_figures(recalls: Callable[..., dict[str, dict[str, Found]]], *,
                limit: int | None = None, workdir: Path | None = None) -> dict[str, Any]:
    """The bench section: :func:`figures` per split, the number of questions, and per split
    fused recall@k minus the best generator alone with its paired interval (bench.margins).
    ``recalls`` is :func:`question_recalls` (a parameter so a test can hand a small one)."""
    from bench.cache import CachedEmbedder
    from bench.margins import fused_margins
    from lake.embedding.sentence import SentenceTransformerEmbedder

    inner = SentenceTransformerEmbedder()
    # a cache of its own: LoCoMo's is saved by other runs at the same time
    embedder = CachedEmbedder(inner, path=CACHE / f"emb-lme-{inner.name}.npz")
    found = recalls(embedder, limit=limit, workdir=workdir)
    embedder.save()
    out: dict[str, Any] = {"limit": limit}
    for split, by_config in found.items():
        kinds = [q.kind for q in scored(haystacks(split, limit=limit))]
        out[split] = figures(by_config, kinds)
        out[f"{split}_questions"] = len(kinds)
        out[f"{split}_margins"] = {
            str(m.k): m.to_json()
            for m in fused_margins({n: f.recall for n, f in by_config.items()}, KS)}
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m bench.longmemeval [--warm] [--limit N]``: embed histories into the bench
    cache, or print the bench section (:func:`run_figures`) as JSON."""
    parser = argparse.ArgumentParser(prog="python -m bench.longmemeval")
    parser.add_argument("--warm", action="store_true",
                        help="only embed the chosen questions' histories into the cache")
    parser.add_argument("--limit", type=int, default=None,
                        help="the first N questions of the seeded order (default: all 120)")
    args = parser.parse_args(argv)
    try:
        if args.warm:
            from lake.embedding.sentence import SentenceTransformerEmbedder

            inner = SentenceTransformerEmbedder()
            warm(CachedEmbedder(inner, path=CACHE / f"emb-lme-{inner.name}.npz"),
                 limit=args.limit)
            return 0
        result = run_figures(question_recalls, limit=args.limit, workdir=CACHE / "longmemeval")
    except (MissingLongMemEval, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
