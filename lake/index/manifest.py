"""Per-partition index manifests: what an index set was built from, and where it lives.

Layout under ``<lake>/indexes/<tenant>/<month>/``: one folder per segment (``<segment_id>/``
holding the artifacts of some of the partition's rows) and ``current.json`` naming the live
build. A build's ``manifest.json`` sits in the folder of its newest segment and lists the live
segments, base first (see lake.index.segments): a full build is one segment, an append adds a
small delta segment beside the ones already live. Either way the new state is made live by
atomically replacing ``current.json``, and only then are folders no live manifest names removed.

In an object-store lake the same layout holds objects; builds are staged in, and opened from, a
local cache folder per lake (``TURNLAKE_CACHE``, default ``~/.cache/turnlake``).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from lake.errors import IndexUnavailable
from lake.location import Blobs, LakeLocation

MANIFEST_FILE = "manifest.json"
CURRENT_FILE = "current.json"
_INDEXES = "indexes"
_COMPLETE = ".complete"  # marks a fully downloaded build in an object-store lake's cache


@dataclass(frozen=True)
class PartitionManifest:
    """What one partition's index set was built from, with sizes and timings."""

    tenant: str
    month: str
    build_id: str
    content_version: int
    logs_version: int
    content_fingerprint: str
    logs_fingerprint: str
    row_count: int
    turn_count: int
    embedded_rows: int
    model: str | None
    dim: int
    semantic_kind: str
    built_at: str
    build_seconds: float
    bytes: dict[str, int] = field(default_factory=dict)
    # The live segments, base first ([] in manifests older than segments: the build alone),
    # and the rows of each; the build's own folder is the last segment.
    segments: list[str] = field(default_factory=list)
    segment_rows: list[int] = field(default_factory=list)
    # The UTF-8 bytes of the texts each live segment holds, base first ([] in manifests older
    # than it): what indexing a segment's rows again costs, which a row count does not say
    # when one row is a 9 MB answer (pipeline.index_build.Compaction weighs segments by it).
    segment_text_bytes: list[int] = field(default_factory=list)
    # The embedding model asked for at build time (``model`` is None when no row had its
    # vectors), and how many rows carry vectors of another model and so are not searchable
    # by meaning: a model change makes the partition stale instead of silently empty.
    embedding_model: str | None = None
    foreign_vectors: int = 0
    # Where this build's time went (seconds): "read" (its rows and vectors from the tables),
    # "rows" (the segment's row file), "semantic", "lexical" and "trigram"; {} in older
    # manifests. A delta build counts only its own segment, as build_seconds does.
    seconds_by_kind: dict[str, float] = field(default_factory=dict)
    # Data files (paths relative to their table) at this build's versions that no segment
    # holds yet: a large append indexed beside the live writer (lake.index.deferred). While
    # any is listed the partition is stale.
    deferred_content: list[str] = field(default_factory=list)
    deferred_logs: list[str] = field(default_factory=list)

    @property
    def live_segments(self) -> list[str]:
        """Segment folder names, base first."""
        return list(self.segments) or [self.build_id]

    @property
    def requested_model(self) -> str | None:
        """The model this build was asked to index (older manifests: the one it used)."""
        return self.embedding_model if self.embedding_model is not None else self.model

    def to_json(self) -> str:
        """The manifest as pretty JSON."""
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> PartitionManifest:
        """Parse a manifest written by :meth:`to_json`."""
        return cls(**json.loads(text))


def partition_key(tenant: str, month: str) -> str:
    """The blob prefix of one partition's index builds, relative to the lake root."""
    return f"{_INDEXES}/{tenant}/{month}"


def partition_dir(root: Path | str | LakeLocation, tenant: str, month: str) -> Path:
    """The local folder holding one partition's builds: under a local lake itself, else in the
    lake's local cache (where builds are staged before upload and downloaded to be opened)."""
    location = LakeLocation.of(root)
    base = location.cache_dir if location.remote else location.local
    return base / _INDEXES / tenant / month


def read_current(root: Path | str | LakeLocation, tenant: str,
                 month: str) -> tuple[Path, PartitionManifest] | None:
    """The live build's local folder and its manifest, or None when the partition has no index.

    For an object-store lake the folder is where :func:`local_build` puts the build; it may not
    have been downloaded yet.
    """
    location = LakeLocation.of(root)
    blobs = location.blobs
    base = partition_key(tenant, month)
    try:
        pointer = blobs.read_bytes(f"{base}/{CURRENT_FILE}")
    except FileNotFoundError:
        return None
    try:
        build_id = str(json.loads(pointer)["build_id"])
        manifest = PartitionManifest.from_json(
            blobs.read_bytes(f"{base}/{build_id}/{MANIFEST_FILE}").decode())
    except (OSError, KeyError, ValueError, TypeError) as exc:
        raise IndexUnavailable(f"index of partition {tenant}/{month} is unreadable: {exc}") from exc
    return partition_dir(location, tenant, month) / build_id, manifest


def local_build(root: Path | str | LakeLocation, manifest: PartitionManifest) -> Path:
    """A local folder holding the build a manifest describes, ready to open (its segments are
    the sibling folders :func:`local_segments` names).

    Object-store lakes keep a cache keyed by segment id (a segment never changes once
    published), filled on first use and stripped of the partition's other segments, so a
    rebuilt partition is downloaded afresh and the superseded copy does not linger.
    """
    return local_segments(root, manifest)[-1]


def local_segments(root: Path | str | LakeLocation, manifest: PartitionManifest) -> list[Path]:
    """Local folders of a manifest's live segments, base first, downloaded when needed."""
    location = LakeLocation.of(root)
    base = partition_dir(location, manifest.tenant, manifest.month)
    names = manifest.live_segments
    folders = [base / name for name in names]
    if not location.remote:
        return folders
    for name, folder in zip(names, folders, strict=True):
        if (folder / _COMPLETE).exists():
            continue
        base.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=base))
        try:
            prefix = f"{partition_key(manifest.tenant, manifest.month)}/{name}"
            location.blobs.download_dir(prefix, staging)
            if not (staging / MANIFEST_FILE).exists():  # every segment keeps its manifest
                raise FileNotFoundError(f"index segment {location}/{prefix} is gone (a newer "
                                        "build replaced it)")
            (staging / _COMPLETE).touch()
            try:
                os.rename(staging, folder)
            except OSError:
                if not (folder / _COMPLETE).exists():  # another process finished it first
                    raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    _remove_local_builds(base, keep=set(names))
    return folders


def publish(root: Path | str | LakeLocation, manifest: PartitionManifest) -> None:
    """Make a finished build live (uploading it first for an object-store lake), then remove
    the partition's older builds."""
    location = LakeLocation.of(root)
    base = partition_key(manifest.tenant, manifest.month)
    local = partition_dir(location, manifest.tenant, manifest.month)
    if location.remote:
        # Earlier segments were uploaded when they were published; only the new one goes up.
        location.blobs.upload_dir(local / manifest.build_id, f"{base}/{manifest.build_id}")
        (local / manifest.build_id / _COMPLETE).touch()
    location.blobs.write_bytes(f"{base}/{CURRENT_FILE}",
                               json.dumps({"build_id": manifest.build_id}).encode())
    remove_other_builds(location, manifest.tenant, manifest.month,
                        keep=set(manifest.live_segments))


def remove_other_builds(root: Path | str | LakeLocation, tenant: str, month: str,
                        keep: str | set[str] | None) -> None:
    """Delete segment folders other than ``keep`` (left by older builds or crashed ones)."""
    location = LakeLocation.of(root)
    base = partition_key(tenant, month)
    kept = _kept(keep)
    for name in location.blobs.children(base):
        if name not in kept and name != CURRENT_FILE and not name.startswith("."):
            location.blobs.delete_prefix(f"{base}/{name}")
    if location.remote:  # a local lake's builds are the blobs just removed
        _remove_local_builds(partition_dir(location, tenant, month), keep=kept)


def _kept(keep: str | set[str] | None) -> set[str]:
    return set() if keep is None else {keep} if isinstance(keep, str) else keep


def _remove_local_builds(base: Path, keep: str | set[str] | None) -> None:
    """Remove cached segment folders of one partition that ``keep`` (the live segments as the
    caller knows them) has left behind.

    Several processes share a cache (a server and its writer child, or servers on one host)
    and each knows the live build only as of its last look, so a folder is removed only when
    it sorts before the newest kept segment (ids are time-ordered): a reader that has not seen
    the newest build yet never removes it, nor a build in progress. Where no index is live,
    complete copies go (the partition's content went) and so do unfinished folders untouched
    for ``_UNFINISHED_GRACE_S``; a younger one may be a first build being written."""
    if not base.exists():
        return
    kept = _kept(keep)
    newest = max(kept, default=None)
    for child in base.iterdir():
        if not child.is_dir() or child.name in kept or child.name.startswith("."):
            continue
        if newest is not None and child.name > newest:
            continue  # newer than what the caller knows: not its to judge
        if newest is None and not (child / _COMPLETE).exists() and recently_touched(child):
            continue
        shutil.rmtree(child, ignore_errors=True)


_UNFINISHED_GRACE_S = 3600.0


def recently_touched(folder: Path) -> bool:
    """Whether ``folder`` changed within the last hour: an unfinished build folder that old
    is a crashed writer's, a younger one may still be being written."""
    try:
        return time.time() - folder.stat().st_mtime < _UNFINISHED_GRACE_S
    except OSError:
        return False


def list_partitions(root: Path | str | LakeLocation, *,
                    among: Callable[[tuple[str, str]], bool] | None = None,
                    ) -> list[tuple[str, str]]:
    """Every (tenant, month) that has a live index; with ``among``, only those it accepts
    (asked before the partition's pointer is looked for, which costs a request or a stat)."""
    blobs = LakeLocation.of(root).blobs
    return [part for part in _partition_folders(blobs)
            if (among is None or among(part)) and blobs.exists(_pointer_key(*part))]


def pointer_stamps(root: Path | str | LakeLocation, *, tenant: str | None = None
                   ) -> list[tuple[str, str, str]]:
    """(tenant, month, pointer stamp) of every indexed partition, or of one ``tenant``'s, in
    order: a token list that changes whenever any such partition's live build does, or a
    partition appears or goes. It costs a listing and a stamp per partition, so a caller
    that serves one tenant asks for that tenant's."""
    blobs = LakeLocation.of(root).blobs
    return [(t, month, stamp) for t, month in _partition_folders(blobs, tenant)
            if (stamp := blobs.stamp(_pointer_key(t, month))) is not None]


def _partition_folders(blobs: Blobs, tenant: str | None = None) -> list[tuple[str, str]]:
    """(tenant, month) of every partition folder under ``indexes/`` (of one ``tenant``'s),
    in order, whether or not a build of it is live."""
    tenants = blobs.children(_INDEXES) if tenant is None else [tenant]
    return [(t, month) for t in tenants for month in blobs.children(f"{_INDEXES}/{t}")]


def _pointer_key(tenant: str, month: str) -> str:
    return f"{partition_key(tenant, month)}/{CURRENT_FILE}"


def drop_partition(root: Path | str | LakeLocation, tenant: str, month: str) -> None:
    """Remove a partition's indexes entirely (its table rows are all gone)."""
    location = LakeLocation.of(root)
    location.blobs.delete_prefix(partition_key(tenant, month))
    if location.remote:
        shutil.rmtree(partition_dir(location, tenant, month), ignore_errors=True)


def prune_cache(root: Path | str | LakeLocation,
                live: dict[tuple[str, str], set[str]], *, tenant: str | None = None) -> None:
    """Drop cached segments of an object-store lake that are no longer live (``live`` maps
    each indexed partition to its live segment ids), so erased or expired content leaves
    search nodes too. With ``tenant``, only that tenant's cache is looked at (``live`` then
    needs to name only its partitions)."""
    location = LakeLocation.of(root)
    if not location.remote:
        return
    base = location.cache_dir / _INDEXES
    if not base.exists():
        return
    for tenant_dir in base.iterdir() if tenant is None else [base / tenant]:
        for month_dir in tenant_dir.iterdir() if tenant_dir.is_dir() else ():
            _remove_local_builds(month_dir, keep=live.get((tenant_dir.name, month_dir.name)))
