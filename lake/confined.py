"""File operations confined to one folder: every folder and file below it is opened relative
to its parent's descriptor, never following a symlink, so that no name and no symlink planted
in the folder can make a write (or a removal) land outside it. Used by workspace pull.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress

from lake.errors import WorkspaceError

# O_NOFOLLOW on every open inside the folder: a symlink fails with ELOOP instead of being
# followed (O_DIRECTORY makes a symlinked folder fail the same way, or with ENOTDIR).
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC


def open_folders(root: int, folders: list[str], made: list[str]) -> int:
    """A descriptor of the folder ``folders`` names under ``root``, each one made when missing
    (and appended to ``made``) and none of them a symlink."""
    fd = os.dup(root)
    done: list[str] = []
    try:
        for part in folders:
            done.append(part)
            try:
                next_fd = os.open(part, DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                os.mkdir(part, 0o777, dir_fd=fd)
                made.append("/".join(done))
                next_fd = os.open(part, DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise WorkspaceError(f"{'/'.join(done)} is a symlink or not a folder; "
                                         "nothing is written through one") from None
                raise WorkspaceError(f"cannot open {'/'.join(done)}: {exc}") from exc
            os.close(fd)
            fd = next_fd
    except BaseException:
        os.close(fd)
        raise
    return fd


def atomic_write_at(folder_fd: int, name: str, data: bytes) -> None:
    """Temp file beside ``name``, fsync, rename over it: readers see old bytes or new."""
    tmp = f".{name[:200]}.{uuid.uuid4().hex[:12]}.pulling"
    fd = os.open(tmp, _NEW_FLAGS, 0o666, dir_fd=folder_fd)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, name, src_dir_fd=folder_fd, dst_dir_fd=folder_fd)
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp, dir_fd=folder_fd)
        raise


def remove_if_same(root: int, path: str, sha: str) -> bool:
    """Unlink ``path`` when it is a regular file whose sha256 is ``sha`` (never through a
    symlink): a file changed since it was written is kept."""
    with folder_of(root, path) as found:
        if found is None:
            return False  # a folder on the way is gone, or is a symlink now
        fd, name = found
        current = lstat_at(fd, name)
        if current is None or not stat.S_ISREG(current.st_mode) or sha256_at(fd, name) != sha:
            return False
        os.unlink(name, dir_fd=fd)
        return True


def remove_empty_folder(root: int, folder: str) -> bool:
    """Remove a folder pull made, if it is still a real folder and empty."""
    with folder_of(root, folder) as found:
        if found is None:
            return False
        fd, name = found
        current = lstat_at(fd, name)
        if current is None or not stat.S_ISDIR(current.st_mode):
            return False
        try:
            os.rmdir(name, dir_fd=fd)
        except OSError:
            return False  # not empty: something pull did not write is in it
        return True


@contextmanager
def folder_of(root: int, path: str) -> Iterator[tuple[int, str] | None]:
    """A descriptor of the folder holding ``path`` (each folder opened without following a
    symlink) and the last segment's name; None when a folder on the way is missing, or is a
    symlink or not a folder. Nothing is created."""
    *folders, name = path.split("/")
    fd: int | None = os.dup(root)
    try:
        for part in folders:
            assert fd is not None
            try:
                next_fd = os.open(part, DIR_FLAGS, dir_fd=fd)
            except OSError:
                os.close(fd)
                fd = None
                break
            os.close(fd)
            fd = next_fd
        yield None if fd is None else (fd, name)
    finally:
        if fd is not None:
            os.close(fd)


def lstat_at(fd: int, name: str) -> os.stat_result | None:
    """The stat of ``name`` in the folder ``fd`` (a symlink's own), None when missing."""
    try:
        return os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def exists_at(fd: int, path: str) -> bool:
    """True when ``path`` below ``fd`` exists (as anything), reached without symlinks."""
    with folder_of(fd, path) as found:
        return found is not None and lstat_at(*found) is not None


def read_at(fd: int, name: str) -> bytes:
    """The bytes of the file ``name`` in the folder ``fd`` (a symlink fails, ELOOP)."""
    file_fd = os.open(name, _READ_FLAGS, dir_fd=fd)
    with os.fdopen(file_fd, "rb") as fh:
        return fh.read()


def sha256_at(fd: int, name: str) -> str:
    """The sha256 of the file ``name`` in the folder ``fd``, read in 1 MiB pieces."""
    file_fd = os.open(name, _READ_FLAGS, dir_fd=fd)
    digest = hashlib.sha256()
    with os.fdopen(file_fd, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
