"""Index builds of a serving process, run in a child process.

A partition build is CPU-bound Python and native code; in the serving process it would hold
the interpreter lock against the searches and the group commits for its whole duration.
``ChildBuilder`` is a :class:`pipeline.index_build.PartitionBuilder` that builds each
partition in one long-lived child process (spawned, not forked: the server runs threads).
"""

from __future__ import annotations

from collections.abc import Generator, Sequence

from lake.index.manifest import PartitionManifest
from lake.index.partition import build_partition
from lake.location import LakeLocation
from lake.store import LakeStore
from pipeline.workers import server_child


def _build(root: LakeLocation, tenant: str, month: str, content_version: int,
           logs_version: int, model: str | None) -> PartitionManifest:
    return build_partition(LakeStore(root), tenant, month, content_version=content_version,
                           logs_version=logs_version, model=model)


class ChildBuilder:
    """Builds partitions one after another in a child process; ``close()`` stops it."""

    def __init__(self) -> None:
        self._pool = server_child()

    def __call__(self, store: LakeStore, partitions: Sequence[tuple[str, str]], *,
                 content_version: int, logs_version: int,
                 model: str | None) -> Generator[PartitionManifest, None, None]:
        """Build and publish each partition in the child, yielding its manifest."""
        for tenant, month in partitions:
            # One at a time: when the caller closes this generator no build is in flight.
            yield self._pool.submit(_build, store.root, tenant, month, content_version,
                                    logs_version, model).result()

    def close(self) -> None:
        """Stop the child process."""
        self._pool.shutdown(wait=True, cancel_futures=True)
