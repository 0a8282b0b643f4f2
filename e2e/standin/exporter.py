"""TEST STAND-IN for vLLM's ``/metrics``: one process plays one vLLM pod's metrics. Never ship it.

It exports, for every metric of ``pooling_operator.vllm.metrics.METRICS``, vLLM's own name, type and label
names (``engine="0"``, ``model_name``, ``finished_reason`` on the success counter) through prometheus_client,
the library vLLM exports with, with the buckets the renderer sets (``LATENCY_BUCKETS`` for the end-to-end
latency; vLLM's defaults for time to first token and tokens per step). The numbers come from the service model
(``pooling_operator.autoscaling.simulator.servicemodel.Replica``) run in wall-clock time: requests arrive as a Poisson
process at this pod's share of a load profile, which two JSON files give and the process re-reads:

- the load profile ``{"requests_per_second": total, "mean_tokens": 16}`` (the test rewrites it);
- the pods file ``{"ready_pods": n}`` (the fleet rewrites it): the load is split evenly over the n ready pods,
  as a Service spreads it over ready endpoints.

Every prompt has ``mean_tokens`` tokens. Time to first token equals end-to-end latency for pooling requests
(vLLM records both at the single output). ``vllm:num_requests_running`` reads 0, as real vLLM does for pooling.

Run: ``python -m e2e.standin.exporter --port-file F --load-file L --pods-file P --model-name M [--seed S]
[--params JSON]``; it binds a free loopback port and writes it to F (atomically) once it serves.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import random
import signal
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from prometheus_client.core import (
    CollectorRegistry,
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from pooling_operator.autoscaling.simulator.servicemodel import Histogram, Replica, ServiceParams
from pooling_operator.vllm import metrics as m

TICK_SECONDS = 0.1  # how often the model is advanced and the files re-read between scrapes
HELP = {
    m.WAITING: "Number of requests waiting to be processed.",
    m.RUNNING: "Number of requests in model execution batches.",
    m.SUCCESS: "Count of successfully processed requests.",
    m.PROMPT_TOKENS: "Number of prefill tokens processed.",
    m.E2E_LATENCY: "Histogram of e2e request latency in seconds.",
    m.TTFT: "Histogram of time to first token in seconds.",
    m.ITERATION_TOKENS: "Histogram of number of tokens per engine_step.",
}
BUCKETS: dict[str, tuple[float, ...]] = {
    m.E2E_LATENCY: m.LATENCY_BUCKETS,
    m.TTFT: m.TTFT_BUCKETS,
    m.ITERATION_TOKENS: tuple(float(b) for b in m.ITERATION_TOKEN_BUCKETS),
}


@dataclasses.dataclass(frozen=True)
class Load:
    requests_per_second: float = 0.0
    mean_tokens: float = 16.0


def read_json(path: Path) -> dict[str, Any] | None:
    """The file's object, or None while it is absent or unreadable (the writers replace files atomically)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


class Model:
    """A ``Replica`` fed with Poisson arrivals in wall-clock time. The rate is piecewise constant: when it
    changes, the pending arrival is drawn again from the change (exact, the process being memoryless)."""

    def __init__(self, params: ServiceParams, seed: int, clock: Any = time.monotonic) -> None:
        self.clock = clock
        self.t0 = clock()
        self.replica = Replica(params, ready_at=0.0)
        self.ttft = Histogram(BUCKETS[m.TTFT])
        self.rng = random.Random(seed)
        self.rate = 0.0
        self.tokens = 16
        self.now = 0.0  # model time reached
        self.next_arrival: float | None = None
        self.lock = threading.Lock()

    def set_load(self, rate: float, tokens: int) -> None:
        """Change the arrival rate (requests per second to this pod) from the current time on."""
        with self.lock:
            self._advance(self.clock() - self.t0)
            if rate != self.rate:
                self.rate = rate
                self.next_arrival = None
            self.tokens = max(1, tokens)

    def advance(self) -> None:
        with self.lock:
            self._advance(self.clock() - self.t0)

    def _advance(self, t: float) -> None:
        while self.rate > 0:
            if self.next_arrival is None:
                self.next_arrival = self.now + self.rng.expovariate(self.rate)
            if self.next_arrival > t:
                break
            self.replica.submit(self.next_arrival, self.tokens)
            self.now = self.next_arrival
            self.next_arrival = None
        for done in self.replica.advance(t):
            self.ttft.observe(done.latency)
        self.now = max(self.now, t)


class VllmCollector(Collector):
    """The metric families of one vLLM engine (engine "0"), from the model's counters."""

    def __init__(self, model: Model, model_name: str) -> None:
        self.model = model
        self.model_name = model_name

    def collect(self) -> Iterator[Any]:
        with self.model.lock:
            self.model._advance(self.model.clock() - self.model.t0)
            c = self.model.replica.counters
            gauges = {m.WAITING: float(c.waiting), m.RUNNING: 0.0}
            counters = {m.PROMPT_TOKENS: float(c.prompt_tokens)}
            histograms = {
                m.E2E_LATENCY: c.e2e,
                m.TTFT: self.model.ttft,
                m.ITERATION_TOKENS: c.iteration_tokens,
            }
            success = float(c.success)
            families = []
            for metric in m.METRICS:
                families.append(self._family(metric, gauges, counters, histograms, success))
        yield from families

    def _family(
        self,
        metric: m.Metric,
        gauges: dict[str, float],
        counters: dict[str, float],
        histograms: dict[str, Histogram],
        success: float,
    ) -> Any:
        names = [label for label in metric.labels if label != "finished_reason"]
        base = {"engine": "0", "model_name": self.model_name}
        values = [base[label] for label in names]
        if metric.type == "gauge":
            family = GaugeMetricFamily(metric.name, HELP[metric.name], labels=names)
            family.add_metric(values, gauges[metric.name])
            return family
        if metric.type == "counter":
            family = CounterMetricFamily(metric.name, HELP[metric.name], labels=metric.labels)
            if metric.name == m.SUCCESS:
                # vLLM exports every finished reason; a pooling request always finishes with "stop"
                for reason in m.FINISHED_REASONS:
                    labels = {**base, "finished_reason": reason}
                    family.add_metric(
                        [labels[label] for label in metric.labels], success if reason == "stop" else 0.0
                    )
            else:
                family.add_metric(values, counters[metric.name])
            return family
        if metric.type == "histogram":
            h = histograms[metric.name]
            if h.bounds != BUCKETS[metric.name]:
                raise AssertionError(f"{metric.name}: the model's buckets are not the exported ones")
            family = HistogramMetricFamily(metric.name, HELP[metric.name], labels=names)
            bounds = [*h.bounds, math.inf]
            family.add_metric(
                values,
                [(floatToGoString(b), float(n)) for b, n in zip(bounds, h.cumulative(), strict=True)],
                float(h.sum),
            )
            return family
        raise AssertionError(f"unknown metric type {metric.type!r} of {metric.name}")


def _load(load_file: Path, pods_file: Path, last: tuple[Load, int]) -> tuple[Load, int]:
    load, pods = last
    data = read_json(load_file)
    if data is not None:
        load = Load(float(data.get("requests_per_second", 0.0)), float(data.get("mean_tokens", 16)))
    data = read_json(pods_file)
    if data is not None:
        pods = int(data.get("ready_pods", pods))
    return load, pods


class MetricsHandler(BaseHTTPRequestHandler):
    """``GET /metrics`` in the classic text format (0.0.4) whatever the scraper asks for.

    prometheus_client 0.26 answers an OpenMetrics Accept header (Prometheus 2.x sends one) with the colons of
    sample names turned into underscores while HELP/TYPE keep them (prometheus/client_python#1177), which
    would file ``vllm:num_requests_waiting`` under ``vllm_num_requests_waiting``. The text format keeps
    vLLM's names.
    """

    registry: CollectorRegistry

    def do_GET(self) -> None:
        if self.path.split("?", 1)[0] != "/metrics":
            self.send_error(404)
            return
        body = generate_latest(self.registry)
        self.send_response(200)
        self.send_header("Content-Type", CONTENT_TYPE_PLAIN_0_0_4)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # one line per scrape is noise
        pass


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m e2e.standin.exporter", description=__doc__.splitlines()[0])
    ap.add_argument("--port-file", type=Path, required=True)
    ap.add_argument("--load-file", type=Path, required=True)
    ap.add_argument("--pods-file", type=Path, required=True)
    ap.add_argument("--model-name", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--params", default="{}", help="ServiceParams fields as a JSON object")
    ap.add_argument("--host", default="127.0.0.1")
    args = ap.parse_args(argv)

    params = ServiceParams(**json.loads(args.params))
    model = Model(params, args.seed)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(VllmCollector(model, args.model_name))
    handler = type("Handler", (MetricsHandler,), {"registry": registry})
    server = ThreadingHTTPServer((args.host, 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    tmp = args.port_file.with_name(f".{args.port_file.name}.tmp")
    tmp.write_text(str(server.server_port))
    os.replace(tmp, args.port_file)

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    state = (Load(), 1)
    while True:
        state = _load(args.load_file, args.pods_file, state)
        load, pods = state
        model.set_load(load.requests_per_second / max(pods, 1), round(load.mean_tokens))
        if stop.wait(TICK_SECONDS):  # the model's tick, not a synchronisation: scrapes advance it too
            break
    server.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
