"""vLLM's metrics as the autoscaler reads them: names, types, labels, the fixed latency buckets, the labels
that scope a series to one service, and the PromQL built from them. One table, read by the renderer (the
`--custom-histogram-buckets` flag, the PodMonitor/ServiceMonitor relabelings), the autoscaler's Prometheus
reader, the KEDA ScaledObject, the simulator and the tests' metric exporters and scrape configuration.

Facts (real vLLM 0.32, shared reference captures `metrics-after-load.txt` and `load-curve.md`):
- `vllm:num_requests_waiting` counts only requests inside the scheduler that missed the last batch: 0 up to
  ~90 % load, and an undercount past saturation. `vllm:num_requests_running` reads 0 at every load for pooling
  requests, so it is not used.
- There is no arrival counter: `vllm:request_success_total` counts completions (which stop at capacity under
  overload). `rate(vllm:e2e_request_latency_seconds_sum)` is, by Little's law, the mean number of requests in
  the system, which keeps growing with overload.
- The default request-latency buckets start at 0.3 s, which makes `histogram_quantile` meaningless for
  embeddings answering in milliseconds; every service therefore gets the fixed, fine buckets below (never
  derived from a target, so changing the p99 target never changes the pod template).
"""

from __future__ import annotations

from dataclasses import dataclass

from pooling_operator.api.identity import COMPONENTS

# ---- metric names, types and labels (as vLLM 0.32 exports them) ---------------------------------------------

WAITING = "vllm:num_requests_waiting"  # gauge {engine, model_name}
RUNNING = "vllm:num_requests_running"  # gauge {engine, model_name}: always 0 for pooling requests
SUCCESS = "vllm:request_success_total"  # counter {engine, finished_reason, model_name}
PROMPT_TOKENS = "vllm:prompt_tokens_total"  # counter {engine, model_name}
E2E_LATENCY = "vllm:e2e_request_latency_seconds"  # histogram {engine, model_name}
TTFT = "vllm:time_to_first_token_seconds"  # histogram {engine, model_name}; equals e2e for pooling requests
ITERATION_TOKENS = "vllm:iteration_tokens_total"  # histogram {engine, model_name}: tokens per engine step
# histograms {engine, model_name}: a request's time waiting for a step, and in its step (the calibration reads them)
QUEUE_TIME = "vllm:request_queue_time_seconds"
INFERENCE_TIME = "vllm:request_inference_time_seconds"

FINISHED_REASONS = ("stop", "length", "abort", "error", "repetition")
ENGINE_LABELS = ("engine", "model_name")


@dataclass(frozen=True)
class Metric:
    name: str
    type: str  # gauge | counter | histogram
    labels: tuple[str, ...]


METRICS: tuple[Metric, ...] = (
    Metric(WAITING, "gauge", ENGINE_LABELS),
    Metric(RUNNING, "gauge", ENGINE_LABELS),
    Metric(SUCCESS, "counter", ("engine", "finished_reason", "model_name")),
    Metric(PROMPT_TOKENS, "counter", ENGINE_LABELS),
    Metric(E2E_LATENCY, "histogram", ENGINE_LABELS),
    Metric(TTFT, "histogram", ENGINE_LABELS),
    Metric(ITERATION_TOKENS, "histogram", ENGINE_LABELS),
)

# ---- buckets -------------------------------------------------------------------------------------------------

# Fixed for every service: about three per decade from 5 ms to 10 minutes. vLLM applies a family's list to every
# histogram of the family (e2e, queue, inference, prefill, decode times), so this is the `request_latency` family.
LATENCY_BUCKETS: tuple[float, ...] = (
    0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.75,
    1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0,
)  # fmt: skip
LATENCY_FAMILY = "request_latency"
# vLLM's own defaults for the families we do not change (v1/metrics/buckets.py).
TTFT_BUCKETS: tuple[float, ...] = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
    160.0, 640.0, 2560.0,
)  # fmt: skip
ITERATION_TOKEN_BUCKETS: tuple[float, ...] = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)

# ---- scoping: the labels that tie a series to one service ----------------------------------------------------

# Prometheus label -> the Kubernetes pod metadata it comes from (the `__meta_kubernetes_*` source label of
# a pod-role scrape). The rendered PodMonitor/ServiceMonitor relabel into these names, the tests' file-based
# scrape configuration writes them as target labels, and every query below matches on them.
NAMESPACE_LABEL = "namespace"
INSTANCE_LABEL = "vllm_pooling_io_instance"
COMPONENT_LABEL = "vllm_pooling_io_component"
POD_LABEL = "pod"
SCOPE_LABELS: dict[str, str] = {
    NAMESPACE_LABEL: "__meta_kubernetes_namespace",
    INSTANCE_LABEL: "__meta_kubernetes_pod_label_app_kubernetes_io_instance",
    COMPONENT_LABEL: "__meta_kubernetes_pod_label_app_kubernetes_io_component",
    POD_LABEL: "__meta_kubernetes_pod_name",
}


def relabelings() -> list[dict[str, object]]:
    """prometheus-operator relabelings that give every scraped series the scope labels."""
    return [
        {"sourceLabels": [source], "targetLabel": target, "action": "replace"}
        for target, source in SCOPE_LABELS.items()
    ]


def target_labels(namespace: str, instance: str, component: str, pod: str) -> dict[str, str]:
    """The scope labels of one pod, as a file-based scrape target carries them."""
    return {NAMESPACE_LABEL: namespace, INSTANCE_LABEL: instance, COMPONENT_LABEL: component, POD_LABEL: pod}


def matchers(namespace: str, instance: str, component: str) -> str:
    return f'{NAMESPACE_LABEL}="{namespace}",{INSTANCE_LABEL}="{instance}",{COMPONENT_LABEL}="{component}"'


# ---- the queries ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Queries:
    """PromQL for one service. Every query sums over the service's pods; `reporting` counts the pods whose
    metrics Prometheus has (a pod still loading its model exports nothing)."""

    waiting: str  # requests waiting in the schedulers, summed
    reporting: str  # pods reporting
    completions: str  # completed requests per second
    in_system: str  # mean requests in the system (Little's law: rate of the latency sum)
    tokens: str  # prompt tokens per second
    p99: str  # p99 of end-to-end latency, seconds (NaN without traffic)

    def named(self) -> dict[str, str]:
        return {
            "waiting": self.waiting,
            "reporting": self.reporting,
            "completions": self.completions,
            "inSystem": self.in_system,
            "tokens": self.tokens,
            "p99": self.p99,
        }


def queries(namespace: str, instance: str, component: str, window: str) -> Queries:
    m = matchers(namespace, instance, component)
    return Queries(
        waiting=f"sum({WAITING}{{{m}}})",
        reporting=f"count(count by ({POD_LABEL}) ({WAITING}{{{m}}}))",  # pods, not engines (data parallel)
        completions=f"sum(rate({SUCCESS}{{{m}}}[{window}]))",
        in_system=f"sum(rate({E2E_LATENCY}_sum{{{m}}}[{window}]))",
        tokens=f"sum(rate({PROMPT_TOKENS}{{{m}}}[{window}]))",
        p99=f"histogram_quantile(0.99, sum by (le) (rate({E2E_LATENCY}_bucket{{{m}}}[{window}])))",
    )


def service_queries(kind: str, namespace: str | None, name: str, window: str) -> Queries:
    """The autoscaler's PromQL for one service, scoped by the labels its monitors give the pods' series."""
    return queries(namespace or "default", name, COMPONENTS[kind], window)
