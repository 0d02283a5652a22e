"""The file store's batch path: folders made ahead by workers, new files written in place."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from lake.errors import RefError
from lake.filestore import FileStore, PendingFile

KEY = "acme/c-1/t-0001/files/sub/a.csv"


def test_put_new_stores_bytes_and_makes_missing_folders(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    store.put_new([PendingFile(KEY, b"a,b\n"), PendingFile("acme/c-1/t-0002/files/b.txt", b"")])
    assert store.get(KEY) == b"a,b\n"
    assert store.get("acme/c-1/t-0002/files/b.txt") == b""
    assert not [p for p in (tmp_path / "objects").rglob("*") if p.name.endswith(".tmp")]


def test_a_folder_deleted_between_two_calls_is_made_again(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    store.make_folders([KEY])
    store.put_new([PendingFile(KEY, b"first")])
    shutil.rmtree(tmp_path / "objects" / "acme" / "c-1")  # an erasure between two batches
    store.put_new([PendingFile(KEY, b"second")])
    assert store.get(KEY) == b"second"
    shutil.rmtree(tmp_path / "objects")
    store.put(KEY, b"third")
    assert store.get(KEY) == b"third"


def test_make_folders_creates_the_folders_and_no_file(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    store.make_folders([KEY, "acme/c-2/t-0009/files/x.csv"])
    assert (tmp_path / "objects" / "acme" / "c-1" / "t-0001" / "files" / "sub").is_dir()
    assert (tmp_path / "objects" / "acme" / "c-2" / "t-0009" / "files").is_dir()
    assert not [p for p in (tmp_path / "objects").rglob("*") if p.is_file()]
    store.make_folders([KEY])  # existing folders are fine


def test_an_existing_file_is_replaced_whole(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    store.put(KEY, b"left by a rolled-back batch, longer than the new bytes")
    store.put_new([PendingFile(KEY, b"new")])
    assert store.get(KEY) == b"new"


@pytest.mark.parametrize("staged", [False, True])
def test_a_symlinked_file_is_replaced_not_followed(tmp_path: Path, staged: bool) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"secret")
    store = FileStore(tmp_path / "lake")
    store.make_folders([KEY])
    (tmp_path / "lake" / "objects" / KEY).symlink_to(outside)
    with store.staging() as folder:
        assert folder is not None
        store.put_new([PendingFile(KEY, staged=store.stage(b"new", folder)) if staged
                       else PendingFile(KEY, b"new")])
    assert outside.read_bytes() == b"secret"
    assert store.get(KEY) == b"new"


@pytest.mark.parametrize("level", ["acme/c-1", "acme/c-1/t-0001", "acme/c-1/t-0001/files"])
def test_a_symlinked_folder_is_refused_by_every_write_path(tmp_path: Path, level: str) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    store = FileStore(tmp_path / "lake")
    link = tmp_path / "lake" / "objects" / level
    link.parent.mkdir(parents=True)
    link.symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(RefError, match="symlink"):
        store.make_folders([KEY])
    with pytest.raises(RefError, match="symlink"):
        store.put_new([PendingFile(KEY, b"x")])
    with pytest.raises(RefError, match="symlink"):
        store.put(KEY, b"x")
    assert not [p for p in elsewhere.rglob("*") if p.is_file()]


def test_put_new_refuses_a_malformed_key(tmp_path: Path) -> None:
    with pytest.raises(RefError):
        FileStore(tmp_path).put_new([PendingFile("acme/c-1/../t-0001/files/a.csv", b"x")])


def test_staged_bytes_are_moved_into_place_and_the_rest_removed(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    with store.staging() as folder:
        assert folder is not None
        used = store.stage(b"kept", folder)
        unused = store.stage(b"a duplicate's bytes", folder)
        store.make_folders([KEY])
        store.put_new([PendingFile(KEY, staged=used)])
        assert store.get(KEY) == b"kept"
        assert not Path(used).exists() and Path(unused).exists()
    assert not (tmp_path / "_staging").exists()


def test_clear_staging_removes_what_crashed_runs_left(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    left = tmp_path / "_staging" / "run-1"
    left.mkdir(parents=True)
    (left / "1-0").write_bytes(b"x")
    store.clear_staging()
    assert not (tmp_path / "_staging").exists()
    store.clear_staging()  # nothing to clear is fine
