"""Hosted file bytes, stored under ``<lake>/objects/``: loose or packed.

A loose file is one object per (turn, path), ``objects/<tenant>/<conversation>/<turn>/files/...``.
A bulk ingest packs the small files of each chunk of input into one pack object,
``objects/@packs/<name>.pack``, and a packed file's storage key names its pack and byte range
(``@packs/<name>.pack#<offset>+<length>``): creating a file is what storing a small one costs
(a new inode, and folders for a new turn), so one pack per chunk replaces thousands of them.
Erasing a packed file overwrites its range with zeros, and a pack nothing points at any more
is removed whole, so erasure still removes exactly the erased bytes.

Paths are validated by the refs module; symlinks inside a local store are never followed. In an
object-store lake the same keys name objects under the lake prefix.
"""

from __future__ import annotations

import errno
import hashlib
import itertools
import os
import re
import shutil
import stat
import uuid
from collections.abc import Callable, Collection, Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from lake.errors import LakeError, RefError, RefNotFound
from lake.location import LakeLocation, atomic_write
from lake.refs import normalize_relative_path, validate_id

_PREFIX = "objects"
_PACKS = "@packs"  # "@" is not allowed in ids, so no tenant folder can have this name
PACKED_PREFIX = f"{_PACKS}/"  # how every packed storage key starts
_PACK_KEY = re.compile(r"@packs/([0-9a-f]{32}\.pack)#([0-9]+)\+([0-9]+)")
# Files up to this size are packed by bulk ingests; a pack is closed once it holds this much.
PACKED_FILE_BYTES = 1 << 20
PACK_BYTES = 64 << 20
# Hosted bytes that ingest workers wrote ahead of their batch, under the lake root.
_STAGING = "_staging"
# O_EXCL: a new file only (an existing one, or a symlink, takes the atomic path instead).
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
_staged_names = itertools.count()  # unique within a process; the pid makes them unique
_own_staging: set[str] = set()  # this process's subfolders of staging folders, made already


@dataclass(frozen=True)
class PendingFile:
    """Hosted file bytes to store under a storage key (as part of a batch): ``data``, or the
    file ``staged`` holding them (see :meth:`FileStore.staging`); for a packed key, ``staged``
    is the staged pack, which holds the bytes of other pending files too."""

    key: str
    data: bytes = b""
    staged: str | None = None


class FileStore:
    """Content of hosted files, addressed by storage keys relative to ``<lake>/objects``."""

    def __init__(self, root: Path | str | LakeLocation) -> None:
        self.location = LakeLocation.of(root)
        self._remote = self.location.remote
        # The objects folder as text, for the batch paths that build one path per file.
        self._root = "" if self._remote else str(self.root)
        self._unsynced: set[str] = set()  # local files put_new wrote, for sync to flush

    @property
    def root(self) -> Path:
        """The folder of a local lake's hosted files."""
        return self.location.local / _PREFIX

    def key_for(self, tenant: str, conversation_id: str, turn_id: str, path: str) -> str:
        """The storage key of a hosted file (``path`` is ``files/<relative path>``)."""
        validate_id(tenant, "tenant")
        validate_id(conversation_id, "conversation_id")
        validate_id(turn_id, "turn_id")
        relative = normalize_relative_path(path)
        return f"{tenant}/{conversation_id}/{turn_id}/{relative}"

    def put(self, key: str, data: bytes, *, durable: bool = True) -> str:
        """Write bytes atomically (temp file, rename); returns their sha256.

        With ``durable`` the file is fsync'd; batch writers use :meth:`put_new` and call
        :meth:`sync` once after many files, which is far cheaper than one fsync per file.
        """
        if self._remote:
            self.location.blobs.write_bytes(self._object_key(key), data)
            return hashlib.sha256(data).hexdigest()
        self._replace(key, self._local_target(key, set()), data, durable=durable)
        return hashlib.sha256(data).hexdigest()

    def put_new(self, files: Iterable[PendingFile]) -> None:
        """Store the bytes of turns that are not visible yet (a batch before its commit point);
        not fsync'd: call :meth:`sync` before anything points at them.

        Nobody reads a key before its turn is committed, so a key that does not exist yet is
        written in place rather than through a temp file and a rename; an existing one (left
        by a rolled-back batch, or a symlink) is replaced atomically as :meth:`put` does. A
        staged file is moved into place (one rename), which replaces atomically too.
        """
        if self._remote:
            uploaded: set[str] = set()
            for file in files:
                packed = _packed(file.key)
                if packed is None:
                    self.location.blobs.write_bytes(self._object_key(file.key), _bytes_of(file))
                elif packed.pack not in uploaded:
                    uploaded.add(packed.pack)
                    self.location.blobs.write_bytes(_pack_object(packed.pack),
                                                    _bytes_of(file))
            return
        folders: set[str] = set()  # folders checked during this call: each costs syscalls
        for file in files:
            packed = _packed(file.key)
            if packed is not None:
                self._move_pack(file, packed, folders)
                continue
            target = self._local_target(file.key, folders)
            try:
                if file.staged is not None:
                    _move_staged(file.staged, target)
                else:
                    _write_new(target, file.data)
            except FileExistsError:
                self._replace(file.key, target, file.data, durable=False)
            except OSError as exc:
                raise LakeError(f"could not store hosted file {file.key}: {exc}") from exc
            self._unsynced.add(target)

    def _move_pack(self, file: PendingFile, packed: _Packed, folders: set[str]) -> None:
        """Move a staged pack into place, once for all the pending files it holds."""
        if file.staged is None:
            raise LakeError(f"packed file {file.key} has no staged pack")
        folder = f"{self._root}/{_PACKS}"
        target = f"{folder}/{packed.pack}"
        if target in folders:
            return
        if folder not in folders:
            os.makedirs(self._root, exist_ok=True)
            _make_folder(folder, file.key)
            folders.add(folder)
        try:
            _move_staged(file.staged, target)
        except OSError as exc:
            raise LakeError(f"could not store pack {packed.pack}: {exc}") from exc
        folders.add(target)
        self._unsynced.add(target)

    @staticmethod
    def _replace(key: str, target: str, data: bytes, *, durable: bool) -> None:
        """Write ``target`` through a temp file and a rename (an existing file or symlink is
        replaced, never written through)."""
        try:
            atomic_write(Path(target), data, durable=durable)
        except OSError as exc:
            raise LakeError(f"could not store hosted file {key}: {exc}") from exc

    @contextmanager
    def staging(self) -> Iterator[str | None]:
        """A new folder in which ingest workers write hosted bytes ahead of their batch (None
        for an object-store lake); removed on exit with whatever no batch moved out of it.

        Creating a file is the costly part of storing one (far more than renaming it), and the
        workers do it in parallel while the serial commit only moves files into place. The
        bytes sit outside ``objects`` until their batch's manifest names their keys, so a
        crash leaves them where :meth:`clear_staging` finds them.
        """
        if self._remote:
            yield None
            return
        base = self.location.local / _STAGING
        folder = base / uuid.uuid4().hex
        folder.mkdir(parents=True)
        try:
            yield str(folder)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
            with suppress(OSError):
                base.rmdir()  # only when no other run's folder is left in it

    def clear_staging(self) -> None:
        """Remove the bytes crashed ingests staged; call under the writer lock, before any
        new write (no other ingest can be staging then)."""
        if not self._remote:
            shutil.rmtree(self.location.local / _STAGING, ignore_errors=True)

    @staticmethod
    def stage(data: bytes, folder: str) -> str:
        """Write bytes into a new file of a :meth:`staging` folder; returns its path.

        Each process writes into a subfolder of its own: processes creating files in one
        folder queue on that folder's lock (about half again the kernel time per file with
        two ingest workers).
        """
        try:
            path = FileStore.stage_path(folder, str(next(_staged_names)))
            _write_new(path, data)
        except OSError as exc:
            raise LakeError(f"could not stage hosted file bytes in {folder}: {exc}") from exc
        return path

    @staticmethod
    def stage_path(folder: str, name: str) -> str:
        """The path of a new staged file in this process's subfolder of a staging folder."""
        own = f"{folder}/{os.getpid()}"
        if own not in _own_staging:
            try:
                os.mkdir(own)
            except FileExistsError:
                pass
            except OSError as exc:
                raise LakeError(f"could not make this process's staging folder in {folder}: "
                                f"{exc}") from exc
            _own_staging.add(own)
        return f"{own}/{name}"

    def make_folders(self, keys: Iterable[str]) -> None:
        """Create the folders of keys whose bytes a batch will store (a no-op in an object
        store); a symlinked folder on the way is refused (RefError).

        Ingest workers call this while they prepare turns: creating folders is most of the
        cost of storing small files, and empty folders are harmless (nothing points at them),
        so it is done in parallel, ahead of the batch whose commit order governs the bytes.
        """
        if self._remote:
            return
        folders: set[str] = set()
        for key in keys:
            if _packed(key) is None:  # a pack needs no folder of its own
                self._local_target(key, folders, make=_make_folder)

    def _local_target(self, key: str, folders: set[str], *,
                      make: Callable[[str, str], None] | None = None) -> str:
        """The file path of a key, each folder on the way checked (a symlink is refused) or
        created by ``make``; ``folders`` holds those already done (the caller's cache, so that
        one a later call finds deleted is made again)."""
        (tenant, conversation, turn), relative = self._check(key)
        root = self._root
        if root not in folders:
            os.makedirs(root, exist_ok=True)
            folders.add(root)
        folder, _, name = f"{tenant}/{conversation}/{turn}/{relative}".rpartition("/")
        path = root
        for part in folder.split("/"):
            path = f"{path}/{part}"
            if path not in folders:
                (make or _check_folder)(path, key)
                folders.add(path)
        return f"{path}/{name}"

    def sync(self) -> None:
        """Flush the files :meth:`put_new` wrote, and their folders' entries, to disk (one
        call for a whole batch); object-store PUTs are durable once acknowledged.

        Only those files: ``os.sync()`` flushed the whole machine's dirty pages and waited
        for every other process's writes too.
        """
        written, self._unsynced = self._unsynced, set()
        try:
            for path in sorted(written):
                _fsync(path, os.O_RDONLY)
            for folder in sorted({os.path.dirname(path) for path in written}):
                _fsync(folder, os.O_RDONLY | os.O_DIRECTORY)
        except OSError as exc:
            raise LakeError(f"could not flush hosted files to disk: {exc}") from exc

    def get(self, key: str) -> bytes:
        """The bytes stored under a key."""
        packed = _packed(key)
        if packed is not None:
            return self._read_packed(key, packed)
        if self._remote:
            try:
                return self.location.blobs.read_bytes(self._object_key(key))
            except FileNotFoundError:
                raise RefNotFound(f"no stored bytes for {key}") from None
        path = self._path(key)
        if path.is_symlink() or not path.is_file():
            raise RefNotFound(f"no stored bytes for {key}")
        return path.read_bytes()

    def _read_packed(self, key: str, packed: _Packed) -> bytes:
        if self._remote:
            try:
                pack = self.location.blobs.read_bytes(_pack_object(packed.pack))
            except FileNotFoundError:
                raise RefNotFound(f"no stored bytes for {key}") from None
            data = pack[packed.offset:packed.offset + packed.length]
        else:
            path = self._pack_path(key, packed.pack)
            try:
                with open(path, "rb") as fh:
                    data = os.pread(fh.fileno(), packed.length, packed.offset)
            except FileNotFoundError:
                raise RefNotFound(f"no stored bytes for {key}") from None
        if len(data) != packed.length:
            raise RefNotFound(f"no stored bytes for {key}: its pack is shorter than its range")
        return data

    def _pack_path(self, key: str, pack: str) -> str:
        """The local path of a pack; a symlinked pack or packs folder is refused."""
        folder = f"{self._root}/{_PACKS}"
        path = f"{folder}/{pack}"
        for probe in (folder, path):
            with suppress(FileNotFoundError):
                if stat.S_ISLNK(os.lstat(probe).st_mode):
                    raise RefError(f"storage key {key!r} passes through a symlink")
        return path

    def erase(self, keys: Iterable[str], *, unreferenced_packs: Collection[str] = ()) -> int:
        """Remove the bytes of these keys; returns how many were removed.

        A loose file is deleted. A packed file's range is overwritten with zeros (each pack
        rewritten once, atomically), except in ``unreferenced_packs`` (packs no catalog row
        points at any more, see :func:`packs_of`), which are removed whole.
        """
        loose, ranges = _by_pack(keys)
        removed = sum(self.delete(key) for key in loose)
        for pack, parts in sorted(ranges.items()):
            if pack in unreferenced_packs:
                removed += len(parts) if self._remove_pack(pack) else 0
            else:
                removed += self._blank(pack, parts)
        return removed

    def discard(self, keys: Iterable[str]) -> int:
        """Remove the objects of a rolled-back batch: loose files, and the packs its packed
        keys name (whole: a pack holds one batch's bytes only). Returns objects removed."""
        loose, ranges = _by_pack(keys)
        removed = sum(self.delete(key) for key in loose)
        return removed + sum(self._remove_pack(pack) for pack in sorted(ranges))

    def _remove_pack(self, pack: str) -> bool:
        key = _pack_object(pack)
        if self._remote:
            return self.location.blobs.delete(key)
        path = self._pack_path(key, pack)
        try:
            os.unlink(path)
        except FileNotFoundError:
            return False
        return True

    def _blank(self, pack: str, parts: list[_Packed]) -> int:
        """Overwrite ranges of a pack with zeros (an atomic rewrite); returns ranges blanked."""
        key = _pack_object(pack)
        try:
            if self._remote:
                data = bytearray(self.location.blobs.read_bytes(key))
            else:
                with open(self._pack_path(key, pack), "rb") as fh:
                    data = bytearray(fh.read())
        except FileNotFoundError:
            return 0  # removed already (a resumed erasure)
        for part in parts:
            data[part.offset:part.offset + part.length] = bytes(part.length)
        if self._remote:
            self.location.blobs.write_bytes(key, bytes(data))
        else:
            atomic_write(Path(self._pack_path(key, pack)), bytes(data), durable=True)
        return len(parts)

    def delete(self, key: str) -> bool:
        """Remove one object (a packed file: blank its range); True when something was
        removed."""
        if _packed(key) is not None:
            return self.erase([key]) == 1
        if self._remote:
            return self.location.blobs.delete(self._object_key(key))
        path = self._path(key)
        if path.is_symlink() or path.is_file():
            path.unlink()
            return True
        return False

    def delete_prefix(self, *segments: str) -> int:
        """Remove every object under tenant[/conversation[/turn]]; returns files removed."""
        for s in segments:
            validate_id(s, "storage segment")
        if self._remote:
            return self.location.blobs.delete_prefix("/".join((_PREFIX, *segments)))
        folder = self.root.joinpath(*segments)
        if not folder.exists():
            return 0
        count = sum(1 for p in folder.rglob("*") if p.is_file() or p.is_symlink())
        shutil.rmtree(folder)
        return count

    @staticmethod
    def _check(key: str) -> tuple[list[str], str]:
        parts = key.split("/", 3)
        if len(parts) != 4:
            raise RefError(f"malformed storage key {key!r}")
        for segment, what in zip(parts[:3], ("tenant", "conversation_id", "turn_id"), strict=True):
            validate_id(segment, what)
        return parts[:3], normalize_relative_path(parts[3])

    def _object_key(self, key: str) -> str:
        (tenant, conversation, turn), relative = self._check(key)
        return f"{_PREFIX}/{tenant}/{conversation}/{turn}/{relative}"

    def _path(self, key: str) -> Path:
        (tenant, conversation, turn), relative = self._check(key)
        path = self.root / tenant / conversation / turn / relative
        # Refuse any symlinked folder on the way: bytes must come from inside the store.
        probe = self.root
        for part in path.relative_to(self.root).parts[:-1]:
            probe = probe / part
            if probe.is_symlink():
                raise RefError(f"storage key {key!r} passes through a symlink")
        return path


def pack_key(pack: str, offset: int, length: int) -> str:
    """The storage key of ``length`` bytes at ``offset`` in a pack."""
    return f"{_PACKS}/{pack}#{offset}+{length}"


def _pack_object(pack: str) -> str:
    """A pack's object key under the lake root."""
    return f"{_PREFIX}/{_PACKS}/{pack}"


def _by_pack(keys: Iterable[str]) -> tuple[list[str], dict[str, list[_Packed]]]:
    """Storage keys split into loose ones and, per pack, the ranges of packed ones."""
    loose: list[str] = []
    ranges: dict[str, list[_Packed]] = {}
    for key in keys:
        packed = _packed(key)
        if packed is None:
            loose.append(key)
        else:
            ranges.setdefault(packed.pack, []).append(packed)
    return loose, ranges


def packs_of(keys: Iterable[str]) -> set[str]:
    """The packs that packed storage keys point into (loose keys are skipped)."""
    return {packed.pack for key in keys if (packed := _packed(key)) is not None}


@dataclass(frozen=True)
class _Packed:
    pack: str
    offset: int
    length: int


def _packed(key: str) -> _Packed | None:
    """A packed key's pack and range; None for a loose key."""
    if not key.startswith(PACKED_PREFIX):
        return None
    match = _PACK_KEY.fullmatch(key)
    if match is None:
        raise RefError(f"malformed storage key {key!r}")
    return _Packed(match[1], int(match[2]), int(match[3]))


class PackWriter:
    """Packs the bytes of small files into new pack files in a staging folder, one pack per
    :data:`PACK_BYTES`; :meth:`close` writes the last one. Used by one process at a time."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self._parts: list[bytes] = []
        self._size = 0
        self._name = ""
        self._staged = ""

    def add(self, data: bytes) -> PendingFile:
        """Pack bytes; returns the pending file that stores them (its staged pack is written
        by :meth:`add` or :meth:`close` later)."""
        if not self._name or (self._parts and self._size + len(data) > PACK_BYTES):
            self._flush()
            self._name = f"{uuid.uuid4().hex}.pack"
            self._staged = FileStore.stage_path(self.folder, self._name)
        offset = self._size
        self._parts.append(data)
        self._size += len(data)
        return PendingFile(pack_key(self._name, offset, len(data)), staged=self._staged)

    def close(self) -> None:
        """Write the pack still open."""
        self._flush()
        self._name = ""

    def _flush(self) -> None:
        if not self._parts:
            return
        try:
            _write_new(self._staged, b"".join(self._parts))
        except OSError as exc:
            raise LakeError(f"could not stage a pack of hosted files in {self.folder}: "
                            f"{exc}") from exc
        self._parts, self._size = [], 0


def blank_staged(pending: Iterable[PendingFile]) -> None:
    """Zero the ranges of packed pending files in their staged packs: bytes a batch does not
    store (turns it dropped as duplicates) must not ride along in a pack it does store."""
    by_pack: dict[str, list[_Packed]] = {}
    for file in pending:
        packed = _packed(file.key)
        if packed is not None and file.staged is not None:
            by_pack.setdefault(file.staged, []).append(packed)
    for staged, parts in by_pack.items():
        try:
            fd = os.open(staged, os.O_WRONLY | os.O_CLOEXEC)
            try:
                for part in parts:
                    os.pwrite(fd, bytes(part.length), part.offset)
            finally:
                os.close(fd)
        except OSError as exc:
            raise LakeError(f"could not blank refused bytes in staged pack {staged}: "
                            f"{exc}") from exc


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


def _bytes_of(file: PendingFile) -> bytes:
    if file.staged is None:
        return file.data
    with open(file.staged, "rb") as fh:
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


def _write_new(target: str, data: bytes) -> None:
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
