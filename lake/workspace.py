"""Workspace pull (spec section 07): materialize a turn's hosted files and user attachments
into a folder an agent works in, and clean up exactly what was materialized.

Layout of a pulled workspace ``DIR``::

    DIR/files/...             hosted files, at their path in the turn (``files/report.pdf``)
    DIR/user.attachments/...  the user's attachments whose bytes are hosted (by name)
    DIR/.turnlake-pull.json   what pull wrote: path, ref, sha256, size, expiry per file

Every byte comes through the authorized resolver (:class:`TurnMaterializer`), so a pull sees
exactly what the principal may read. Every path passes :func:`normalize_relative_path`, and
every folder and file inside ``DIR`` is opened relative to its parent's descriptor without
following symlinks, so neither a hostile name nor a symlink planted in the workspace can make
pull write (or ``clean`` delete) outside it. A file pull did not write, or one that changed
since it wrote it, is never overwritten or removed.

A target that cannot be pulled (expired, not readable, unsafe, in the way) is reported on its
own :class:`PullItem` and the others are pulled. A ref that names nothing and a ref of
another user get the same answer, so a refusal never tells whether the object exists.
"""

from __future__ import annotations

import fcntl
import hashlib
import itertools
import json
import os
import stat
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds

from lake.answers import PULL_MANIFEST
from lake.answers import PullItem as PullItem
from lake.answers import PullKind as PullKind
from lake.answers import PullStatus as PullStatus
from lake.confined import (
    atomic_write_at,
    exists_at,
    lstat_at,
    open_folders,
    read_at,
    remove_empty_folder,
    remove_if_same,
    sha256_at,
)
from lake.errors import (
    AccessDenied,
    QueryError,
    RefError,
    RefExpired,
    RefNotFound,
    WorkspaceError,
)
from lake.refs import FILES_PREFIX, normalize_relative_path, parse_ref, validate_id
from lake.search.access import Principal
from lake.search.materialize import FileCard, TurnMaterializer
from lake.store import LakeStore
from lake.tables import Table

MANIFEST = PULL_MANIFEST
MANIFEST_SCHEMA = "turnlake.pull.v1"
ATTACHMENTS_PREFIX = "user.attachments/"
_OWN_PREFIXES = (FILES_PREFIX, ATTACHMENTS_PREFIX)  # the only places pull writes to

@dataclass(frozen=True)
class PulledFile:
    """One file pull wrote, as recorded in ``.turnlake-pull.json``."""

    path: str
    ref: str
    kind: PullKind
    sha256: str
    size: int
    expires_at: datetime
    pulled_at: datetime

    def to_json(self) -> dict[str, Any]:
        """JSON-ready fields."""
        return {**asdict(self), "expires_at": self.expires_at.isoformat(),
                "pulled_at": self.pulled_at.isoformat()}


@dataclass(frozen=True)
class PullReport:
    """Everything one pull did, item by item."""

    into: str
    manifest: str
    items: list[PullItem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when every file that has bytes to pull is in the workspace (an attachment
        whose bytes were never hosted cannot be, and does not count against it)."""
        return all(item.ok or item.status == "not_hosted" for item in self.items)


@dataclass(frozen=True)
class CleanReport:
    """What ``clean`` removed, and what it kept because it changed since pull wrote it."""

    into: str
    removed: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    folders_removed: list[str] = field(default_factory=list)


@dataclass
class _Manifest:
    """The record of what pull wrote into one workspace (read, updated, written back)."""

    files: dict[str, PulledFile] = field(default_factory=dict)
    folders: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"schema": MANIFEST_SCHEMA,
                "files": [f.to_json() for _, f in sorted(self.files.items())],
                "folders": sorted(set(self.folders))}


class WorkspacePuller:
    """Pulls hosted files of turns (or single conv:fi: refs) into a workspace folder."""

    def __init__(self, store: LakeStore) -> None:
        self._store = store
        self._resolver = TurnMaterializer(store)

    def pull(self, principal: Principal, targets: Sequence[str], into: Path | str, *,
             inside: Path | None = None, as_of: datetime | None = None) -> PullReport:
        """Pull each target, a ``conv:fi:`` ref or a turn ``CONVERSATION/TURN``, into ``into``
        (created when missing). With ``inside`` (a server pulling on a client's behalf),
        ``into`` is a relative folder below it, opened part by part without following a
        symlink, so no link planted there sends the files elsewhere. Raises WorkspaceError
        only when the workspace itself is unusable; every per-target problem is an item of
        the report."""
        if not targets:
            raise QueryError("give at least one conv:fi: ref or CONVERSATION/TURN to pull")
        now = as_of or datetime.now(UTC)
        root = Path(into) if inside is None else inside / str(into)
        plan: Iterator[_Planned] = (
            planned for target in targets for planned in self._plan(principal, target, now))
        items: list[PullItem] = []
        # Refusals come first without touching the disk: a pull with nothing to write
        # creates no folder and no manifest.
        for planned in plan:
            if planned.refused is None:
                plan = itertools.chain([planned], plan)
                break
            items.append(planned.refused)
        else:
            return PullReport(into=str(root), manifest=str(root / MANIFEST), items=items)
        with _workspace(Path(into), inside=inside) as fd:
            manifest = _read_manifest(fd, root)
            claimed: dict[str, str] = {}  # path -> ref, for this pull: one ref per path
            try:
                for planned in plan:
                    items.append(_place(fd, planned, manifest, claimed, now))
            finally:
                # Whatever was written is recorded, even when a later target failed hard,
                # so that clean can remove it and a re-pull knows it as pull's own.
                _write_manifest(fd, manifest)
        return PullReport(into=str(root), manifest=str(root / MANIFEST), items=items)

    def _plan(self, principal: Principal, target: str, now: datetime) -> Iterator[_Planned]:
        """The files a target names, each resolved (bytes and card) or already refused."""
        if target.startswith("conv:"):
            yield self._resolve(principal, target, target, "file", None, now)
            return
        conversation, sep, turn = target.partition("/")
        try:
            if not sep:
                raise RefError("expected a conv:fi: ref or CONVERSATION/TURN")
            validate_id(conversation, "conversation_id")
            validate_id(turn, "turn_id")
        except RefError as exc:
            yield _Planned(PullItem(target, "invalid", message=f"{target!r}: {exc}"))
            return
        try:
            shown = self._resolver.turn(principal, conversation, turn, as_of=now)
        except (QueryError, AccessDenied):
            # The same answer whether the turn is missing or another user's.
            yield _Planned(PullItem(target, "refused", message=(
                f"no live turn {conversation}/{turn} that {principal.describe()} may read")))
            return
        for ref in self._turn_file_refs(principal, conversation, turn):
            yield self._resolve(principal, target, ref, "file", None, now)
        for attachment in shown.attachments:
            yield self._attachment(principal, target, attachment, now)

    def _turn_file_refs(self, principal: Principal, conversation: str, turn: str) -> list[str]:
        """Every hosted file of a turn, expired ones included, so that they are reported."""
        rows = self._store.read(
            Table.FILES, columns=["ref", "path"],
            filter=(ds.field("tenant") == principal.tenant)
            & (ds.field("conversation_id") == conversation) & (ds.field("turn_id") == turn))
        return [r["ref"] for r in sorted(rows.to_pylist(), key=lambda r: r["path"])]

    def _attachment(self, principal: Principal, target: str, attachment: dict[str, Any],
                    now: datetime) -> _Planned:
        name = str(attachment.get("name", ""))
        ref = attachment.get("ref")
        try:
            path = ATTACHMENTS_PREFIX + normalize_relative_path(name)
        except RefError as exc:
            return _Planned(PullItem(target, "unsafe", "attachment", ref=ref,
                                     message=f"attachment name {name!r}: {exc}"))
        if not isinstance(ref, str) or not ref.startswith("conv:fi:"):
            return _Planned(PullItem(target, "not_hosted", "attachment", ref=ref, path=path,
                                     message=f"attachment {name!r} has no hosted bytes "
                                             "(only its metadata and any extracted text)"))
        return self._resolve(principal, target, ref, "attachment", path, now)

    def _resolve(self, principal: Principal, target: str, ref: str, kind: PullKind,
                 path: str | None, now: datetime) -> _Planned:
        try:
            parsed = parse_ref(ref)
            if not parsed.is_file:
                raise RefError(f"a conv:{parsed.namespace}: ref names no file bytes")
            card, data = self._resolver.resolve(principal, ref, as_of=now)
        except RefExpired as exc:
            return _Planned(PullItem(target, "expired", kind, ref=ref, path=path,
                                     message=str(exc)))
        except (RefNotFound, AccessDenied):
            return _Planned(PullItem(target, "refused", kind, ref=ref, path=path, message=(
                f"{ref} names no hosted file that {principal.describe()} may read")))
        except RefError as exc:
            return _Planned(PullItem(target, "invalid", kind, ref=ref, path=path,
                                     message=str(exc)))
        return _Planned(None, target, kind, path or card.path, card, data)


def clean(into: Path | str) -> CleanReport:
    """Remove what pull wrote into ``into`` and is unchanged since, then the folders pull
    made (when empty), then the manifest. A file changed since pull wrote it is kept (and
    reported); nothing pull did not write is touched."""
    root = Path(into)
    removed: list[str] = []
    kept: list[str] = []
    folders_removed: list[str] = []
    with _workspace(root, create=False) as fd:
        if not exists_at(fd, MANIFEST):
            raise WorkspaceError(f"{root} has no {MANIFEST}: nothing pull wrote to clean")
        manifest = _read_manifest(fd, root)
        for path, pulled in sorted(manifest.files.items()):
            if remove_if_same(fd, path, pulled.sha256):
                removed.append(path)
            elif exists_at(fd, path):
                kept.append(path)
        for folder in sorted(set(manifest.folders), key=lambda f: (-f.count("/"), f)):
            if remove_empty_folder(fd, folder):
                folders_removed.append(folder)
        os.unlink(MANIFEST, dir_fd=fd)
    return CleanReport(str(root), removed, kept, folders_removed)


# -- placing files ---------------------------------------------------------------------------

@dataclass(frozen=True)
class _Planned:
    """A file ready to place (card and bytes), or the item that says why there is none."""

    refused: PullItem | None
    target: str = ""
    kind: PullKind = "file"
    path: str = ""
    card: FileCard | None = None
    data: bytes = b""


def _place(fd: int, planned: _Planned, manifest: _Manifest, claimed: dict[str, str],
           now: datetime) -> PullItem:
    """Write one resolved file into the workspace, or say why not."""
    if planned.refused is not None:
        return planned.refused
    card = planned.card
    assert card is not None
    path = planned.path
    base = PullItem(planned.target, "pulled", planned.kind, ref=card.ref, path=path,
                    sha256=card.sha256, size=card.size, expires_at=card.expires_at)
    sha = hashlib.sha256(planned.data).hexdigest()
    if sha != card.sha256:
        return _with(base, "refused", f"{card.ref}: stored bytes do not match their sha256")
    if claimed.get(path, card.ref) != card.ref:
        return _with(base, "conflict", f"{path} is already taken in this pull by "
                                       f"{claimed[path]}")
    try:
        status = _write_file(fd, path, planned.data, manifest.files.get(path), manifest)
    except WorkspaceError as exc:
        return _with(base, "unsafe", str(exc))
    except _InTheWay as exc:
        return _with(base, "conflict", str(exc))
    except OSError as exc:
        return _with(base, "unsafe", f"cannot write {path}: {exc}")
    claimed[path] = card.ref
    manifest.files[path] = PulledFile(path, card.ref, planned.kind, sha, len(planned.data),
                                      card.expires_at, now)
    return _with(base, status, "")


def _with(item: PullItem, status: PullStatus, message: str) -> PullItem:
    return replace(item, status=status, message=message)


class _InTheWay(Exception):
    """A file pull did not write (or that changed since) occupies the path."""


def _write_file(root: int, path: str, data: bytes, previous: PulledFile | None,
                manifest: _Manifest) -> PullStatus:
    """Write ``data`` at ``path`` under the workspace descriptor: a new file, or one pull wrote
    and nobody changed since (replaced atomically). Returns pulled or unchanged."""
    *folders, name = path.split("/")
    folder_fd = open_folders(root, folders, manifest.folders)
    try:
        current = lstat_at(folder_fd, name)
        if current is not None:
            if stat.S_ISLNK(current.st_mode):
                raise WorkspaceError(f"{path} is a symlink; pull never writes through one")
            if not stat.S_ISREG(current.st_mode):
                raise _InTheWay(f"{path} exists and is not a file")
            on_disk = sha256_at(folder_fd, name)
            if previous is None or on_disk != previous.sha256:
                raise _InTheWay(f"{path} exists and was not written by turnlake pull "
                                "(or changed since); left as it is")
            if on_disk == hashlib.sha256(data).hexdigest():
                return "unchanged"
        atomic_write_at(folder_fd, name, data)
        return "pulled"
    finally:
        os.close(folder_fd)


# -- the workspace and its manifest ------------------------------------------------------------

@contextmanager
def _workspace(root: Path, *, create: bool = True, inside: Path | None = None
               ) -> Iterator[int]:
    """A descriptor of the workspace folder (made when missing and ``create``), held under an
    exclusive lock: two pulls (or a pull and a clean) into one folder take turns, so neither
    loses the other's manifest entries. With ``inside``, ``root`` is relative to it and each
    of its folders is opened confined (lake.confined): none may be a symlink or a file."""
    try:
        if inside is not None:
            fd = _confined_folder(inside, root)
        else:
            if create:
                root.mkdir(parents=True, exist_ok=True)
            fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise WorkspaceError(f"workspace {root} does not exist") from None
    except OSError as exc:
        raise WorkspaceError(f"cannot use {root} as a workspace: {exc}") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield fd
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def _confined_folder(inside: Path, into: Path) -> int:
    """A descriptor of the folder ``into`` (relative; empty: ``inside`` itself) below
    ``inside``, made when missing; WorkspaceError naming ``into`` when it is not a clean
    relative path, or when one of its folders is a symlink or a file."""
    name = str(into) if str(into) != "." else ""
    try:
        parts = normalize_relative_path(name).split("/") if name else []
    except RefError as exc:
        raise WorkspaceError(f"into {name!r} is not a folder below the workspace: {exc}") \
            from None
    inside.mkdir(parents=True, exist_ok=True)
    base = os.open(inside, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return open_folders(base, parts, [])
    except WorkspaceError as exc:
        raise WorkspaceError(f"into {name!r}: {exc}") from None
    finally:
        os.close(base)


def _read_manifest(fd: int, root: Path) -> _Manifest:
    """The manifest of the workspace (empty when there is none); a malformed one, or one that
    names a path outside pull's own folders, is refused rather than trusted."""
    where = root / MANIFEST
    current = lstat_at(fd, MANIFEST)
    if current is None:
        return _Manifest()
    if not stat.S_ISREG(current.st_mode):
        raise WorkspaceError(f"{where} is not a regular file (a symlink?); refusing it")
    try:
        raw = read_at(fd, MANIFEST)
        doc = json.loads(raw)
        if not isinstance(doc, dict) or doc.get("schema") != MANIFEST_SCHEMA:
            raise ValueError(f"schema is not {MANIFEST_SCHEMA}")
        files = {}
        for entry in doc.get("files", []):
            if entry["kind"] not in ("file", "attachment"):
                raise ValueError(f"kind {entry['kind']!r} is neither file nor attachment")
            pulled = PulledFile(
                path=_own_path(entry["path"]), ref=str(entry["ref"]), kind=entry["kind"],
                sha256=str(entry["sha256"]), size=int(entry["size"]),
                expires_at=datetime.fromisoformat(entry["expires_at"]),
                pulled_at=datetime.fromisoformat(entry["pulled_at"]))
            files[pulled.path] = pulled
        folders = [_own_path(f) for f in doc.get("folders", [])]
    except (OSError, ValueError, KeyError, TypeError, RefError) as exc:
        raise WorkspaceError(f"{where} is not a valid pull manifest: {exc}") from exc
    return _Manifest(files, folders)


def _own_path(path: object) -> str:
    """A manifest path, checked: relative, no traversal, under files/ or user.attachments/
    (or one of those two folders itself)."""
    if not isinstance(path, str):
        raise ValueError(f"path {path!r} is not a string")
    normal = normalize_relative_path(path)
    if normal not in ("files", "user.attachments") and not normal.startswith(_OWN_PREFIXES):
        raise ValueError(f"path {path!r} is outside files/ and user.attachments/")
    return normal


def _write_manifest(fd: int, manifest: _Manifest) -> None:
    current = lstat_at(fd, MANIFEST)
    if current is not None and not stat.S_ISREG(current.st_mode):
        raise WorkspaceError(f"{MANIFEST} is not a regular file; refusing to replace it")
    data = json.dumps(manifest.to_json(), indent=2).encode() + b"\n"
    atomic_write_at(fd, MANIFEST, data)
