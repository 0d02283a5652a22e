"""The LoCoMo split: what tunes ranking reads only conversations 0-4, and the report split's
figures come from the others."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from bench import locomo, relevance
from bench.reworded import reword
from lake.embedding.hashing import HashingEmbedder
from lake.store import LakeStore
from lake.tables import Table


def _sample(i: int) -> dict[str, object]:
    word = f"topic{i}word"
    return {
        "sample_id": f"conv-{i}",
        "conversation": {
            "speaker_a": "Ann", "speaker_b": "Bob",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Ann", "dia_id": "D1:1", "text": f"I went hiking near {word}"},
                {"speaker": "Bob", "dia_id": "D1:2", "text": "How was the weather there?"},
                {"speaker": "Ann", "dia_id": "D1:3", "text": "Sunny, and the lake was cold"},
                {"speaker": "Bob", "dia_id": "D1:4", "text": "Sounds lovely, well done"},
            ]},
        "qa": [{"question": f"Where did Ann go hiking, {word}?", "answer": word,
                "evidence": ["D1:1"], "category": 4}],
        "observation": {},
    }


@pytest.fixture
def ten(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "locomo10.json"
    path.write_text(json.dumps([_sample(i) for i in range(10)]))
    monkeypatch.setattr(locomo, "LOCOMO", path)
    return path


def test_the_splits_are_the_first_and_last_five(ten: Path) -> None:
    assert [s["sample_id"] for s in locomo.samples("tune")] == [f"conv-{i}" for i in range(5)]
    assert [s["sample_id"] for s in locomo.samples("report")] == [
        f"conv-{i}" for i in range(5, 10)]
    assert len(locomo.samples("all")) == 10
    with pytest.raises(ValueError, match="unknown LoCoMo split"):
        locomo.samples("everything")


def test_tuning_never_reads_the_report_conversations(ten: Path, tmp_path: Path) -> None:
    ranked, text_only, reworded = relevance.tune_probes(HashingEmbedder(64),
                                                        tmp_path / "work")
    tune = {f"conv-{i}" for i in range(5)}
    # The tuning lake holds the tuning conversations alone, and every probe is one of theirs.
    rows = LakeStore(tmp_path / "work" / "relevance-tune").read(Table.CONTENT_ROWS,
                                                               columns=["user_id", "text"])
    assert set(rows["user_id"].to_pylist()) == tune
    assert not any(f"topic{i}word" in t for i in range(5, 10) for t in rows["text"].to_pylist())
    assert {r.probe.user_id for r in ranked + text_only + reworded} == tune
    assert sum(bool(r.probe.evidence) for r in ranked) == 5
    # the same five questions in other words, each pointing at its own evidence
    assert [r.probe.kind for r in reworded] == ["reworded"] * 5
    asked = {r.probe.user_id: r.probe for r in ranked if r.probe.evidence}
    for r in reworded:
        assert r.probe.evidence == asked[r.probe.user_id].evidence
        assert r.probe.text != asked[r.probe.user_id].text


def test_split_figures_ask_only_that_splits_questions(ten: Path, tmp_path: Path) -> None:
    asked: list[str] = []
    real = locomo.SearchService.search

    def spy(self: object, request: locomo.SearchRequest) -> object:
        asked.append(request.principal.user_id or "")
        return real(self, request)  # type: ignore[arg-type]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(locomo.SearchService, "search", spy)
        out = locomo.evaluate(HashingEmbedder(64), rich=False, workdir=tmp_path,
                              splits=("report",))
    assert set(asked) == {f"conv-{i}" for i in range(5, 10)}
    assert out["report"]["lexical"][5] == 1.0  # each question names its own rare word


def test_recall_is_the_mean_of_each_questions_recall(ten: Path, tmp_path: Path) -> None:
    embedder = HashingEmbedder(64)
    per_question = locomo.question_recalls(embedder, rich=False, workdir=tmp_path,
                                           splits=("tune", "report"))
    means = locomo.evaluate(embedder, rich=False, workdir=tmp_path, splits=("tune", "report"))
    for split in ("tune", "report"):
        assert set(per_question[split]) == set(locomo.CONFIGS)
        for name, recalls in per_question[split].items():
            assert recalls.shape == (5, len(locomo.KS))  # one question per conversation
            assert ((recalls >= 0) & (recalls <= 1)).all()
            assert means[split][name] == pytest.approx(dict(zip(locomo.KS, recalls.mean(axis=0),
                                                                strict=True)))
    assert (per_question["report"]["lexical"] == 1.0).all()
    with pytest.raises(ValueError, match="no question was asked"):
        locomo.mean_recalls(np.zeros((0, len(locomo.KS))))


def test_the_fit_judges_models_by_the_relevance_the_search_serves(ten: Path,
                                                                   tmp_path: Path) -> None:
    ranked, _, _ = relevance.tune_probes(HashingEmbedder(64), tmp_path / "work")
    relevance.check_replica(ranked)
    # the fixture's turns are lifted by their neighbours, so the replica has that step to get
    # right: without it, the served relevance is not reproduced
    own = [relevance.relevance(r.semantic, r.lexical, r.trigram) for r in ranked]
    assert any((o < r.served - 1e-9).any() for o, r in zip(own, ranked, strict=True))
    alone = [dataclasses.replace(r, previous=np.full_like(r.previous, -1),
                                 following=np.full_like(r.following, -1)) for r in ranked]
    with pytest.raises(RuntimeError, match="no longer follows"):
        relevance.check_replica(alone)


def test_joined_turns_keep_every_word_and_point_the_evidence_at_their_run(ten: Path) -> None:
    records, questions, _ = locomo.build(locomo.samples("tune"), rich=False)
    joined, asked = locomo.join_turns(records, questions, 2)
    assert len(records) == 10 and len(joined) == 5  # two turns a session, one run each
    first = joined[0]
    assert first["turn_id"] == "t-001"
    assert first["submissions"] == records[0]["submissions"]
    assert first["completion"]["text"].split("\n") == [
        "How was the weather there?", "Sunny, and the lake was cold", "Sounds lovely, well done"]
    assert [q.evidence for q in asked] == [frozenset({(r["conversation_id"], "t-001")})
                                           for r in joined]
    # a run longer than the session takes the whole session
    assert len(locomo.join_turns(records, questions, 16)[0]) == 5


def test_a_fit_that_cannot_meet_its_targets_says_so_with_every_boundary_tried(
        ten: Path, tmp_path: Path) -> None:
    with pytest.raises(relevance.NoFit, match="no boundary cosine") as caught:
        relevance.fit(HashingEmbedder(64), tmp_path / "work", loss=-1.0)
    assert [t["c"] for t in caught.value.tried] == [round(0.30 + i / 100, 2) for i in range(50)]
    assert all(set(t) == {"c", "true_empty", "recall_floor", "recall_no_floor"}
               for t in caught.value.tried)


def test_a_found_shift_that_cannot_meet_its_target_says_so_with_every_shift_tried(
        ten: Path, tmp_path: Path) -> None:
    with pytest.raises(relevance.NoShift, match="as asked and reworded") as caught:
        relevance.fit(HashingEmbedder(64), tmp_path / "work", found_loss=-1.0)
    assert [t["found_shift"] for t in caught.value.tried] == [
        round(i / 100, 2) for i in range(51)]
    assert all(set(t) == {"found_shift", "recall_floor", "reworded_recall_floor"}
               for t in caught.value.tried)


def test_mixed_joining_keeps_every_other_run_as_it_was() -> None:
    turns = [{"conversation_id": "c", "turn_id": f"t-{i}",
              "submissions": [{"text": f"ask {i}"}], "completion": {"text": f"say {i}"}}
             for i in range(5)]
    asked = [locomo.Question("u", "q", frozenset({("c", f"t-{i}")})) for i in range(5)]
    joined, moved = locomo.join_turns(turns, asked, 2, mixed=True)
    # runs [0, 1] and [4] are joined, [2, 3] stay two turns
    assert [r["turn_id"] for r in joined] == ["t-0", "t-2", "t-3", "t-4"]
    assert joined[0]["completion"]["text"].split("\n") == ["say 0", "ask 1", "say 1"]
    assert joined[1:3] == turns[2:4] and joined[3] == turns[4]
    assert [sorted(q.evidence) for q in moved] == [
        [("c", t)] for t in ("t-0", "t-0", "t-2", "t-3", "t-4")]


def test_the_floor_report_asks_each_split_its_questions_and_the_same_reworded(
        ten: Path, tmp_path: Path) -> None:
    asked: list[tuple[str, str]] = []
    real = relevance.SearchService.search

    def spy(self: object, request: locomo.SearchRequest) -> object:
        asked.append((request.principal.user_id or "", request.query))
        return real(self, request)  # type: ignore[arg-type]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(relevance.SearchService, "search", spy)
        out = relevance.report(HashingEmbedder(64), tmp_path)
    questions = locomo.build(locomo.samples("all"), rich=False)[1]
    reworded = reword(questions, HashingEmbedder(64))
    for split, users in (("tune", range(5)), ("report", range(5, 10))):
        other_words = out[split]["reworded"]
        assert other_words["questions"] == 5 == out[split]["questions"]
        assert set(other_words) == {"questions", "recall_floor", "recall_no_floor",
                                    "false_empty_rate"}
        mine = {f"conv-{i}" for i in users}
        texts = {t for u, t in asked if u in mine}
        # each question of the split is asked as written and in other words, and no other's
        for q, other in zip(questions, reworded, strict=True):
            assert q.text != other.text
            assert (q.text in texts) == (other.text in texts) == (q.user_id in mine)
