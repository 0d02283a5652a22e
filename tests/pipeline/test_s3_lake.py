"""A lake on an S3-protocol server (moto on loopback) behaves exactly like a local lake fed the
same input: ingest, index build, search, materialization, purge and erase all agree, erased
content leaves no trace in the bucket or in a search node's cache, and the CLI takes s3:// roots.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from lake.deletion.target import ErasureTarget
from lake.embedding.hashing import HashingEmbedder
from lake.index.status import StatusCache, partition_statuses
from lake.location import LakeLocation
from lake.search.access import Principal
from lake.search.materialize import TurnMaterializer
from lake.search.request import GENERATORS, SearchRequest
from lake.search.service import SearchService
from lake.settings import RetentionRule, Settings
from lake.store import LakeStore
from lake.tables import Table
from pipeline.cli import app
from pipeline.index_build import build_indexes
from pipeline.jobs import run_ingest
from pipeline.retention import erase, purge
from tests.factories import make_record, write_jsonl
from tests.s3_server import aws_env, bucket_objects, cache_files, new_bucket, s3_config, s3_endpoint

__all__ = ["s3_endpoint"]  # the fixture, imported for pytest

NOW = datetime.now(UTC).replace(microsecond=0)
ERASED = "QZXERASEDQZX"
ANALYST = Principal("acme", analyst=True)
QUERIES = ("forecast timezone", "glacier dashboard slow", "tundra deploy", ERASED.lower(),
           "question number 3")
# Columns a run stamps with its own clock or random ids.
RUN_COLUMNS = {"batch_id", "ingested_at", "quarantined_at", "embedded_at", "at", "updated_at",
               "job_id"}


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _records() -> list[dict[str, Any] | str]:
    t0 = NOW - timedelta(days=2)
    month_ago = NOW - timedelta(days=40)
    records: list[dict[str, Any] | str] = [
        make_record(n, conversation="c-1", at=t0 + timedelta(minutes=n)) for n in range(4)]
    records += [
        make_record(10, conversation="c-2", prompt="the glacier dashboard is slow", at=t0),
        make_record(11, conversation="c-old", prompt="the tundra deploy failed",
                    at=month_ago, writer="rich", summary="tundra summary", notes=["a note"]),
        make_record(12, user="u-ben", conversation="c-ben", prompt="ben tundra rollback",
                    at=t0, ttl_days=1, started_at=(NOW - timedelta(days=5)).isoformat(),
                    ended_at=(NOW - timedelta(days=5, seconds=-30)).isoformat()),
        make_record(20, conversation="c-erase", writer="rich", at=t0,
                    prompt=f"the {ERASED} workbook", answer=f"fixed {ERASED}",
                    summary=f"summary {ERASED}", anchors=[ERASED],
                    hosted_files=[{"path": "files/out.csv", "mime": "text/csv",
                                   "content_b64": _b64(f"col\n{ERASED}\n"),
                                   "description": "the export"}]),
        make_record(30, tenant="globex", user="u-gil", conversation="c-g", at=t0,
                    prompt="globex forecast timezone"),
        json.dumps({**make_record(40, conversation="c-bad"), "bogus": 1}),
    ]
    return records


@dataclass
class Lakes:
    local: Settings
    remote: Settings
    endpoint: str
    bucket: str
    cache: Path


def _settings(lake: Path | str, **kw: Any) -> Settings:
    return Settings(lake=lake, embedding_model="hashing-64", **kw,
                    retention=(RetentionRule("acme", ttl_days=1, role="note"),))


@pytest.fixture
def lakes(s3_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Lakes:
    cache = tmp_path / "cache"
    monkeypatch.setenv("TURNLAKE_CACHE", str(cache))
    bucket = new_bucket(s3_endpoint)
    local = _settings(tmp_path / "lake")
    remote = _settings(f"s3://{bucket}/team/lake", s3=s3_config(s3_endpoint))
    source = write_jsonl(tmp_path / "in.jsonl", _records())
    for settings in (local, remote):
        report = run_ingest(settings, [source])
        assert (report.ingest.accepted, len(report.ingest.quarantined)) == (9, 1)
    return Lakes(local, remote, s3_endpoint, bucket, cache)


def _table(settings: Settings, table: Table) -> list[dict[str, Any]]:
    data = LakeStore(settings.lake).read(table)
    keep = [c for c in data.column_names if c not in RUN_COLUMNS]
    rows = data.select(keep).to_pylist()
    for row in rows:
        if table is Table.AUDIT:  # the job id inside the counts is the run's own
            row["counts"] = {k: v for k, v in json.loads(row["counts"]).items() if k != "job"}
    return sorted(rows, key=lambda r: json.dumps(r, sort_keys=True, default=str))


def _search(settings: Settings) -> list[Any]:
    service = SearchService(LakeStore(settings.lake), embedder=HashingEmbedder(64))
    found = []
    for query in QUERIES:
        for generator in (*GENERATORS, None):
            enabled = {g: generator is None or g == generator for g in GENERATORS}
            result = service.search(SearchRequest(
                query, ANALYST, scope="tenant", k=20, max_per_conversation=0,
                enabled=enabled, as_of=NOW))
            found.append([(query, generator, h.conversation_id, h.turn_id, h.role,
                           round(h.score, 9), h.text) for h in result.hits])
    return found


def _same(lakes: Lakes) -> None:
    for table in Table:
        assert _table(lakes.remote, table) == _table(lakes.local, table), table
    assert _search(lakes.remote) == _search(lakes.local)


def test_ingest_index_and_search_match_the_local_lake(lakes: Lakes) -> None:
    _same(lakes)
    statuses = partition_statuses(LakeStore(lakes.remote.lake))
    assert {s.freshness for s in statuses.values()} == {"fresh"}
    # one partition per tenant and month of the turns (how many depends on today's date)
    months = {(r["tenant"], r["started_at"][:7]) for r in _records() if isinstance(r, dict)}
    assert len(statuses) == len(partition_statuses(LakeStore(lakes.local.lake))) == len(months)
    assert set(statuses) == months
    keys = bucket_objects(lakes.endpoint, lakes.bucket)
    for area in ("tables/turn_logs/_delta_log/", "tables/content_rows/", "indexes/acme/",
                 "objects/acme/c-erase/t-0020/files/out.csv"):
        assert any(k.startswith(f"team/lake/{area}") for k in keys), area
    assert not any(k.startswith("team/lake/_batches/") or k.startswith("team/lake/_locks/")
                   for k in keys), "manifests and locks are gone once the job ends"


def test_materialized_turns_and_hosted_files_match(lakes: Lakes) -> None:
    ref = "conv:fi:conv_c-erase.turn_t-0020.files/out.csv"
    ana = Principal("acme", "u-ana")
    shown = [TurnMaterializer(LakeStore(s.lake)).turn(ana, "c-erase", "t-0020")
             for s in (lakes.local, lakes.remote)]
    # Each lake recorded the turn in a batch of its own: its own edition, in every address.
    editions = [t.edition for t in shown]
    assert editions[0] != editions[1] and all(editions)
    unedited = [replace(t, edition=None, addresses=None) for t in shown]
    assert unedited[0] == unedited[1]
    assert [t.addresses.record.replace(t.edition or "", "E") for t in shown if t.addresses] \
        == ["conv:ar:conv_c-erase.turn_t-0020.record@E"] * 2
    resolved = [TurnMaterializer(LakeStore(s.lake)).resolve(ana, ref)
                for s in (lakes.local, lakes.remote)]
    assert resolved[0] == resolved[1] and resolved[1][1] == f"col\n{ERASED}\n".encode()


def test_purge_and_erase_match_and_leave_no_trace_in_bucket_or_cache(lakes: Lakes) -> None:
    _search(lakes.remote)  # the search node caches every partition's build
    assert cache_files(lakes.cache)
    for settings in (lakes.local, lakes.remote):
        report = purge(settings, as_of=NOW)
        assert report.outcome is not None and report.outcome.deleted["turn_logs"] == 1
    _same(lakes)
    target = ErasureTarget("acme", conversation_id="c-erase")
    for settings in (lakes.local, lakes.remote):
        report = erase(settings, target, actor="test", settle=None)
        assert report.outcome is not None and report.outcome.deleted["file_objects"] == 1
    _same(lakes)
    needles = (ERASED.encode(), ERASED.lower().encode())
    leftovers = [k for k, data in bucket_objects(lakes.endpoint, lakes.bucket).items()
                 if any(n in data for n in needles)]
    leftovers += [str(p) for p in cache_files(lakes.cache)
                  if any(n in p.read_bytes() for n in needles)]
    assert leftovers == []


def _cached_builds(cache: Path, tenant: str) -> set[str]:
    # <cache>/<lake digest>/indexes/<tenant>/<month>/<build id>/manifest.json
    return {p.relative_to(cache).parts[4] for p in cache_files(cache)
            if p.name == "manifest.json" and p.relative_to(cache).parts[2] == tenant}


def test_a_new_manifest_replaces_the_cached_build(lakes: Lakes) -> None:
    _search(lakes.remote)
    before = _cached_builds(lakes.cache, "acme")
    build_indexes(LakeStore(lakes.remote.lake), model="hashing-64", full=True, tenant="acme")
    assert _search(lakes.remote) == _search(lakes.local)
    after = _cached_builds(lakes.cache, "acme")
    acme_months = {r["started_at"][:7] for r in _records()
                   if isinstance(r, dict) and r["tenant"] == "acme"}
    assert len(before) == len(after) == len(acme_months) and not before & after, \
        "old builds left the cache"


def test_a_search_node_with_an_empty_cache_downloads_what_it_needs(
        lakes: Lakes, tmp_path: Path) -> None:
    node = LakeLocation.of(lakes.remote.lake, s3_config(lakes.endpoint))
    fresh = LakeLocation(uri=node.uri, s3=node.s3, cache_root=tmp_path / "node-cache")
    service = SearchService(LakeStore(fresh), embedder=HashingEmbedder(64))
    hits = service.search(SearchRequest("glacier dashboard", ANALYST, scope="tenant")).hits
    assert hits and hits[0].conversation_id == "c-2"
    assert cache_files(tmp_path / "node-cache")


def test_a_search_node_that_missed_a_rebuild_looks_again(lakes: Lakes, tmp_path: Path) -> None:
    # The node read the statuses, then another process rebuilt the partitions (removing the
    # builds the node was about to download) before the node's next look at the lake.
    node = LakeLocation.of(lakes.remote.lake, s3_config(lakes.endpoint))
    fresh = LakeLocation(uri=node.uri, s3=node.s3, cache_root=tmp_path / "node-cache")
    store = LakeStore(fresh)
    service = SearchService(store, embedder=HashingEmbedder(64))
    service._statuses = StatusCache(store, remote_poll_s=3600.0)  # a look that stays stale
    before = {s.manifest.build_id for s in service.statuses().values() if s.manifest}
    build_indexes(LakeStore(lakes.remote.lake), model="hashing-64", full=True, tenant="acme")
    hits = service.search(SearchRequest("glacier dashboard", ANALYST, scope="tenant")).hits
    assert hits and hits[0].conversation_id == "c-2"
    after = {s.manifest.build_id for s in service.statuses().values() if s.manifest}
    assert after != before and _cached_builds(tmp_path / "node-cache", "acme") <= after


def test_cli_takes_an_s3_lake_from_the_standard_aws_environment(
        s3_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in aws_env(s3_endpoint).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("TURNLAKE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("TURNLAKE_EMBEDDING_MODEL", "hashing-64")
    lake = f"s3://{new_bucket(s3_endpoint)}/cli"
    source = write_jsonl(tmp_path / "in.jsonl", _records())
    runner = CliRunner()
    ingested = runner.invoke(app, ["ingest", str(source), "--lake", lake])
    assert ingested.exit_code == 0, ingested.output
    assert "accepted 9," in " ".join(ingested.output.split()), ingested.output
    status = runner.invoke(app, ["index", "status", "--json", "--lake", lake])
    assert status.exit_code == 0, status.output
    assert {p["freshness"] for p in json.loads(status.output)} == {"fresh"}
    found = runner.invoke(app, ["search", "glacier dashboard", "--tenant", "acme",
                                "--analyst", "--scope", "tenant", "--lake", lake, "--json"])
    assert found.exit_code == 0, found.output
    assert "c-2" in found.output


def test_a_missing_bucket_is_a_clear_error(s3_endpoint: str, tmp_path: Path) -> None:
    settings = _settings("s3://no-such-bucket-here/lake", s3=s3_config(s3_endpoint))
    with pytest.raises(Exception, match="no-such-bucket-here") as err:
        run_ingest(settings, [write_jsonl(tmp_path / "in.jsonl", _records()[:1])])
    assert type(err.value).__module__.startswith("lake"), repr(err.value)


def test_two_ingests_at_once_into_one_s3_lake_both_land(
        s3_endpoint: str, tmp_path: Path) -> None:
    lake = f"s3://{new_bucket(s3_endpoint)}/shared"
    env = {**os.environ, **aws_env(s3_endpoint), "TURNLAKE_CACHE": str(tmp_path / "cache"),
           "TURNLAKE_EMBEDDING_MODEL": "hashing-64"}
    sources = [write_jsonl(tmp_path / f"in-{user}.jsonl", [
        make_record(n, user=user, conversation=f"c-{user}-{n % 3}") for n in range(30)])
        for user in ("u-one", "u-two")]
    procs = [subprocess.Popen([sys.executable, "-m", "pipeline.cli", "ingest", str(src),
                               "--lake", lake], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for src in sources]
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    settings = Settings(lake=lake, s3=s3_config(s3_endpoint))
    logs = LakeStore(settings.lake).read(Table.TURN_LOGS, columns=["user_id", "turn_id"])
    assert logs.num_rows == 60
    assert len(set(zip(logs["user_id"].to_pylist(), logs["turn_id"].to_pylist(),
                       strict=True))) == 60
    statuses = partition_statuses(LakeStore(settings.lake))
    assert {s.freshness for s in statuses.values()} == {"fresh"}
