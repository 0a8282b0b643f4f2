"""The API facade's pure parts: which answers are worth a retry, how requests are counted, where its proxy comes from."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kubernetes_asyncio import client

from pooling_operator.api.kinds import KINDS, OWNER_KINDS
from pooling_operator.api.resources import KINDS as RESOURCE_KINDS
from pooling_operator.k8s import api
from pooling_operator.k8s.api import ApiError, TransientError, classify, verb_and_resource


@pytest.mark.parametrize(("status", "transient"), [(0, True), (409, True), (429, True), (500, True), (503, True),
                                                    (400, False), (403, False), (404, False), (422, False)])
def test_one_place_decides_what_is_retried(status: int, transient: bool) -> None:
    err = classify(status, "r", "body")
    assert isinstance(err, ApiError) and isinstance(err, TransientError) is transient and err.status == status


def test_an_apply_the_schema_cannot_type_is_a_refusal_not_a_server_fault() -> None:
    # kube-apiserver 1.35, server-side apply of a Deployment with an unknown key under affinity
    body = '{"kind":"Status","message":"failed to create typed patch object (/v1, Kind=Deployment): .spec.template.spec.affinity.x: field not declared in schema","code":500}'
    err = classify(500, "InternalError", body)
    assert not isinstance(err, TransientError) and err.status == 500


@pytest.mark.parametrize(("method", "path", "expected"), [
    ("GET", "/api/v1/namespaces/x/pods", ("list", "pods")),
    ("GET", "/api/v1/namespaces/x", ("get", "namespaces")),
    ("PATCH", "/apis/apps/v1/namespaces/x/deployments/d/scale", ("patch", "deployments/scale")),
    ("PATCH", "/apis/vllm-pooling.io/v1alpha1/namespaces/n/poolingservices/a/status", ("patch", "poolingservices/status")),
    ("GET", "/apis/vllm-pooling.io/v1alpha1/autoscalingpolicies", ("list", "autoscalingpolicies")),
    ("PUT", "/apis/coordination.k8s.io/v1/namespaces/n/leases/l", ("update", "leases")),
    ("POST", "/api/v1/namespaces/n/events", ("create", "events")),
    ("DELETE", "/api/v1/namespaces/n/services/s", ("delete", "services")),
])
def test_requests_are_counted_as_the_audit_log_names_them(method: str, path: str, expected: tuple[str, str]) -> None:
    assert verb_and_resource(method, path) == expected


def test_our_kinds_take_plural_and_scope_from_the_resource_table() -> None:
    for name, info in RESOURCE_KINDS.items():
        assert (KINDS[name].plural, KINDS[name].namespaced) == (info.plural, info.namespaced)
    assert set(OWNER_KINDS) == {"PoolingService", "ScoringService", "HiddenStateJob", "PoolingJob", "ModelCache"}
    assert KINDS["Deployment"].path("ns", "d", "scale") == "/apis/apps/v1/namespaces/ns/deployments/d/scale"
    assert KINDS["Namespace"].path(None, "ns") == "/api/v1/namespaces/ns"


def test_an_event_is_retried_when_throttled_then_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    answers = [TransientError(429, "TooManyRequests", "throttled")] * 2 + [None]

    async def request(self: api.Kube, method: str, path: str, **_: object) -> None:
        calls.append(path)
        answer = answers[len(calls) - 1] if len(calls) <= len(answers) else TransientError(0, "x", "down")
        if answer is not None:
            raise answer

    async def no_sleep(_: float) -> None:
        return None

    monkeypatch.setattr(api.Kube, "request", request)
    monkeypatch.setattr(api.asyncio, "sleep", no_sleep)
    owner = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "o", "namespace": "n", "uid": "u"}}
    asyncio.run(api.Kube().event(owner, "Normal", "Created", "made"))
    assert len(calls) == 3  # two 429s, then posted
    calls.clear()
    answers[:] = [TransientError(0, "x", "down")] * 10
    asyncio.run(api.Kube().event(owner, "Normal", "Created", "made"))
    assert len(calls) == len(api.EVENT_RETRY_SECONDS) + 1  # bounded: then dropped with a warning


def _session_for(host: str, monkeypatch: pytest.MonkeyPatch, env: dict[str, str], proxy: str | None = None) -> Any:
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)

    async def made() -> Any:
        configuration = client.Configuration(host=host)
        configuration.proxy = proxy
        kube = api.Kube(configuration)
        rest = (await kube._api()).rest_client
        seen = (rest.pool_manager.trust_env, rest.proxy, rest.proxy_headers, rest.pool_manager.connector.closed)
        await kube.close()
        return seen

    return asyncio.run(made())


def test_the_api_servers_proxy_is_looked_up_once_not_for_every_request(monkeypatch: pytest.MonkeyPatch) -> None:
    # No variable: no proxy, and the session no longer reads ~/.netrc and the environment per request.
    assert _session_for("https://10.0.0.1:6443", monkeypatch, {}) == (False, None, None, False)
    # The environment's proxy for the API server's scheme, with the credentials of its URL as a header.
    trust, proxy, headers, _ = _session_for("https://10.0.0.1:6443", monkeypatch, {"HTTPS_PROXY": "http://u:p@proxy.example:3128"})
    assert (trust, proxy) == (False, "http://proxy.example:3128")
    assert headers == {"Proxy-Authorization": "Basic dTpw"}
    # NO_PROXY naming the API server: no proxy, as aiohttp decided per request before.
    assert _session_for("https://10.0.0.1:6443", monkeypatch, {"HTTPS_PROXY": "http://proxy.example:3128", "NO_PROXY": "10.0.0.1"})[1] is None
    # A proxy the kubeconfig names wins over the environment.
    assert _session_for("https://10.0.0.1:6443", monkeypatch, {"HTTPS_PROXY": "http://proxy.example:3128"},
                        proxy="http://kubeconfig.example:8080")[1] == "http://kubeconfig.example:8080"  # fmt: skip
