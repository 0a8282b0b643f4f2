"""The operator's informer (k8s/informer.py) against the real API server: a list in pages and the watch from
its version, the metadata-only watch of CRDs, and a kind that is not served until its CRD is installed and
stops being served when the CRD is deleted. The 410 re-list is exercised end to end by
e2e/tests/operator/test_faults.py (a frozen operator, a restarted API server, a compacted etcd)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from e2e.kube.controlplane import ControlPlane
from pooling_operator.api.kinds import KINDS, Kind
from pooling_operator.k8s.api import METADATA_ONLY, Kube
from pooling_operator.k8s.cache import project
from pooling_operator.k8s.informer import Event, Informer
from pooling_operator.runtime.watches import CRD, project_crd

GROUP = "informer-test.vllm-pooling.io"
WIDGET = Kind(f"{GROUP}/v1", "Widget", "widgets")


async def kube_of(cluster: ControlPlane) -> Kube:
    from kubernetes_asyncio import client, config

    configuration = client.Configuration()
    await config.load_kube_config(config_file=str(cluster.kubeconfig), client_configuration=configuration)
    return Kube(configuration)


async def until(check: Callable[[], Any], what: str, timeout: float = 30) -> None:
    """Wait for a condition the informer's task makes true (it runs on this loop: each poll yields to it)."""
    async def poll() -> None:
        while not check():
            await asyncio.sleep(0.05)

    try:
        await asyncio.wait_for(poll(), timeout)
    except TimeoutError:
        raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}") from None


def crd() -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"widgets.{GROUP}"},
        "spec": {"group": GROUP, "scope": "Namespaced", "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                 "versions": [{"name": "v1", "served": True, "storage": True,
                               "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]},
    }  # fmt: skip


def test_pages_then_the_watch_from_the_lists_version(cluster: ControlPlane, namespace: str) -> None:
    labelled = {"app.kubernetes.io/managed-by": "vllm-pooling-operator"}
    maps = [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"cm-{i}", "namespace": namespace, "labels": labelled}}
            for i in range(5)] + [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "unlabelled", "namespace": namespace}}]  # fmt: skip
    cluster.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": maps}))

    async def main() -> None:
        kube = await kube_of(cluster)
        events: list[Event] = []
        listed: list[int] = []
        informer = Informer(kube, KINDS["ConfigMap"], namespace, handle=events.append, listed=lambda i: listed.append(i.lists),
                            project=project, selector={"app.kubernetes.io/managed-by": "vllm-pooling-operator"}, page=2)  # fmt: skip
        task = asyncio.create_task(informer.run())
        try:
            await until(lambda: listed == [1], "the first list")
            assert sorted(e.body["metadata"]["name"] for e in events) == [f"cm-{i}" for i in range(5)]  # three pages
            assert all(e.listed and e.type == "ADDED" and e.body["kind"] == "ConfigMap" for e in events)
            await asyncio.to_thread(cluster.kubectl, "delete", "configmap", "cm-0", "-n", namespace)
            await asyncio.to_thread(cluster.kubectl, "annotate", "configmap", "cm-1", "-n", namespace, "x=y")
            await until(lambda: len(events) >= 7, "the delete and the change by the watch")
            assert [(e.type, e.body["metadata"]["name"], e.listed) for e in events[5:7]] == [
                ("DELETED", "cm-0", False), ("MODIFIED", "cm-1", False)]
            assert set(informer.known) == {e.body["metadata"]["uid"] for e in events[1:5]}
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await kube.close()

    asyncio.run(main())


def test_a_kind_is_watched_once_its_crd_appears_and_forgotten_when_it_goes(cluster: ControlPlane, namespace: str) -> None:
    async def main() -> None:
        kube = await kube_of(cluster)
        events: list[Event] = []
        listed: list[int] = []
        widgets = Informer(kube, WIDGET, None, handle=events.append, listed=lambda i: listed.append(i.lists), project=project)

        def crd_event(event: Event) -> None:  # what runtime/watches.py does with the CRD watch
            if event.type != "DELETED" and event.body["metadata"]["name"] == f"widgets.{GROUP}" and widgets.served is False:
                widgets.serve()

        crds = Informer(kube, CRD, None, handle=crd_event, listed=lambda _: None, project=project_crd, accept=METADATA_ONLY)
        tasks = [asyncio.create_task(widgets.run()), asyncio.create_task(crds.run())]
        try:
            await until(lambda: listed == [1] and crds.lists == 1, "the first lists")
            assert widgets.served is False and events == []
            await asyncio.to_thread(cluster.kubectl, "apply", "-f", "-", input=json.dumps(crd()))
            await until(lambda: widgets.served is True, "the Widget kind served after its CRD appeared")
            widget = {"apiVersion": f"{GROUP}/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": namespace}, "spec": {"size": 3}}
            await until(lambda: cluster.kubectl("apply", "-f", "-", input=json.dumps(widget), check=False).returncode == 0, "a Widget created")
            await until(lambda: any(e.body["metadata"]["name"] == "w" and not e.vanished for e in events), "the Widget seen")
            assert events[-1].body["spec"] == {"size": 3}
            await asyncio.to_thread(cluster.kubectl, "delete", "crd", f"widgets.{GROUP}", "--wait=true")
            await until(lambda: widgets.served is False and widgets.known == {}, "the Widget kind no longer served")
            assert any(e.type == "DELETED" and e.body["metadata"]["name"] == "w" for e in events)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await kube.close()
            cluster.kubectl("delete", "crd", f"widgets.{GROUP}", "--ignore-not-found")

    asyncio.run(main())
