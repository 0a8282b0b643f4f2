"""The hidden-state driver's only API call: one data key of its job's progress ConfigMap.

The operator creates the ConfigMap and a Role that lets the job's pods get/patch/update that one
object by name, so the driver only ever merge-patches ``data[shard-<I>]`` and never creates it. A JSON
merge patch of a single key leaves the other shards' keys alone, so shards need no coordination.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from pooling_operator.k8s.api import KINDS, Kube

log = logging.getLogger(__name__)

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def pod_namespace() -> str | None:
    """$POD_NAMESPACE (the Job sets it from the downward API), else the service account's namespace."""
    namespace = os.environ.get("POD_NAMESPACE")
    if namespace:
        return namespace
    try:
        return SERVICE_ACCOUNT_NAMESPACE.read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


class ProgressConfigMap:
    """Writes one key of ConfigMap ``name`` in ``namespace`` by JSON merge patch."""

    def __init__(self, name: str, namespace: str, kube: Kube | None = None) -> None:
        self.name = name
        self.namespace = namespace
        self._kube = kube or Kube()

    async def write(self, key: str, value: str) -> None:
        path = KINDS["ConfigMap"].path(self.namespace, self.name)
        await self._kube.request("PATCH", path, body={"data": {key: value}}, content_type="application/merge-patch+json")

    async def close(self) -> None:
        await self._kube.close()


def progress_configmap(name: str) -> ProgressConfigMap | None:
    """The writer for ConfigMap ``name`` in this pod's namespace, or None (logged) when it cannot be had:
    no name given or no namespace known. Reporting is optional; the shard is not."""
    if not name:
        return None
    namespace = pod_namespace()
    if namespace is None:
        log.warning("Progress reporting is off: neither $POD_NAMESPACE nor a service account namespace is set")
        return None
    # The client loads its credentials on the first write; a failure there is logged by the Reporter, which
    # never lets reporting stop the shard.
    return ProgressConfigMap(name, namespace)
