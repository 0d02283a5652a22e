"""Hosted file bytes, stored under ``<lake>/objects/<tenant>/<conversation>/<turn>/files/...``.

One object per (turn, path) so that erasing a turn or conversation removes exactly its bytes.
Paths are validated by the refs module; symlinks inside the store are never followed.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from lake.errors import LakeError, RefError, RefNotFound
from lake.refs import normalize_relative_path, validate_id


class FileStore:
    """Content of hosted files, addressed by storage keys relative to ``<lake>/objects``."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root) / "objects"
        self._made: set[Path] = set()  # folders this instance created (mkdir is costly)

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
        target = self._path(key)
        if target.parent not in self._made:
            target.parent.mkdir(parents=True, exist_ok=True)
            self._made.add(target.parent)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        try:
            with open(tmp, "wb") as fh:
                fh.write(data)
                if durable:
                    fh.flush()
                    os.fsync(fh.fileno())
            os.replace(tmp, target)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise LakeError(f"could not store hosted file {key}: {exc}") from exc
        return hashlib.sha256(data).hexdigest()

    @staticmethod
    def sync() -> None:
        """Flush every written file to disk (one call for a whole batch of puts)."""
        os.sync()

    def get(self, key: str) -> bytes:
        """The bytes stored under a key."""
        path = self._path(key)
        if path.is_symlink() or not path.is_file():
            raise RefNotFound(f"no stored bytes for {key}")
        return path.read_bytes()

    def delete(self, key: str) -> bool:
        """Remove one object; True when something was removed."""
        path = self._path(key)
        if path.is_symlink() or path.is_file():
            path.unlink()
            return True
        return False

    def delete_prefix(self, *segments: str) -> int:
        """Remove every object under tenant[/conversation[/turn]]; returns files removed."""
        for s in segments:
            validate_id(s, "storage segment")
        folder = self.root.joinpath(*segments)
        if not folder.exists():
            return 0
        count = sum(1 for p in folder.rglob("*") if p.is_file() or p.is_symlink())
        shutil.rmtree(folder)
        return count

    def _path(self, key: str) -> Path:
        parts = key.split("/", 3)
        if len(parts) != 4:
            raise RefError(f"malformed storage key {key!r}")
        for segment, what in zip(parts[:3], ("tenant", "conversation_id", "turn_id"), strict=True):
            validate_id(segment, what)
        relative = normalize_relative_path(parts[3])
        path = self.root / parts[0] / parts[1] / parts[2] / relative
        # Refuse any symlinked folder on the way: bytes must come from inside the store.
        probe = self.root
        for part in path.relative_to(self.root).parts[:-1]:
            probe = probe / part
            if probe.is_symlink():
                raise RefError(f"storage key {key!r} passes through a symlink")
        return path
