"""Prometheus metrics of one service process (``GET /metrics``).

Each app owns its registry, so tests may build several apps in one process. With
``--workers N`` every worker process counts for itself: a scrape sees the worker that
answered it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from lake.index.opened import OpenedStats

_LATENCY_BUCKETS = (0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
_BATCH_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000, 20_000)
_LAG_BUCKETS = (0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0)


class ServiceMetrics:
    """The service's counters and histograms, in a registry of their own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.request_seconds = Histogram(
            "turnlake_request_seconds", "Request latency by route", ["method", "route", "status"],
            buckets=_LATENCY_BUCKETS, registry=r)
        self.turns = Counter("turnlake_turns_total", "Turns received, by outcome", ["outcome"],
                             registry=r)
        self.commit_turns = Histogram("turnlake_commit_turns", "Turns per group commit",
                                      buckets=_BATCH_BUCKETS, registry=r)
        self.commit_requests = Histogram("turnlake_commit_requests",
                                         "Recording requests per group commit",
                                         buckets=_BATCH_BUCKETS, registry=r)
        self.commit_seconds = Histogram("turnlake_commit_seconds", "Group commit duration",
                                        buckets=_LATENCY_BUCKETS, registry=r)
        self.ack_to_searchable = Histogram(
            "turnlake_ack_to_searchable_seconds",
            "From a recording's answer to its partition index being published",
            buckets=_LAG_BUCKETS, registry=r)
        self.index_failures = Counter("turnlake_index_build_failures_total",
                                      "Index builds after a commit that failed (retried)",
                                      registry=r)
        self.commit_failures = Counter(
            "turnlake_commit_failures_total",
            "Commits of spooled recordings that failed (retried; the spool keeps them)",
            registry=r)
        self.spool_turns = Gauge("turnlake_spool_turns",
                                 "Turns acknowledged and not committed yet", registry=r)
        self.spool_divergences = Counter(
            "turnlake_spool_divergences_total",
            "Turns whose commit kept or dropped them against their answer (another writer "
            "recorded the same turn in between)", registry=r)
        self.writer_queue = Gauge("turnlake_writer_queued_requests",
                                  "Recording requests waiting for the writer to decide them",
                                  registry=r)
        self.held_keys = Gauge("turnlake_writer_paused_keys",
                               "Keys whose recordings wait for their fair share of the writer "
                               "(they used it for long while other keys record)", registry=r)
        self.index_backlog = Gauge("turnlake_index_backlog_commits",
                                   "Commits whose partitions wait for their index step",
                                   registry=r)
        self.unsearchable_groups = Gauge(
            "turnlake_unsearchable_groups",
            "Answered groups of recordings not searchable yet", registry=r)
        self.startup_seconds = Gauge(
            "turnlake_startup_seconds",
            "Time the start-up took to readiness (recovery, its index step, warming), or "
            "has taken so far", registry=r)
        self.recovered_groups = Gauge(
            "turnlake_recovered_groups",
            "Acknowledged groups this start committed from stopped servers' spools",
            registry=r)
        self.unresolved_refs = Counter(
            "turnlake_unresolved_refs_total",
            "conv:* refs in recorded turns' texts that lead to no object (each logged with "
            "its turn)", registry=r)
        self.partitions_stale = Gauge("turnlake_partitions_stale",
                                      "Partitions whose index is older than their tables",
                                      registry=r)

    def watch_stale(self, count: Callable[[], int]) -> None:
        """Have the stale-partition gauge computed at each scrape."""
        self.partitions_stale.set_function(count)

    def watch_partitions(self, stats: Callable[[], OpenedStats]) -> None:
        """Report the search's opened partitions at each scrape: how many it opened and how
        many the memory budget closed (counters), how many are open and their charged bytes."""
        self.registry.register(_PartitionsCollector(stats))

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)


class _PartitionsCollector(Collector):
    """The search service's partition counters, read at each scrape."""

    def __init__(self, stats: Callable[[], OpenedStats]) -> None:
        self._stats = stats

    def collect(self) -> Iterable[Metric]:
        now = self._stats()
        yield CounterMetricFamily("turnlake_search_partitions_opened",
                                  "Partition indexes searches had to open", value=now.opened)
        yield CounterMetricFamily("turnlake_search_partitions_closed",
                                  "Partition indexes closed to keep within the memory budget",
                                  value=now.closed)
        yield GaugeMetricFamily("turnlake_search_partitions_open",
                                "Partition indexes open for search", value=now.open_partitions)
        yield GaugeMetricFamily("turnlake_search_open_bytes",
                                "Bytes the open partition indexes are charged against the "
                                "memory budget (0 without a budget)", value=now.open_bytes)
