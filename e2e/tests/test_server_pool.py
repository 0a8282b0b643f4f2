"""The real_vllm tier's server pool (e2e/tests/operator/real_vllm/pool.py) with a deployer that records what
it is asked to do: at most two servers alive, started in the order wanted, one server per model and argv,
the next one started only once a released server's pods are gone."""

from __future__ import annotations

from typing import Any

import pytest

from e2e.tests.operator.real_vllm.pool import MAX_ALIVE, ServerPool, pool_key, slot
from e2e.tests.operator.real_vllm.serving import Served


class Recorder:
    def __init__(self) -> None:
        self.log: list[str] = []
        self.alive: set[str] = set()
        self.most_alive = 0

    def apply(self, doc: dict[str, Any]) -> dict[str, Any]:
        name = doc["metadata"]["name"]
        self.log.append(f"apply {name}")
        self.alive.add(name)
        self.most_alive = max(self.most_alive, len(self.alive))
        return doc

    def await_ready(self, doc: dict[str, Any], began: float) -> Served:
        name = doc["metadata"]["name"]
        assert name in self.alive
        self.log.append(f"ready {name}")
        return Served(doc["kind"], doc["metadata"]["namespace"], name, f"{name}-0", "http://127.0.0.1:1", {}, {}, 0.0)

    def delete(self, doc: dict[str, Any], wait: bool = False) -> None:
        name = doc["metadata"]["name"]
        self.log.append(f"delete {name}")
        self.alive.remove(name)

    def drained(self, namespace: str) -> None:
        self.log.append(f"drained {namespace}")


def service(name: str, model: str = "/m", max_len: int = 256) -> dict[str, Any]:
    return {
        "apiVersion": "vllm-pooling.io/v1alpha1", "kind": "PoolingService", "metadata": {"name": name, "namespace": "x"},
        "spec": {"model": {"name": model, "source": {"volume": {"claimName": "models", "path": model, "readOnly": True}}},
                 "task": "embed", "engine": {"image": "vllm/vllm-openai:v0.32.0", "maxModelLen": max_len},
                 "resources": {"gpu": {"count": 0}, "cpu": "1", "memory": "4Gi"}},
    }  # fmt: skip


def pool() -> tuple[ServerPool, Recorder]:
    rec = Recorder()
    return ServerPool(rec, "pool"), rec  # type: ignore[arg-type]


def test_two_start_at_once_and_the_next_waits_for_a_release_and_the_pods_gone() -> None:
    p, rec = pool()
    keys = [p.want(service(n, model=f"/{n}")) for n in ("a", "b", "c", "d")]
    assert rec.log == ["apply a", "apply b"]
    with p.using(keys[0]) as s:
        assert (s.name, s.namespace) == ("a", "pool")  # the pool's namespace, whatever the doc said
    assert rec.log[-3:] == ["ready a", "delete a", "apply c"]
    for k in keys[1:]:
        with p.using(k):
            pass
    assert rec.log == ["apply a", "apply b", "ready a", "delete a", "apply c", "ready b", "delete b", "apply d",
                       "ready c", "delete c", "ready d", "delete d"]  # fmt: skip
    assert rec.most_alive == MAX_ALIVE and not rec.alive and not p.servers


def test_the_same_model_and_argv_is_one_server_released_by_its_last_user() -> None:
    p, rec = pool()
    k1, k2 = p.want(service("a")), p.want(service("a"))
    assert k1 == k2 and rec.log == ["apply a"]
    with p.using(k1):
        pass
    assert "delete a" not in rec.log  # one user is left
    with p.using(k2):
        pass
    assert rec.log == ["apply a", "ready a", "delete a"]  # Ready once, for both


def test_serving_a_doc_uses_what_was_wanted_for_it_or_wants_it_now() -> None:
    p, rec = pool()
    p.want(service("a", model="/a"))
    with p.serving(service("a", model="/a")) as s:  # the doc as the module wrote it, any namespace
        assert s.name == "a"
    with p.serving(service("b", model="/b")):  # never wanted up front
        pass
    assert rec.log == ["apply a", "ready a", "delete a", "apply b", "ready b", "delete b"] and not p.servers


def test_a_slot_for_a_job_holds_its_turn_so_one_server_starts_beside_it() -> None:
    p, rec = pool()
    a, job, b, c = p.want(service("a", model="/a")), p.want(slot("job")), p.want(service("b", model="/b")), p.want(service("c", model="/c"))
    assert rec.log == ["apply a"]  # the slot took the second place, and applies nothing
    with p.using(a):
        pass
    assert rec.log[-1] == "apply b"  # one server beside the job
    with p.holding(slot("job")):
        assert rec.log[-1] == "apply b"
    assert rec.log[-1] == "apply c" and job not in p.servers
    for k in (b, c):
        with p.using(k):
            pass
    assert "delete job" not in rec.log and rec.most_alive == 2


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        (service("a"), service("a"), True),
        (service("a"), service("b"), False),  # another served name: another argv
        (service("a", model="/m"), service("a", model="/n"), False),
        (service("a", max_len=256), service("a", max_len=128), False),
    ],
)
def test_the_key_is_the_model_and_the_rendered_argv(a: dict[str, Any], b: dict[str, Any], same: bool) -> None:
    assert (pool_key(a) == pool_key(b)) is same


def test_close_stops_what_is_alive_and_starts_nothing_queued() -> None:
    p, rec = pool()
    for n in ("a", "b", "c"):
        p.want(service(n, model=f"/{n}"))
    p.close()
    assert rec.log == ["apply a", "apply b", "delete a", "delete b", "drained pool"] and not rec.alive


def test_an_invalid_spec_is_refused_with_the_field_path() -> None:
    bad = service("a")
    bad["spec"]["task"] = "generate"
    with pytest.raises(AssertionError, match=r"spec\.task"):
        pool_key(bad)
