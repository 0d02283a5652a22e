"""Per-partition index manifests: what an index set was built from, and where it lives.

Layout under ``<lake>/indexes/<tenant>/<month>/``: one folder per build (``<build_id>/`` holding
``manifest.json`` and the artifacts) and ``current.json`` naming the live build. A new build is
written beside the old one and made live by atomically replacing ``current.json``.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

from lake.errors import IndexError_

MANIFEST_FILE = "manifest.json"
CURRENT_FILE = "current.json"


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

    def to_json(self) -> str:
        """The manifest as pretty JSON."""
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> PartitionManifest:
        """Parse a manifest written by :meth:`to_json`."""
        return cls(**json.loads(text))


def partition_dir(root: Path, tenant: str, month: str) -> Path:
    """The folder holding every build of one partition's indexes."""
    return Path(root) / "indexes" / tenant / month


def read_current(root: Path, tenant: str, month: str) -> tuple[Path, PartitionManifest] | None:
    """The live build folder and its manifest, or None when the partition has no index."""
    base = partition_dir(root, tenant, month)
    pointer = base / CURRENT_FILE
    if not pointer.exists():
        return None
    try:
        build_id = json.loads(pointer.read_text())["build_id"]
        folder = base / build_id
        return folder, PartitionManifest.from_json((folder / MANIFEST_FILE).read_text())
    except (OSError, KeyError, ValueError, TypeError) as exc:
        raise IndexError_(f"index of partition {tenant}/{month} is unreadable: {exc}") from exc


def publish(root: Path, manifest: PartitionManifest) -> None:
    """Make a finished build live, then remove the partition's older builds."""
    base = partition_dir(root, manifest.tenant, manifest.month)
    tmp = base / f".{CURRENT_FILE}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps({"build_id": manifest.build_id}))
    os.replace(tmp, base / CURRENT_FILE)
    remove_other_builds(base, keep=manifest.build_id)


def remove_other_builds(base: Path, keep: str | None) -> None:
    """Delete build folders other than ``keep`` (left by older builds or crashed ones)."""
    if not base.exists():
        return
    for child in base.iterdir():
        if child.is_dir() and child.name != keep:
            shutil.rmtree(child, ignore_errors=True)


def list_partitions(root: Path) -> list[tuple[str, str]]:
    """Every (tenant, month) that has a live index."""
    base = Path(root) / "indexes"
    if not base.exists():
        return []
    return sorted((t.name, m.name) for t in base.iterdir() if t.is_dir()
                  for m in t.iterdir() if (m / CURRENT_FILE).exists())


def drop_partition(root: Path, tenant: str, month: str) -> None:
    """Remove a partition's indexes entirely (its table rows are all gone)."""
    shutil.rmtree(partition_dir(root, tenant, month), ignore_errors=True)
