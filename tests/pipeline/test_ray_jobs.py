"""Partition-parallel index builds and backfills on Ray give what the in-process jobs give.

One local Ray instance with 2 CPUs serves the whole module. Every comparison runs the two
paths on byte-for-byte copies of one lake, so table versions, file names and fingerprints are
the same on both sides and anything that differs comes from the runner.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from lake.embedding.factory import embedder_for
from lake.errors import EmbeddingError
from lake.index.lexical import LexicalIndex
from lake.index.manifest import PartitionManifest, read_current
from lake.index.status import partition_statuses
from lake.search.access import Principal
from lake.search.request import SearchRequest
from lake.search.service import SearchService
from lake.settings import Settings
from lake.store import LakeStore
from lake.tables import Table
from pipeline.cli import app
from pipeline.commands.index import with_ray_value
from pipeline.embed import backfill
from pipeline.index_build import build_indexes
from pipeline.jobs import run_ingest
from pipeline.ray_jobs import EmbedOnRay, RayJobError, build_on_ray, ray_session
from tests.factories import BASE_TIME, make_record, rich_record

MODEL = "hashing-64"
TENANTS = ("acme", "globex")
MONTHS = ("2026-03", "2026-04", "2026-05")
PARTITIONS = [(t, m) for t in TENANTS for m in MONTHS]
AS_OF = BASE_TIME + timedelta(days=90)
QUERIES = ("forecast timezone", "openpyxl workbook", "question number 3", "deploy rollback")
ROOT = Path(__file__).parents[2]
# Differ between any two builds: identity and clock.
RUN_FIELDS = {"build_id", "built_at", "build_seconds", "seconds_by_kind", "segments"}
# One local Ray at a time on the machine: with test_ray_ingest in one pytest-xdist worker.
pytestmark = pytest.mark.xdist_group("ray")


def _children() -> list[str]:
    """Command lines of this process's live child processes that belong to Ray."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_text().replace("\0", " ")
        except (OSError, IndexError):
            continue
        if int(fields[1]) == os.getpid() and fields[0] != "Z" and (
                "/ray/" in cmdline or "ray::" in cmdline):
            found.append(cmdline)
    return found


@pytest.fixture(scope="module")
def ray_local() -> Iterator[None]:
    """One local Ray instance (2 CPUs) for the module; no process of it may outlive it."""
    ray = pytest.importorskip("ray")
    with pytest.MonkeyPatch.context() as env:
        env.delenv("RAY_ADDRESS", raising=False)
        env.setenv("RAY_USAGE_STATS_ENABLED", "0")
        ray.init(address="local", num_cpus=2, include_dashboard=False,
                 logging_level=logging.ERROR, log_to_driver=False)
        try:
            yield
        finally:
            ray.shutdown()
    deadline = time.monotonic() + 15
    while _children() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _children(), f"Ray left processes behind: {_children()}"


def _lines() -> list[str]:
    """Turns in 2 tenants x 3 months, minimal and rich writers, two users per tenant."""
    records: list[dict[str, Any]] = []
    for t, tenant in enumerate(TENANTS):
        for m in range(len(MONTHS)):
            start = BASE_TIME + timedelta(days=35 * m)
            for n in range(4):
                at = start + timedelta(hours=n)
                user = ("u-ana", "u-ben")[n % 2]
                conversation = f"c-{tenant}-{m}-{user}"
                if n == 0:
                    record = rich_record(n, tenant=tenant, user=user,
                                         conversation=conversation)
                    record.update(turn_id=f"t-{m}{n}", started_at=at.isoformat(),
                                  ended_at=(at + timedelta(seconds=40)).isoformat())
                    for part in record["submissions"]:
                        part["arrived_at"] = at.isoformat()
                    record["completion"]["at"] = (at + timedelta(seconds=30)).isoformat()
                else:
                    record = make_record(10 * m + n + 100 * t, tenant=tenant, user=user,
                                         conversation=conversation, at=at,
                                         prompt=f"question number {n} on deploy rollback "
                                                f"{tenant} month {m}")
                records.append(record)
    return [json.dumps(r) for r in records]


def _settings(root: Path) -> Settings:
    return Settings(lake=root, embedding_model=MODEL, embed_batch_size=4)


@pytest.fixture(scope="module")
def embedded_lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Rows embedded at ingest, no index yet."""
    root = tmp_path_factory.mktemp("embedded") / "lake"
    job = run_ingest(_settings(root), records=_lines(), embed=True, index=False)
    assert job.ingest.partitions == set(PARTITIONS) and not job.ingest.quarantined
    return root


@pytest.fixture(scope="module")
def pending_lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Rows ingested with embedding off: every row pending."""
    root = tmp_path_factory.mktemp("pending") / "lake"
    job = run_ingest(_settings(root), records=_lines(), embed=False, index=False)
    assert job.ingest.accepted == len(_lines()) and job.embedding.embedded == 0
    return root


def _copies(source: Path, tmp_path: Path) -> tuple[Path, Path]:
    return (Path(shutil.copytree(source, tmp_path / "in-process")),
            Path(shutil.copytree(source, tmp_path / "on-ray")))


def _manifest(m: PartitionManifest) -> dict[str, Any]:
    # tantivy's indexing threads split the documents over segments in any order (two
    # in-process builds differ too), so the lexical folder's size is compared by content below.
    sizes = {k: v for k, v in m.bytes.items() if k != "lexical"}
    return {k: v for k, v in asdict(m).items() if k not in RUN_FIELDS} | {"bytes": sizes}


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _folder(root: Path, tenant: str, month: str) -> Path:
    current = read_current(root, tenant, month)
    assert current is not None, f"{tenant}/{month} has no index"
    return current[0]


def _artifacts(root: Path, tenant: str, month: str) -> dict[str, str]:
    """Every artifact's bytes by path, the lexical index and the manifest excepted."""
    folder = _folder(root, tenant, month)
    return {p.relative_to(folder).as_posix(): _sha(p) for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != "manifest.json"
            and not p.relative_to(folder).as_posix().startswith("lexical/")}


def _lexical(root: Path, tenant: str, month: str) -> list[Any]:
    """The lexical index's size and, per query, its (row, BM25 score) set."""
    index = LexicalIndex.open(_folder(root, tenant, month) / "lexical")
    return [len(index), *(sorted((doc, round(score, 4))
                                 for doc, score in index.search(query, limit=100))
                          for query in QUERIES)]


def _hits(root: Path) -> list[list[dict[str, Any]]]:
    service = SearchService(LakeStore(root), embedder=embedder_for(MODEL))
    answers = []
    for tenant in TENANTS:
        for query in QUERIES:
            result = service.search(SearchRequest(query, Principal(tenant, analyst=True),
                                                  scope="tenant", as_of=AS_OF, k=20))
            assert not result.warnings, result.warnings
            answers.append([hit.to_json() for hit in result.hits])
    return answers


def _content_rows(root: Path) -> list[dict[str, Any]]:
    rows = LakeStore(root).read(Table.CONTENT_ROWS).sort_by("row_id").to_pylist()
    assert rows
    return rows


def test_index_build_on_ray_equals_the_in_process_build(ray_local: None, embedded_lake: Path,
                                                        tmp_path: Path) -> None:
    here, there = _copies(embedded_lake, tmp_path)
    seen: list[tuple[str, int, int]] = []
    local = build_indexes(LakeStore(here), model=MODEL)
    on_ray = build_indexes(LakeStore(there), model=MODEL, builder=build_on_ray,
                           on_partition=lambda name, done, total: seen.append(
                               (name, done, total)))
    assert [(m.tenant, m.month) for m in on_ray.built] == PARTITIONS
    assert [_manifest(m) for m in on_ray.built] == [_manifest(m) for m in local.built]
    assert all(m.embedded_rows == m.row_count > 0 for m in on_ray.built)
    assert sorted(name for name, _, _ in seen) == [f"{t}/{m}" for t, m in PARTITIONS]
    assert [(done, total) for _, done, total in seen] == [(i, 6) for i in range(1, 7)]
    for tenant, month in PARTITIONS:
        assert _artifacts(there, tenant, month) == _artifacts(here, tenant, month)
        lexical = _lexical(there, tenant, month)
        assert lexical[0] > 0 and any(lexical[1:])
        assert lexical == _lexical(here, tenant, month)
    assert {s.freshness for s in partition_statuses(LakeStore(there)).values()} == {"fresh"}
    hits = _hits(there)
    assert all(hits) and hits == _hits(here)


def test_backfill_on_ray_equals_the_in_process_backfill(ray_local: None, pending_lake: Path,
                                                        tmp_path: Path) -> None:
    here, there = _copies(pending_lake, tmp_path)
    before = LakeStore(here).version(Table.CONTENT_ROWS)
    assert before is not None
    seen: list[str] = []
    progress: list[tuple[int, int]] = []
    local = backfill(_settings(here), embedder_for(MODEL))
    on_ray = backfill(_settings(there), embedder_for(MODEL), runner=EmbedOnRay(MODEL, 4),
                      on_partition=lambda name, done, total: seen.append(name),
                      on_progress=lambda done, total: progress.append((done, total)))
    assert (on_ray.embedded, on_ray.failed, on_ray.error) == (local.embedded, 0, None)
    assert on_ray.partitions == local.partitions == set(PARTITIONS)
    assert sorted(seen) == [f"{t}/{m}" for t, m in PARTITIONS]
    assert progress[-1] == (local.embedded, local.embedded)
    rows = _content_rows(there)
    assert rows == _content_rows(here)
    assert {(r["embedding_status"], r["embedding_model"], len(r["embedding"]))
            for r in rows} == {("done", MODEL, 64)}
    # One commit per partition, as in process.
    assert LakeStore(there).version(Table.CONTENT_ROWS) == before + len(PARTITIONS)


def test_a_provider_failing_on_ray_commits_nothing_and_stops(ray_local: None,
                                                            pending_lake: Path,
                                                            tmp_path: Path) -> None:
    lake = Path(shutil.copytree(pending_lake, tmp_path / "lake"))
    before = LakeStore(lake).version(Table.CONTENT_ROWS)
    missing = str(tmp_path / "no-such-model")
    report = backfill(_settings(lake), embedder_for(MODEL), runner=EmbedOnRay(missing, 4))
    assert report.embedded == 0 and report.failed > 0
    assert report.error is not None and "no-such-model" in report.error
    assert LakeStore(lake).version(Table.CONTENT_ROWS) == before
    assert {r["embedding_status"] for r in _content_rows(lake)} == {"pending"}


def test_an_error_inside_a_task_reaches_the_driver_as_itself(ray_local: None,
                                                             pending_lake: Path,
                                                             tmp_path: Path) -> None:
    lake = Path(shutil.copytree(pending_lake, tmp_path / "lake"))
    before = LakeStore(lake).version(Table.CONTENT_ROWS)
    # hashing-0 is refused when the task builds its provider, outside embed_rows' safety net.
    with pytest.raises(EmbeddingError, match="dim must be a positive int"):
        backfill(_settings(lake), embedder_for(MODEL), runner=EmbedOnRay("hashing-0", 4))
    assert LakeStore(lake).version(Table.CONTENT_ROWS) == before
    # The writer lock was released and the rows are untouched: a plain backfill does it all.
    assert backfill(_settings(lake), embedder_for(MODEL)).embedded == len(_content_rows(lake))


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, pending_lake: Path, tmp_path: Path) -> CliRunner:
    monkeypatch.setenv("TURNLAKE_EMBEDDING_MODEL", MODEL)
    monkeypatch.setenv("TURNLAKE_LAKE", str(shutil.copytree(pending_lake, tmp_path / "lake")))
    return CliRunner()


def test_cli_embed_and_build_on_ray_report_each_partition(ray_local: None,
                                                          cli: CliRunner) -> None:
    embedded = cli.invoke(app, ["embed", "--backfill", "--ray"])
    assert embedded.exit_code == 0, embedded.output
    for tenant, month in PARTITIONS:
        assert f"embedding: {tenant}/{month} done" in embedded.output
        assert f"building indexes: {tenant}/{month} done" in embedded.output
    rows = len(_content_rows(Path(os.environ["TURNLAKE_LAKE"])))
    assert f"embedded {rows} rows, 0 failed" in embedded.output
    built = cli.invoke(app, ["index", "build", "--ray", "--full"])
    assert built.exit_code == 0, built.output
    assert "(6/6)" in built.output and "6 built, 0 already fresh" in built.output
    for tenant, month in PARTITIONS:
        assert f"building indexes: {tenant}/{month} done" in built.output
        assert f"built {tenant}/{month}: " in built.output


def test_a_bare_ray_option_means_a_local_instance() -> None:
    assert with_ray_value(["--ray"]) == ["--ray", "local"]
    assert with_ray_value(["--ray", "--full"]) == ["--ray", "local", "--full"]
    assert with_ray_value(["--full", "--ray", "auto"]) == ["--full", "--ray", "auto"]
    assert with_ray_value(["--ray=ray://head:10001"]) == ["--ray=ray://head:10001"]
    assert with_ray_value(["--", "--ray"]) == ["--", "--ray"]


def test_missing_ray_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, cli: CliRunner) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # as if the extra were not installed
    with pytest.raises(RayJobError, match=r"pip install 'turnlake\[ray\]'"), ray_session():
        pass
    result = cli.invoke(app, ["index", "build", "--ray"])
    assert result.exit_code == 2
    assert "--ray needs the ray extra: pip install 'turnlake[ray]'" in result.output


@pytest.mark.parametrize(("address", "message"), [
    ("127.0.0.1:1", "cannot reach Ray at '127.0.0.1:1'"),
    ("ray://127.0.0.1:1", "cannot reach Ray at 'ray://127.0.0.1:1'"),
    ("head-node", "bad Ray address 'head-node'"),
])
def test_a_bad_ray_address_is_a_clear_error(cli: CliRunner, address: str, message: str) -> None:
    pytest.importorskip("ray")
    result = cli.invoke(app, ["embed", "--backfill", "--ray", address])
    assert result.exit_code == 2
    assert message in " ".join(result.output.split())
    cpus = cli.invoke(app, ["index", "build", "--ray-cpus", "2"])
    assert cpus.exit_code == 2 and "--ray-cpus needs --ray" in cpus.output


def test_the_core_cli_does_not_import_ray() -> None:
    probe = ("import sys, pipeline.cli, pipeline.ray_jobs; "
             "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[]"


def test_the_cli_starts_and_stops_its_own_local_instance(pending_lake: Path,
                                                         tmp_path: Path) -> None:
    """In a fresh process (no Ray yet) a bare --ray starts a private instance, quietly."""
    pytest.importorskip("ray")
    lake = Path(shutil.copytree(pending_lake, tmp_path / "lake"))
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(TURNLAKE_EMBEDDING_MODEL=MODEL, RAY_USAGE_STATS_ENABLED="0")
    done = subprocess.run([sys.executable, "-m", "pipeline.cli", "embed", "--backfill",
                           "--no-index", "--lake", str(lake), "--ray", "--ray-cpus", "1"],
                          cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"embedded {len(_content_rows(lake))} rows, 0 failed" in done.stdout
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    # Ray's own logging stays quiet: one line per partition is all stderr gets.
    assert len(lines) == len(PARTITIONS), done.stderr[-2000:]
    assert all(line.startswith("embedding: ") for line in lines), done.stderr[-2000:]
