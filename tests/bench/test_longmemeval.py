"""The LongMemEval dev set's mapping onto turns, its halves, and its recall figures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bench import longmemeval
from bench.questions import KS
from lake.embedding.hashing import HashingEmbedder


def _question(i: int, *, opener: str = "user", marked: bool = True) -> dict[str, Any]:
    word = f"topic{i}word"
    evidence = [{"role": "user", "content": f"I adopted a cat called {word}",
                 "has_answer": marked},
                {"role": "assistant", "content": "Congratulations on the new cat!"},
                {"role": "user", "content": "Thanks, she is very shy"},
                {"role": "assistant", "content": "Give her time and a quiet room."}]
    other = [{"role": "user", "content": "What is a good pasta recipe?"},
             {"role": "user", "content": "Something quick please"},
             {"role": "assistant", "content": "Try aglio e olio: garlic, oil, chili."}]
    if opener == "assistant":
        other = [{"role": "assistant", "content": "Here is the summary you asked for."},
                 *other]
    return {"question_id": f"q{i:02d}", "question_type": "single-session-user" if i % 2
            else "temporal-reasoning", "question": f"What is the name of my cat {word}?",
            "question_date": "2023/05/30 (Tue) 10:00", "answer": word,
            "answer_session_ids": [f"ans_{i}"],
            "haystack_session_ids": [f"other_{i}", f"ans_{i}"],
            "haystack_dates": ["2023/05/20 (Sat) 09:00", "2023/05/21 (Sun) 18:30"],
            "haystack_sessions": [other, evidence]}


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    where = tmp_path / "lme"
    where.mkdir()
    for i in range(8):
        (where / f"q{i:02d}.json").write_text(json.dumps(_question(i)))
    monkeypatch.setattr(longmemeval, "LONGMEMEVAL", where)
    return where


def test_a_session_maps_onto_turns_as_the_readme_says() -> None:
    stack = longmemeval._haystack(_question(3))
    by_turn = {(r["conversation_id"], r["turn_id"]): r for r in stack.records}
    # user runs fold into one turn's submissions, the assistant's run is its completion
    pasta = by_turn[("q03-other_3", "t-001")]
    assert [s["text"] for s in pasta["submissions"]] == [
        "What is a good pasta recipe?", "Something quick please"]
    assert [s["event_type"] for s in pasta["submissions"]] == ["prompt", "followup"]
    assert pasta["completion"]["text"] == "Try aglio e olio: garlic, oil, chili."
    # turn n starts n minutes after the session's date
    assert by_turn[("q03-ans_3", "t-002")]["started_at"] == "2023-05-21T18:31:00+00:00"
    # the evidence is the turn holding the marked utterance, not the whole session
    assert stack.question.evidence == frozenset({("q03-ans_3", "t-001")})
    assert stack.question.user_id == "q03"
    assert stack.asked_at.isoformat() == "2023-05-30T10:00:00+00:00"


def test_an_answer_session_without_marks_counts_every_turn() -> None:
    stack = longmemeval._haystack(_question(1, marked=False))
    assert stack.question.evidence == frozenset({("q01-ans_1", "t-001"),
                                                 ("q01-ans_1", "t-002")})


def test_a_session_the_assistant_opens_keeps_its_words() -> None:
    stack = longmemeval._haystack(_question(2, opener="assistant"))
    first = next(r for r in stack.records if r["conversation_id"] == "q02-other_2")
    assert first["submissions"][0]["text"] == ""
    assert first["completion"]["text"] == "Here is the summary you asked for."


def test_a_file_of_another_shape_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "x.json"
    bad.write_text(json.dumps({"question_id": "x"}))
    with pytest.raises(ValueError, match=r"x\.json: not a LongMemEval question"):
        longmemeval.load(bad)


def test_a_missing_folder_is_named(tmp_path: Path) -> None:
    with pytest.raises(longmemeval.MissingLongMemEval, match="TURNLAKE_LONGMEMEVAL"):
        longmemeval.question_files(tmp_path / "nowhere")


def test_the_halves_alternate_by_sorted_id_and_a_limit_keeps_each_in_its_half(
        folder: Path) -> None:
    tune = [f.stem for f in longmemeval.split_files("tune")]
    report = [f.stem for f in longmemeval.split_files("report")]
    assert tune == ["q00", "q02", "q04", "q06"] and report == ["q01", "q03", "q05", "q07"]
    limited = longmemeval.split_files("all", limit=3)
    assert len(limited) == 3
    assert {f.stem for f in longmemeval.split_files("tune", limit=3)} <= set(tune)
    with pytest.raises(ValueError, match="unknown LongMemEval split"):
        longmemeval.split_files("held-out")


def test_tuning_reads_the_tune_half_only(folder: Path, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from bench import tune

    read: list[str] = []
    original = longmemeval.load

    def spy(path: Path) -> longmemeval.Haystack:
        read.append(path.stem)
        return original(path)

    monkeypatch.setattr(longmemeval, "load", spy)
    result = tune.tune_sets(locomo=None, longmemeval=HashingEmbedder(64),
                            workdir=tmp_path / "work", candidates=tune.CANDIDATES[:2])
    assert [r["candidate"] for r in result["ranked"]] != []
    assert read and set(read) <= {"q00", "q02", "q04", "q06"}


def test_recall_and_all_at_k_on_a_real_lake(folder: Path, tmp_path: Path) -> None:
    found = longmemeval.question_recalls(HashingEmbedder(64), workdir=tmp_path / "work")
    assert set(found) == {"tune", "report"}
    for by_config in found.values():
        fused = by_config["fused"]
        assert fused.recall.shape == (4, len(KS))
        # one evidence turn each: all@k is recall@k, and the cat's name finds it
        assert np.array_equal(fused.recall, fused.every)
        assert fused.recall[:, -1].min() == 1.0
    figures = longmemeval.figures(found["report"], ["a", "b", "a", "b"])
    assert figures["fused"]["by_type"]["a"]["questions"] == 2
    assert set(figures["fused"]["recall"]) == {str(k) for k in KS}


def test_a_session_held_twice_is_kept_once() -> None:
    data = _question(4)
    data["haystack_session_ids"].append("other_4")
    data["haystack_dates"].append("2023/05/25 (Thu) 08:00")
    data["haystack_sessions"].append(data["haystack_sessions"][0])
    stack = longmemeval._haystack(data)
    assert sum(r["conversation_id"] == "q04-other_4" for r in stack.records) == 1


def test_the_ablation_plot_draws_one_panel_a_set(tmp_path: Path) -> None:
    from bench.ablation import plot

    arms = {"report": {"semantic": [0.4, 0.5, 0.7], "lexical": [0.6, 0.7, 0.8],
                       "trigram": [0.1, 0.1, 0.1], "fused": [0.7, 0.8, 0.9]}}
    out = plot({"locomo": {"arms": arms}, "longmemeval": {"arms": arms}}, tmp_path / "p.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_judging_a_candidate_compares_it_with_the_ranking_as_it_is() -> None:
    from bench.ablation import judge
    from bench.questions import Asking, Found

    better = Asking(min_relevance=0.0)

    def asker(asking: Asking, configs: object) -> dict[str, dict[str, Found]]:
        value = 1.0 if asking == better else 0.5
        recall = np.full((6, len(KS)), value)
        return {"report": {"fused": Found(recall, recall)}}

    out = judge({"set": asker}, better)
    report = out["set"]["report"]
    assert report["on"] == [1.0] * len(KS) and report["off"] == [0.5] * len(KS)
    assert all(low == high == 0.5 for low, high in report["on_minus_off"])
