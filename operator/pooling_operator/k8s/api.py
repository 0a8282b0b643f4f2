"""A small asynchronous facade over the kubernetes client: get, list, server-side apply, delete, status, events.

The kubernetes client is blocking, so every call runs in a worker thread (asyncio.to_thread) and kopf's
event loop never waits on the network. Transient failures (409, 429, 5xx, connection errors) raise
TransientError so the caller can retry with backoff; everything else raises ApiError.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import urllib3
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from pooling_operator import GROUP

log = logging.getLogger(__name__)

FIELD_MANAGER = "vllm-pooling-operator"
AUTOSCALER_FIELD_MANAGER = "vllm-pooling-operator-autoscaler"


class ApiError(Exception):
    def __init__(self, status: int, reason: str, body: str = "") -> None:
        super().__init__(f"{status} {reason}: {body[:500]}")
        self.status = status
        self.reason = reason
        self.body = body


class TransientError(ApiError):
    """Worth retrying: a conflict, throttling, a server error or a broken connection."""


@dataclass(frozen=True)
class Kind:
    api_version: str
    kind: str
    plural: str
    namespaced: bool = True

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        base = "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name:
            base += f"/{name}"
        if subresource:
            base += f"/{subresource}"
        return base


KINDS: dict[str, Kind] = {
    k.kind: k
    for k in (
        Kind("apps/v1", "Deployment", "deployments"),
        Kind("v1", "Service", "services"),
        Kind("v1", "ServiceAccount", "serviceaccounts"),
        Kind("v1", "ConfigMap", "configmaps"),
        Kind("v1", "Pod", "pods"),
        Kind("v1", "Secret", "secrets"),
        Kind("v1", "Namespace", "namespaces", namespaced=False),
        Kind("v1", "Event", "events"),
        Kind("policy/v1", "PodDisruptionBudget", "poddisruptionbudgets"),
        Kind("batch/v1", "Job", "jobs"),
        Kind("rbac.authorization.k8s.io/v1", "Role", "roles"),
        Kind("rbac.authorization.k8s.io/v1", "RoleBinding", "rolebindings"),
        Kind("monitoring.coreos.com/v1", "ServiceMonitor", "servicemonitors"),
        Kind("monitoring.coreos.com/v1", "PodMonitor", "podmonitors"),
        Kind("keda.sh/v1alpha1", "ScaledObject", "scaledobjects"),
        Kind(f"{GROUP}/v1alpha1", "PoolingService", "poolingservices"),
        Kind(f"{GROUP}/v1alpha1", "ScoringService", "scoringservices"),
        Kind(f"{GROUP}/v1alpha1", "HiddenStateJob", "hiddenstatejobs"),
        Kind(f"{GROUP}/v1alpha1", "AutoscalingPolicy", "autoscalingpolicies", namespaced=False),
    )
}


def kind_of(obj: dict[str, Any]) -> Kind:
    return KINDS[obj["kind"]]


def load_client() -> client.ApiClient:
    """In-cluster config when running in a pod, else KUBECONFIG / ~/.kube/config."""
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    configuration = client.Configuration.get_default_copy()
    configuration.connection_pool_maxsize = 32
    return client.ApiClient(configuration)


class Kube:
    """The operator's only way to the API server."""

    def __init__(self, api_client: client.ApiClient | None = None) -> None:
        self._client = api_client or load_client()

    def close(self) -> None:
        self._client.close()

    def _call(self, method: str, path: str, *, body: Any = None, query: list[tuple[str, Any]] | None = None,
              content_type: str = "application/json") -> Any:
        try:
            _, url, headers, _, _ = self._client.param_serialize(
                method, path, query_params=query or [], header_params={"Content-Type": content_type, "Accept": "application/json"},
                auth_settings=["BearerToken"],
            )
            response = self._client.call_api(method, url, header_params=headers, body=body, _request_timeout=30)
            data = response.read()
        except ApiException as exc:
            status = exc.status or 0
            cls = TransientError if status in (0, 409, 429) or status >= 500 else ApiError
            raise cls(status, exc.reason or "", str(exc.body or "")) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise TransientError(0, type(exc).__name__, str(exc)) from exc
        if not 200 <= response.status < 300:
            text = data.decode(errors="replace") if isinstance(data, bytes) else str(data)
            cls = TransientError if response.status in (409, 429) or response.status >= 500 else ApiError
            raise cls(response.status, response.reason or "", text)
        return json.loads(data) if data else None

    async def request(self, method: str, path: str, **kwargs: Any) -> Any:
        return await asyncio.to_thread(self._call, method, path, **kwargs)

    async def get(self, kind: Kind, namespace: str | None, name: str) -> dict[str, Any] | None:
        try:
            return await self.request("GET", kind.path(namespace, name))
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    async def list(
        self, kind: Kind, namespace: str | None, selector: dict[str, str], fields: dict[str, str] | None = None
    ) -> list[dict[str, Any]]:
        """Objects of a kind matching labels (and fields); [] when the kind is not installed (e.g. no KEDA)."""
        query = [("labelSelector", ",".join(f"{k}={v}" for k, v in sorted(selector.items())))]
        if fields:
            query.append(("fieldSelector", ",".join(f"{k}={v}" for k, v in sorted(fields.items()))))
        try:
            items = (await self.request("GET", kind.path(namespace), query=query))["items"]
        except ApiError as exc:
            if exc.status == 404:
                return []
            raise
        for item in items:
            item.setdefault("apiVersion", kind.api_version)
            item.setdefault("kind", kind.kind)
        return items

    async def apply(self, obj: dict[str, Any], *, manager: str = FIELD_MANAGER, subresource: str | None = None) -> dict[str, Any]:
        """Server-side apply, forced: the operator owns the fields it sets."""
        kind = kind_of(obj)
        meta = obj["metadata"]
        query = [("fieldManager", manager), ("force", "true")]
        path = kind.path(meta.get("namespace"), meta["name"], subresource)
        return await self.request("PATCH", path, body=obj, query=query, content_type="application/apply-patch+yaml")

    async def scale(self, namespace: str, name: str, replicas: int, *, manager: str = AUTOSCALER_FIELD_MANAGER) -> dict[str, Any]:
        """Server-side apply of a Deployment's /scale subresource: only spec.replicas, under the autoscaler's
        field manager, so the operator's own apply (and GitOps tools) never see the change as drift."""
        body = {
            "apiVersion": "autoscaling/v1",
            "kind": "Scale",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": replicas},
        }
        path = KINDS["Deployment"].path(namespace, name, "scale")
        query = [("fieldManager", manager), ("force", "true")]
        return await self.request("PATCH", path, body=body, query=query, content_type="application/apply-patch+yaml")

    async def delete(self, obj: dict[str, Any]) -> None:
        kind = kind_of(obj)
        meta = obj["metadata"]
        try:
            await self.request("DELETE", kind.path(meta.get("namespace"), meta["name"]),
                               body={"propagationPolicy": "Background", "preconditions": {"uid": meta["uid"]}} if meta.get("uid") else None)
        except ApiError as exc:
            if exc.status != 404:
                raise

    async def event(self, owner: dict[str, Any], type_: str, reason: str, message: str) -> None:
        """A core/v1 Event on the owner; failures are logged, never raised (events are best effort)."""
        meta = owner["metadata"]
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta.get("namespace") or "default"},
            "involvedObject": {
                "apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": meta["name"],
                "namespace": meta.get("namespace"), "uid": meta.get("uid"),
                "resourceVersion": meta.get("resourceVersion"),
            },
            "type": type_,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": FIELD_MANAGER},
            "reportingComponent": FIELD_MANAGER,
            "reportingInstance": FIELD_MANAGER,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "eventTime": None,
            "count": 1,
            "action": reason,
        }
        try:
            await self.request("POST", KINDS["Event"].path(event["metadata"]["namespace"]), body=event)
        except ApiError as exc:
            if exc.status == 404 or (exc.status == 403 and "NamespaceTerminating" in exc.body):
                # The namespace is going away with everything in it: nothing to tell anyone.
                log.debug("Dropped event %s on %s/%s: its namespace is gone or terminating", reason, owner["kind"], meta["name"])
                return
            log.warning("Could not post event %s on %s/%s: %s", reason, owner["kind"], meta["name"], exc)
