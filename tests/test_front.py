"""A service's front (builders/front.py, api/autoscaling.py): the KEDA HTTP add-on's InterceptorRoute the
operator renders, the trigger a keda backend adds for it, the wake signal a front implies and where clients send.
The rendered route is held here to the add-on's v1beta1 API (kedacore/http-add-on v0.15.0
operator/apis/http/v1beta1/interceptorroute_types.go and config/crd/bases/http.keda.sh_interceptorroutes.yaml, cited
per field); the control-plane tier installs that CRD (the module is fetched at test time) and has the real API
server admit what the operator writes (e2e/tests/operator/test_autoscaling.py)."""

from __future__ import annotations

from typing import Any

import pytest

from pooling_operator.api import messages as M
from pooling_operator.autoscaling.loop import Autoscaler
from pooling_operator.builders import BuildContext, plan
from pooling_operator.builders.front import VLLM_DEFAULT_MAX_NUM_SEQS, concurrency_target, readiness_seconds
from pooling_operator.status.services import endpoint
from pooling_operator.vllm.contract import contract
from pooling_operator.vllm.settings import KEDA_HTTP_INTERCEPTOR, KEDA_HTTP_SCALER, Settings
from pooling_operator.vllm.validate import validate
from tests.factories import pooling

HOSTS = ["minilm.search.example.com", "*.minilm.example.com"]
FRONT = {"kedaHttpAddOn": {"hosts": HOSTS}}


def valid(autoscaling: dict[str, Any], **spec: Any) -> Any:
    result = validate(pooling({"autoscaling": {"maxReplicas": 4, **autoscaling}, **spec}, name="minilm", namespace="search"))
    assert result.ok, [str(p) for p in result.errors]
    return result.resource


def children(autoscaling: dict[str, Any], ctx: BuildContext | None = None, **spec: Any) -> dict[str, dict[str, Any]]:
    return {o["kind"]: o for o in plan(valid(autoscaling, **spec), contract("0.33"), ctx or BuildContext()).objects}


def errors(autoscaling: dict[str, Any]) -> list[str]:
    return [str(p) for p in validate(pooling({"autoscaling": {"maxReplicas": 4, **autoscaling}})).problems if p.severity == "error"]


def test_the_route_sends_the_fronts_hosts_to_the_services_port_and_holds_them_for_two_start_ups() -> None:
    route = children({"minReplicas": 0, "front": FRONT}, BuildContext(typical_startup_seconds=41.0))["InterceptorRoute"]
    assert route["apiVersion"] == "http.keda.sh/v1beta1" and route["metadata"]["name"] == "minilm"
    assert route["metadata"]["namespace"] == "search"  # owned by the service where it has a uid (the control-plane tier)
    spec = route["spec"]
    # TargetRef: service + exactly one of port/portName (types.go 99-115); RoutingRule.hosts a set (40-48)
    assert spec["target"] == {"service": "minilm", "port": 8000}
    assert spec["rules"] == [{"hosts": HOSTS}]
    # ScalingMetricSpec: concurrency or requestRate required (85-97), targetValue >= 1 (63-68)
    assert spec["scalingMetric"] == {"concurrency": {"targetValue": VLLM_DEFAULT_MAX_NUM_SEQS + 16}}
    # InterceptorRouteTimeouts.readiness: a duration (205-215); a minute to notice + two start-ups of 41 s, in 30 s steps
    assert spec["timeouts"] == {"readiness": "150s"}
    assert "coldStart" not in spec  # v0.15's ColdStartSpec needs fallback or placeholder (193-203): none is rendered


def test_max_pending_requests_goes_where_add_on_one_puts_it() -> None:
    route = children({"minReplicas": 0, "front": {"kedaHttpAddOn": {"hosts": HOSTS, "maxPendingRequests": 40}}})["InterceptorRoute"]
    assert route["spec"]["coldStart"] == {"maxPendingRequests": 40}  # https://keda.sh/http-add-on/1.0/reference/environment-variables/


@pytest.mark.parametrize(
    ("typical", "timeout", "seconds"),
    [(None, 1800, 1800), (0.0, 600, 600), (12.0, 1800, 120), (41.0, 1800, 150), (45.0, 1800, 150), (46.0, 1800, 180),
     (400.0, 600, 600)],
)
def test_the_readiness_timeout_is_a_minute_to_notice_and_two_start_ups_within_the_engines_timeout(
    typical: float | None, timeout: int, seconds: int
) -> None:
    assert readiness_seconds(typical, timeout) == seconds


def test_the_route_follows_the_services_own_batch_and_queue_targets() -> None:
    assert concurrency_target(None, 16) == VLLM_DEFAULT_MAX_NUM_SEQS + 16
    route = children({"minReplicas": 0, "front": FRONT, "queueDepthPerReplica": 8}, engine={"maxNumSeqs": 64})["InterceptorRoute"]
    assert route["spec"]["scalingMetric"]["concurrency"]["targetValue"] == 72


def test_no_front_no_route() -> None:
    assert "InterceptorRoute" not in children({"minReplicas": 1})


def test_a_front_is_the_wake_signal_of_its_routes_interceptor_series_unless_one_is_written() -> None:
    a = valid({"minReplicas": 0, "front": FRONT}).spec.autoscaling
    assert a.wake_query("search", "minilm") == 'interceptor_request_concurrency{route_namespace="search",route_name="minilm"}'
    written = {"prometheus": {"query": 'sum(rate(ingress_requests_total{host="minilm"}[1m]))'}}
    b = valid({"minReplicas": 0, "front": FRONT, "wake": written}).spec.autoscaling
    assert b.wake_query("search", "minilm") == written["prometheus"]["query"]
    assert valid({"minReplicas": 1}).spec.autoscaling.wake_query("search", "minilm") is None


def test_the_autoscaler_reads_the_fronts_series_as_the_wake() -> None:
    autoscaler = Autoscaler.__new__(Autoscaler)  # track() needs only its own maps and a loop for the task
    autoscaler.services, autoscaler._tasks = {}, {}
    resource = valid({"minReplicas": 0, "front": FRONT})
    resource.metadata.uid = "u1"

    class Done:
        def done(self) -> bool:
            return False

    autoscaler._tasks["search"] = Done()  # type: ignore[assignment]
    autoscaler.track(resource, None)
    tracked = autoscaler.services["u1"]
    assert tracked.may_zero and tracked.wake_query == resource.spec.autoscaling.wake_query("search", "minilm")


def test_min_replicas_zero_takes_a_front_as_its_wake_signal() -> None:
    assert errors({"minReplicas": 0, "front": FRONT}) == []
    assert f"spec.autoscaling.minReplicas: {M.MIN_REPLICAS_ZERO}" in errors({"minReplicas": 0})
    assert "autoscaling.front.kedaHttpAddOn" in M.MIN_REPLICAS_ZERO


@pytest.mark.parametrize(
    ("front", "path", "words"),
    [
        ({"kedaHttpAddOn": {"hosts": []}}, "spec.autoscaling.front.kedaHttpAddOn.hosts", "at least 1"),
        ({"kedaHttpAddOn": {"hosts": ["a.example.com", "a.example.com"]}}, "spec.autoscaling.front.kedaHttpAddOn.hosts",
         "a.example.com appear more than once"),
        ({"kedaHttpAddOn": {"hosts": ["Search_Host"]}}, "spec.autoscaling.front.kedaHttpAddOn.hosts[0]", "pattern"),
        ({"kedaHttpAddOn": {"hosts": ["a.example.com"], "maxPendingRequests": 0}},
         "spec.autoscaling.front.kedaHttpAddOn.maxPendingRequests", "greater than or equal to 1"),
        ({"kedaHttpAddOn": {"hosts": ["a.example.com"], "host": "x"}}, "spec.autoscaling.front.kedaHttpAddOn.host", "did you mean 'hosts'"),
    ],
)
def test_a_bad_front_is_refused_naming_the_field(front: dict[str, Any], path: str, words: str) -> None:
    found = errors({"minReplicas": 0, "front": front})
    assert any(e.startswith(path) and words in e for e in found), found


def test_keda_adds_the_add_ons_trigger_beside_its_own() -> None:
    so = children({"minReplicas": 0, "front": FRONT, "backend": "keda"}, BuildContext(settings=Settings(keda_http_scaler="scaler.http:9090")))["ScaledObject"]
    triggers = {t["name"]: t for t in so["spec"]["triggers"]}
    # pkg/k8s/scaledobject.go 11-18: type external-push, metadata scalerAddress and interceptorRoute
    assert triggers["front"] == {"type": "external-push", "name": "front",
                                 "metadata": {"scalerAddress": "scaler.http:9090", "interceptorRoute": "minilm"}}
    assert "wake" not in triggers and so["spec"]["minReplicaCount"] == 0  # the add-on's scaler activates it from zero
    assert BuildContext().settings.keda_http_scaler == KEDA_HTTP_SCALER == "keda-add-ons-http-external-scaler.keda:9090"


def test_a_fronted_services_network_policy_lets_the_interceptor_in() -> None:
    """The interceptor forwards the requests it holds from its own namespace (the add-on's, keda by default): a
    NetworkPolicy that admitted only the service's namespace would leave every held request unanswered."""
    from pooling_operator.vllm.settings import service_namespace

    ns_rules = [[f["namespaceSelector"] for f in rule["from"] if "namespaceSelector" in f]
                for rule in children({"minReplicas": 0, "front": FRONT}, networkPolicy={})["NetworkPolicy"]["spec"]["ingress"]]
    assert [{"matchLabels": {"kubernetes.io/metadata.name": "keda"}}] in ns_rules
    plain = children({"minReplicas": 1}, networkPolicy={})["NetworkPolicy"]["spec"]["ingress"]
    assert all("keda" not in str(rule) for rule in plain)
    assert Settings(keda_http_interceptor="http://proxy.http-addon.svc.cluster.local:8080").keda_http_namespace == "http-addon"
    assert [service_namespace(u) for u in ("http://proxy.edge:80", "http://10.0.0.5:8080", "http://front.example.com")] == ["edge", None, None]


def test_clients_send_to_the_interceptor_when_a_front_holds_their_requests() -> None:
    assert endpoint(valid({"minReplicas": 0, "front": FRONT}), KEDA_HTTP_INTERCEPTOR) == "http://keda-add-ons-http-interceptor-proxy.keda:8080"
    assert endpoint(valid({"minReplicas": 1}), KEDA_HTTP_INTERCEPTOR) == "http://minilm.search.svc:8000"


def test_a_new_start_up_sample_re_plans_a_fronted_service_and_its_route_follows() -> None:
    """The route's readiness timeout follows status.startup.typicalSeconds: the reconcile's plan, kept per spec,
    is made again when the sample changes (only for a service with a front)."""
    from pooling_operator.reconcile.built import built
    from pooling_operator.reconcile.policyset import PolicySet
    from pooling_operator.reconcile.state import Memory

    body = pooling({"autoscaling": {"minReplicas": 0, "maxReplicas": 4, "front": FRONT}}, name="minilm", namespace="search")
    body["metadata"].update(uid="u1", generation=1)
    memory, settings = Memory(), Settings(keda_http_scaler="s:1")

    def readiness(typical: float | None) -> str:
        b = built(memory, settings, None, {**body, "status": {"startup": {"typicalSeconds": typical}}}, PolicySet(), None)
        return next(o for o in b.desired if o["kind"] == "InterceptorRoute")["spec"]["timeouts"]["readiness"]

    assert readiness(None) == "1800s"  # nothing measured: the engine's startup timeout
    assert readiness(41.0) == "150s"
    assert readiness(100.0) == "270s"
    plain = pooling({"autoscaling": {"minReplicas": 1, "maxReplicas": 4}}, name="plain", namespace="search")
    plain["metadata"].update(uid="u2", generation=1)
    first = built(memory, settings, None, {**plain, "status": {"startup": {"typicalSeconds": 10.0}}}, PolicySet(), None)
    again = built(memory, settings, None, {**plain, "status": {"startup": {"typicalSeconds": 90.0}}}, PolicySet(), None)
    assert again is first  # no front: a sample changes nothing, nothing is planned again
