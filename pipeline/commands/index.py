"""Commands that maintain derived data: index build / status, embed --backfill.

``index build`` and ``embed --backfill`` take ``--ray [ADDRESS]`` to run one Ray task per
partition (see pipeline.ray_jobs); without it they work in this process.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Annotated

import typer
from rich.table import Column
from rich.table import Table as RichTable
from typer._click import Context  # the vendored click whose Command TyperCommand is
from typer.core import TyperCommand

from lake.batches import RecoveryReport
from lake.embedding.factory import embedder_from, embedding_identity
from lake.errors import TurnlakeError
from lake.index.status import partition_statuses
from lake.settings import Settings
from lake.store import LakeStore
from pipeline.commands.common import (
    LakeOption,
    app,
    console,
    existing_lake,
    fail,
    literal,
    out,
    styled,
)
from pipeline.commands.embedding_opts import RuntimeOption, with_runtime
from pipeline.embed import PartitionEmbedder, backfill, refresh_long_texts
from pipeline.index_build import (
    BuildReport,
    PartitionBuilder,
    build_in_process,
    build_indexes,
    compact_indexes,
    recover_if_idle,
    stale_partitions,
)
from pipeline.progress import JobProgress, job_progress
from pipeline.ray_jobs import LOCAL, EmbedOnRay, build_on_ray, ray_session

RayOption = Annotated[str | None, typer.Option(
    "--ray", metavar="[ADDRESS]",
    help="Run one Ray task per partition: alone, on a local Ray instance; with an address "
         "('auto', 'host:6379', 'ray://host:10001'), on that cluster. Needs the ray extra.")]
RayCpusOption = Annotated[int | None, typer.Option(
    "--ray-cpus", min=1, help="CPUs of the local Ray instance (default: every core).")]


class RayFlagCommand(TyperCommand):
    """A command whose ``--ray`` may stand alone, meaning ``--ray local``.

    Typer has no optional-value options (it ignores click's ``flag_value``), so a bare
    ``--ray`` (last, or followed by another option) gets the value ``local`` before parsing.
    """

    def parse_args(self, ctx: Context, args: list[str]) -> list[str]:
        """Supply ``local`` to a bare ``--ray``, then parse as usual."""
        return super().parse_args(ctx, with_ray_value(args))


def with_ray_value(args: list[str]) -> list[str]:
    """``args`` with ``local`` inserted after each ``--ray`` that has no value of its own."""
    out_args: list[str] = []
    for i, arg in enumerate(args):
        out_args.append(arg)
        if arg == "--":
            return out_args + args[i + 1:]
        if arg == "--ray" and (i + 1 == len(args) or args[i + 1].startswith("-")):
            out_args.append(LOCAL)
    return out_args


@contextmanager
def _runners(ray: str | None, ray_cpus: int | None, settings: Settings,
             ) -> Iterator[tuple[PartitionBuilder, PartitionEmbedder | None]]:
    """Where partitions are built and embedded: in this process, or on Ray for the job."""
    if ray is None:
        if ray_cpus is not None:
            raise TurnlakeError("--ray-cpus needs --ray")
        yield build_in_process, None
        return
    with ray_session(ray, num_cpus=ray_cpus):
        yield build_on_ray, EmbedOnRay(settings.embedding_model, settings.embed_batch_size,
                                       settings.embedding_runtime, settings.embedding_precision)


def _per_partition(progress: JobProgress, label: str) -> Callable[[str, int, int], None]:
    """The progress bar on a terminal; elsewhere (logs, CI) one line per finished partition."""
    bar = progress.partitions(label)
    plain = not sys.stderr.isatty()

    def update(name: str, done: int, total: int) -> None:
        bar(name, done, total)
        if plain:
            console.print(literal(f"{label}: {name} done ({done}/{total})"), highlight=False)

    return update


index_app = typer.Typer(no_args_is_help=True, help="Build and inspect partition indexes.")
app.add_typer(index_app, name="index")
_MONTH = re.compile(r"\d{4}-(0[1-9]|1[0-2])")


def _checked_month(value: str | None) -> str | None:
    """``--month`` as partitions name it, or a usage error (a month that names no partition
    would otherwise match nothing without a word)."""
    if value is not None and not _MONTH.fullmatch(value):
        raise typer.BadParameter(f"{value!r} is not a month as YYYY-MM (e.g. 2026-03)")
    return value


MonthOption = Annotated[str | None, typer.Option(help="Only this month (YYYY-MM).",
                                                 callback=_checked_month)]


def _say_if_nothing_matched(report: BuildReport, tenant: str | None,
                            month: str | None) -> None:
    """A --tenant / --month that selected no partition of the lake is said, not passed over."""
    if (tenant or month) and not report.built and not report.skipped_fresh \
            and not report.dropped and not report.unindexed:
        what = " ".join(f"{name} {value}" for name, value in
                        (("tenant", tenant), ("month", month)) if value)
        console.print(styled(("note:", "yellow"), f" no partition of {what} matched in this lake"))


@index_app.command("build", cls=RayFlagCommand)
def index_build(
    full: Annotated[bool, typer.Option(help="Rebuild every partition, fresh or not.")] = False,
    tenant: Annotated[str | None, typer.Option(help="Only this tenant.")] = None,
    month: MonthOption = None,
    ray: RayOption = None,
    ray_cpus: RayCpusOption = None,
    lake: LakeOption = None,
) -> None:
    """Rebuild the indexes of partitions whose tables changed since their manifest."""
    settings = existing_lake(lake)
    try:
        recovered = recover_if_idle(LakeStore(settings.lake))
        if recovered is not None:
            _say_recovered(recovered)
        with (_runners(ray, ray_cpus, settings) as (builder, _),
              job_progress() as progress):
            report = build_indexes(LakeStore(settings.lake),
                                   model=embedding_identity(settings),
                                   full=full, tenant=tenant, month=month, builder=builder,
                                   on_partition=_per_partition(progress, "building indexes"))
    except TurnlakeError as exc:
        raise fail(exc) from exc
    _print_built(report)
    _say_if_nothing_matched(report, tenant, month)
    out.print(f"{len(report.built)} built, {report.skipped_fresh} already fresh")


def _say_recovered(recovered: RecoveryReport) -> None:
    """What finishing a crashed writer's batches did, before a build."""
    if recovered.completed:
        out.print(f"finished {len(recovered.completed)} batch(es) a crashed writer left")
    if recovered.rolled_back:
        out.print(f"rolled back {len(recovered.rolled_back)} batch(es) a crashed writer left "
                  "half-written (re-run that ingest to record them)")


def _seconds_by_kind(seconds: dict[str, float]) -> str:
    """" (read 0.41s, semantic 2.10s, ...)", or "" for a manifest that has no breakdown."""
    if not seconds:
        return ""
    order = ["read", "rows", "semantic", "lexical", "trigram"]  # the order a build takes
    kinds = sorted(seconds, key=lambda k: (order.index(k) if k in order else len(order), k))
    return " (" + ", ".join(f"{kind} {seconds[kind]:.2f}s" for kind in kinds) + ")"


def _print_built(report: BuildReport) -> None:
    for m in report.built:
        name = f"{m.tenant}/{m.month}"
        how = ("delta segment" if name in report.appended else
               "compacted" if name in report.compacted else "built")
        out.print(literal(f"{how} {name}: {m.row_count} rows ({m.embedded_rows} embedded, "
                          f"{m.semantic_kind}, {len(m.live_segments)} segment"
                          f"{'s' if len(m.live_segments) > 1 else ''}) from content_rows "
                          f"v{m.content_version} in {m.build_seconds:.2f}s"
                          f"{_seconds_by_kind(m.seconds_by_kind)}"))
    for m in report.foreign_vectors:
        # Rows embedded by another model are not in the semantic index: say so, never
        # leave a partition silently unsearchable by meaning.
        console.print(styled(
            ("warning:", "yellow"),
            f" {m.tenant}/{m.month}: {m.foreign_vectors} rows carry vectors of another model "
            f"than {m.embedding_model!r}; the semantic index holds {m.embedded_rows} of "
            f"{m.row_count} rows. Set TURNLAKE_EMBEDDING_MODEL to their model and rebuild, or "
            "re-embed them."))
    for name in report.dropped:
        out.print(literal(f"dropped index of {name} (no rows left)"))


@index_app.command("compact")
def index_compact(
    tenant: Annotated[str | None, typer.Option(help="Only this tenant.")] = None,
    month: MonthOption = None,
    lake: LakeOption = None,
) -> None:
    """Merge each partition's index segments into one new base segment."""
    settings = existing_lake(lake)
    try:
        with job_progress() as progress:
            report = compact_indexes(LakeStore(settings.lake),
                                     model=embedding_identity(settings),
                                     tenant=tenant, month=month,
                                     on_partition=_per_partition(progress, "compacting"))
    except TurnlakeError as exc:
        raise fail(exc) from exc
    _print_built(report)
    for name in report.unindexed:
        part_tenant, part_month = name.split("/", 1)
        console.print(styled(
            ("note:", "yellow"),
            f" {name} has no index to compact (missing or unreadable); build it with "
            f"`turnlake index build --tenant {part_tenant} --month {part_month}`"))
    _say_if_nothing_matched(report, tenant, month)
    out.print(f"{len(report.compacted)} compacted, {report.skipped_fresh} already one segment")


@index_app.command("status")
def index_status(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    lake: LakeOption = None,
) -> None:
    """Show each partition's index freshness, sizes and the command that rebuilds it."""
    settings = existing_lake(lake)
    statuses = partition_statuses(LakeStore(settings.lake),
                                  model=embedding_identity(settings))
    if as_json:
        out.print_json(json.dumps([{
            "partition": s.name, "freshness": s.freshness,
            "rows": s.manifest.row_count if s.manifest else None,
            "embedded_rows": s.manifest.embedded_rows if s.manifest else None,
            "segments": len(s.manifest.live_segments) if s.manifest else None,
            "foreign_vectors": s.manifest.foreign_vectors if s.manifest else None,
            "built_from_version": s.manifest.content_version if s.manifest else None,
            "table_version": s.content_version,
            "rebuild": s.rebuild_command if s.freshness != "fresh" else None,
        } for s in statuses.values()]))
        return
    # The partition names the row: never cut or wrapped, whatever the width (a pipe, an
    # 80-column terminal). It is the first column, so a table wider than the terminal loses
    # its right edge, never the name; the fix command wraps instead.
    name_width = max((len(s.name) for s in statuses.values()), default=len("partition"))
    table = RichTable(Column("partition", no_wrap=True, min_width=name_width),
                      "state", "rows", "embedded", "segments", "built from", "table", "fix")
    for s in statuses.values():
        m = s.manifest
        table.add_row(literal(s.name), s.freshness, str(m.row_count) if m else "-",
                      str(m.embedded_rows) if m else "-",
                      str(len(m.live_segments)) if m else "-",
                      f"v{m.content_version}" if m else "-", f"v{s.content_version}",
                      literal(s.rebuild_command if s.freshness in ("stale", "missing")
                              else ""))
    out.print(table)


@app.command(cls=RayFlagCommand)
def embed(
    backfill_rows: Annotated[bool, typer.Option(
        "--backfill", help="Embed every row still pending or failed.")] = False,
    reembed: Annotated[bool, typer.Option(
        "--reembed", help="With --backfill: also re-embed rows whose vectors came from another "
                          "embedding identity (model, runtime family or precision).")] = False,
    long_texts: Annotated[bool, typer.Option(
        "--long-texts", help="Re-embed, as passages, rows longer than the model reads that "
                             "carry no passage vectors (embedded before passages, they hold "
                             "their opening's vector; before passage vectors were kept, "
                             "only the pooled one); runs in this process.")] = False,
    index: Annotated[bool, typer.Option(help="Rebuild the partitions that changed.")] = True,
    runtime: RuntimeOption = None,
    ray: RayOption = None,
    ray_cpus: RayCpusOption = None,
    lake: LakeOption = None,
) -> None:
    """Embed rows that were written without an embedding (provider down, --no-embed)."""
    if not backfill_rows and not long_texts:
        raise fail(TurnlakeError("nothing to do: pass --backfill or --long-texts"))
    if long_texts and (backfill_rows or reembed or ray):
        raise fail(TurnlakeError("--long-texts runs alone: not with --backfill, --reembed "
                                 "or --ray"))
    settings = with_runtime(existing_lake(lake), runtime)
    try:
        embedder = embedder_from(settings, "bulk")
        with (_runners(ray, ray_cpus, settings) as (builder, runner),
              job_progress() as progress):
            if long_texts:
                report = refresh_long_texts(settings, embedder,
                                            on_progress=progress.total("re-embedding rows"),
                                            on_partition=_per_partition(progress, "embedding"))
            else:
                report = backfill(settings, embedder, runner=runner, reembed=reembed,
                                  on_progress=progress.total("embedding rows"),
                                  on_partition=_per_partition(progress, "embedding"))
            store = LakeStore(settings.lake)
            # also the partitions whose index went stale: a backfill killed after committing
            # its vectors, re-run, embeds nothing and must still index them
            touched = report.partitions | stale_partitions(store) if index else set()
            if touched:
                build_indexes(store, model=embedder.name, partitions=touched, builder=builder,
                              on_partition=_per_partition(progress, "building indexes"))
    except TurnlakeError as exc:
        raise fail(exc) from exc
    if report.error:
        console.print(styled(("embedding failed:", "yellow"), f" {report.error}"))
    if long_texts and not report.long_rows:
        out.print("no long row lacks its passage vectors: nothing to re-embed")
    elif long_texts:
        out.print(f"{report.long_rows} long rows had no passage vectors: {report.embedded} "
                  f"re-embedded as passages, {report.failed} failed")
    else:
        out.print(f"embedded {report.embedded} rows, {report.failed} failed; {report.reused} "
                  "of them reused a vector instead of computing it")
    if report.error:
        raise typer.Exit(1)
