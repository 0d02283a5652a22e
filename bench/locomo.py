"""LoCoMo retrieval quality: turn-level recall@5/10/25 per generator and fused.

Mapping (from shared/eval/locomo/README.md): one sample = one user, one session = one
conversation; a turn = a run of the session opener's utterances (folded submissions) followed
by the other speaker's run (the completion); turns one minute apart from the session time.
Rich records carry each LoCoMo observation as an anchor of the turn holding its utterance.
The data is read from ../shared at run time and never copied into the project.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from bench.questions import CONFIGS, KS, Asking, Question, ask, mean_recalls
from lake.embedding.base import Embedder
from lake.search.relevance import DEFAULT_MIN_RELEVANCE
from lake.search.request import DEFAULT_WEIGHTS, FusionSettings
from lake.search.service import SearchService
from lake.settings import Settings
from lake.store import LakeStore
from pipeline.jobs import run_ingest

# The evaluation set lives beside the repository (../shared/eval/locomo, never copied into
# it); TURNLAKE_LOCOMO names another place, e.g. for a clone made elsewhere.
LOCOMO = Path(os.environ.get("TURNLAKE_LOCOMO") or Path(__file__).resolve().parents[2]
              / "shared" / "eval" / "locomo" / "locomo10.json")
TENANT = "locomo"
__all__ = ["CONFIGS", "KS", "Question", "build", "evaluate", "ingested_lake", "load",
           "mean_recalls", "question_recalls", "samples"]
# Tuning reads only the first five conversations; figures are reported on the other five
# (and on all ten). Anything fitted or chosen for ranking comes from "tune" alone.
SPLITS: dict[str, range] = {"tune": range(0, 5), "report": range(5, 10), "all": range(0, 10)}
_DIA = re.compile(r"D(\d+):(\d+)")


class MissingEvalData(FileNotFoundError):
    """The LoCoMo file is not where the benchmarks look for it."""


def load(path: Path | None = None) -> list[dict[str, Any]]:
    """The LoCoMo samples (``path``, else :data:`LOCOMO`); MissingEvalData naming the place
    looked in when the file is not there."""
    where = path or LOCOMO
    if not where.is_file():
        raise MissingEvalData(f"LoCoMo not found at {where}: put locomo10.json there or name "
                              "it with TURNLAKE_LOCOMO")
    data: list[dict[str, Any]] = json.loads(where.read_text())
    return data


def samples(split: str, path: Path | None = None) -> list[dict[str, Any]]:
    """The LoCoMo samples of one split ("tune", "report" or "all"), in file order."""
    if split not in SPLITS:
        raise ValueError(f"unknown LoCoMo split {split!r}; splits are {', '.join(SPLITS)}")
    data = load(path)
    return [data[i] for i in SPLITS[split] if i < len(data)]


def _session_time(value: str) -> datetime:
    return datetime.strptime(value, "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def build(data: list[dict[str, Any]], *, rich: bool
          ) -> tuple[list[dict[str, Any]], list[Question], datetime]:
    """Turn records, scored questions and the end of the last session."""
    records: list[dict[str, Any]] = []
    questions: list[Question] = []
    last = datetime(2000, 1, 1, tzinfo=UTC)
    for sample in data:
        user = sample["sample_id"]
        conv = sample["conversation"]
        turn_of: dict[str, tuple[str, str]] = {}
        observations: dict[str, list[str]] = {}
        for key, per_speaker in sample.get("observation", {}).items():
            for items in per_speaker.values():
                for text, dia in items:
                    for dia_id in _DIA.findall(str(dia)):
                        observations.setdefault(f"D{dia_id[0]}:{dia_id[1]}", []).append(text)
            del key
        n = 1
        while f"session_{n}" in conv:
            utterances = conv[f"session_{n}"]
            start = _session_time(conv[f"session_{n}_date_time"])
            cid = f"{user}-s{n}"
            for t, (user_run, answer_run) in enumerate(_turns(utterances)):
                tid = f"t-{t + 1:03d}"
                at = start + timedelta(minutes=t)
                last = max(last, at + timedelta(seconds=30))
                for u in user_run + answer_run:
                    turn_of[u["dia_id"]] = (cid, tid)
                record: dict[str, Any] = {
                    "schema": "turnlake.turn.v1", "tenant": TENANT, "app": "locomo",
                    "agent": "locomo", "user_id": user, "conversation_id": cid,
                    "turn_id": tid, "writer": "rich" if rich else "minimal",
                    "started_at": at.isoformat(),
                    "ended_at": (at + timedelta(seconds=30)).isoformat(),
                    "submissions": [{"text": _text(u), "event_type":
                                     "prompt" if i == 0 else "followup", "batch": i,
                                     "arrived_at": at.isoformat()}
                                    for i, u in enumerate(user_run)],
                    "completion": {"text": "\n".join(_text(u) for u in answer_run),
                                   "at": (at + timedelta(seconds=20)).isoformat()},
                    "ttl_days": 36_500,
                }
                if rich:
                    record["anchors"] = [o for u in user_run + answer_run
                                         for o in observations.get(u["dia_id"], [])]
                records.append(record)
            n += 1
        for qa in sample["qa"]:
            if qa.get("category") not in (1, 2, 3, 4):
                continue
            ids = {f"D{a}:{b}" for a, b in _DIA.findall(" ".join(map(str, qa["evidence"])))}
            turns = frozenset(turn_of[i] for i in ids if i in turn_of)
            if turns:
                questions.append(Question(user, qa["question"], turns))
    return records, questions, last


def join_turns(records: list[dict[str, Any]], questions: list[Question], n: int, *,
               mixed: bool = False) -> tuple[list[dict[str, Any]], list[Question]]:
    """Each conversation's turns joined in runs of ``n`` into one turn: the first turn's
    prompt, and a completion holding the rest of the run's text in order (as an agent that
    answers at length); rich anchors are pooled. ``mixed``: only every other run is joined
    (the first, third, ...), the turns of the others stay as they were, so long turns sit
    beside short ones in each conversation. A question's evidence becomes the turns that
    hold it."""
    out: list[dict[str, Any]] = []
    into: dict[tuple[str, str], tuple[str, str]] = {}
    runs: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        runs.setdefault(r["conversation_id"], []).append(r)
    for conversation, turns in runs.items():
        for block, start in enumerate(range(0, len(turns), n)):
            run = turns[start:start + n]
            if mixed and block % 2:
                out += run
                into.update({(conversation, r["turn_id"]): (conversation, r["turn_id"])
                             for r in run})
                continue
            head = run[0]
            texts = [head["completion"]["text"]]
            for r in run[1:]:
                texts += [s["text"] for s in r["submissions"]] + [r["completion"]["text"]]
            joined = {**head, "completion": {**head["completion"], "text": "\n".join(texts)}}
            if "anchors" in head:
                joined["anchors"] = [a for r in run for a in r.get("anchors", [])]
            out.append(joined)
            into.update({(conversation, r["turn_id"]): (conversation, head["turn_id"])
                         for r in run})
    return out, [Question(q.user_id, q.text, frozenset(into[t] for t in q.evidence))
                 for q in questions]


def _text(u: Mapping[str, Any]) -> str:
    text = str(u["text"])
    if u.get("blip_caption"):
        text += f" [image: {u['blip_caption']}]"
    return text


def _turns(utterances: list[dict[str, Any]]) -> Iterator[tuple[list[Any], list[Any]]]:
    opener = utterances[0]["speaker"]
    i = 0
    while i < len(utterances):
        user_run: list[Any] = []
        while i < len(utterances) and utterances[i]["speaker"] == opener:
            user_run.append(utterances[i])
            i += 1
        answer_run: list[Any] = []
        while i < len(utterances) and utterances[i]["speaker"] != opener:
            answer_run.append(utterances[i])
            i += 1
        if not user_run:  # a session the other speaker opens mid-way cannot happen; be safe
            user_run, answer_run = answer_run, []
        if not answer_run:
            answer_run = [{"text": "", "dia_id": ""}]
        yield user_run, answer_run


# What a cached bench lake was written by: bump it when ingest writes rows differently
# (2: a long row keeps its passages' vectors; 3: vectors at half precision), so that a lake
# of an older form is rebuilt.
LAKE_FORM = 3
_FORM_FILE = "bench-lake-form"


def ingested_lake(root: Path, records: list[dict[str, Any]], embedder: Embedder) -> Settings:
    """The settings of a lake at ``root`` holding ``records``, ingested with ``embedder``:
    the one already there when an ingest of this :data:`LAKE_FORM` and of these records
    finished it, else a new one (an older, other or unfinished lake is removed first)."""
    settings = Settings(lake=root, embedding_model=embedder.name)
    stamp = root / _FORM_FILE
    digest = hashlib.sha1(json.dumps(records, sort_keys=True).encode()).hexdigest()
    made = f"{LAKE_FORM} {digest}\n"
    if stamp.is_file() and stamp.read_text() == made:
        return settings
    shutil.rmtree(root, ignore_errors=True)
    report = run_ingest(settings, records=[json.dumps(r) for r in records], embedder=embedder)
    if report.ingest.quarantined:
        first = report.ingest.quarantined[0]
        raise ValueError(f"{len(report.ingest.quarantined)} bench records refused, the first "
                         f"(line {first.line}) for {first.reason}")
    stamp.write_text(made)
    return settings


def question_recalls(embedder: Embedder, *, rich: bool, fusion: FusionSettings | None = None,
                     weights: Mapping[str, float] | None = None, workdir: Path | None = None,
                     splits: tuple[str, ...] = ("all",), min_relevance: float | None = None,
                     reworded: bool = False, joined: int = 1, mixed: bool = False
                     ) -> dict[str, dict[str, np.ndarray]]:
    """Per split and configuration, each asked question's recall at each k of :data:`KS`
    (an array of questions × ks, questions in one order for every configuration), on a freshly
    built LoCoMo lake of all ten samples (a question sees only its own sample's history; the
    split picks the questions). ``min_relevance`` None: the search default floor.
    ``reworded``: the questions asked in other words (bench.reworded). ``joined`` > 1: each
    session's turns joined in runs of that many (:func:`join_turns`), a history of long rows;
    with ``mixed``, every other run only, long rows among short ones."""
    records, questions, last = build(samples("all"), rich=rich)
    if joined > 1:
        records, questions = join_turns(records, questions, joined, mixed=mixed)
    if reworded:
        from bench.reworded import reword

        questions = reword(questions, embedder)
    root = Path(workdir or tempfile.mkdtemp(prefix="locomo-")) / (
        ("rich" if rich else "minimal") + (f"-joined{joined}" if joined > 1 else "")
        + ("-mixed" if joined > 1 and mixed else ""))
    ingested_lake(root, records, embedder)
    service = SearchService(LakeStore(root), embedder=embedder)
    asking = Asking(fusion=fusion or FusionSettings(), weights=dict(weights or DEFAULT_WEIGHTS),
                    min_relevance=DEFAULT_MIN_RELEVANCE if min_relevance is None
                    else min_relevance)
    out: dict[str, dict[str, np.ndarray]] = {}
    for split in splits:
        users = {s["sample_id"] for s in samples(split)}
        asked = [q for q in questions if q.user_id in users]
        found = ask(service, TENANT, asked, last, asking=asking, configs=CONFIGS)
        out[split] = {name: f.recall for name, f in found.items()}
    return out


def evaluate(embedder: Embedder, *, rich: bool, fusion: FusionSettings | None = None,
             weights: Mapping[str, float] | None = None, workdir: Path | None = None,
             splits: tuple[str, ...] = ("all",), min_relevance: float | None = None,
             reworded: bool = False, joined: int = 1, mixed: bool = False
             ) -> dict[str, dict[str, dict[int, float]]]:
    """Recall@k per split and configuration: the mean over the split's questions of
    :func:`question_recalls` (same arguments)."""
    found = question_recalls(embedder, rich=rich, fusion=fusion, weights=weights,
                             workdir=workdir, splits=splits, min_relevance=min_relevance,
                             reworded=reworded, joined=joined, mixed=mixed)
    return {split: {name: mean_recalls(recalls) for name, recalls in by_config.items()}
            for split, by_config in found.items()}
