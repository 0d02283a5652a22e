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

import hashlib
import itertools
import os
import re
import uuid
from collections.abc import Collection, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from lake.errors import LakeError, RefError, RefNotFound
from lake.file_objects import BlobObjects, LocalObjects, Objects, StoredObject, write_new
from lake.location import LakeLocation
from lake.refs import normalize_relative_path, validate_id

_PREFIX = "objects"
_PACKS = "@packs"  # "@" is not allowed in ids, so no tenant folder can have this name
PACKED_PREFIX = f"{_PACKS}/"  # how every packed storage key starts
_PACK_KEY = re.compile(r"@packs/([0-9a-f]{32}\.pack)#([0-9]+)\+([0-9]+)")
# Files up to this size are packed by bulk ingests; a pack is closed once it holds this much.
PACKED_FILE_BYTES = 1 << 20
PACK_BYTES = 64 << 20
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
    """Content of hosted files, addressed by storage keys relative to ``<lake>/objects``.

    What is stored where (keys, packs, erasure by range) is decided here; how an object is
    written, read and removed is the backend's (lake.file_objects: a local folder, or the
    lake's object store)."""

    def __init__(self, root: Path | str | LakeLocation) -> None:
        self.location = LakeLocation.of(root)
        self._objects: Objects = (
            BlobObjects(self.location.blobs, _PREFIX) if self.location.remote
            else LocalObjects(self.location.local, self.location.local / _PREFIX))

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
        self._objects.put(self._object_key(key), data, durable=durable)
        return hashlib.sha256(data).hexdigest()

    def put_new(self, files: Iterable[PendingFile]) -> None:
        """Store the bytes of turns that are not visible yet (a batch before its commit point);
        not fsync'd: call :meth:`sync` before anything points at them. A packed file stores
        its staged pack (once for all the pending files it holds)."""
        objects = []
        packs: set[str] = set()
        for file in files:
            packed = _packed(file.key)
            if packed is None:
                objects.append(StoredObject(self._object_key(file.key), file.data,
                                            file.staged, file.key))
            elif file.staged is None:
                raise LakeError(f"packed file {file.key} has no staged pack")
            elif packed.pack not in packs:  # one object for all the files a pack holds
                packs.add(packed.pack)
                objects.append(StoredObject(_pack_object(packed.pack), staged=file.staged,
                                            what=f"pack {packed.pack}"))
        self._objects.put_new(objects)

    @contextmanager
    def staging(self) -> Iterator[str | None]:
        """A new folder in which ingest workers write hosted bytes ahead of their batch (None
        for an object-store lake); removed on exit with whatever no batch moved out of it."""
        with self._objects.staging() as folder:
            yield folder

    def clear_staging(self) -> None:
        """Remove the bytes crashed ingests staged; call under the writer lock, before any
        new write (no other ingest can be staging then)."""
        self._objects.clear_staging()

    @staticmethod
    def stage(data: bytes, folder: str) -> str:
        """Write bytes into a new file of a :meth:`staging` folder; returns its path.

        Each process writes into a subfolder of its own: processes creating files in one
        folder queue on that folder's lock (about half again the kernel time per file with
        two ingest workers).
        """
        try:
            path = FileStore.stage_path(folder, str(next(_staged_names)))
            write_new(path, data)
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
        # a pack needs no folder of its own
        self._objects.make_folders(self._object_key(k) for k in keys if _packed(k) is None)

    def sync(self) -> None:
        """Flush the files :meth:`put_new` wrote, and their folders' entries, to disk (one
        call for a whole batch); object-store PUTs are durable once acknowledged."""
        self._objects.sync()

    def get(self, key: str) -> bytes:
        """The bytes stored under a key."""
        packed = _packed(key)
        try:
            if packed is None:
                return self._objects.get(self._object_key(key))
            data = self._objects.get_range(_pack_object(packed.pack), packed.offset,
                                           packed.length)
        except FileNotFoundError:
            raise RefNotFound(f"no stored bytes for {key}") from None
        if len(data) != packed.length:
            raise RefNotFound(f"no stored bytes for {key}: its pack is shorter than its range")
        return data

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
                removed += len(parts) if self._objects.delete(_pack_object(pack)) else 0
            else:
                removed += self._blank(pack, parts)
        return removed

    def discard(self, keys: Iterable[str]) -> int:
        """Remove the objects of a rolled-back batch: loose files, and the packs its packed
        keys name (whole: a pack holds one batch's bytes only). Returns objects removed."""
        loose, ranges = _by_pack(keys)
        removed = sum(self.delete(key) for key in loose)
        return removed + sum(self._objects.delete(_pack_object(pack)) for pack in sorted(ranges))

    def _blank(self, pack: str, parts: list[_Packed]) -> int:
        """Overwrite ranges of a pack with zeros (an atomic rewrite); returns ranges blanked."""
        key = _pack_object(pack)
        try:
            data = bytearray(self._objects.get_range(key, 0, None))
        except FileNotFoundError:
            return 0  # removed already (a resumed erasure)
        for part in parts:
            data[part.offset:part.offset + part.length] = bytes(part.length)
        self._objects.put(key, bytes(data), durable=True)
        return len(parts)

    def delete(self, key: str) -> bool:
        """Remove one object (a packed file: blank its range); True when something was
        removed."""
        if _packed(key) is not None:
            return self.erase([key]) == 1
        return self._objects.delete(self._object_key(key))

    def delete_prefix(self, *segments: str) -> int:
        """Remove every object under tenant[/conversation[/turn]]; returns files removed."""
        for s in segments:
            validate_id(s, "storage segment")
        return self._objects.delete_prefix("/".join(segments))

    def remove_empty_folders(self, tenant: str, conversation_id: str) -> None:
        """Remove a conversation's folder and then its tenant's, where empty (an erased
        conversation should not linger; an object store has no folders to leave behind)."""
        validate_id(tenant, "tenant")
        validate_id(conversation_id, "conversation_id")
        self._objects.remove_empty_folders([f"{tenant}/{conversation_id}", tenant])

    @staticmethod
    def _check(key: str) -> tuple[list[str], str]:
        parts = key.split("/", 3)
        if len(parts) != 4:
            raise RefError(f"malformed storage key {key!r}")
        for segment, what in zip(parts[:3], ("tenant", "conversation_id", "turn_id"), strict=True):
            validate_id(segment, what)
        return parts[:3], normalize_relative_path(parts[3])

    def _object_key(self, key: str) -> str:
        """A loose storage key, checked, as its object key under ``objects``."""
        (tenant, conversation, turn), relative = self._check(key)
        return f"{tenant}/{conversation}/{turn}/{relative}"


def pack_key(pack: str, offset: int, length: int) -> str:
    """The storage key of ``length`` bytes at ``offset`` in a pack."""
    return f"{_PACKS}/{pack}#{offset}+{length}"


def _pack_object(pack: str) -> str:
    """A pack's object key under ``objects``."""
    return f"{_PACKS}/{pack}"


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
            write_new(self._staged, b"".join(self._parts))
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











