"""Where a FileStore's objects live: a local folder, or the lake's object store (Blobs).

:class:`lake.filestore.FileStore` decides *what* is stored (storage keys, packs, erasure by
range); an ``Objects`` backend decides *how* an object key is written, read and removed. Keys
here are relative to the store's ``objects`` folder/prefix: a loose file's
``<tenant>/<conversation>/<turn>/files/...`` (checked by the FileStore) or a pack's
``@packs/<name>.pack``.

The local backend never follows a symlink inside the store, writes a batch's new files in
place (they are invisible until their batch commits), moves staged files and packs into place
with one rename, reads a packed range with one ``pread``, and fsyncs exactly the files it
wrote. The object-store backend PUTs whole objects (a PUT is durable once acknowledged) and
reads packed ranges out of the whole pack.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from lake.errors import LakeError, RefError
from lake.location import Blobs, atomic_write, remove_file

# Hosted bytes that ingest workers wrote ahead of their batch, under the lake root.
STAGING = "_staging"
# O_EXCL: a new file only (an existing one, or a symlink, takes the atomic path instead).
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC


@dataclass(frozen=True)
class StoredObject:
    """Bytes to store under an object key as part of a batch: ``data``, or the staged file
    holding them."""

    key: str
    data: bytes = b""
    staged: str | None = None
    what: str = ""  # the storage key it stores, for messages


class Objects(Protocol):
    """What a FileStore needs of the place its objects live."""

    def put(self, key: str, data: bytes, *, durable: bool) -> None:
        """Write an object atomically (replacing any)."""

    def put_new(self, objects: Sequence[StoredObject]) -> None:
        """Store a batch's objects (not yet pointed at by anything); see :meth:`sync`."""

    def sync(self) -> None:
        """Make what :meth:`put_new` stored durable."""

    def get(self, key: str) -> bytes:
        """An object's bytes; FileNotFoundError when there is none."""

    def get_range(self, key: str, offset: int, length: int | None) -> bytes:
        """``length`` bytes of an object from ``offset`` (fewer at its end; None: to the
        end); FileNotFoundError when there is none."""

    def delete(self, key: str) -> bool:
        """Remove an object; True when there was one."""

    def delete_prefix(self, prefix: str) -> int:
        """Remove every object under a folder/prefix; returns how many."""

    def remove_empty_folders(self, prefixes: Iterable[str]) -> None:
        """Remove these folders where they are empty (an object store has none)."""

    def staging(self) -> AbstractContextManager[str | None]:
        """A folder for workers to write bytes into ahead of their batch (None: unused)."""

    def clear_staging(self) -> None:
        """Remove what crashed ingests staged."""

    def make_folders(self, keys: Iterable[str]) -> None:
        """Create (or check) the folders of object keys ahead of their batch."""


class LocalObjects:
    """Objects as files under a local folder (see the module notes)."""

    def __init__(self, lake: Path, root: Path) -> None:
        self._lake = lake
        self.root = root
        self._root = str(root)  # the batch paths build one path per file from text
        self._unsynced: set[str] = set()  # files put_new wrote, for sync to flush

    def put(self, key: str, data: bytes, *, durable: bool) -> None:
        """Write through a temp file and a rename."""
        _replace(key, self._target(key, set()), data, durable=durable)

    def put_new(self, objects: Sequence[StoredObject]) -> None:
        """A key that does not exist yet is written in place rather than through a temp file
        and a rename (nobody reads it before its batch commits); an existing one (left by a
        rolled-back batch, or a symlink) is replaced atomically. A staged file is moved into
        place with one rename, which replaces atomically too."""
        folders: set[str] = set()  # folders checked during this call: each costs syscalls
        for item in objects:
            target = self._target(item.key, folders)
            try:
                if item.staged is not None:
                    _move_staged(item.staged, target)
                else:
                    write_new(target, item.data)
            except FileExistsError:
                _replace(item.what or item.key, target, item.data, durable=False)
            except OSError as exc:
                raise LakeError(f"could not store {_named(item)}: {exc}") from exc
            self._unsynced.add(target)

    def sync(self) -> None:
        """Flush the files :meth:`put_new` wrote, and their folders' entries, to disk (only
        those: ``os.sync()`` flushed the whole machine's dirty pages and waited for every
        other process's writes too)."""
        written, self._unsynced = self._unsynced, set()
        try:
            for path in sorted(written):
                _fsync(path, os.O_RDONLY)
            for folder in sorted({os.path.dirname(path) for path in written}):
                _fsync(folder, os.O_RDONLY | os.O_DIRECTORY)
        except OSError as exc:
            raise LakeError(f"could not flush hosted files to disk: {exc}") from exc

    def get(self, key: str) -> bytes:
        """The file's bytes (a symlink, or a symlinked folder on the way, is refused)."""
        path = self._path(key)
        if path.is_symlink() or not path.is_file():
            raise FileNotFoundError(key)
        return path.read_bytes()

    def get_range(self, key: str, offset: int, length: int | None) -> bytes:
        """One ``pread`` of the range; a symlinked object is refused (RefError)."""
        path = self._path(key)
        with suppress(FileNotFoundError):
            if stat.S_ISLNK(os.lstat(path).st_mode):
                raise RefError(f"storage key {key!r} passes through a symlink")
        with open(path, "rb") as fh:
            if length is None:
                fh.seek(offset)
                return fh.read()
            return os.pread(fh.fileno(), length, offset)

    def delete(self, key: str) -> bool:
        """Unlink the file (a symlink itself, never its target)."""
        return remove_file(self._path(key))

    def delete_prefix(self, prefix: str) -> int:
        """Remove the folder and everything in it."""
        folder = self.root / prefix
        if not folder.exists():
            return 0
        count = sum(1 for p in folder.rglob("*") if p.is_file() or p.is_symlink())
        shutil.rmtree(folder)
        return count

    def remove_empty_folders(self, prefixes: Iterable[str]) -> None:
        """rmdir each, stopping at the first that is not empty."""
        for prefix in prefixes:
            try:
                (self.root / prefix).rmdir()
            except OSError:
                return

    @contextmanager
    def staging(self) -> Iterator[str | None]:
        """A new folder under ``<lake>/_staging``, removed on exit with whatever no batch
        moved out of it.

        Creating a file is the costly part of storing one (far more than renaming it), and the
        workers do it in parallel while the serial commit only moves files into place. The
        bytes sit outside ``objects`` until their batch's manifest names their keys, so a
        crash leaves them where :meth:`clear_staging` finds them."""
        base = self._lake / STAGING
        folder = base / uuid.uuid4().hex
        folder.mkdir(parents=True)
        try:
            yield str(folder)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
            with suppress(OSError):
                base.rmdir()  # only when no other run's folder is left in it

    def clear_staging(self) -> None:
        """Remove the staging folder (under the writer lock: no ingest is staging then)."""
        shutil.rmtree(self._lake / STAGING, ignore_errors=True)

    def make_folders(self, keys: Iterable[str]) -> None:
        """Create each key's folders; a symlinked folder on the way is refused (RefError)."""
        folders: set[str] = set()
        for key in keys:
            self._target(key, folders, make=_make_folder)

    def _target(self, key: str, folders: set[str], *,
                make: Callable[[str, str], None] | None = None) -> str:
        """The file path of a key, each folder on the way checked (a symlink is refused) or
        created by ``make``; ``folders`` holds those already done (the caller's cache, so that
        one a later call finds deleted is made again)."""
        root = self._root
        if root not in folders:
            os.makedirs(root, exist_ok=True)
            folders.add(root)
        folder, _, name = key.rpartition("/")
        path = root
        for part in folder.split("/"):
            path = f"{path}/{part}"
            if path not in folders:
                (make or _check_folder)(path, key)
                folders.add(path)
        return f"{path}/{name}"

    def _path(self, key: str) -> Path:
        """A key's path, refusing any symlinked folder on the way: bytes must come from
        inside the store."""
        path = self.root / key
        probe = self.root
        for part in path.relative_to(self.root).parts[:-1]:
            probe = probe / part
            with suppress(FileNotFoundError):
                if stat.S_ISLNK(os.lstat(probe).st_mode):
                    raise RefError(f"storage key {key!r} passes through a symlink")
        return path


class BlobObjects:
    """Objects in the lake's object store, under ``<prefix>/`` of its Blobs."""

    def __init__(self, blobs: Blobs, prefix: str) -> None:
        self._blobs = blobs
        self._prefix = prefix

    def _key(self, key: str) -> str:
        return f"{self._prefix}/{key}"

    def put(self, key: str, data: bytes, *, durable: bool) -> None:
        """One PUT (durable once acknowledged)."""
        self._blobs.write_bytes(self._key(key), data)

    def put_new(self, objects: Sequence[StoredObject]) -> None:
        """One PUT per object."""
        for item in objects:
            self._blobs.write_bytes(self._key(item.key), _bytes_of(item))

    def sync(self) -> None:
        """Nothing to do: acknowledged PUTs are durable."""

    def get(self, key: str) -> bytes:
        """One GET."""
        return self._blobs.read_bytes(self._key(key))

    def get_range(self, key: str, offset: int, length: int | None) -> bytes:
        """The range, out of the whole object."""
        data = self._blobs.read_bytes(self._key(key))
        return data[offset:] if length is None else data[offset:offset + length]

    def delete(self, key: str) -> bool:
        """One DELETE."""
        return self._blobs.delete(self._key(key))

    def delete_prefix(self, prefix: str) -> int:
        """Every object under the prefix."""
        return self._blobs.delete_prefix(self._key(prefix))

    def remove_empty_folders(self, prefixes: Iterable[str]) -> None:
        """Nothing to do: an object store has no folders."""

    @contextmanager
    def staging(self) -> Iterator[str | None]:
        """No staging: workers hand their bytes to the batch."""
        yield None

    def clear_staging(self) -> None:
        """Nothing staged, nothing to clear."""

    def make_folders(self, keys: Iterable[str]) -> None:
        """Nothing to do: an object store has no folders."""


def _named(item: StoredObject) -> str:
    return f"hosted file {item.what or item.key}"


def _replace(key: str, target: str, data: bytes, *, durable: bool) -> None:
    """Write ``target`` through a temp file and a rename (an existing file or symlink is
    replaced, never written through)."""
    try:
        atomic_write(Path(target), data, durable=durable)
    except OSError as exc:
        raise LakeError(f"could not store hosted file {key}: {exc}") from exc


def _make_folder(path: str, key: str) -> None:
    """Create one folder of a storage key's path, or check the one that exists (mkdir first:
    the folders of a new turn usually do not exist yet)."""
    try:
        os.mkdir(path)
    except FileExistsError:
        _check_folder(path, key)
    except OSError as exc:
        raise LakeError(f"could not store hosted file {key}: {exc}") from exc


def _check_folder(path: str, key: str) -> None:
    """Check one folder of a storage key's path, creating it when missing: bytes must stay
    inside the store, so a symlinked folder is refused (lstat first: ingest workers have
    usually made the folders already)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        _make_folder(path, key)
        return
    if stat.S_ISLNK(mode):
        raise RefError(f"storage key {key!r} passes through a symlink")
    if not stat.S_ISDIR(mode):
        raise LakeError(f"could not store hosted file {key}: {path} is not a folder")


def _bytes_of(item: StoredObject) -> bytes:
    if item.staged is None:
        return item.data
    with open(item.staged, "rb") as fh:
        return fh.read()


def _fsync(path: str, flags: int) -> None:
    fd = os.open(path, flags | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _move_staged(staged: str, target: str) -> None:
    """Move a staged file to ``target``, replacing whatever is there (a symlink included:
    rename replaces the link itself)."""
    try:
        os.replace(staged, target)
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        # The staging folder is on another file system than the store: copy instead.
        with open(staged, "rb") as fh:
            atomic_write(Path(target), fh.read(), durable=False)
        os.unlink(staged)


def write_new(target: str, data: bytes) -> None:
    """Create ``target`` (FileExistsError when it exists) and write ``data`` into it."""
    fd = os.open(target, _NEW_FILE, 0o666)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    except OSError:
        os.close(fd)
        os.unlink(target)  # a torn file must not look stored
        raise
    os.close(fd)
