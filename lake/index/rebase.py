"""Rebases beside a live writer: a partition's new base segment is built while delta
segments of its newest rows keep being published.

A rebase merges a partition's segments into one new base, a full build of its rows, so it
takes time in proportion to the partition. Run in the index step of a live writer, it held
back every later delta: on the serve bench a recorded turn then waited up to a second to be
searchable, and behind the rebase of a partition of a million rows it would wait minutes.

:func:`write_base` builds the new base without the index lock, in a hidden folder
(``.rebase-<build id>``: publications remove only visible folders). :func:`publish_base`,
under the index lock, makes it live together with a delta segment of what was appended since
the base's table versions. It discards the base instead when the partition's live base
changed meanwhile (another build published one) or when more than an append happened to the
partition since (an erase, a purge: the new base may hold rows that are gone). Until the
publication, and after a crash at any point, the previous segments stay live; a hidden folder
a crash left behind is removed by a later rebase of the partition once it is an hour old.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from lake.batches import indexable_versions
from lake.faults import NO_FAULTS, Faults
from lake.index.delta import append_partition
from lake.index.manifest import PartitionManifest, partition_dir, read_current, recently_touched
from lake.index.partition import write_partition
from lake.store import LakeStore

HIDDEN_PREFIX = ".rebase-"


def write_base(store: LakeStore, begun: PartitionManifest, *, content_version: int,
               logs_version: int, model: str | None) -> PartitionManifest:
    """Build a new base segment of the partition of ``begun`` (its live manifest when the
    rebase was decided) at the given table versions, hidden from readers and publications.
    Takes no lock; only for a local lake."""
    folder = partition_dir(store.root, begun.tenant, begun.month)
    _remove_leftovers(folder)
    return write_partition(store, begun.tenant, begun.month, content_version=content_version,
                           logs_version=logs_version, model=model, folder_prefix=HIDDEN_PREFIX)


def publish_base(store: LakeStore, begun: PartitionManifest, base: PartitionManifest, *,
                 model: str | None, faults: Faults = NO_FAULTS,
                 defer_bytes: int | None = None) -> PartitionManifest | None:
    """Make ``base`` (from :func:`write_base`) live with a delta segment of the rows appended
    since its versions (large files deferred by ``defer_bytes``: lake.index.deferred), and
    return the published manifest; None when the base was discarded (see the module notes).
    The caller holds the index lock."""
    current = read_current(store.root, base.tenant, base.month)
    keep = current is not None and current[1].live_segments[:1] == begun.live_segments[:1]
    return publish_hidden(store, base, keep=keep, fault="index.rebase_visible", model=model,
                          faults=faults, defer_bytes=defer_bytes)


def publish_hidden(store: LakeStore, built: PartitionManifest, *, keep: bool, fault: str,
                   model: str | None, faults: Faults = NO_FAULTS,
                   defer_bytes: int | None = None) -> PartitionManifest | None:
    """Make the build written hidden beside the live one (``built``) live with a delta
    segment of the rows appended since its versions, and return the published manifest;
    remove it and return None when ``keep`` is False (the live build moved on) or nothing
    could be published. ``fault`` names the point between visible and live. The caller holds
    the index lock."""
    folder = partition_dir(store.root, built.tenant, built.month)
    hidden = folder / f"{HIDDEN_PREFIX}{built.build_id}"
    if not keep:
        shutil.rmtree(hidden, ignore_errors=True)
        return None
    visible = folder / built.build_id
    os.rename(hidden, visible)
    # Visible, not live: the next publication of the partition removes it.
    faults.hit(fault)
    content_version, logs_version = indexable_versions(store)
    published = None
    if content_version is not None and logs_version is not None:
        published = append_partition(store, built, content_version=content_version,
                                     logs_version=logs_version, model=model, faults=faults,
                                     defer_bytes=defer_bytes)
    if published is None:
        shutil.rmtree(visible, ignore_errors=True)
    return published


def _remove_leftovers(folder: Path) -> None:
    """Remove hidden rebase folders that crashed rebases left (see recently_touched)."""
    for child in folder.glob(f"{HIDDEN_PREFIX}*") if folder.is_dir() else ():
        if child.is_dir() and not recently_touched(child):
            shutil.rmtree(child, ignore_errors=True)
