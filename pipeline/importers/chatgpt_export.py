"""Reading a ChatGPT export: ``conversations.json``, its ``conversations-NNN.json`` shards,
the export ``.zip`` holding them, and the uploaded or generated files shipped beside them.

A file named in a conversation (an attachment's ``id``, an image's ``file-service://`` or
``sediment://`` asset pointer) is found by name: the export stores it as ``<id>-<name>``,
``<id>.<ext>`` or ``<id>`` in the zip (any folder) or beside ``conversations.json``.
"""

from __future__ import annotations

import codecs
import re
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import IO

from lake.errors import RecordError

EXPORT_MEMBER = "conversations.json"
_SHARD = re.compile(r"(?:^|/)conversations(?:-\d+)?\.json$")
_HEAD_BYTES = 4096
# Names an export file of a conversation's file id may have: the id, then "-", "." or the end.
_FILE_ID = re.compile(r"^(file[-_][A-Za-z0-9]+)")


class Export:
    """An export file or zip: its conversation shards in order, and its files by id."""

    def __init__(self, path: Path) -> None:
        if not path.is_file():
            raise RecordError(f"ChatGPT export {path} does not exist or is not a file")
        self.path = path
        self.is_zip = zipfile.is_zipfile(path)
        if self.is_zip:
            with zipfile.ZipFile(path) as archive:
                names = archive.namelist()
            shards = [n for n in names if _SHARD.search(n)]
            if not shards:
                raise RecordError(f"ChatGPT export {path} is a zip without {EXPORT_MEMBER} "
                                  "(or conversations-000.json shards)")
            # The shallowest folder holding shards is the export's; shards in name order.
            depth = min(n.count("/") for n in shards)
            self.shards = sorted(n for n in shards if n.count("/") == depth)
            self._files = _by_file_id(n for n in names if not n.endswith("/"))
        else:
            self.shards = [path.name]
            self._files = _by_file_id(
                p.name for p in path.parent.iterdir() if p.is_file() and p != path)

    @contextmanager
    def open_shard(self, shard: str) -> Iterator[IO[bytes]]:
        """A shard's JSON as a binary stream."""
        if self.is_zip:
            with zipfile.ZipFile(self.path) as archive, archive.open(shard) as fh:
                yield fh
        else:
            with self.path.open("rb") as fh:
                yield fh

    def shipped(self, file_id: str) -> tuple[str, int] | None:
        """The name (as uploaded) and size of the export's file for a conversation's file id,
        if it ships one."""
        member = self._files.get(_file_key(file_id))
        if member is None:
            return None
        if self.is_zip:
            with zipfile.ZipFile(self.path) as archive:
                size = archive.getinfo(member).file_size
        else:
            size = (self.path.parent / member).stat().st_size
        # "file-X-report.pdf" was uploaded as "report.pdf"; a bare "file-X.png" keeps its name.
        name = PurePosixPath(member).name
        key = _file_key(file_id)
        return (name[len(key) + 1:] if name.startswith(key + "-") else name), size

    def file_bytes(self, file_id: str) -> bytes:
        """The bytes of a file :meth:`shipped` found."""
        member = self._files[_file_key(file_id)]
        if self.is_zip:
            with zipfile.ZipFile(self.path) as archive:
                return archive.read(member)
        return (self.path.parent / member).read_bytes()


def _file_key(file_id: str) -> str:
    """A file id as the export's names spell it: ``file-service://file-X`` and
    ``sediment://file_X`` both name ``file-X`` / ``file_X``."""
    bare = file_id.rsplit("://", 1)[-1]
    match = _FILE_ID.match(bare)
    return match.group(1) if match else bare


def _by_file_id(names: Iterator[str] | list[str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for name in names:
        match = _FILE_ID.match(PurePosixPath(name).name)
        if match:
            found.setdefault(match.group(1), name)
    return found


class Utf8Repair:
    """A byte reader that passes UTF-8 through and replaces invalid bytes with U+FFFD.

    ijson stops at the first invalid byte, which would lose the rest of the export; replacing
    keeps the damage to the one string, and ``first_bad_offset`` lets the import report it.
    """

    def __init__(self, raw: IO[bytes]) -> None:
        self._raw = raw
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._read = 0
        self._written = 0
        self._head = b""
        self.first_bad_offset: int | None = None

    def head(self) -> bytes:
        """The first bytes of the stream, without consuming them."""
        if not self._head:
            self._head = self._repaired(_HEAD_BYTES)
        return self._head

    def read(self, size: int = -1) -> bytes:
        """Up to ``size`` input bytes, repaired; may return a few bytes fewer or more."""
        if size == 0:
            return b""  # ijson probes with read(0) to tell bytes from text streams
        if self._head:
            head, self._head = self._head, b""
            return head
        return self._repaired(size)

    def _repaired(self, size: int) -> bytes:
        out = b""
        # ijson takes an empty read as the end of input, so read on while the decoder has only
        # buffered the start of a character split across reads.
        while not out:
            pending_before = self._decoder.getstate()[0]
            chunk = self._raw.read(size)
            out = self._decoder.decode(chunk, final=not chunk).encode("utf-8")
            self._read += len(chunk)
            self._written += len(out)
            if self.first_bad_offset is None:
                self._locate_replacement(pending_before, chunk)
            if not chunk:
                break
        return out

    def _locate_replacement(self, pending_before: bytes, chunk: bytes) -> None:
        # Valid UTF-8 re-encodes to exactly the bytes it came from, so a difference means this
        # read replaced something; decoding it strictly tells where.
        complete = self._read - len(self._decoder.getstate()[0])
        if self._written == complete:
            return
        start = self._read - len(chunk) - len(pending_before)
        try:
            (pending_before + chunk).decode("utf-8")
            self.first_bad_offset = start
        except UnicodeDecodeError as exc:
            self.first_bad_offset = start + exc.start
