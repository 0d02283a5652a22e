"""Hostile refs and hosted files: traversal in every spelling, symlinks planted in the file
store, refs naming another user's or tenant's turn, and oversize files."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

import pytest

from lake.errors import AccessDenied, RefError, RefNotFound
from lake.filestore import FileStore
from lake.search.access import Principal
from lake.search.materialize import TurnMaterializer
from lake.settings import Settings
from lake.store import LakeStore
from lake.tables import Table
from pipeline.ingest import Ingestor
from tests.reliability.lake_audit import file_bytes, turn_record, write_records

ANA = Principal("acme", "u-ana")
BEN = Principal("acme", "u-ben")
GLOBEX = Principal("globex", "u-ana")
ANA_REF = "conv:fi:conv_c-1.turn_t-0001.files/mk1.csv"
BEN_REF = "conv:fi:conv_c-2.turn_t-0002.files/mk2.csv"
SECRET = b"root:x:0:0:secret\n"
TRAVERSALS = [
    "conv:fi:conv_c-1.turn_t-0001.files/../mk1.csv",
    "conv:fi:conv_c-1.turn_t-0001.files/../../../../etc/passwd",
    "conv:fi:conv_c-1.turn_t-0001./etc/passwd",
    "conv:fi:conv_c-1.turn_t-0001.files//etc/passwd",
    "conv:fi:conv_c-1.turn_t-0001.files/%2e%2e/%2e%2e/secret",
    "conv:fi:conv_c-1.turn_t-0001.files/..%2f..%2fsecret",
    "conv:fi:conv_c-1.turn_t-0001.files/%252e%252e/x",
    "conv:fi:conv_c-1.turn_t-0001.files/..\\..\\secret",
    "conv:fi:conv_c-1.turn_t-0001.files/C:/Windows/win.ini",
    "conv:fi:conv_c-1.turn_t-0001.files/a\x00.csv",
    "conv:fi:conv_c-1.turn_t-0001.files/\u202egpj.exe",
    "conv:fi:conv_../c-2.turn_t-0002.files/mk2.csv",
    "conv:fi:conv_c-1.turn_t-0001/../../c-2/t-0002.files/mk2.csv",
    "conv:fi:conv_c-1.turn_t-0001.files/" + "a" * 2000,
    "conv:xx:conv_c-1.turn_t-0001.files/mk1.csv",
    "file:///etc/passwd",
    "",
]


@pytest.fixture
def lake(tmp_path: Path) -> Path:
    """Two users of acme and a globex user whose conversation and turn ids collide with
    acme's, each turn with a hosted file."""
    records = [turn_record(1, conversation="c-1", rich=True),
               turn_record(2, conversation="c-2", user="u-ben", rich=True),
               turn_record(1, conversation="c-1", tenant="globex", rich=True, marker="mk1")]
    records[2]["hosted_files"][0]["content_b64"] = base64.b64encode(b"globex bytes").decode()
    path = write_records(tmp_path / "in.jsonl", records)
    assert Ingestor(Settings(lake=tmp_path / "lake")).ingest_paths([path]).accepted == 3
    (tmp_path / "secret.txt").write_bytes(SECRET)
    return tmp_path / "lake"


@pytest.mark.parametrize("ref", TRAVERSALS, ids=range(len(TRAVERSALS)))
def test_traversal_refs_are_refused(lake: Path, ref: str) -> None:
    materializer = TurnMaterializer(LakeStore(lake))
    for who in (ANA, Principal("acme", analyst=True)):
        with pytest.raises(RefError):  # RefError or RefNotFound, never bytes
            materializer.resolve(who, ref)


def test_refs_of_another_user_or_tenant(lake: Path) -> None:
    materializer = TurnMaterializer(LakeStore(lake))
    assert materializer.resolve(ANA, ANA_REF)[1] == file_bytes("mk1")
    with pytest.raises(AccessDenied):
        materializer.resolve(ANA, BEN_REF)
    assert materializer.resolve(Principal("acme", analyst=True), BEN_REF)[1] == file_bytes("mk2")
    # The same ids in another tenant name that tenant's own bytes, never acme's...
    assert materializer.resolve(GLOBEX, ANA_REF)[1] == b"globex bytes"
    # ...and a ref that exists only in acme is unknown to globex (no hint it exists).
    with pytest.raises(RefNotFound):
        materializer.resolve(Principal("globex", analyst=True), BEN_REF)


def _plant_symlink(lake: Path, key: str, target: Path) -> Path:
    path = lake / "objects" / key
    path.unlink()
    path.symlink_to(target)
    return path


def test_a_symlinked_object_is_never_followed(lake: Path, tmp_path: Path) -> None:
    outside = tmp_path / "secret.txt"
    _plant_symlink(lake, "acme/c-1/t-0001/files/mk1.csv", outside)
    store = FileStore(lake)
    with pytest.raises(RefNotFound):
        store.get("acme/c-1/t-0001/files/mk1.csv")
    with pytest.raises(RefNotFound):
        TurnMaterializer(LakeStore(lake)).resolve(ANA, ANA_REF)
    # Writing over the link replaces the link; the file it pointed at is untouched.
    store.put("acme/c-1/t-0001/files/mk1.csv", b"new")
    assert outside.read_bytes() == SECRET
    assert store.get("acme/c-1/t-0001/files/mk1.csv") == b"new"


def test_a_symlinked_folder_is_refused_for_reads_writes_and_deletes(lake: Path,
                                                                     tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "files").mkdir(parents=True)
    (elsewhere / "files" / "mk2.csv").write_bytes(SECRET)
    turn_dir = lake / "objects" / "acme" / "c-2" / "t-0002"
    for child in sorted(turn_dir.rglob("*"), reverse=True):
        child.unlink() if child.is_file() else child.rmdir()
    turn_dir.rmdir()
    turn_dir.symlink_to(elsewhere, target_is_directory=True)
    store = FileStore(lake)
    key = "acme/c-2/t-0002/files/mk2.csv"
    with pytest.raises(RefError, match="symlink"):
        store.get(key)
    with pytest.raises(RefError, match="symlink"):
        store.put(key, b"overwrite")
    with pytest.raises(RefError, match="symlink"):
        store.delete(key)
    with pytest.raises(RefError, match="symlink"):
        TurnMaterializer(LakeStore(lake)).resolve(Principal("acme", analyst=True), BEN_REF)
    store.delete_prefix("acme", "c-2")  # removes the link itself, not what it points at
    assert (elsewhere / "files" / "mk2.csv").read_bytes() == SECRET
    assert not turn_dir.exists()


def _hosted(path: str, **source: Any) -> dict[str, Any]:
    record = turn_record(9, conversation="c-9")
    record["hosted_files"] = [{"path": path, "mime": "text/plain", **source}]
    return record


@pytest.mark.parametrize("path", [
    "files/../outside.txt", "files/a/../../outside.txt", "/etc/passwd", "files//x",
    "files/%2e%2e/%2e%2e/outside.txt", "files/..%2foutside.txt", "files/a\\..\\..\\x",
    "files/\x00.txt", "files/" + "é" * 200, "outside.txt", "files/"])
def test_hosted_paths_that_escape_are_quarantined(tmp_path: Path, path: str) -> None:
    settings = Settings(lake=tmp_path / "lake")
    good = turn_record(1, conversation="c-good")
    lines = [json.dumps(good), json.dumps(_hosted(path, content_b64="eA==")),
             json.dumps(turn_record(2, conversation="c-good"))]
    source = tmp_path / "in.jsonl"
    source.write_text("\n".join(lines) + "\n")
    report = Ingestor(settings).ingest_paths([source])
    assert report.accepted == 2 and [q.line for q in report.quarantined] == [2]
    assert "path" in report.quarantined[0].reason
    stored = [p for p in tmp_path.rglob("*") if p.is_file() and p.read_bytes() == b"x"]
    assert stored == [], "no byte of a refused file was written anywhere"


def test_oversize_hosted_files_are_quarantined(tmp_path: Path) -> None:
    limit = 1000
    settings = Settings(lake=tmp_path / "lake", max_hosted_file_bytes=limit)
    (tmp_path / "big.bin").write_bytes(b"x" * (limit + 1))
    (tmp_path / "fits.bin").write_bytes(b"x" * limit)
    lines = [
        _hosted("files/a.bin", content_b64=base64.b64encode(b"y" * (limit + 1)).decode()),
        _hosted("files/b.bin", source_path="big.bin"),
        _hosted("files/c.bin", source_path="fits.bin"),
    ]
    for n, record in enumerate(lines):
        record["turn_id"] = f"t-9{n}"
    report = Ingestor(settings).ingest_paths([write_records(tmp_path / "in.jsonl", lines)])
    assert report.accepted == 1
    assert [q.line for q in report.quarantined] == [1, 2]
    assert all(f"{limit}-byte limit" in q.reason for q in report.quarantined)
    sizes = LakeStore(settings.lake).read(Table.FILES, columns=["size"])["size"].to_pylist()
    assert sizes == [limit]


@pytest.mark.parametrize("escape", ["absolute", "parent"])
def test_source_paths_outside_the_record_folder_are_refused(tmp_path: Path,
                                                            escape: str) -> None:
    drop = tmp_path / "drop"
    secret = tmp_path / "secret.txt"
    secret.write_bytes(SECRET)
    source = str(secret) if escape == "absolute" else os.path.join("..", "secret.txt")
    path = write_records(drop / "in.jsonl", [_hosted("files/s.txt", source_path=source)])
    report = Ingestor(Settings(lake=tmp_path / "lake")).ingest_paths([path])
    assert report.accepted == 0 and len(report.quarantined) == 1
