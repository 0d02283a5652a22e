"""No vector computed twice: duplicates within rows, vectors already in the lake, per tenant and
identity only; and ``embed --backfill --reembed`` moving rows to a new identity."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from typer.testing import CliRunner

from lake.embedding.hashing import HashingEmbedder
from lake.embedding.passages import pooled
from lake.embedding.precision import half_precision
from lake.embedding.reuse import VectorReuse, text_digest
from lake.embedding.rows import embed_rows
from lake.errors import EmbeddingError
from lake.settings import Settings
from lake.store import LakeStore
from lake.tables import Table
from pipeline.cli import app
from pipeline.embed import backfill
from pipeline.jobs import run_ingest
from tests.factories import make_record, passage_hashing_embedder

MODEL = "hashing-64"


class _Counting:
    """A hashing embedder that records every text it was asked to embed."""

    def __init__(self, dim: int = 64) -> None:
        self.inner = HashingEmbedder(dim)
        self.name = self.inner.name
        self.dim = dim
        self.seen: list[str] = []

    def encode(self, texts: Sequence[str], *, batch_size: int = 64) -> np.ndarray:
        self.seen.extend(texts)
        return self.inner.encode(texts, batch_size=batch_size)


def _rows(store: LakeStore, **where: str) -> pa.Table:
    expr = None
    for key, value in where.items():
        term = ds.field(key) == value
        expr = term if expr is None else expr & term
    return store.read(Table.CONTENT_ROWS, filter=expr)


def _records(tenant: str, start: int, prompts: Sequence[str]) -> list[str]:
    return [json.dumps(make_record(start + i, tenant=tenant, conversation=f"c-{tenant}",
                                   prompt=p, answer="thanks")) for i, p in enumerate(prompts)]


@pytest.fixture
def lake(tmp_path: Path) -> Path:
    root = tmp_path / "lake"
    job = run_ingest(Settings(lake=root, embedding_model=MODEL),
                     records=_records("acme", 0, ["continue", "deploy failed", "continue"]),
                     index=False)
    assert job.embedding.embedded > 0
    return root


def test_identical_texts_of_a_tenant_are_embedded_once_per_batch(lake: Path) -> None:
    rows = _rows(LakeStore(lake))
    counting = _Counting()
    out, outcome = embed_rows(rows, counting)
    texts = rows.column("text").to_pylist()
    assert sorted(counting.seen) == sorted(set(texts))
    assert outcome.embedded == len(texts) and outcome.reused == len(texts) - len(set(texts))
    np.testing.assert_allclose(
        np.array(out.column("embedding").to_pylist(), dtype=np.float32),
        HashingEmbedder(64).encode(texts), atol=1e-6)


def test_the_same_text_in_two_tenants_is_embedded_for_each(lake: Path) -> None:
    rows = _rows(LakeStore(lake))
    both = pa.concat_tables([rows, rows.set_column(
        rows.schema.get_field_index("tenant"), "tenant",
        pa.array(["globex"] * rows.num_rows, pa.string()))])
    counting = _Counting()
    embed_rows(both, counting)
    assert len(counting.seen) == 2 * len(set(rows.column("text").to_pylist()))


def test_vectors_in_the_lake_are_reused_by_the_same_tenant_only(lake: Path) -> None:
    settings = Settings(lake=lake, embedding_model=MODEL, embed_reuse_min_texts=0)
    counting = _Counting()
    job = run_ingest(settings, records=_records("acme", 10, ["continue", "brand new text"])
                     + _records("globex", 20, ["continue"]), embedder=counting, index=False)
    # acme's "continue" and "thanks" are in the lake already; globex must compute its own.
    assert sorted(counting.seen) == ["brand new text", "continue", "thanks"]
    assert job.embedding.reused == job.embedding.embedded - 3
    store = LakeStore(lake)
    for tenant in ("acme", "globex"):
        rows = _rows(store, tenant=tenant)
        got = np.array(rows.column("embedding").to_pylist(), dtype=np.float32)
        # the vectors computed, as the lake keeps them (lake.embedding.precision)
        np.testing.assert_array_equal(got, half_precision(HashingEmbedder(64).encode(
            rows.column("text").to_pylist())))


def test_a_small_job_computes_its_few_vectors_rather_than_read_the_tenant(lake: Path) -> None:
    counting = _Counting()
    job = run_ingest(Settings(lake=lake, embedding_model=MODEL),
                     records=_records("acme", 10, ["continue", "continue"]), embedder=counting,
                     index=False)
    assert sorted(counting.seen) == ["continue", "thanks"]  # within the job only
    assert job.embedding.reused == job.embedding.embedded - 2
    reuse = VectorReuse(LakeStore(lake), MODEL, load_after=3)
    assert reuse.lookup("acme", [text_digest("continue")]) == {}
    assert not reuse.loaded("acme")
    assert set(reuse.lookup("acme", [text_digest("continue"), text_digest("thanks")])) == {
        text_digest("continue"), text_digest("thanks")}
    assert reuse.loaded("acme")


def test_a_tenant_not_loaded_keeps_a_bounded_memory_of_its_vectors(lake: Path) -> None:
    reuse = VectorReuse(LakeStore(lake), MODEL, load_after=10**6, remember_at_most=2)
    for text in ("a", "b", "c"):
        reuse.remember("acme", text_digest(text), np.zeros(64, np.float32))
    assert set(reuse.lookup("acme", [text_digest(t) for t in "abc"])) == {
        text_digest("b"), text_digest("c")}


def test_a_lookup_reads_and_answers_from_one_tenant_only(lake: Path) -> None:
    reuse = VectorReuse(LakeStore(lake), MODEL, load_after=0)
    digest = text_digest("continue")
    assert digest in reuse.lookup("acme", [digest])
    assert reuse.lookup("globex", [digest]) == {}
    reuse.remember("globex", text_digest("only globex"), np.zeros(64, np.float32))
    assert reuse.lookup("acme", [text_digest("only globex")]) == {}
    assert set(reuse._tenants) == {"acme", "globex"}  # one map per tenant, never merged


def test_another_identity_is_never_reused(lake: Path) -> None:
    reuse = VectorReuse(LakeStore(lake), "hashing-32")
    assert reuse.lookup("acme", [text_digest("continue")]) == {}
    with pytest.raises(EmbeddingError, match="hashing-32"):
        embed_rows(_rows(LakeStore(lake)), HashingEmbedder(64), reuse=reuse)


def test_reembed_moves_rows_of_another_identity_and_only_them(lake: Path) -> None:
    store = LakeStore(lake)
    before = _rows(store)
    plain = backfill(Settings(lake=lake, embedding_model="hashing-32"), HashingEmbedder(32))
    assert plain.embedded == 0  # without --reembed, done rows are left alone
    report = backfill(Settings(lake=lake, embedding_model="hashing-32"), HashingEmbedder(32),
                      reembed=True)
    assert report.embedded == before.num_rows
    assert report.reused == before.num_rows - len(set(before.column("text").to_pylist()))
    after = _rows(store)
    assert set(after.column("embedding_model").to_pylist()) == {"hashing-32"}
    assert {len(v) for v in after.column("embedding").to_pylist()} == {32}
    again = backfill(Settings(lake=lake, embedding_model="hashing-32"), HashingEmbedder(32),
                     reembed=True)
    assert again.embedded == 0


def test_cli_reembed_makes_the_partition_stale_until_rebuilt(
        lake: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TURNLAKE_LAKE", str(lake))
    monkeypatch.setenv("TURNLAKE_EMBEDDING_MODEL", MODEL)
    cli = CliRunner()
    assert cli.invoke(app, ["index", "build"]).exit_code == 0

    def status() -> list[dict[str, Any]]:
        result = cli.invoke(app, ["index", "status", "--json"])
        assert result.exit_code == 0, result.output
        return list(json.loads(result.stdout))

    assert [s["freshness"] for s in status()] == ["fresh"]
    monkeypatch.setenv("TURNLAKE_EMBEDDING_MODEL", "hashing-32")
    result = cli.invoke(app, ["embed", "--backfill", "--reembed", "--no-index"])
    assert result.exit_code == 0, result.output
    assert "reused a vector" in result.stdout
    assert [s["freshness"] for s in status()] == ["stale"]
    assert cli.invoke(app, ["index", "build"]).exit_code == 0
    assert [s["freshness"] for s in status()] == ["fresh"]
    from lake.index.manifest import read_current

    current = read_current(lake, "acme", _rows(LakeStore(lake))["month"][0].as_py())
    assert current is not None and current[1].model == "hashing-32"


def test_an_unknown_runtime_option_is_a_clear_error(lake: Path) -> None:
    result = CliRunner().invoke(app, ["embed", "--backfill", "--embedding-runtime", "jax",
                                      "--lake", str(lake)])
    assert result.exit_code == 2
    assert "embedding runtime must be one of" in result.output


def test_a_long_text_keeps_its_passage_vectors_and_reuse_carries_them(tmp_path: Path) -> None:
    embedder = passage_hashing_embedder(64)
    splitter = embedder.passage_splitter
    long = "the nightly ledger export finished late and the vault probe failed twice " * 8
    parts = splitter.split([long])[0]
    assert len(parts) >= 3
    settings = Settings(lake=tmp_path / "lake", embedding_model=embedder.name,
                        embed_reuse_min_texts=1)
    first = [json.dumps(make_record(0, prompt=long, answer="ok"))]
    run_ingest(settings, records=first, embedder=embedder)
    again = [json.dumps(make_record(1, prompt=long, answer="fine"))]
    report = run_ingest(settings, records=again, embedder=embedder)
    assert report.embedding.reused >= 1  # the long prompt was not computed again
    rows = _rows(LakeStore(settings.lake), role="user")
    assert rows.num_rows == 2
    expected = embedder.encode(parts)
    for vector, passages in zip(rows.column("embedding").to_pylist(),
                                rows.column("passage_embeddings").to_pylist(), strict=True):
        stored = np.array(passages, np.float32).reshape(-1, 64)
        # as computed, kept at half precision (lake.embedding.precision)
        np.testing.assert_array_equal(stored, half_precision(expected))
        np.testing.assert_array_equal(vector, half_precision(pooled(expected)))
    # a text that fits keeps no passages
    answers = _rows(LakeStore(settings.lake), role="assistant")
    assert answers.column("passage_embeddings").null_count == answers.num_rows
