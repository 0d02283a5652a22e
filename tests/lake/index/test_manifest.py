"""A search node's cache of an object-store lake's builds: what pruning may remove.

A server and its writer child share one cache, each knowing the live build only as of its
last look; pruning must never take a build newer than the one the pruner knows, nor a build
being written, and must still drop what an erasure or a rebuild made dead."""

from __future__ import annotations

import os
import time
from pathlib import Path

from lake.index.manifest import partition_dir, prune_cache
from lake.index.partition import new_segment_id
from lake.location import LakeLocation

OLD, LIVE, NEWER = "20261203T100000000000-aaaa", "20261203T110000000000-bbbb", \
    "20261203T120000000000-cccc"


def _cache(tmp_path: Path, *builds: str, complete: bool = True) -> tuple[LakeLocation, Path]:
    location = LakeLocation(uri="s3://bucket/lake", cache_root=tmp_path / "cache")
    base = partition_dir(location, "acme", "2026-03")
    for build in builds:
        (base / build).mkdir(parents=True)
        (base / build / "manifest.json").write_text("{}")
        if complete:
            (base / build / ".complete").touch()
    return location, base


def _left(base: Path) -> set[str]:
    return {p.name for p in base.iterdir()} if base.exists() else set()


def test_pruning_keeps_the_live_segments_and_anything_newer(tmp_path: Path) -> None:
    location, base = _cache(tmp_path, OLD, LIVE, NEWER)
    (base / ".20261203T130000000000-dddd.x1").mkdir()  # a download being staged
    prune_cache(location, {("acme", "2026-03"): {LIVE}})
    assert _left(base) == {LIVE, NEWER, ".20261203T130000000000-dddd.x1"}


def test_a_partition_without_a_live_index_loses_its_copies_not_a_first_build(
        tmp_path: Path) -> None:
    location, base = _cache(tmp_path, OLD, LIVE)  # complete copies of a dropped partition
    (base / NEWER).mkdir()  # a first build being written: no completion mark yet
    prune_cache(location, {})
    assert _left(base) == {NEWER}
    hour_ago = time.time() - 3700
    os.utime(base / NEWER, (hour_ago, hour_ago))  # ...left by a crash an hour ago
    prune_cache(location, {})
    assert _left(base) == set()


def test_segment_ids_sort_in_the_order_they_were_made() -> None:
    made = [new_segment_id() for _ in range(200)]
    assert made == sorted(made)
    same_second_old_form = f"{made[0][:15]}-ffffffff"  # ids were once to the second
    assert same_second_old_form < made[0]
