"""Partition-parallel batch jobs on Ray: one task per (tenant, month) partition.

The driver (the ``turnlake`` process) keeps everything that needs the lake's locks: it takes
the lock, plans which partitions to process at which table versions, and (for embedding)
commits. Ray tasks do one partition's CPU work each: an index build, which the task publishes
itself (atomically per partition, as the in-process build does), or the embedding of the
partition's pending rows, returned to the driver as an Arrow table so that every table write
stays in the one process that holds the writer lock.

Tasks reopen the lake from ``store.root`` (picklable: a local folder or an object-store
location), so a cluster's workers need the same turnlake installed and the lake reachable at
the same root. Ray itself is an optional extra, imported only when a job runs on it.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from lake.embedding.base import Embedder
from lake.embedding.factory import EmbedderSpec
from lake.embedding.reuse import VectorReuse
from lake.errors import TurnlakeError
from lake.index.manifest import PartitionManifest
from lake.index.partition import build_partition
from lake.store import LakeStore
from pipeline.embed import EmbeddedPartition, embed_partition

if TYPE_CHECKING:
    from ray import ObjectRef

LOCAL = "local"  # the address meaning "start a private Ray instance on this machine"
RAY_EXTRA = "--ray needs the ray extra: pip install 'turnlake[ray]'"
CONNECT_TIMEOUT_S = 5.0
# Builds a cancelled run leaves running could publish after the index lock is released.
DRAIN_TIMEOUT_S = 120.0


class RayJobError(TurnlakeError):
    """Ray is missing or unreachable, or a task on it failed."""


def require_ray() -> None:
    """Raise :class:`RayJobError` with the install command unless ray can be imported."""
    try:
        import ray  # noqa: F401
    except ImportError as exc:
        raise RayJobError(RAY_EXTRA) from exc


@contextmanager
def ray_session(address: str | None = LOCAL, *, num_cpus: int | None = None) -> Iterator[None]:
    """Connect this process to Ray for the duration of a job.

    ``local`` (or None) starts a private local instance with ``num_cpus`` CPUs (default: every
    core), without dashboard and with quiet logging, and stops it afterwards. Anything else is
    a cluster address (``auto``, ``host:port`` of its GCS, or ``ray://host:10001``) that
    ``ray.init`` connects to. The address is checked first either way; a process already
    connected to Ray (a notebook, a test) then keeps that connection and it stays open.
    """
    require_ray()
    import ray

    target = address or LOCAL
    if target != LOCAL:
        if num_cpus is not None:
            raise RayJobError(f"--ray-cpus sizes a local Ray instance; the cluster at "
                              f"{target!r} has its own CPUs")
        _check_reachable(target)
    if ray.is_initialized():
        yield
        return
    # A local instance would otherwise report usage statistics over the internet.
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        if target == LOCAL:
            ray.init(address=LOCAL, num_cpus=num_cpus or os.cpu_count() or 1,
                     include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False)
        else:
            ray.init(address=target, logging_level=logging.ERROR, log_to_driver=False)
    except (ConnectionError, ValueError, RuntimeError, TimeoutError) as exc:
        ray.shutdown()
        hint = ""
        if target not in (LOCAL, "auto") and not os.environ.get("RAY_AUTH_MODE"):
            hint = ("; a cluster started with `ray start` checks a token: set RAY_AUTH_MODE=token "
                    "and RAY_AUTH_TOKEN (or copy the head's ~/.ray/auth_token)")
        raise RayJobError(f"cannot connect to Ray at {target!r}: {exc}{hint}") from exc
    try:
        yield
    finally:
        ray.shutdown()


def _check_reachable(address: str) -> None:
    """Fail fast on an address nothing listens on (``ray.init`` would retry for minutes)."""
    if address == "auto":
        return  # ray.init finds the local cluster's address file, or says there is none
    client = address.startswith("ray://")
    parts = urlsplit(address if client else f"//{address}")
    try:
        host, port = parts.hostname, parts.port or (10001 if client else None)
    except ValueError:
        host, port = None, None
    if not host or port is None:
        raise RayJobError(f"bad Ray address {address!r}: expected 'auto', 'host:port' (the "
                          "head node's GCS) or 'ray://host:port' (Ray Client, port 10001)")
    try:
        socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        raise RayJobError(f"cannot reach Ray at {address!r} ({host}:{port}: {exc}); start the "
                          "cluster (`ray start --head`) or check the address") from None


def build_on_ray(store: LakeStore, partitions: Sequence[tuple[str, str]], *,
                 content_version: int, logs_version: int,
                 model: str | None) -> Generator[PartitionManifest, None, None]:
    """A ``PartitionBuilder`` (see pipeline.index_build): one Ray task per partition, each
    building and publishing it; manifests are yielded as tasks finish."""
    task = _remote(_build_task)
    pending = {task.remote(store.root, tenant, month, content_version, logs_version, model):
               f"{tenant}/{month}" for tenant, month in partitions}
    yield from _as_completed(pending, "index build", drain=True)


@dataclass(frozen=True)
class EmbedOnRay:
    """A ``PartitionEmbedder`` (see pipeline.embed): one Ray task per partition, embedding its
    rows in batches of ``batch_size`` with the provider for ``model`` (the setting, as given to
    ``embedder_for``) on ``runtime`` at ``precision``, loaded once per worker process with one
    intra-op thread (a task holds one CPU; the cluster's parallelism is its tasks). Vectors a
    worker has seen for a tenant are reused across its partitions. Rows come back to the
    driver."""

    model: str | None
    batch_size: int
    runtime: str = "onnx"
    precision: str = "fp32"

    def __call__(self, store: LakeStore, version: int, partitions: Sequence[tuple[str, str]],
                 *, reembed: str | None = None, on_rows: Callable[[int], None] | None = None,
                 ) -> Generator[EmbeddedPartition, None, None]:
        """Submit every partition, then yield them as they finish (``on_rows`` is unused:
        progress is per partition)."""
        task = _remote(_embed_task)
        spec = EmbedderSpec(self.model, self.runtime, self.precision, threads=1)
        pending = {task.remote(store.root, version, tenant, month, spec, self.batch_size,
                               reembed): f"{tenant}/{month}"
                   for tenant, month in partitions}
        yield from _as_completed(pending, "embedding", drain=False)


def _build_task(root: Any, tenant: str, month: str, content_version: int, logs_version: int,
                model: str | None) -> PartitionManifest:
    return build_partition(LakeStore(root), tenant, month, content_version=content_version,
                           logs_version=logs_version, model=model)


def _embed_task(root: Any, version: int, tenant: str, month: str, spec: EmbedderSpec,
                batch_size: int, reembed: str | None) -> EmbeddedPartition:
    store = LakeStore(root)
    embedder = _embedder(spec)
    return embed_partition(store, version, tenant, month, embedder, batch_size=batch_size,
                           reembed=reembed, reuse=_reuse(store, version, embedder.name))


@lru_cache(maxsize=4)
def _embedder(spec: EmbedderSpec) -> Embedder:
    # Cached per worker process: Ray reuses workers, so a model loads once, not per partition.
    return spec.build()


_REUSE: dict[tuple[str, int, str], VectorReuse] = {}


def _reuse(store: LakeStore, version: int, identity: str) -> VectorReuse:
    # One per worker and job (lake, version, identity): a tenant's vectors are read once per
    # worker, not once per partition; an older job's entry is dropped.
    key = (str(store.root), version, identity)
    if key not in _REUSE:
        _REUSE.clear()
        _REUSE[key] = VectorReuse(store, identity, version=version)
    return _REUSE[key]


def _remote(fn: Callable[..., Any]) -> Any:
    require_ray()
    import ray

    # Ray would otherwise start a default, chatty instance that outlives the job.
    if not ray.is_initialized():
        raise RayJobError("Ray is not connected: run Ray jobs inside "
                          "pipeline.ray_jobs.ray_session()")
    return _remote_function(fn)


@cache
def _remote_function(fn: Callable[..., Any]) -> Any:
    import ray

    # max_retries=0: a task that died is reported, and the whole job is safe to re-run.
    return ray.remote(num_cpus=1, max_retries=0)(fn)


def _as_completed(pending: dict[ObjectRef[Any], str], what: str, *,
                  drain: bool) -> Generator[Any, None, None]:
    """Yield task results as they finish; on failure or early close cancel the rest (and with
    ``drain`` wait until they have stopped)."""
    import ray
    from ray.exceptions import RayError, RayTaskError

    try:
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            name = pending.pop(ready[0])
            try:
                value = ray.get(ready[0])
            except RayTaskError as exc:
                cause = exc.cause
                if isinstance(cause, TurnlakeError):
                    raise cause from None  # turnlake's own errors name what went wrong
                raise RayJobError(f"{what} of partition {name} failed on Ray: "
                                  f"{type(cause).__name__}: {cause}") from exc
            except RayError as exc:  # the worker or its node died, the result was lost
                raise RayJobError(f"{what} of partition {name} failed on Ray: {exc}; "
                                  "re-run the job") from exc
            yield value
    finally:
        if pending:
            refs = list(pending)
            for ref in refs:
                ray.cancel(ref)
            if drain:
                ray.wait(refs, num_returns=len(refs), timeout=DRAIN_TIMEOUT_S)
