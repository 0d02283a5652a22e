"""Hosted file bytes, stored under ``<lake>/objects/<tenant>/<conversation>/<turn>/files/...``.

One object per (turn, path) so that erasing a turn or conversation removes exactly its bytes.
Paths are validated by the refs module; symlinks inside a local store are never followed. In an
object-store lake the same keys name objects under the lake prefix.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from lake.errors import LakeError, RefError, RefNotFound
from lake.location import LakeLocation, atomic_write
from lake.refs import normalize_relative_path, validate_id

_PREFIX = "objects"


class FileStore:
    """Content of hosted files, addressed by storage keys relative to ``<lake>/objects``."""

    def __init__(self, root: Path | str | LakeLocation) -> None:
        self.location = LakeLocation.of(root)
        self._remote = self.location.remote
        self._made: set[Path] = set()  # folders this instance created (mkdir is costly)

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

        With ``durable`` the file is fsync'd; batch writers pass False and call
        :meth:`sync` once after many puts, which is far cheaper than one fsync per file.
        """
        if self._remote:
            self.location.blobs.write_bytes(self._object_key(key), data)
            return hashlib.sha256(data).hexdigest()
        target = self._path(key)
        if target.parent not in self._made:
            target.parent.mkdir(parents=True, exist_ok=True)
            self._made.add(target.parent)
        try:
            atomic_write(target, data, durable=durable)
        except OSError as exc:
            raise LakeError(f"could not store hosted file {key}: {exc}") from exc
        return hashlib.sha256(data).hexdigest()

    def sync(self) -> None:
        """Flush every written file to disk (one call for a whole batch of puts); object-store
        PUTs are durable once acknowledged."""
        if not self._remote:
            os.sync()

    def get(self, key: str) -> bytes:
        """The bytes stored under a key."""
        if self._remote:
            try:
                return self.location.blobs.read_bytes(self._object_key(key))
            except FileNotFoundError:
                raise RefNotFound(f"no stored bytes for {key}") from None
        path = self._path(key)
        if path.is_symlink() or not path.is_file():
            raise RefNotFound(f"no stored bytes for {key}")
        return path.read_bytes()

    def delete(self, key: str) -> bool:
        """Remove one object; True when something was removed."""
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
