"""The workbench's one read-only service: search, catalog, replay and analytics over a lake.

Pages get it from :func:`cached_workbench`, which keeps one instance per lake for the life of
the app: every read goes to the tables' latest versions, and the search service follows new
index builds itself (lake.index.status), so a commit or a build needs no new service. (It
used to build one per lake version: on a live lake the model loaded again and every
tenant's indexes were opened again after each write, and each page run read every
partition's index pointer and manifest to name the version, ~90 ms at 1,012 partitions.)

Every method takes the :class:`~app.models.Viewer` it acts for and reads through the same
principal rules as the CLI, so a page never sees a row the service would not return.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import polars as pl
import streamlit as st

from app.models import (
    FileView,
    HitView,
    MentionView,
    RefView,
    ReplayTurn,
    SearchForm,
    SearchOutcome,
    Viewer,
    mentioned_refs,
)
from lake import analytics
from lake.deletion.audit import AuditEntry, read_audit
from lake.embedding.factory import embedder_from, embedding_identity
from lake.errors import AccessDenied, QueryError, RefError
from lake.mentions import Mention
from lake.resolver import RefResolver, ResolvedRecord
from lake.search.access import Principal
from lake.search.catalog import (
    CatalogTurn,
    ConversationEntry,
    ConversationPage,
    ConversationQuery,
    TurnCatalog,
)
from lake.search.materialize import FileCard, TurnMaterializer
from lake.search.request import SearchRequest
from lake.search.service import SearchService
from lake.settings import RetentionRule, Settings
from lake.store import LakeStore
from lake.tables import Table

# Hosted files up to this size are resolved while the turn renders, so that an expired or
# refused ref shows on its card; bigger ones are resolved only when downloaded.
EAGER_FILE_BYTES = 5 * 1024 * 1024


@dataclass(frozen=True)
class OverviewData:
    """The Overview page's headline figures for one window (each tab below them reads its
    own: :meth:`Workbench.trends`, :meth:`Workbench.tops`, :meth:`Workbench.failures`,
    :meth:`Workbench.mixes`)."""

    totals: analytics.ActivityTotals
    per_day: pl.DataFrame


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


class Warmup:
    """Loads a service's model, tables and indexes in a background thread.

    Started once the app's first page is drawn (app/main.py; loading the model beside that
    run slowed it by as much), so that the first search does not pay for loading it; pages
    show :meth:`describe` until it is done, and a search that comes earlier waits on
    :meth:`wait` behind a visible spinner.
    """

    def __init__(self, load: Callable[[], str]) -> None:
        self._load = load
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._started = 0.0
        self._seconds: float | None = None
        self._what = ""
        self.error: str | None = None

    def start(self) -> None:
        """Begin loading (once; later calls do nothing)."""
        with self._lock:
            if self._thread is not None:
                return
            self._started = time.monotonic()
            self._thread = threading.Thread(target=self._run, name="workbench-warmup",
                                            daemon=True)
            self._thread.start()

    def _run(self) -> None:
        try:
            self._what = self._load()
        except Exception as exc:  # shown on the page; search reports its own error then
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            self._seconds = time.monotonic() - self._started
            self._done.set()

    @property
    def ready(self) -> bool:
        """Whether loading has finished (successfully or not)."""
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until loading has finished (starting it if needed); False on timeout."""
        self.start()
        return self._done.wait(timeout)

    def describe(self) -> str:
        """One line for the page: loading (for how long), ready, or what failed."""
        if not self.ready:
            waited = time.monotonic() - self._started if self._started else 0.0
            return f"Loading the model, tables and indexes in the background ({waited:.0f} s)"
        if self.error is not None:
            return f"Warm-up failed ({self.error}); searches load what they need themselves."
        return f"Service ready: {self._what} (loaded in {self._seconds or 0.0:.1f} s)"


class Workbench:
    """Read-only access to one lake for the workbench pages."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.store = LakeStore(settings.lake)
        self.search_service = SearchService(
            self.store, embedder=lambda: embedder_from(settings, "query"))
        self.catalog = TurnCatalog(self.store)
        self.materializer = TurnMaterializer(self.store)
        self.warmup = Warmup(self.warm)
        self._tenants: tuple[int | None, list[str]] | None = None

    def warm(self) -> str:
        """Load what a first search needs: the embedding model (one query encoded), the index
        statuses, and each tenant's partition indexes (one search per tenant opens them).
        Returns what was loaded, for the page."""
        model = self.settings.embedding_model or "all-MiniLM-L6-v2"
        self.search_service.embedder().encode(["warm up"])
        tenants = self.tenants()
        for tenant in tenants:
            self.search_service.search(SearchRequest(
                "warm up", Principal(tenant, analyst=True), scope="tenant", k=1))
        return f"model {model}, indexes of {len(tenants)} tenant(s)"

    # -- identity ------------------------------------------------------------------------

    def tenants(self) -> list[str]:
        """The tenants the analyst may read: the configured ones, else every tenant found
        (worked out once per version of the timelines table: the sidebar asks on every
        page run)."""
        if self.settings.analyst_tenants:
            return list(self.settings.analyst_tenants)
        version = self.store.latest_version(Table.TIMELINES)
        known = self._tenants
        if known is None or known[0] != version:
            known = self._tenants = (version, analytics.lake_tenants(self.store))
        return list(known[1])

    def users(self, viewer: Viewer) -> list[str]:
        """Users whose conversations the viewer may see."""
        return analytics.tenant_users(self.store, viewer.principal)

    # -- search and replay ---------------------------------------------------------------

    def search(self, viewer: Viewer, form: SearchForm, *,
               as_of: datetime | None = None) -> SearchOutcome:
        """Run the form's search; raises QueryError / AccessDenied for a refused request,
        and QueryError for a query without a word (spaces or punctuation only)."""
        if not form.has_words():
            raise QueryError("the query has no words to search")
        now = as_of or datetime.now(UTC)
        request = form.request(viewer.principal, now)
        result = self.search_service.search(request)
        titles = self.titles(viewer, list(dict.fromkeys(h.conversation_id
                                                        for h in result.hits)))
        hits = [HitView(h, titles.get(h.conversation_id)) for h in result.hits]
        # The page explains an answer emptied by the relevance floor itself.
        warnings = [w for w in result.warnings if w != result.floor_note]
        when = form.when_range(now)
        span = (analytics.turn_span(self.store, viewer.principal) if when is not None
                else None)
        return SearchOutcome(viewer, form, hits, warnings,
                             float(result.timings_ms.get("total", 0.0)), result.below_floor,
                             tuple(result.named_times), when, span)

    def titles(self, viewer: Viewer, conversation_ids: list[str]) -> dict[str, str]:
        """Titles of the named conversations; an untitled one is named by its first prompt."""
        return self.catalog.titles(viewer.principal, conversation_ids)

    def conversation_page(self, viewer: Viewer, query: ConversationQuery) -> ConversationPage:
        """One page of the viewer's conversations (never all of a tenant's at once)."""
        return self.catalog.conversation_page(viewer.principal, query)

    def facets(self, viewer: Viewer) -> dict[str, list[str]]:
        """The apps, agents and users the conversation list can filter on."""
        return self.catalog.facets(viewer.principal)

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
        hosted = {card.ref for card in turn.files}
        mentions = [self._mention(viewer, ref, name)
                    for ref, name in mentioned_refs(str(turn.completion["text"]))
                    if ref not in hosted]
        attached = {str(a["ref"]): self._mention(viewer, str(a["ref"]), str(a["name"]))
                    for a in turn.attachments if a.get("ref")}
        refs = tuple(self._ref(viewer, m) for m in turn.mentions
                     if not m.ref.startswith("conv:fi:"))
        return ReplayTurn.build(turn, [self._file(viewer, card) for card in turn.files],
                                mentions, attached, refs)

    def _ref(self, viewer: Viewer, mention: Mention) -> RefView:
        """A record ref the turn's text names, followed for the viewer when it was found."""
        if mention.status != "found" or mention.address is None:
            return RefView(mention.ref, mention.status, mention.address, None, mention.reason)
        try:
            resolved = RefResolver(self.materializer).resolve(viewer.principal,
                                                              mention.address)
        except (RefError, AccessDenied) as exc:
            return RefView(mention.ref, "refused", mention.address, None, str(exc))
        value = (json.dumps(resolved.value, indent=2, default=str)
                 if isinstance(resolved, ResolvedRecord) else None)
        return RefView(mention.ref, "found", mention.address, value, None)

    def _mention(self, viewer: Viewer, ref: str, name: str) -> MentionView:
        """A ref resolved for the viewer, or the resolver's reason for refusing it."""
        try:
            card, data = self.materializer.resolve(viewer.principal, ref)
        except (RefError, AccessDenied) as exc:
            return MentionView(ref, name, None, str(exc))
        return MentionView(card.ref, card.name, data, None)

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

    def overview(self, viewer: Viewer, *, since: datetime | None, by: str,
                 until: datetime | None = None) -> OverviewData:
        """Activity in [since, until) (None: open-ended): totals and turns per day split by
        app, agent or user_id."""
        p = viewer.principal
        return OverviewData(
            totals=analytics.activity_totals(self.store, p, since=since, until=until),
            per_day=analytics.turns_per_day(self.store, p, by=by, since=since, until=until))

    def trends(self, viewer: Viewer, *, since: datetime | None,
               until: datetime | None = None) -> pl.DataFrame:
        """The daily tokens, cost, duration percentiles and feedback rate in the window."""
        return analytics.daily_trends(self.store, viewer.principal, since=since, until=until)

    def tops(self, viewer: Viewer, *, since: datetime | None,
             until: datetime | None = None) -> tuple[pl.DataFrame, pl.DataFrame]:
        """The busiest users and apps in the window."""
        p = viewer.principal
        return (analytics.top_groups(self.store, p, by="user_id", since=since, until=until),
                analytics.top_groups(self.store, p, by="app", since=since, until=until))

    def failures(self, viewer: Viewer, *, since: datetime | None,
                 until: datetime | None = None) -> pl.DataFrame:
        """The turns in the window with a failed step or negative feedback."""
        return analytics.failure_review(self.store, viewer.principal, since=since,
                                        until=until)

    def mixes(self, viewer: Viewer, *, since: datetime | None, until: datetime | None = None
              ) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
        """Search rows per role, turns per writer and per feedback outcome in the window."""
        p = viewer.principal
        return (analytics.role_mix(self.store, p, since=since, until=until),
                analytics.writer_mix(self.store, p, since=since, until=until),
                analytics.feedback_mix(self.store, p, since=since, until=until))

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
                                      self.search_service.statuses(viewer.principal.tenant))


def purge_runner(workbench: Workbench) -> PurgeRunner | None:
    """The purge action of the Retention page: purge the viewer's tenant as of an instant.

    Only admins may purge (AccessDenied otherwise, also for an admin viewing as a user). The
    purge itself is the retention pipeline's job (writer lock, crash-safe steps, index
    rebuilds, vacuum, audit row).
    """
    from pipeline.retention import purge

    def run(viewer: Viewer, as_of: datetime) -> list[analytics.PurgeCount]:
        if not viewer.may_admin:
            raise AccessDenied("only an admin of the tenant may purge")
        report = purge(workbench.settings, as_of=as_of, tenant=viewer.tenant,
                       actor=f"workbench admin of {viewer.tenant}")
        deleted = report.outcome.deleted if report.outcome else {}
        return [analytics.PurgeCount(table=t, rows=int(n), bytes=None)
                for t, n in sorted(deleted.items())]

    return run


IndexRebuilder = Callable[[Viewer, list[tuple[str, str]], Callable[[str, int, int], None]],
                          list[str]]


def index_rebuilder(workbench: Workbench) -> IndexRebuilder:
    """The rebuild action of the Index health page: rebuild the named stale or missing
    partitions of the viewer's tenant, under the index lock exactly as ``turnlake index build``
    takes it (a build already running elsewhere is waited for; what it left fresh is skipped).
    Returns the partitions built. Admins only."""
    from pipeline.index_build import build_indexes

    def run(viewer: Viewer, partitions: list[tuple[str, str]],
            progress: Callable[[str, int, int], None]) -> list[str]:
        if not viewer.may_admin:
            raise AccessDenied("only an admin of the tenant may rebuild indexes")
        foreign = [f"{t}/{m}" for t, m in partitions if t != viewer.tenant]
        if foreign:
            raise AccessDenied(f"{viewer.describe()} may not rebuild {', '.join(foreign)}")
        model = embedding_identity(workbench.settings)
        report = build_indexes(workbench.store, model=model, tenant=viewer.tenant,
                               partitions=set(partitions), on_partition=progress)
        return [f"{m.tenant}/{m.month}" for m in report.built] + report.dropped

    return run


def audit_log(workbench: Workbench, viewer: Viewer, *, limit: int = 50) -> list[AuditEntry]:
    """The tenant's retention audit rows, newest first (analysts only; users see none)."""
    if not viewer.is_analyst:
        return []
    return [e for e in read_audit(workbench.store) if e.tenant in (viewer.tenant, None)][:limit]


# Keyed by the settings' repr: Streamlit's own hashing walks the dataclass field by field, ~8 ms
# a call on a busy machine, and every page run asks three times.
@st.cache_resource(max_entries=4, show_spinner=False, hash_funcs={Settings: repr})
def _workbench(settings: Settings) -> Workbench:
    return Workbench(settings)


def cached_workbench(settings: Settings) -> Workbench:
    """The shared read-only service of the lake, made on the app's first run (its warm-up
    starts once that run's page is drawn: :meth:`Warmup.start`)."""
    return _workbench(settings)
