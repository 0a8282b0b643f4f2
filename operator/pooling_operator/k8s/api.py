"""The operator's only way to the API server: get, list, server-side apply, delete, status, events.

Built on kubernetes_asyncio, on the same aiohttp and event loop as kopf (which serves the probes and webhook): no worker threads, one connection
pool, and the same kubeconfig / in-cluster loading (exec plugins, token rotation) as the official client.
The facade speaks paths from the one kinds table (`api/kinds.py`) and classifies every failure in one place:
TransientError (409, 429, 5xx, a broken connection, a timeout) is worth a retry with backoff; ApiError is not.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp
import aiohttp.helpers
from kubernetes_asyncio import client, config
from prometheus_client import Counter
from yarl import URL

from pooling_operator.api.clock import micro_time
from pooling_operator.api.kinds import KINDS, Kind, kind_of

log = logging.getLogger(__name__)

FIELD_MANAGER = "vllm-pooling-operator"
# A resourceVersion no object ever has (the largest the API server parses; etcd's revisions count up from 1). An
# apply carrying it creates the object when the name is free (a create ignores the version, as a PUT that creates
# does) and is answered 409 when any object holds the name, instead of taking that object over: one request, no
# read first. Pinned on the API server by e2e/tests/operator/test_foreign_children.py.
NEVER_A_VERSION = str(2**64 - 1)
AUTOSCALER_FIELD_MANAGER = "vllm-pooling-operator-autoscaler"
AUTOSCALER_STATUS = ("autoscaling", "cost")  # the status keys that manager owns (beside its conditions)
REQUEST_TIMEOUT_SECONDS = 30.0  # one request, connect to last byte; a watch has its own (below)
WATCH_SERVER_SECONDS = 300  # the API server ends a watch after this (timeoutSeconds); it is then resumed
WATCH_CLIENT_SECONDS = WATCH_SERVER_SECONDS + 30  # ... and we give up on one that outlives it by this much
READ_BUFSIZE = 2**21  # as kubernetes_asyncio's session: a watch event may carry an object up to etcd's 1.5 MiB
METADATA_ONLY = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
__all__ = ["AUTOSCALER_FIELD_MANAGER", "FIELD_MANAGER", "KINDS", "ApiError", "Kind", "Kube", "TransientError", "kind_of"]


REQUESTS = Counter("vllm_pooling_operator_api_requests", "Requests the operator sent to the API server (watches aside).",
                   ["verb", "resource"])


def verb_and_resource(method: str, path: str) -> tuple[str, str]:
    """("list", "pods") for GET /api/v1/namespaces/x/pods, as the audit log names them."""
    parts = [p for p in path.split("?")[0].split("/") if p]
    rest = parts[2:] if parts[:1] == ["api"] else parts[3:]
    if rest[:1] == ["namespaces"] and len(rest) > 2:
        rest = rest[2:]
    resource = "/".join(rest[:1] + rest[2:3])  # plural, and a subresource after the name
    named = len(rest) > 1
    verb = {"GET": "get" if named else "list", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(method, method.lower())
    return verb, resource or "namespaces"


class ApiError(Exception):
    def __init__(self, status: int, reason: str, body: str = "", *, retry_after: float | None = None) -> None:
        super().__init__(f"{status} {reason}: {body[:500]}")
        self.status = status
        self.reason = reason
        self.body = body
        self.retry_after = retry_after  # seconds, from the answer's Retry-After header (a 429 carries one)

    @property
    def gone(self) -> bool:
        """The object, or its whole namespace, is gone or going: 404, or 403 NamespaceTerminating (the API server
        refuses to create anything in a namespace being deleted)."""
        return self.status == 404 or (self.status == 403 and "NamespaceTerminating" in self.body)


class TransientError(ApiError):
    """Worth retrying: a conflict, throttling, a server error or a broken connection."""


def status_patch(body: Mapping[str, Any], status: dict[str, Any] | None = None) -> dict[str, Any]:
    """The server-side apply of `body`'s status subresource: its identity and `status` (None: nothing, which
    drops every status field the applying manager owned)."""
    meta = body["metadata"]
    patch = {"apiVersion": body["apiVersion"], "kind": body["kind"],
             "metadata": {"name": meta["name"], **({"namespace": meta["namespace"]} if meta.get("namespace") else {})}}
    if status is not None:
        patch["status"] = status
    return patch


UNTYPEABLE_PATCH = "failed to create typed patch object"
EVENT_RETRY_SECONDS = (1.0, 2.0, 4.0)  # an event is retried this often on a transient answer, then dropped


def classify(status: int, reason: str, body: str, headers: Mapping[str, str] | None = None) -> ApiError:
    """The one place an answer becomes an error: transient (retry) or not. A server-side apply whose object
    does not fit the kind's schema (a key no schema declares, in a free-form field the user wrote) is answered
    with 500 'failed to create typed patch object': a refusal of that object, not a server fault."""
    refused = status == 500 and UNTYPEABLE_PATCH in body
    cls = TransientError if (status in (0, 409, 429) or status >= 500) and not refused else ApiError
    return cls(status, reason, body, retry_after=retry_after((headers or {}).get("Retry-After")))


def retry_after(header: str | None) -> float | None:
    """A Retry-After header in seconds (the API server sends whole seconds; an HTTP date is not read)."""
    try:
        return max(0.0, float(header)) if header else None
    except ValueError:
        return None


async def load_configuration() -> client.Configuration:
    """In-cluster config when running in a pod, else KUBECONFIG / ~/.kube/config."""
    configuration = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=configuration)
    except config.ConfigException:
        await config.load_kube_config(client_configuration=configuration)
    return configuration


def env_proxy_once(rest: Any, host: str) -> None:
    """Look the API server's proxy up in the environment once, not for every request.

    kubernetes_asyncio's session trusts the environment, so aiohttp reads ~/.netrc and the proxy variables for each
    request, each time in a worker thread: 2.5x the process's CPU per request (bench/README.md, "The proxy looked
    up once"). The API server's address does not change while the client lives: its proxy is found once by
    aiohttp's own rule (HTTPS_PROXY / HTTP_PROXY, NO_PROXY, a proxy's credentials from its URL or ~/.netrc) and the
    session is made again on the same connection pool without trusting the environment. A proxy the kubeconfig
    names wins, as before. ~/.netrc no longer gives the API server itself a login: the kubeconfig's credentials are
    the client's (with a token, aiohttp refused to combine the two anyway)."""
    session = rest.pool_manager
    if not rest.proxy:
        try:
            proxy, auth = aiohttp.helpers.get_env_proxy_for_url(URL(host))
        except LookupError:
            pass  # no proxy for this host (none set, or NO_PROXY names it)
        else:
            rest.proxy = str(proxy)
            if auth is not None:
                rest.proxy_headers = {**(rest.proxy_headers or {}), "Proxy-Authorization": auth.encode()}
    connector = session.connector
    session.detach()  # the connector stays open for the new session
    rest.pool_manager = aiohttp.ClientSession(connector=connector, trust_env=False, read_bufsize=READ_BUFSIZE)


class Kube:
    """Connects on first use, inside the running loop (aiohttp sessions belong to one)."""

    def __init__(self, configuration: client.Configuration | None = None, *, timeout: float = REQUEST_TIMEOUT_SECONDS) -> None:
        self._configuration = configuration
        self._client: client.ApiClient | None = None
        self._connecting = asyncio.Lock()
        self.timeout = timeout

    async def _api(self) -> client.ApiClient:
        if self._client is None:
            async with self._connecting:
                if self._client is None:
                    configuration = self._configuration or await load_configuration()
                    configuration.connection_pool_maxsize = 32
                    api = client.ApiClient(configuration)
                    assert configuration.host is not None  # a kubeconfig, the cluster or the default always names one
                    env_proxy_once(api.rest_client, configuration.host)
                    self._client = api
        return self._client

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    async def request(self, method: str, path: str, *, body: Any = None, query: list[tuple[str, Any]] | None = None,
                      content_type: str = "application/json", accept: str = "application/json") -> Any:
        api = await self._api()
        REQUESTS.labels(*verb_and_resource(method, path)).inc()
        try:
            response = await api.call_api(
                path, method, query_params=query or [], body=body, auth_settings=["BearerToken"],
                header_params={"Content-Type": content_type, "Accept": accept},
                _preload_content=False, _request_timeout=self.timeout,
            )
            async with response:
                data = await response.read()
                status, reason, headers = response.status, response.reason or "", response.headers
        except client.ApiException as exc:  # raised before the request left (bad parameters)
            raise classify(exc.status or 0, exc.reason or "", str(exc.body or "")) from exc
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise TransientError(0, type(exc).__name__, str(exc)) from exc
        if not 200 <= status < 300:
            raise classify(status, reason, data.decode(errors="replace"), headers)
        return json.loads(data) if data else None

    async def watch(self, path: str, query: list[tuple[str, Any]], *, accept: str = "application/json",
                    timeout: int = WATCH_SERVER_SECONDS) -> AsyncIterator[dict[str, Any]]:  # fmt: skip
        """The events of one watch request (``watch=1`` and ``timeoutSeconds``: ``timeout``), as parsed JSON lines,
        until the API server ends it. An answer other than 200 raises as `request` does; a broken connection or a
        watch that outlives the server's timeout raises TransientError. Not counted in REQUESTS (a watch is
        not a request the operator repeats)."""
        api = await self._api()
        query = [*query, ("watch", "1"), ("timeoutSeconds", str(timeout))]
        try:
            response = await api.call_api(
                path, "GET", query_params=query, auth_settings=["BearerToken"], header_params={"Accept": accept},
                _preload_content=False, _request_timeout=timeout + WATCH_CLIENT_SECONDS - WATCH_SERVER_SECONDS,
            )
            async with response:
                if response.status != 200:
                    raise classify(response.status, response.reason or "", (await response.read()).decode(errors="replace"),
                                   response.headers)
                pending = b""
                # chunks, not readline: one object may be longer than any line limit aiohttp sets
                async for chunk in response.content.iter_any():
                    pending += chunk
                    *lines, pending = pending.split(b"\n")
                    for line in lines:
                        if line.strip():
                            yield json.loads(line)
                if pending.strip():
                    yield json.loads(pending)
        except client.ApiException as exc:
            raise classify(exc.status or 0, exc.reason or "", str(exc.body or "")) from exc
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise TransientError(0, type(exc).__name__, str(exc)) from exc

    async def get(self, kind: Kind, namespace: str | None, name: str) -> dict[str, Any] | None:
        try:
            return await self.request("GET", kind.path(namespace, name))
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    async def lookup(self, kind: Kind, namespace: str | None, name: str) -> tuple[dict[str, Any] | None, bool]:
        """(the object or None, whether the API server serves the kind at all): a 404 for a missing object names
        it in the Status's details, a 404 for a resource nobody serves (a CRD not installed) does not."""
        try:
            return await self.request("GET", kind.path(namespace, name)), True
        except ApiError as exc:
            if exc.status != 404:
                raise
            try:
                details = json.loads(exc.body).get("details") or {}
            except (ValueError, AttributeError):
                details = {}
            return None, bool(details.get("name"))

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

    async def apply(self, obj: dict[str, Any], *, manager: str = FIELD_MANAGER, subresource: str | None = None,
                    create: bool = False) -> dict[str, Any]:
        """Server-side apply, forced: the operator owns the fields it sets. With `create`, only where the name is
        free: an object already there (anyone's) is answered 409 and left as it is (NEVER_A_VERSION)."""
        kind = kind_of(obj)
        meta = obj["metadata"]
        if create:
            obj = {**obj, "metadata": {**meta, "resourceVersion": NEVER_A_VERSION}}
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

    async def event(self, owner: dict[str, Any], type_: str, reason: str, message: str, at: str | None = None) -> None:
        """A core/v1 Event on the owner, stamped `at` (a micro_time; default now); failures are logged, never raised
        (events are best effort)."""
        meta = owner["metadata"]
        now = at or micro_time()
        event: dict[str, Any] = {
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
        for attempt, pause in enumerate((*EVENT_RETRY_SECONDS, None)):
            try:
                await self.request("POST", KINDS["Event"].path(event["metadata"]["namespace"]), body=event)
                return
            except TransientError as exc:  # throttled (429) or the API server away: a few tries, then dropped
                if pause is not None:
                    await asyncio.sleep(pause)
                    continue
                log.warning("Could not post event %s on %s/%s after %d tries: %s", reason, owner["kind"], meta["name"],
                            attempt + 1, exc)
            except ApiError as exc:
                if exc.gone:
                    # The namespace is going away with everything in it: nothing to tell anyone.
                    log.debug("Dropped event %s on %s/%s: its namespace is gone or terminating", reason, owner["kind"], meta["name"])
                    return
                log.warning("Could not post event %s on %s/%s: %s", reason, owner["kind"], meta["name"], exc)
            return
