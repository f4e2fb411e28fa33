"""Prometheus metrics: the database's handoff picture, and a watcher's own counters.

Imported only when metrics are switched on (the dashboard's ``/metrics``, ``hermes-state watch
--metrics-port``); it needs ``prometheus-client`` (the ``dashboard`` extra).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import Any, Final

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector

__all__ = ["CONTENT_TYPE", "StatsCollector", "WatcherMetrics", "render_stats"]

CONTENT_TYPE: Final = CONTENT_TYPE_LATEST

#: Delivery and claim latencies span milliseconds (a local script) to minutes (a slow platform).
_SECONDS_BUCKETS: Final = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0
)  # fmt: skip


class StatsCollector(Collector):
    """Gauges from one ``handoff_stats()`` snapshot (taken by the caller, which may await)."""

    def __init__(self, stats: Mapping[str, Any]) -> None:
        self.stats = stats

    def collect(self) -> Iterator[Metric]:
        handoffs = GaugeMetricFamily(
            "hermes_state_handoffs", "Sessions in each handoff state", labels=["state"]
        )
        for state, count in self.stats["counts"].items():
            handoffs.add_metric([state], count)
        yield handoffs
        age = self.stats["oldest_pending_age_seconds"]
        yield GaugeMetricFamily(
            "hermes_state_oldest_pending_age_seconds",
            "Seconds since the oldest pending handoff was requested (0 when none is pending)",
            value=0.0 if age is None else age,
        )
        running = GaugeMetricFamily(
            "hermes_state_running_handoffs", "Running handoffs per owner", labels=["owner"]
        )
        expired = GaugeMetricFamily(
            "hermes_state_expired_leases",
            "Running handoffs whose lease has expired, per owner (reclaimable)",
            labels=["owner"],
        )
        for owner in self.stats["running_by_owner"]:
            name = owner["owner"] or ""
            running.add_metric([name], owner["running"])
            expired.add_metric([name], owner["expired_leases"])
        yield running
        yield expired
        yield GaugeMetricFamily(
            "hermes_state_failures_last_hour",
            "Handoffs failed in the last hour",
            value=self.stats["failures_last_hour"]["count"],
        )


def render_stats(stats: Mapping[str, Any]) -> bytes:
    """The text exposition of one stats snapshot."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StatsCollector(stats))
    return generate_latest(registry)


class WatcherMetrics:
    """A watcher's counters and histograms, in a registry of their own."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.claims = Counter(
            "hermes_state_watch_claims", "Handoffs this watcher claimed", registry=self.registry
        )
        self.deliveries = Counter(
            "hermes_state_watch_deliveries",
            "Deliveries finished, by outcome (completed, failed, discarded, cancelled)",
            ["outcome"],
            registry=self.registry,
        )
        self.delivery_seconds = Histogram(
            "hermes_state_watch_delivery_duration_seconds",
            "How long a delivery (the handler) ran",
            buckets=_SECONDS_BUCKETS,
            registry=self.registry,
        )
        self.claim_latency = Histogram(
            "hermes_state_watch_claim_latency_seconds",
            "From the request to this watcher's claim",
            buckets=_SECONDS_BUCKETS,
            registry=self.registry,
        )
        self.tick_seconds = Histogram(
            "hermes_state_watch_tick_duration_seconds",
            "How long one poll of every scope took",
            buckets=_SECONDS_BUCKETS,
            registry=self.registry,
        )

        self.loop_restarts = Counter(
            "hermes_state_watch_loop_restarts",
            "Times the watch loop was restarted after an unexpected error in a tick",
            registry=self.registry,
        )

    def claimed(self, row: Mapping[str, Any], now: float | None = None) -> None:
        self.claims.inc()
        requested = row.get("handoff_requested_at")
        if isinstance(requested, int | float):
            now = time.time() if now is None else now
            self.claim_latency.observe(max(0.0, now - requested))

    def delivered(self, outcome: str, seconds: float) -> None:
        self.deliveries.labels(outcome).inc()
        self.delivery_seconds.observe(seconds)

    def ticked(self, seconds: float) -> None:
        self.tick_seconds.observe(seconds)

    def loop_restarted(self) -> None:
        self.loop_restarts.inc()

    def serve(self, port: int, host: str = "127.0.0.1") -> Any:
        """Expose ``/metrics`` on ``host:port`` from a daemon thread; returns the server."""
        server, _thread = start_http_server(port, addr=host, registry=self.registry)
        return server
