"""The write-ahead spool: durable group files, orphans found by their released lock, recovery
that commits a dead server's answered groups once, in order, and the erasures given the step
that settles them first. Answering from the spool changes when a recording is answered, never
what the answer is: random sequences of groups get the same outcomes and leave the same lake
as when every group is answered after its commit; hosts recording the same turns at once see
each accepted exactly once; and a server reads and erases what it answered at once."""

from __future__ import annotations

import json
import random
import threading
from pathlib import Path
from typing import Any

import orjson
import pytest

from lake.deletion.target import ErasureTarget
from lake.errors import LakeError
from lake.settings import Settings
from lake.store import LakeStore
from lake.tables import Table
from pipeline.ingest import TurnKey
from pipeline.live import LiveWriter
from pipeline.retention import erase
from pipeline.service.metrics import ServiceMetrics
from pipeline.service.outcomes import LineOutcome
from pipeline.service.spool import (
    SPOOL_DIR,
    Spool,
    SpooledGroup,
    orphaned,
    orphans,
    recover_orphans,
    settle_spools,
    settler,
    through,
    wait_for_answered,
)
from pipeline.service.writer import GroupWriter
from tests.pipeline.service.server import Server, make_keys
from tests.reliability.lake_audit import key_of, turn_record


def _group(seq: int, *numbers: int) -> SpooledGroup:
    return SpooledGroup(seq, f"<api g{seq}>",
                        [orjson.dumps(turn_record(n)).decode() for n in numbers])


def _die(spool: Spool) -> None:
    """What a kill does to a spool: its lock goes, its files stay."""
    spool._lock.close()


def test_a_spool_keeps_whole_groups_in_order_until_removed(tmp_path: Path) -> None:
    spool = Spool.create(tmp_path)
    for seq in (1, 2, 3):
        spool.append(_group(seq, seq))
    (spool.path / "g000000000004.tmp").write_text("half a group")  # never acknowledged
    assert [g.seq for g in spool.groups()] == [1, 2, 3]
    assert spool.groups()[1] == _group(2, 2)
    spool.remove(2)
    assert [g.seq for g in spool.groups()] == [3]
    spool.release()
    assert spool.path.is_dir()  # a group is left: the folder stays for a recovery
    assert [g.seq for o in orphans(tmp_path) for g in o.groups()] == [3]


def test_a_living_spool_is_no_orphan_and_an_empty_one_goes(tmp_path: Path) -> None:
    living, dead = Spool.create(tmp_path), Spool.create(tmp_path)
    living.append(_group(1, 1))
    dead.append(_group(1, 2))
    _die(dead)
    found = list(orphans(tmp_path))
    assert [o.path for o in found] == [dead.path]
    # Held by the finder now: a second look (another server starting) passes it by.
    assert list(orphans(tmp_path)) == []
    found[0].remove(1)
    found[0].release()
    assert not dead.path.exists()
    living.remove(1)
    living.release()
    assert not living.path.exists()
    assert list((tmp_path / SPOOL_DIR).iterdir()) == []


def test_an_unreadable_group_is_named(tmp_path: Path) -> None:
    spool = Spool.create(tmp_path)
    (spool.path / "g000000000001.json").write_text(json.dumps({"lines": ["x"]}))
    with pytest.raises(LakeError, match=r"g000000000001\.json.*record its lines again"):
        spool.groups()


def test_recovery_commits_a_dead_servers_groups_once(hashing_settings: Settings) -> None:
    lake = Path(str(hashing_settings.lake))
    live = LiveWriter(hashing_settings, embed=False)
    live.ingest([orjson.dumps(turn_record(1)).decode()])  # committed before the kill
    spool = Spool.create(lake)
    spool.append(_group(1, 1, 2))  # its first turn committed, the second not
    spool.append(_group(2, 3))
    _die(spool)
    assert recover_orphans(hashing_settings, through(live)).groups == 2
    assert not spool.path.exists()
    logs = LakeStore(lake).read(Table.TURN_LOGS, columns=["turn_id"])
    assert sorted(logs["turn_id"].to_pylist()) == ["t-0001", "t-0002", "t-0003"]
    assert recover_orphans(hashing_settings).groups == 0  # nothing is left to commit twice


def test_recovery_leaves_an_unreadable_spool_for_the_next_try(
        hashing_settings: Settings) -> None:
    lake = Path(str(hashing_settings.lake))
    spool = Spool.create(lake)
    (spool.path / "g000000000001.json").write_text("{")
    _die(spool)
    assert recover_orphans(hashing_settings).groups == 0
    assert (spool.path / "g000000000001.json").exists()


def test_recovery_commits_the_readable_groups_beside_an_unreadable_one_and_names_it(
        hashing_settings: Settings) -> None:
    lake = Path(str(hashing_settings.lake))
    spool = Spool.create(lake)
    spool.append(_group(1, 1))
    (spool.path / "g000000000002.json").write_text("{")
    spool.append(_group(3, 3))
    _die(spool)
    assert recover_orphans(hashing_settings).groups == 2
    logs = LakeStore(lake).read(Table.TURN_LOGS, columns=["turn_id"])
    assert sorted(logs["turn_id"].to_pylist()) == ["t-0001", "t-0003"]
    assert sorted(p.name for p in spool.path.glob("g*")) == ["g000000000002.json"]
    [problem] = orphaned(lake).problems
    assert "g000000000002.json cannot be read" in problem and "record its lines again" in problem


def test_an_erasure_first_commits_what_a_dead_server_answered(
        hashing_settings: Settings) -> None:
    lake = Path(str(hashing_settings.lake))
    LiveWriter(hashing_settings, embed=False).ingest([orjson.dumps(turn_record(1)).decode()])
    spool = Spool.create(lake)
    spool.append(_group(1, 2, 3))  # answered, never committed: its server was killed
    _die(spool)
    erase(hashing_settings, ErasureTarget(tenant="acme", conversation_id="c-1"), actor="test",
          settle=settler(hashing_settings))
    assert LakeStore(lake).read(Table.TURN_LOGS, columns=["turn_id"]).num_rows == 0
    assert not spool.path.exists()  # nothing is left to bring the erased turns back


def test_an_erasure_embeds_the_dead_servers_turns_it_keeps(hashing_settings: Settings) -> None:
    lake = Path(str(hashing_settings.lake))
    spool = Spool.create(lake)
    spool.append(SpooledGroup(1, "<api g1>", [
        orjson.dumps(turn_record(1)).decode(),
        orjson.dumps(turn_record(2, conversation="c-2")).decode()]))
    _die(spool)
    erase(hashing_settings, ErasureTarget(tenant="acme", conversation_id="c-1"), actor="test",
          settle=settler(hashing_settings))
    rows = LakeStore(lake).read(Table.CONTENT_ROWS,
                                columns=["conversation_id", "embedding_status"])
    assert set(rows["conversation_id"].to_pylist()) == {"c-2"}
    # committed as maintain or a starting server would: embedded, not left for a backfill
    assert set(rows["embedding_status"].to_pylist()) == {"done"}


def test_an_erasure_waits_for_a_living_servers_spool(hashing_settings: Settings) -> None:
    living = Spool.create(Path(str(hashing_settings.lake)))
    living.append(_group(1, 1))
    with pytest.raises(LakeError, match="has answered recordings it has not committed"):
        settle_spools(hashing_settings, timeout_s=0.2)
    living.remove(1)
    settle_spools(hashing_settings, timeout_s=0.2)


def test_a_read_waits_only_for_living_spools_groups_answered_before_it(tmp_path: Path) -> None:
    living, dead = Spool.create(tmp_path), Spool.create(tmp_path)
    dead.append(_group(1, 1))
    _die(dead)  # waits for a recovery, which no read can hasten: passed by
    living.append(_group(1, 2))
    written = (living.path / "g000000000001.json").stat().st_mtime
    assert wait_for_answered(tmp_path, before=written - 1, timeout_s=0.1)  # answered later
    assert not wait_for_answered(tmp_path, before=written + 1, timeout_s=0.1)
    living.remove(1)
    assert wait_for_answered(tmp_path, before=written + 1, timeout_s=0.1)


def test_the_clis_erasures_are_given_the_settle_step(
        hashing_settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``turnlake erase`` and ``ingest --replace`` hand their erasures the spool settling
    (pipeline.commands.common.erase_settler): what a dead server answered is committed first,
    so the erasure takes it too and nothing brings it back."""
    from typer.testing import CliRunner

    from pipeline.cli import app

    monkeypatch.setenv("TURNLAKE_EMBEDDING_MODEL", "hashing-64")
    lake = Path(str(hashing_settings.lake))
    LiveWriter(hashing_settings, embed=False).ingest([orjson.dumps(turn_record(1)).decode()])
    spool = Spool.create(lake)
    spool.append(_group(1, 2))
    _die(spool)
    erased = CliRunner().invoke(app, ["erase", "--tenant", "acme", "--conversation", "c-1",
                                      "--lake", str(lake)])
    assert erased.exit_code == 0, erased.output
    assert LakeStore(lake).read(Table.TURN_LOGS, columns=["turn_id"]).num_rows == 0
    assert not spool.path.exists()

    LiveWriter(hashing_settings, embed=False).ingest([orjson.dumps(turn_record(3)).decode()])
    spool = Spool.create(lake)
    spool.append(_group(2, 4))
    _die(spool)
    changed = turn_record(3, marker="changed")
    (tmp_path / "changed.jsonl").write_bytes(orjson.dumps(changed) + b"\n")
    replaced = CliRunner().invoke(app, ["ingest", str(tmp_path / "changed.jsonl"), "--replace",
                                        "--no-embed", "--no-index", "--lake", str(lake)])
    assert replaced.exit_code == 0, replaced.output
    assert "replaced 1 stored turn(s)" in " ".join(replaced.output.split())
    logs = LakeStore(lake).read(Table.TURN_LOGS, columns=["turn_id"])
    assert sorted(logs["turn_id"].to_pylist()) == ["t-0003", "t-0004"]
    assert not spool.path.exists()


# -- answered from the spool: the same outcomes and lake as answered after the commit ---------

Group = list[str]


def _scenario(seed: int) -> list[Group]:
    rng = random.Random(seed)
    owners = {"c-1": "u-ana", "c-2": "u-ben", "c-3": "u-ana"}
    sent: list[dict[str, Any]] = []
    groups: list[Group] = []
    for _ in range(rng.randint(3, 7)):
        group: Group = []
        for _ in range(rng.randint(1, 6)):
            kind = rng.choice(["new", "new", "repeat", "conflict", "foreign", "bad"])
            if kind in ("repeat", "conflict") and sent:
                record = dict(rng.choice(sent))
                if kind == "conflict":
                    record["conversation_title"] = f"retitled {rng.randint(0, 9)}"
            elif kind == "bad":
                group.append(rng.choice(["{not json", orjson.dumps(
                    {"schema": "turnlake.turn.v1", "tenant": "acme"}).decode()]))
                continue
            else:
                conversation = rng.choice(sorted(owners))
                user = owners[conversation] if kind != "foreign" else "u-eve"
                record = turn_record(rng.randint(0, 12), user=user, conversation=conversation)
            sent.append(record)
            group.append(orjson.dumps(record).decode())
        groups.append(group)
    return groups


def _run(settings: Settings, groups: list[Group]) -> tuple[list[list[LineOutcome]], Any]:
    writer = GroupWriter(settings, embedder=None, index=False)
    writer.start()
    try:
        answers = []
        for group in groups:
            keys = []
            for line in group:
                try:
                    keys.append(key_of(orjson.loads(line)))
                except (orjson.JSONDecodeError, KeyError):
                    keys.append(None)  # as the service's intake: a line naming no turn
            answers.append(writer.submit(group, keys).result(timeout=120))
        assert writer.flush(timeout_s=120)
    finally:
        writer.close()
    logs = LakeStore(settings.lake).read(Table.TURN_LOGS,
                                         columns=["conversation_id", "turn_id", "payload"])
    quarantined = LakeStore(settings.lake).read(Table.QUARANTINE, columns=["line", "reason"])
    return answers, (sorted(zip(*(logs[c].to_pylist() for c in logs.column_names),
                                strict=True)),
                     sorted(r.split(" (", 1)[0] for r in quarantined["reason"].to_pylist()))


@pytest.mark.parametrize("seed", range(6))
def test_spooled_answers_and_lake_equal_committed_ones(tmp_path: Path, seed: int) -> None:
    groups = _scenario(seed)
    spooled = Settings(lake=tmp_path / "spooled", embedding_model="hashing-64")
    committed = spooled.with_(lake=tmp_path / "committed", record_spool=False)
    answers, lake = _run(spooled, groups)
    assert (answers, lake) == _run(committed, groups)
    statuses = {o.status for answer in answers for o in answer}
    assert "accepted" in statuses
    assert not list((tmp_path / "spooled" / "_spool").iterdir())  # all committed, spool gone


# -- hosts recording the same turns at once: each accepted exactly once -----------------------

HOSTS = 6
REQUESTS = 8


def _host(writer: GroupWriter, seed: int, answers: list[tuple[str, TurnKey, LineOutcome]],
          lock: threading.Lock) -> None:
    rng = random.Random(seed)
    for _ in range(REQUESTS):
        records = []
        for _ in range(rng.randint(1, 5)):
            record = turn_record(rng.randint(0, 15), conversation=rng.choice(["c-1", "c-2"]))
            if rng.random() < 0.3:  # the same turn with other content: a conflict
                record["conversation_title"] = f"host {seed}"
            records.append(record)
        lines = [orjson.dumps(r).decode() for r in records]
        outcomes = writer.submit(lines, [key_of(r) for r in records]).result(timeout=120)
        with lock:
            answers.extend(zip(lines, (key_of(r) for r in records), outcomes, strict=True))


def test_concurrent_hosts_get_one_acceptance_per_turn_and_the_lake_holds_those(
        tmp_path: Path) -> None:
    settings = Settings(lake=tmp_path / "lake", embedding_model="hashing-64",
                        commit_window_ms=2.0)
    metrics = ServiceMetrics()
    writer = GroupWriter(settings, embedder=None, index=False, metrics=metrics)
    writer.start()
    answers: list[tuple[str, TurnKey, LineOutcome]] = []
    lock = threading.Lock()
    try:
        hosts = [threading.Thread(target=_host, args=(writer, seed, answers, lock))
                 for seed in range(HOSTS)]
        for thread in hosts:
            thread.start()
        for thread in hosts:
            thread.join(timeout=300)
        assert writer.flush(timeout_s=120)
    finally:
        writer.close()
    accepted = [(key, orjson.loads(line)) for line, key, o in answers if o.status == "accepted"]
    assert len({key for key, _ in accepted}) == len(accepted)  # each turn accepted once
    logs = LakeStore(settings.lake).read(Table.TURN_LOGS,
                                         columns=["tenant", "conversation_id", "turn_id",
                                                  "payload"])
    stored = {(t, c, n): orjson.loads(p) for t, c, n, p in zip(
        *(logs[name].to_pylist() for name in logs.column_names), strict=True)}
    assert stored.keys() == {key for key, _ in accepted}
    for key, record in accepted:  # the content answered `accepted` is the content stored
        assert stored[key]["conversation_title"] == record["conversation_title"], key
    rejected = [o for _, _, o in answers if o.status == "rejected"]
    assert rejected and all("conflict" in (o.reason or "") for o in rejected)
    assert "turnlake_spool_divergences_total 0.0" in metrics.render().decode()


# -- a server reads and erases what it answered from its spool at once ------------------------

@pytest.mark.slow
def test_answered_turns_are_read_and_erased_at_once(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    keys = make_keys(lake)
    with Server(lake) as server, server.client(keys["recorder"]) as recorder, \
            server.client(keys["admin"]) as admin:
        for round_no in range(3):
            conversation = f"c-r{round_no}"
            records = [turn_record(round_no * 100 + i, conversation=conversation)
                       for i in range(20)]
            answer = recorder.post("/v1/turns", json={"turns": records})
            assert answer.json()["accepted"] == 20, answer.text
            erased = admin.delete(f"/v1/conversations/{conversation}")  # right after: no read
            assert erased.status_code == 200, erased.text
            # And a turn is readable the moment its answer came.
            read = turn_record(round_no * 100 + 50, conversation=f"c-read{round_no}")
            assert recorder.post("/v1/turns", json=read).json()["accepted"] == 1
            shown = admin.get(f"/v1/conversations/c-read{round_no}/turns/{read['turn_id']}")
            assert shown.status_code == 200, shown.text
        # Later commits (of other turns) bring none of the erased ones back.
        assert recorder.post("/v1/turns", json=turn_record(999, conversation="c-x")
                             ).json()["accepted"] == 1
        for round_no in range(3):
            listed = admin.get("/v1/catalog", params={"conversation": f"c-r{round_no}"})
            assert listed.status_code == 200, listed.text
            assert listed.json()["turns"] == []
        assert len(admin.get("/v1/catalog", params={"conversation": "c-x"}).json()["turns"]) == 1
