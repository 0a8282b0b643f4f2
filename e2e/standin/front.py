"""A stand-in for the KEDA HTTP add-on's interceptor, as far as Prometheus sees it: its request-concurrency gauge
for one route (``interceptor_request_concurrency{route_name, route_namespace}``, the requests in flight or held
while the backend wakes: the add-on's interceptor/metrics/instruments.go 18-25, 87-88 at v0.15.0), served on loopback by
prometheus_client and published to the test's Prometheus through a file_sd file of its own. The test sets the
value; nothing is proxied (the interceptor resolves a route's Service by cluster DNS, which this harness has not)."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Gauge, start_http_server

from e2e.kube.prometheus import PrometheusServer

CONCURRENCY = "interceptor_request_concurrency"


class StandinFront:
    def __init__(self, prometheus: PrometheusServer, namespace: str, route: str) -> None:
        self.prometheus, self.namespace, self.route = prometheus, namespace, route
        self.registry = CollectorRegistry()
        self.gauge = Gauge(CONCURRENCY, "Requests in flight at the interceptor (stand-in).", ["route_name", "route_namespace"],
                           registry=self.registry).labels(route, namespace)  # fmt: skip
        self.targets = prometheus.targets_path(f"front-{namespace}-{route}")
        self._server: Any = None

    @property
    def query(self) -> str:
        """The wake query a service behind this route names."""
        return f'sum({CONCURRENCY}{{route_name="{self.route}",route_namespace="{self.namespace}"}})'

    def set(self, pending: float) -> None:
        self.gauge.set(pending)

    def start(self) -> StandinFront:
        self._server, _ = start_http_server(0, addr="127.0.0.1", registry=self.registry)
        port = self._server.server_port
        self.prometheus.write_targets(self.targets, [{"targets": [f"127.0.0.1:{port}"], "labels": {"component": "front"}}])
        return self

    def __enter__(self) -> StandinFront:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.targets.unlink(missing_ok=True)
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
