"""The workbench's one read-only service: search, catalog, replay and analytics over a lake.

Pages get it from :func:`cached_workbench`, which keeps one instance per (lake, lake version):
a new commit to any table or a new index build changes the version and so builds a new
service. Every method takes the :class:`~app.models.Viewer` it acts for and reads through the
same principal rules as the CLI, so a page never sees a row the service would not return.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import streamlit as st

from app.models import FileView, HitView, ReplayTurn, SearchForm, SearchOutcome, Viewer
from lake import analytics
from lake.embedding.factory import embedder_from
from lake.errors import AccessDenied, RefError
from lake.index.manifest import list_partitions, read_current
from lake.location import LakeLocation
from lake.retention import AuditEntry, read_audit
from lake.search.catalog import CatalogTurn, ConversationEntry, TurnCatalog
from lake.search.materialize import FileCard, TurnMaterializer
from lake.search.service import SearchService
from lake.settings import RetentionRule, Settings
from lake.store import LakeStore
from lake.tables import Table

# Hosted files up to this size are resolved while the turn renders, so that an expired or
# refused ref shows on its card; bigger ones are resolved only when downloaded.
EAGER_FILE_BYTES = 5 * 1024 * 1024


@dataclass(frozen=True)
class LakeVersion:
    """What identifies a lake's readable state: each table's version and each index build."""

    tables: tuple[int | None, ...]
    index_builds: tuple[str, ...]


def lake_version(root: Path | LakeLocation) -> LakeVersion:
    """The lake's current version, read cheaply from Delta log names and index pointers."""
    store = LakeStore(root)
    tables = tuple(store.latest_version(t) for t in Table)
    builds = []
    for tenant, month in list_partitions(root):
        current = read_current(root, tenant, month)
        builds.append(f"{tenant}/{month}@{current[1].build_id if current else '-'}")
    return LakeVersion(tables, tuple(builds))


@dataclass(frozen=True)
class OverviewData:
    """The Overview page's figures for one window."""

    totals: analytics.ActivityTotals
    per_day: pl.DataFrame
    roles: pl.DataFrame
    writers: pl.DataFrame
    feedback: pl.DataFrame


@dataclass(frozen=True)
class RetentionData:
    """The Retention page's figures as of one instant."""

    as_of: datetime
    default_ttl_days: int
    rules: tuple[RetentionRule, ...]
    sizes: pl.DataFrame
    histogram: pl.DataFrame
    expired_turns: pl.DataFrame
    expired_files: pl.DataFrame
    purge: list[analytics.PurgeCount]


PurgeRunner = Callable[[Viewer, datetime], list[analytics.PurgeCount]]


class Workbench:
    """Read-only access to one lake for the workbench pages."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.store = LakeStore(settings.lake)
        self.search_service = SearchService(
            self.store, embedder=lambda: embedder_from(settings, "query"))
        self.catalog = TurnCatalog(self.store)
        self.materializer = TurnMaterializer(self.store)

    # -- identity ------------------------------------------------------------------------

    def tenants(self) -> list[str]:
        """The tenants the analyst may read: the configured ones, else every tenant found."""
        if self.settings.analyst_tenants:
            return list(self.settings.analyst_tenants)
        return analytics.lake_tenants(self.store)

    def users(self, viewer: Viewer) -> list[str]:
        """Users whose conversations the viewer may see."""
        return analytics.tenant_users(self.store, viewer.principal)

    # -- search and replay ---------------------------------------------------------------

    def search(self, viewer: Viewer, form: SearchForm, *,
               as_of: datetime | None = None) -> SearchOutcome:
        """Run the form's search; raises QueryError / AccessDenied for a refused request."""
        request = form.request(viewer.principal, as_of or datetime.now(UTC))
        result = self.search_service.search(request)
        titles = {c.conversation_id: c.title for c in self.conversations(viewer)}
        hits = [HitView(h, titles.get(h.conversation_id)) for h in result.hits]
        return SearchOutcome(viewer, form.query, hits, result.warnings,
                             float(result.timings_ms.get("total", 0.0)))

    def conversations(self, viewer: Viewer, *,
                      user_id: str | None = None) -> list[ConversationEntry]:
        """The viewer's live conversations, most recent activity first."""
        return self.catalog.conversations(viewer.principal, user_id=user_id)

    def turns(self, viewer: Viewer, conversation_id: str) -> list[CatalogTurn]:
        """A conversation's live turns in order; AccessDenied when it is another user's."""
        return self.catalog.turns(viewer.principal, conversation_id)

    def replay(self, viewer: Viewer, conversation_id: str, turn_id: str) -> ReplayTurn:
        """One turn rebuilt for replay, its hosted files resolved through the ref resolver."""
        turn = self.materializer.turn(viewer.principal, conversation_id, turn_id)
        return ReplayTurn.build(turn, [self._file(viewer, card) for card in turn.files])

    def file_bytes(self, viewer: Viewer, ref: str) -> bytes:
        """A hosted file's bytes; RefError / AccessDenied when the resolver refuses."""
        return self.materializer.resolve(viewer.principal, ref)[1]

    def _file(self, viewer: Viewer, card: FileCard) -> FileView:
        if card.size > EAGER_FILE_BYTES:
            return FileView(card, None, None)
        try:
            return FileView(card, self.file_bytes(viewer, card.ref), None)
        except (RefError, AccessDenied) as exc:
            return FileView(card, None, str(exc))

    # -- analytics -----------------------------------------------------------------------

    def overview(self, viewer: Viewer, *, since: datetime | None, by: str) -> OverviewData:
        """Activity since a moment (None: all time), turns per day split by app or agent."""
        p = viewer.principal
        return OverviewData(
            totals=analytics.activity_totals(self.store, p, since=since),
            per_day=analytics.turns_per_day(self.store, p, by=by, since=since),
            roles=analytics.role_mix(self.store, p, since=since),
            writers=analytics.writer_mix(self.store, p, since=since),
            feedback=analytics.feedback_mix(self.store, p, since=since))

    def retention(self, viewer: Viewer, *, weeks: int = 12,
                  as_of: datetime | None = None) -> RetentionData:
        """Sizes, the coming expiry, what is already past TTL and the purge preview."""
        p, now = viewer.principal, as_of or datetime.now(UTC)
        return RetentionData(
            as_of=now, default_ttl_days=self.settings.default_ttl_days,
            rules=tuple(r for r in self.settings.retention if r.tenant == viewer.tenant),
            sizes=analytics.table_sizes(self.store, p),
            histogram=analytics.expiry_histogram(self.store, p, as_of=now, weeks=weeks),
            expired_turns=analytics.expired_turns(self.store, p, as_of=now),
            expired_files=analytics.expired_files(self.store, p, as_of=now),
            purge=analytics.purge_preview(self.store, p, as_of=now))

    def index_health(self, viewer: Viewer) -> list[analytics.PartitionHealth]:
        """Index state and embedding coverage of the viewer's partitions."""
        return analytics.index_health(self.store, viewer.principal,
                                      self.search_service.statuses())


def purge_runner(workbench: Workbench) -> PurgeRunner | None:
    """The purge action of the Retention page: purge the viewer's tenant as of an instant.

    Only analysts may purge (None for a user view). The purge itself is the retention
    pipeline's job (writer lock, crash-safe steps, index rebuilds, vacuum, audit row).
    """
    from pipeline.retention import purge

    def run(viewer: Viewer, as_of: datetime) -> list[analytics.PurgeCount]:
        if not viewer.is_analyst:
            raise AccessDenied("only an analyst of the tenant may purge")
        report = purge(workbench.settings, as_of=as_of, tenant=viewer.tenant,
                       actor=f"workbench analyst of {viewer.tenant}")
        deleted = report.outcome.deleted if report.outcome else {}
        return [analytics.PurgeCount(table=t, rows=int(n), bytes=None)
                for t, n in sorted(deleted.items())]

    return run


def audit_log(workbench: Workbench, viewer: Viewer, *, limit: int = 50) -> list[AuditEntry]:
    """The tenant's retention audit rows, newest first (analysts only; users see none)."""
    if not viewer.is_analyst:
        return []
    return [e for e in read_audit(workbench.store) if e.tenant in (viewer.tenant, None)][:limit]


@st.cache_resource(max_entries=4, show_spinner=False)
def _workbench(settings: Settings, version: LakeVersion) -> Workbench:
    del version  # part of the cache key only: a new version builds a new service
    return Workbench(settings)


def cached_workbench(settings: Settings) -> Workbench:
    """The shared read-only service for the lake's current version (rebuilt after an ingest
    or an index build)."""
    return _workbench(settings, lake_version(settings.lake))
