from __future__ import annotations

import gzip
import json
from pathlib import Path

import duckdb
import polars as pl
import pyarrow.dataset as ds
import pytest

from lake.faults import Faults
from lake.filestore import FileStore
from lake.index.status import partition_statuses
from lake.records import TurnRecord
from lake.settings import Settings
from lake.store import LakeStore
from lake.tables import TURN_LOG_INDEX_COLUMNS, Table
from pipeline.ingest import Ingestor
from pipeline.jobs import run_ingest
from pipeline.supersede import supersede
from tests.factories import make_record, rich_record, write_jsonl


def _count(store: LakeStore, table: Table) -> int:
    return store.read(table).num_rows if store.exists(table) else 0


def test_minimal_record_writes_the_rows_the_spec_says(settings: Settings, tmp_path: Path) -> None:
    record = make_record(0, submissions=[
        {"text": "first ask", "event_type": "prompt", "batch": 0,
         "arrived_at": "2026-03-10T09:00:00+00:00"},
        {"text": "and also this", "event_type": "followup", "batch": 1,
         "arrived_at": "2026-03-10T09:00:05+00:00"}],
        summary="ignored for minimal writers", anchors=["ignored"])
    report = Ingestor(settings).ingest_paths([write_jsonl(tmp_path / "in.jsonl", [record])])
    assert (report.accepted, report.duplicates, len(report.quarantined)) == (1, 0, 0)
    store = LakeStore(settings.lake)
    rows = store.read(Table.CONTENT_ROWS).sort_by([("role", "descending"), ("seq", "ascending")])
    assert rows["role"].to_pylist() == ["user", "user", "assistant"]
    assert rows["event_type"].to_pylist() == ["prompt", "followup", None]
    assert rows["batch"].to_pylist() == [0, 1, None]
    assert rows["embedding_status"].to_pylist() == ["pending"] * 3
    assert set(rows["month"].to_pylist()) == {"2026-03"}
    timeline = store.read(Table.TIMELINES).to_pylist()
    assert len(timeline) == 1 and timeline[0]["schema"] == "conv.timeline.v1"
    assert timeline[0]["blocks"] == "[]" and timeline[0]["last_turn_id"] == "t-0000"
    assert _count(store, Table.FILES) == 0


def test_rich_record_adds_summary_anchor_note_attachment_rows(settings: Settings,
                                                              tmp_path: Path) -> None:
    Ingestor(settings).ingest_paths([write_jsonl(tmp_path / "in.jsonl", [rich_record(0)])])
    store = LakeStore(settings.lake)
    roles = pl.from_arrow(store.read(Table.CONTENT_ROWS, columns=["role"]))
    assert isinstance(roles, pl.DataFrame)
    counts = dict(roles.group_by("role").len().iter_rows())
    assert counts == {"user": 3, "assistant": 1, "summary": 1, "anchor": 2, "note": 1,
                      "attachment": 1}
    events = store.read(Table.EVENTS).sort_by("seq")
    assert events["type"].to_pylist().count("chat.step") == 2
    assert "context.page_opened" in events["type"].to_pylist()
    files = store.read(Table.FILES).to_pylist()
    assert files[0]["ref"] == "conv:fi:conv_c-1.turn_t-0000.files/forecast.csv"
    assert FileStore(settings.lake).get(files[0]["storage_key"]) == b"month,hours\n3,12\n"
    timeline = store.read(Table.TIMELINES).to_pylist()[0]
    assert json.loads(timeline["blocks"])  # rich writers add one block per accepted block
    log = store.read(Table.TURN_LOGS).to_pylist()[0]
    assert log["block_count"] == len(json.loads(timeline["blocks"]))
    assert log["tokens_in"] == 120 and log["feedback_rating"] == 1
    payload = json.loads(log["payload"])
    assert payload["hosted_files"][0]["path"] == "files/forecast.csv"
    assert "content_b64" not in payload["hosted_files"][0]


def test_the_payload_is_the_canonical_record_whatever_the_line_looked_like(
        settings: Settings, tmp_path: Path) -> None:
    # Readers json.loads payloads: a timestamp given as unix seconds in a string (which the
    # validator accepts even in strict mode), a lowercase t/z, a number given as a string,
    # an explicit null or inline bytes must not reach them as they came.
    odd = make_record(0, conversation="c-a", conversation_title=None,
                      usage={"tokens_in": "7", "tokens_out": 3})
    odd["started_at"] = "1773133200"
    odd["ended_at"] = odd["ended_at"].replace("T", "t").replace("+00:00", "z")
    hosted = rich_record(1)
    lines = [json.dumps(r, ensure_ascii=False) for r in (odd, hosted)]
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(lines) + "\n")
    assert Ingestor(settings).ingest_paths([path]).accepted == 2
    payloads = {row["turn_id"]: row["payload"] for row in LakeStore(settings.lake).read(
        Table.TURN_LOGS, columns=["turn_id", "payload"]).to_pylist()}
    canonical = TurnRecord.model_validate_json(lines[0])
    assert payloads[odd["turn_id"]] == canonical.to_json()
    stored = json.loads(payloads[odd["turn_id"]])
    assert stored["started_at"] == "2026-03-10T09:00:00Z" and stored["ended_at"].endswith("Z")
    assert stored["usage"]["tokens_in"] == 7 and "conversation_title" not in stored
    assert payloads[hosted["turn_id"]] == TurnRecord.model_validate(hosted).to_json(
        without_hosted_bytes=True)


def test_turn_log_index_columns_hold_no_text(settings: Settings, tmp_path: Path) -> None:
    record = rich_record(0)
    Ingestor(settings).ingest_paths([write_jsonl(tmp_path / "in.jsonl", [record])])
    index = LakeStore(settings.lake).read(Table.TURN_LOGS, columns=TURN_LOG_INDEX_COLUMNS)
    values = " ".join(str(v) for row in index.to_pylist() for v in row.values())
    texts = [s["text"] for s in record["submissions"]] + [record["completion"]["text"],
                                                          record["summary"], *record["notes"]]
    for text in texts:
        assert text not in values


def test_reingest_is_idempotent(settings: Settings, tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "in.jsonl", [make_record(i) for i in range(5)] + ["{broken"])
    first = Ingestor(settings).ingest_paths([path])
    store = LakeStore(settings.lake)
    before = {t: _count(store, t) for t in Table}
    second = Ingestor(settings).ingest_paths([path])
    assert (first.accepted, second.accepted, second.duplicates) == (5, 0, 5)
    assert {t: _count(store, t) for t in Table} == before


def test_duplicate_inside_one_file_is_reported(settings: Settings, tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "in.jsonl", [make_record(1), make_record(1)])
    report = Ingestor(settings).ingest_paths([path])
    assert (report.accepted, report.duplicates) == (1, 1)


def test_bad_lines_are_quarantined_and_the_rest_ingested(settings: Settings,
                                                         tmp_path: Path) -> None:
    bad_id = make_record(2, turn_id="bad id!")
    lines: list[dict[str, object] | str] = [make_record(0), "{not json", bad_id, make_record(3)]
    path = write_jsonl(tmp_path / "in.jsonl", lines)
    path.write_bytes(path.read_bytes() + b'{"schema": "\xff\xfe"}\n')
    report = Ingestor(settings).ingest_paths([path])
    assert report.accepted == 2
    by_line = {q.line: q.reason for q in report.quarantined}
    assert set(by_line) == {2, 3, 5}
    assert "turn_id" in by_line[3]
    assert "UTF-8" in by_line[5]
    stored = LakeStore(settings.lake).read(Table.QUARANTINE).to_pylist()
    assert {(r["line"], r["source_file"]) for r in stored} == {(n, str(path)) for n in by_line}
    assert any(r["raw"] == "{not json" for r in stored)


def test_event_data_orjson_cannot_store_is_quarantined_naming_the_event(
        settings: Settings, tmp_path: Path) -> None:
    at = "2026-03-10T09:00:05+00:00"
    huge = {**rich_record(1), "context_events": [
        {"kind": "page_opened", "at": at, "data": {"page": "a"}},
        {"kind": "selection", "at": at, "data": {"offset": 2**70}}]}
    path = write_jsonl(tmp_path / "in.jsonl", [make_record(0), huge, make_record(2)])
    report = Ingestor(settings).ingest_paths([path])
    assert report.accepted == 2
    [refused] = report.quarantined
    assert refused.line == 2
    assert refused.reason.startswith("context_events.1.data: cannot be stored as JSON")
    assert report.files_stored == 0  # the refused rich turn's hosted file is not stored


def test_gzip_and_folders_are_read(settings: Settings, tmp_path: Path) -> None:
    folder = tmp_path / "drop"
    write_jsonl(folder / "a.jsonl", [make_record(0)])
    (folder / "sub").mkdir()
    with gzip.open(folder / "sub" / "b.jsonl.gz", "wt") as fh:
        fh.write(json.dumps(make_record(1)) + "\n")
    report = Ingestor(settings).ingest_paths([folder])
    assert report.accepted == 2


def test_truncated_gzip_keeps_the_lines_before(settings: Settings, tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl.gz"
    body = "".join(json.dumps(make_record(i)) + "\n" for i in range(50)).encode()
    path.write_bytes(gzip.compress(body)[:-200])
    report = Ingestor(settings).ingest_paths([path])
    assert report.accepted > 0
    assert any("could not be read" in q.reason for q in report.quarantined)


def test_hosted_file_from_source_path_and_oversize(settings: Settings, tmp_path: Path) -> None:
    (tmp_path / "out.md").write_text("# report\n")
    ok = make_record(0, hosted_files=[{"path": "files/out.md", "mime": "text/markdown",
                                       "source_path": "out.md"}])
    traversal = make_record(1, hosted_files=[{"path": "files/../../etc/passwd",
                                              "mime": "text/plain", "content_b64": "YQ=="}])
    big = make_record(2, hosted_files=[{"path": "files/big.bin", "mime": "application/x",
                                        "content_b64": "QUFBQUFBQUFBQUFB"}])
    report = Ingestor(settings.with_(max_hosted_file_bytes=10)).ingest_paths(
        [write_jsonl(tmp_path / "in.jsonl", [ok, traversal, big])])
    assert report.accepted == 1
    reasons = " | ".join(q.reason for q in report.quarantined)
    assert "'..'" in reasons and "over the 10-byte limit" in reasons


BOUNDARIES = ["batch.after_manifest", "batch.after_files", "batch.after_content_rows",
              "batch.after_events", "batch.after_files", "batch.after_turn_logs",
              "batch.after_timelines"]


class Crash(Exception):
    pass


@pytest.mark.parametrize("point", sorted(set(BOUNDARIES)))
def test_crash_at_every_write_boundary_then_rerun(settings: Settings, tmp_path: Path,
                                                  point: str) -> None:
    records = [rich_record(i) for i in range(4)] + [make_record(10 + i) for i in range(4)]
    path = write_jsonl(tmp_path / "in.jsonl", records)

    def crash(at: str) -> None:
        if at == point:
            raise Crash(at)

    with pytest.raises(Crash):
        Ingestor(settings, faults=Faults(crash)).ingest_paths([path])
    store = LakeStore(settings.lake)
    visible = _count(store, Table.TURN_LOGS)
    assert visible in (0, len(records)), "a batch is visible whole or not at all"
    report = Ingestor(settings).ingest_paths([path])
    assert report.accepted + report.duplicates == len(records)
    logs = store.read(Table.TURN_LOGS, columns=["conversation_id", "turn_id"]).to_pylist()
    assert len(logs) == len({(r["conversation_id"], r["turn_id"]) for r in logs}) == len(records)
    rows = store.read(Table.CONTENT_ROWS, columns=["row_id"])["row_id"].to_pylist()
    assert len(rows) == len(set(rows)) == 4 * 9 + 4 * 2
    assert _count(store, Table.FILES) == 4
    assert store.read(Table.TIMELINES).to_pylist()[0]["turn_count"] == len(records)
    assert not list((settings.lake / "_batches").glob("*.json"))


def test_batches_split_large_inputs(settings: Settings, tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "in.jsonl", [make_record(i) for i in range(25)])
    report = Ingestor(settings.with_(ingest_batch_turns=10)).ingest_paths([path])
    assert (report.accepted, report.batches) == (25, 3)
    ordinals = LakeStore(settings.lake).read(Table.TURN_LOGS, columns=["ordinal"])
    assert sorted(ordinals["ordinal"].to_pylist()) == list(range(1, 26))


def test_tables_read_with_polars_and_duckdb(settings: Settings, tmp_path: Path) -> None:
    Ingestor(settings).ingest_paths(
        [write_jsonl(tmp_path / "in.jsonl", [rich_record(i) for i in range(3)])])
    store = LakeStore(settings.lake)
    frame = store.scan(Table.CONTENT_ROWS).filter(pl.col("role") == "anchor").collect()
    assert frame.height == 6
    dataset = store.dataset(Table.TURN_LOGS)
    con = duckdb.connect()
    con.register("turn_logs", dataset)
    count, = con.execute(
        "select count(*) from turn_logs where writer = 'rich' and tenant = 'acme'").fetchone()
    assert count == 3
    filtered = store.read(Table.CONTENT_ROWS, columns=["text"],
                          filter=ds.field("role") == "summary")
    assert filtered.num_rows == 3


def test_parallel_preparation_matches_sequential(tmp_path: Path) -> None:
    from pipeline.ingest import PARALLEL_MIN_LINES

    records: list[dict[str, object] | str] = [
        make_record(i % 500, conversation=f"c-{i // 500}") for i in range(PARALLEL_MIN_LINES + 50)]
    records.insert(3000, "{broken")
    records.append(make_record(7, conversation="c-0"))  # a duplicate across chunks
    path = write_jsonl(tmp_path / "in.jsonl", records)
    results = []
    for workers in (1, 2):
        settings = Settings(lake=tmp_path / f"lake-{workers}")
        report = Ingestor(settings, workers=workers).ingest_paths([path])
        logs = LakeStore(settings.lake).read(
            Table.TURN_LOGS, columns=["conversation_id", "turn_id", "ordinal"]).sort_by(
            [("conversation_id", "ascending"), ("turn_id", "ascending")])
        rows = LakeStore(settings.lake).read(Table.CONTENT_ROWS, columns=["row_id"])
        results.append((report.accepted, report.duplicates, len(report.quarantined),
                        logs.to_pylist(), sorted(rows["row_id"].to_pylist())))
    assert results[0] == results[1]
    assert results[0][:3] == (PARALLEL_MIN_LINES + 50, 1, 1)


def test_a_large_files_located_chunks_keep_their_place_after_a_small_file(
        settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import pipeline.sources

    monkeypatch.setattr(pipeline.sources, "SPAN_MIN_BYTES", 1)
    write_jsonl(tmp_path / "in" / "a.jsonl", [make_record(3, answer="from a")])
    write_jsonl(tmp_path / "in" / "b.jsonl",
                [make_record(i, answer="from b") for i in range(25)] + ["{broken"])
    report = Ingestor(settings.with_(ingest_batch_turns=10)).ingest_paths([tmp_path / "in"])
    assert (report.accepted, report.duplicates) == (25, 0)
    # b's turn 3 says something else than a's, which came first: a conflict
    changed, bad = sorted(report.quarantined, key=lambda q: q.line)
    assert (changed.source_file, changed.line) == (str(tmp_path / "in" / "b.jsonl"), 4)
    assert "conflict" in changed.reason
    assert (bad.source_file, bad.line) == (str(tmp_path / "in" / "b.jsonl"), 26)
    answers = LakeStore(settings.lake).read(
        Table.CONTENT_ROWS, columns=["text"],
        filter=(ds.field("role") == "assistant") & (ds.field("turn_id") == "t-0003"))
    assert answers["text"].to_pylist() == ["from a"]


def test_an_interrupted_turn_without_answer_keeps_its_user_rows_and_no_assistant_row(
        settings: Settings, tmp_path: Path) -> None:
    from lake.search.access import Principal
    from lake.search.materialize import TurnMaterializer

    interrupted = make_record(0, completion={"text": "", "at": "2026-03-10T09:00:30+00:00",
                                             "status": "interrupted"})
    report = Ingestor(settings).ingest_paths([
        write_jsonl(tmp_path / "in.jsonl", [interrupted, make_record(1)])])
    assert report.accepted == 2
    store = LakeStore(settings.lake)
    rows = store.read(Table.CONTENT_ROWS, columns=["turn_id", "role"]).to_pylist()
    assert sorted((r["turn_id"], r["role"]) for r in rows) == [
        ("t-0000", "user"), ("t-0001", "assistant"), ("t-0001", "user")]
    materializer = TurnMaterializer(store)
    principal = Principal(tenant="acme", user_id="u-ana")
    assert materializer.turn(principal, "c-1", "t-0000").completion_status == "interrupted"
    assert materializer.turn(principal, "c-1", "t-0001").completion_status == "completed"
    logs = store.read(Table.TURN_LOGS, columns=["turn_id", "completion_status"]).to_pylist()
    assert sorted((r["turn_id"], r["completion_status"]) for r in logs) == [
        ("t-0000", "interrupted"), ("t-0001", "completed")]


def test_changed_content_under_a_known_turn_id_is_a_conflict_not_a_duplicate(
        settings: Settings, tmp_path: Path) -> None:
    Ingestor(settings).ingest_paths([write_jsonl(tmp_path / "a.jsonl",
                                                 [make_record(0), make_record(1)])])
    changed = make_record(1, answer="a different answer", steps=[
        {"name": "grep", "status": "completed", "at": "2026-03-10T09:10:05+00:00"}])
    path = write_jsonl(tmp_path / "b.jsonl", [make_record(0), changed])
    report = Ingestor(settings).ingest_paths([path])
    assert (report.accepted, report.duplicates, len(report.conflicts)) == (0, 1, 1)
    (conflict,) = report.conflicts
    assert report.quarantined == [conflict]
    assert (conflict.source_file, conflict.line) == (str(path), 2)
    assert conflict.reason.startswith("conflict: turn t-0001 of conversation c-1 (tenant acme)")
    assert "differs in: completion.text, steps" in conflict.reason
    store = LakeStore(settings.lake)
    assert store.read(Table.QUARANTINE)["reason"].to_pylist() == [conflict.reason]
    texts = store.read(Table.CONTENT_ROWS, columns=["text"])["text"].to_pylist()
    assert "a different answer" not in texts
    again = Ingestor(settings).ingest_paths([path])  # reported again, quarantined once
    assert len(again.conflicts) == 1 and _count(store, Table.QUARANTINE) == 1


def test_replace_supersedes_the_stored_turn_as_an_erase_would(
        settings: Settings, tmp_path: Path) -> None:
    old = make_record(1, answer="the old answer", steps=[
        {"name": "old_step", "status": "completed", "at": "2026-03-10T09:10:05+00:00"}])
    Ingestor(settings).ingest_paths([write_jsonl(tmp_path / "a.jsonl", [make_record(0), old])])
    new = make_record(1, answer="the new answer")
    path = write_jsonl(tmp_path / "b.jsonl", [new])
    assert len(Ingestor(settings).ingest_paths([path]).conflicts) == 1
    ingestor = Ingestor(settings)
    held = ingestor.ingest_paths([path], hold_conflicts=True)
    assert (held.accepted, held.duplicates, held.conflicts, len(held.held)) == (0, 0, [], 1)
    report = supersede(settings, ingestor, held, settle=None)
    assert (report.accepted, report.duplicates, report.replaced, report.conflicts,
            report.held) == (1, 0, 1, [], [])
    store = LakeStore(settings.lake)
    rows = store.read(Table.CONTENT_ROWS, columns=["turn_id", "role", "text"]).to_pylist()
    assert sorted((r["turn_id"], r["text"]) for r in rows if r["role"] == "assistant") == [
        ("t-0000", "answer number 0: fixed the timezone"), ("t-0001", "the new answer")]
    events = store.read(Table.EVENTS, columns=["turn_id", "data"]).to_pylist()
    assert not any("old_step" in e["data"] for e in events)
    logs = store.read(Table.TURN_LOGS, columns=["turn_id", "ordinal"]).to_pylist()
    assert sorted((r["turn_id"], r["ordinal"]) for r in logs) == [("t-0000", 1), ("t-0001", 2)]
    assert _count(store, Table.QUARANTINE) == 0  # the erase took the conflict line with it
    audit = store.read(Table.AUDIT).to_pylist()
    assert [(a["action"], a["actor"]) for a in audit] == [("erase", "turnlake ingest --replace")]
    again = run_ingest(settings, [path], embed=False, index=False, replace=True).ingest
    assert (again.accepted, again.duplicates, again.replaced) == (0, 1, 0)


def test_a_rerun_with_quarantined_lines_and_only_identical_duplicates(
        settings: Settings, tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "in.jsonl", [make_record(0), "{oops"])
    Ingestor(settings).ingest_paths([path])
    again = Ingestor(settings).ingest_paths([path])
    assert (again.accepted, again.duplicates, again.conflicts, len(again.quarantined)) == (
        0, 1, [], 1)


def test_a_record_given_in_memory_may_not_read_a_source_path(
        settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Records sent over HTTP or to a live writer have no record file: a ``source_path``
    must not read from the ingesting process's current folder (a key file beside a server)."""
    (tmp_path / "secret.txt").write_text("the admin key")
    monkeypatch.chdir(tmp_path)
    leaking = make_record(0, hosted_files=[{"path": "files/leak.txt", "mime": "text/plain",
                                            "source_path": "secret.txt"}])
    for source in ("<api 1>", "<live>", "api"):
        report = Ingestor(settings).ingest_records([json.dumps(leaking)], source=source)
        assert report.accepted == 0
        [refused] = report.quarantined
        assert "content_b64" in refused.reason and refused.source_file.startswith("<")
    assert not any(b"the admin key" in p.read_bytes()
                   for p in settings.lake.rglob("*") if p.is_file())


@pytest.mark.parametrize("apart", [1, 2500])  # lines between the two copies: same chunk or not
def test_one_turn_twice_in_an_input_with_other_content_is_a_conflict(
        settings: Settings, tmp_path: Path, apart: int) -> None:
    """The second copy of a turn is a duplicate only when it is the same turn: with other
    content it is quarantined as a conflict, never dropped as 'recorded already'."""
    first = make_record(0, conversation="c-twice", prompt="the forecast for march")
    changed = make_record(0, conversation="c-twice", prompt="something else entirely")
    fillers = [make_record(i, conversation=f"c-fill-{i % 50}") for i in range(1, apart)]
    lines = [first, *fillers, changed, first]
    report = Ingestor(settings).ingest_paths([write_jsonl(tmp_path / "in.jsonl", lines)])
    assert report.accepted == 1 + len(fillers)
    conflicts = [q for q in report.quarantined if q.line == apart + 1]
    assert len(conflicts) == 1 and "something else" in conflicts[0].raw
    assert "conflict" in conflicts[0].reason and "submissions" in conflicts[0].reason
    if apart == 1:  # beside the first copy, the third one is seen to be the same turn
        assert (report.duplicates, len(report.quarantined)) == (1, 1)
    stored = LakeStore(settings.lake).read(Table.TURN_LOGS, columns=["conversation_id",
                                                                     "payload"])
    [payload] = [p for c, p in zip(stored["conversation_id"].to_pylist(),
                                   stored["payload"].to_pylist(), strict=True) if c == "c-twice"]
    assert "the forecast for march" in payload


@pytest.mark.parametrize("point", ["batch.after_content_rows", "batch.after_timelines"])
def test_rerunning_a_killed_ingest_indexes_what_its_recovery_finished(
        settings: Settings, tmp_path: Path, point: str) -> None:
    run_ingest(settings, [write_jsonl(tmp_path / "base.jsonl",
                                      [make_record(i) for i in range(3)])], embed=False)
    more = write_jsonl(tmp_path / "more.jsonl", [make_record(10 + i) for i in range(4)])

    def crash(at: str) -> None:
        if at == point:
            raise Crash(at)

    with pytest.raises(Crash):  # killed before its index step
        Ingestor(settings, faults=Faults(crash)).ingest_paths([more])
    again = run_ingest(settings, [more], embed=False)
    assert again.ingest.recovered
    store = LakeStore(settings.lake)
    (status,) = partition_statuses(store).values()
    assert status.freshness == "fresh"
    assert status.manifest is not None and status.manifest.turn_count == 7
