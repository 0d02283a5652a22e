"""FileStore.sync flushes the files a batch wrote, not the whole machine."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lake import filestore
from lake.filestore import FileStore, PendingFile


def test_sync_flushes_only_the_files_written_and_their_folders(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = FileStore(tmp_path / "lake")
    keys = [store.key_for("acme", "c-1", f"t-{i}", f"files/{i}.txt") for i in range(3)]
    store.put_new([PendingFile(key, f"bytes {i}".encode()) for i, key in enumerate(keys)])
    flushed: list[str] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        flushed.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    def machine_wide() -> None:
        raise AssertionError("os.sync() flushes every process's writes")

    monkeypatch.setattr(filestore.os, "fsync", recording_fsync)
    monkeypatch.setattr(filestore.os, "sync", machine_wide)
    store.sync()
    files = {str(store.root / key) for key in keys}
    assert files <= set(flushed)
    assert {os.path.dirname(f) for f in files} <= set(flushed)
    assert set(flushed) <= files | {os.path.dirname(f) for f in files}
    flushed.clear()
    store.sync()  # nothing written since: nothing to flush
    assert flushed == []
    assert [store.get(key) for key in keys] == [b"bytes 0", b"bytes 1", b"bytes 2"]
