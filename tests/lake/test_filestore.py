"""The file store's batch path: folders made ahead by workers, new files written in place."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from lake import filestore
from lake.errors import RefError, RefNotFound
from lake.filestore import FileStore, PackWriter, PendingFile, blank_staged, packs_of

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


def _packed(store: FileStore, folder: str, blobs: list[bytes]) -> list[PendingFile]:
    writer = PackWriter(folder)
    pending = [writer.add(data) for data in blobs]
    writer.close()
    return pending


def test_small_files_share_one_pack_and_read_back_by_range(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    with store.staging() as folder:
        assert folder is not None
        pending = _packed(store, folder, [b"first", b"", b"third file"])
        assert len({p.staged for p in pending}) == 1
        store.put_new(pending)
    assert [store.get(p.key) for p in pending] == [b"first", b"", b"third file"]
    [pack] = (tmp_path / "objects" / "@packs").iterdir()
    assert pack.read_bytes() == b"firstthird file"
    assert packs_of([p.key for p in pending] + [KEY]) == {pack.name}


def test_a_full_pack_is_closed_and_a_new_one_begun(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(filestore, "PACK_BYTES", 8)
    store = FileStore(tmp_path)
    with store.staging() as folder:
        assert folder is not None
        pending = _packed(store, folder, [b"12345", b"678", b"9abcdef", b"0"])
        store.put_new(pending)
    assert len({p.staged for p in pending}) == 2  # 5+3 fill the first, 7+1 the second
    assert [store.get(p.key) for p in pending] == [b"12345", b"678", b"9abcdef", b"0"]


def test_erasing_a_packed_file_zeroes_its_range_and_keeps_the_rest(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    with store.staging() as folder:
        assert folder is not None
        secret, kept = _packed(store, folder, [b"secret", b"kept"])
        store.put_new([secret, kept])
    assert store.erase([secret.key]) == 1
    [pack] = (tmp_path / "objects" / "@packs").iterdir()
    assert pack.read_bytes() == bytes(6) + b"kept"
    assert store.get(kept.key) == b"kept"
    assert store.erase([secret.key]) == 1  # a resumed erasure blanks it again, harmlessly
    # A pack no catalog row points into any more is removed whole.
    assert store.erase([kept.key], unreferenced_packs=packs_of([kept.key])) == 1
    assert not list((tmp_path / "objects" / "@packs").iterdir())
    assert store.erase([kept.key]) == 0
    with pytest.raises(RefNotFound):
        store.get(kept.key)


def test_a_rolled_back_batch_discards_its_packs_and_loose_files(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    with store.staging() as folder:
        assert folder is not None
        pending = [*_packed(store, folder, [b"a", b"b"]), PendingFile(KEY, b"loose")]
        store.put_new(pending)
    assert store.discard(p.key for p in pending) == 2
    assert [p for p in (tmp_path / "objects").rglob("*") if p.is_file()] == []


def test_staged_ranges_of_dropped_files_are_blanked(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    with store.staging() as folder:
        assert folder is not None
        dropped, kept = _packed(store, folder, [b"dropped", b"kept"])
        blank_staged([dropped])
        store.put_new([kept])
    [pack] = (tmp_path / "objects" / "@packs").iterdir()
    assert pack.read_bytes() == bytes(7) + b"kept"


@pytest.mark.parametrize("key", ["@packs/abc.pack#0+1", "@packs/" + "0" * 32 + ".pack#0",
                                 "@packs/" + "0" * 32 + ".pack#-1+2",
                                 "@packs/../" + "0" * 32 + ".pack#0+1"])
def test_a_malformed_packed_key_is_refused(tmp_path: Path, key: str) -> None:
    with pytest.raises(RefError, match="malformed storage key"):
        FileStore(tmp_path).get(key)


def test_a_symlinked_pack_is_refused_and_a_short_one_not_found(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    packs = tmp_path / "objects" / "@packs"
    packs.mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.write_bytes(b"not the lake's")
    name = "0" * 32 + ".pack"
    (packs / name).symlink_to(outside)
    with pytest.raises(RefError, match="symlink"):
        store.get(f"@packs/{name}#0+3")
    (packs / name).unlink()
    (packs / name).write_bytes(b"ab")
    with pytest.raises(RefNotFound, match="shorter"):
        store.get(f"@packs/{name}#1+5")


def test_a_symlinked_packs_folder_is_refused_when_a_pack_is_stored(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "lake")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "lake" / "objects").mkdir(parents=True)
    (tmp_path / "lake" / "objects" / "@packs").symlink_to(elsewhere)
    with store.staging() as folder:
        assert folder is not None
        pending = _packed(store, folder, [b"bytes"])
        with pytest.raises(RefError, match="symlink"):
            store.put_new(pending)
    assert list(elsewhere.iterdir()) == []
