"""`turnlake embed --long-texts`: rows embedded before long texts were cut into passages get
their passages' vectors; nothing else is touched, and a second run changes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from lake.embedding.hashing import HashingEmbedder
from lake.embedding.passages import pooled
from lake.embedding.sentence import SentenceTransformerEmbedder
from lake.errors import TurnlakeError
from lake.settings import Settings
from lake.store import LakeStore
from lake.tables import Table
from pipeline.cli import app
from pipeline.embed import refresh_long_texts
from pipeline.jobs import run_ingest
from tests.factories import make_record

LONG = " ".join(f"Step {i}: the nightly export of ledger-{i}.csv finished after {i * 3} minutes."
                for i in range(80))


def _vectors(root: Path) -> dict[str, np.ndarray]:
    rows = LakeStore(root).read(Table.CONTENT_ROWS, columns=["text", "embedding"])
    return {t: np.array(v, np.float32) for t, v in zip(
        rows.column("text").to_pylist(), rows.column("embedding").to_pylist(), strict=True)}


def _passages(root: Path) -> dict[str, np.ndarray]:
    rows = LakeStore(root).read(Table.CONTENT_ROWS, columns=["text", "passage_embeddings"])
    return {t: np.array(v, np.float32).reshape(-1, 384) for t, v in zip(
        rows.column("text").to_pylist(), rows.column("passage_embeddings").to_pylist(),
        strict=True) if v is not None}


@pytest.fixture
def truncated_lake(tmp_path: Path) -> Path:
    """A lake embedded the old way: long texts cut to their first 254 word pieces."""
    root = tmp_path / "lake"
    records = [make_record(0, answer=LONG), make_record(1, answer="a short answer")]
    old = SentenceTransformerEmbedder(passages=False)
    run_ingest(Settings(lake=root, embedding_model=old.name),
               records=[json.dumps(r) for r in records], embedder=old)
    return root


def test_long_rows_get_their_passages_vector_and_the_rest_is_left(truncated_lake: Path) -> None:
    before = _vectors(truncated_lake)
    embedder = SentenceTransformerEmbedder()
    seen: list[tuple[int, int]] = []
    report = refresh_long_texts(Settings(lake=truncated_lake, embedding_model=embedder.name),
                                embedder, on_progress=lambda d, t: seen.append((d, t)))
    assert report.embedded == 1 and report.failed == 0 and len(report.partitions) == 1
    assert report.long_rows == 1  # the short answer and the prompts are not long
    assert seen == [(1, 1)]
    after = _vectors(truncated_lake)
    # kept at half precision (lake.embedding.precision): within 2^-11 of each value
    np.testing.assert_allclose(after[LONG], embedder.encode([LONG])[0], rtol=2.0**-11,
                               atol=1e-6)
    assert float(after[LONG] @ before[LONG]) < 0.999
    assert all(np.array_equal(after[t], v) for t, v in before.items() if t != LONG)
    passages = _passages(truncated_lake)
    assert set(passages) == {LONG}
    assert passages[LONG].shape[0] >= 2  # the row's vector is pooled from them
    # pooled from the passages before both were rounded to half precision
    np.testing.assert_allclose(after[LONG], pooled(passages[LONG]), atol=2.0**-10)
    version = LakeStore(truncated_lake).version(Table.CONTENT_ROWS)
    again = refresh_long_texts(Settings(lake=truncated_lake, embedding_model=embedder.name),
                               embedder)
    assert again.embedded == 0 and not again.partitions
    assert LakeStore(truncated_lake).version(Table.CONTENT_ROWS) == version  # nothing written


def test_an_embedder_that_cuts_no_passages_is_refused(truncated_lake: Path) -> None:
    with pytest.raises(TurnlakeError, match="cuts no passages"):
        refresh_long_texts(Settings(lake=truncated_lake, embedding_model="hashing-32"),
                           HashingEmbedder(32))


def test_the_cli_refreshes_long_texts_and_rebuilds_their_index(
        truncated_lake: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TURNLAKE_LAKE", str(truncated_lake))
    cli = CliRunner()
    result = cli.invoke(app, ["embed", "--long-texts", "--embedding-runtime", "torch"])
    assert result.exit_code == 0, result.output
    assert "1 long rows had no passage vectors: 1 re-embedded as passages, 0 failed" \
        in result.stdout
    again = cli.invoke(app, ["embed", "--long-texts", "--embedding-runtime", "torch"])
    assert "no long row lacks its passage vectors: nothing to re-embed" in again.stdout
    status = cli.invoke(app, ["index", "status", "--json"])
    assert [s["freshness"] for s in json.loads(status.stdout)] == ["fresh"]
    short = truncated_lake.parent / "short"
    run_ingest(Settings(lake=short, embedding_model="all-MiniLM-L6-v2"),
               records=[json.dumps(make_record(0))], embedder=SentenceTransformerEmbedder())
    nothing = cli.invoke(app, ["embed", "--long-texts", "--embedding-runtime", "torch",
                               "--lake", str(short)])
    assert nothing.exit_code == 0, nothing.output
    assert "no long row lacks its passage vectors: nothing to re-embed" in nothing.stdout
    for flags in (["--backfill"], ["--reembed"], ["--ray"]):
        refused = cli.invoke(app, ["embed", "--long-texts", *flags])
        assert refused.exit_code == 2
        assert "--long-texts runs alone" in refused.output
        assert "Traceback" not in refused.output
