"""``ingest --ray`` / ``import … --ray``: write the turns here, embed their rows on Ray workers.

Parsing and writing stay in this process (they need the writer lock and are not the bottleneck;
embedding is, at ~76 texts/s per two cores). The new rows are written ``pending``; then the
backfill path embeds every pending partition with one Ray task each (vectors come back and are
committed here), and the touched partitions' indexes are built on Ray too. If embedding fails
the turns are in and searchable by text, and ``turnlake embed --backfill`` finishes the job.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from lake.embedding.factory import embedder_from
from lake.settings import Settings
from lake.store import LakeStore
from pipeline.embed import backfill
from pipeline.index_build import build_indexes
from pipeline.jobs import EmbedTally, IngestJobReport, run_ingest
from pipeline.ray_jobs import EmbedOnRay, build_on_ray, ray_session
from pipeline.retention import Settle


def ingest_job(settings: Settings, paths: Sequence[Path] | None = None, *,
               records: Sequence[object] | None = None, embed: bool = True, index: bool = True,
               ray: str | None = None, ray_cpus: int | None = None, workers: int = 1,
               on_line: Callable[[int], None] | None = None,
               on_embedded: Callable[[int], None] | None = None,
               on_partition: Callable[[str, int, int], None] | None = None,
               on_embedded_partition: Callable[[str, int, int], None] | None = None,
               replace: bool = False, settle: Settle | None = None) -> IngestJobReport:
    """:func:`pipeline.jobs.run_ingest`, or with ``ray`` (an address, ``local`` for a private
    instance of ``ray_cpus`` CPUs) the same job with embedding and index builds on Ray.
    ``on_embedded_partition(name, done, total)`` reports partitions embedded on Ray; ``replace``
    supersedes stored turns whose content changed, their erasures run ``settle`` first (see
    :func:`pipeline.jobs.run_ingest`)."""
    if ray is None:
        return run_ingest(settings, paths, records=records, embed=embed, index=index,
                          workers=workers, on_line=on_line, on_embedded=on_embedded,
                          on_partition=on_partition, replace=replace, settle=settle)
    with ray_session(ray, num_cpus=ray_cpus):
        job = run_ingest(settings, paths, records=records, embed=False, index=False,
                         workers=workers, on_line=on_line, replace=replace, settle=settle)
        tally = EmbedTally()
        touched = set(job.ingest.partitions)
        if embed and job.ingest.partitions:
            embedder = embedder_from(settings, "bulk")  # names the identity; loads nothing here
            runner = EmbedOnRay(settings.embedding_model, settings.embed_batch_size,
                                settings.embedding_runtime, settings.embedding_precision)
            done = backfill(settings, embedder, runner=runner,
                            on_partition=on_embedded_partition)
            tally = EmbedTally(done.embedded, done.failed, done.reused,
                               [done.error] if done.error else [])
            touched |= done.partitions
        build = None
        if index and touched:
            build = build_indexes(LakeStore(settings.lake),
                                  model=embedder_from(settings, "bulk").name,
                                  partitions=touched, builder=build_on_ray,
                                  on_partition=on_partition)
    return IngestJobReport(job.ingest, tally, build)
