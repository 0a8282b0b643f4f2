"""One pool of real vLLM servers for the session: keyed by model and rendered argv, at most ``MAX_ALIVE`` at once.

A test module declares the servers it uses in ``POOL`` (one entry per use); when the pool is first asked for,
it ``want``s every selected module's entries in test order, applies them through the operator while fewer
than ``MAX_ALIVE`` are alive and queues the rest, so the next servers start while the tests before them run.
``serving(doc)`` waits until its server is Ready and lets go of it afterwards (``holding(slot(...))``
keeps a slot for a vLLM the pool does not start, a HiddenStateJob's sidecar); the pool deletes a server when
its last user lets go and starts the next one at once (the deleted pod drains, preStop sleep and SIGTERM,
beside it; ``close`` waits for every pod to be gone). Two wants with the same model and argv share one server.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any

from e2e.tests.operator.real_vllm.serving import Deployer, Served  # Deployer: apply, await_ready, delete
from pooling_operator import OPERATOR_IMAGE
from pooling_operator.builders import BuildContext, plan
from pooling_operator.vllm.settings import Settings
from pooling_operator.vllm.validate import problem_line, validate

MAX_ALIVE = 2  # two vLLM starts at once use both cores; a third only slows the other two


def rendered_argv(doc: dict[str, Any]) -> list[str]:
    """The vLLM command line the operator renders for ``doc`` (its reconcile's path, as ``render --vllm-args``)."""
    result = validate(doc, Settings())
    if not result.ok or result.resource is None or result.contract is None:
        raise AssertionError("the pool was given an invalid spec:\n" + "\n".join(problem_line(result, p) for p in result.problems))
    return plan(result.resource, result.contract, BuildContext(operator_image=OPERATOR_IMAGE), result.workload).argv


def slot(name: str) -> dict[str, Any]:
    """A ``POOL`` entry for a vLLM the pool does not start (a Job's sidecar): it holds one of the MAX_ALIVE
    slots while its module's tests hold it (``ServerPool.holding``), so the pool starts one server beside it."""
    return {"slot": name}


def pool_key(doc: dict[str, Any]) -> str:
    if "slot" in doc:
        return f"slot:{doc['slot']}"
    return json.dumps({"model": doc["spec"]["model"], "argv": rendered_argv(doc)}, sort_keys=True)


@dataclass
class _Server:
    doc: dict[str, Any]
    users: int = 0
    applied_at: float | None = None
    served: Served | None = None


class ServerPool:
    def __init__(self, deployer: Deployer, namespace: str):
        self.deployer = deployer
        self.namespace = namespace
        self.servers: dict[str, _Server] = {}  # in the order wanted: the queue

    def _here(self, doc: dict[str, Any]) -> dict[str, Any]:
        if "slot" in doc:
            return doc
        doc = copy.deepcopy(doc)
        doc["metadata"]["namespace"] = self.namespace
        return doc

    def want(self, doc: dict[str, Any]) -> str:
        """Queue one use of a server for ``doc`` (in the pool's namespace); returns its key. Starts it now if a
        slot is free."""
        doc = self._here(doc)
        key = pool_key(doc)
        self.servers.setdefault(key, _Server(doc)).users += 1
        self._fill()
        return key

    def serving(self, doc: dict[str, Any]) -> AbstractContextManager[Served]:
        """One use of ``doc``'s server: the one wanted up front, or wanted now (a module run on its own)."""
        key = pool_key(self._here(doc))
        if key not in self.servers:
            self.want(doc)
        return self.using(key)

    def _alive(self) -> int:
        return sum(1 for s in self.servers.values() if s.applied_at is not None)

    def _fill(self) -> None:
        for server in self.servers.values():
            if self._alive() >= MAX_ALIVE:
                return
            if server.applied_at is None:
                if "slot" not in server.doc:
                    server.doc = self.deployer.apply(server.doc)
                server.applied_at = time.monotonic()

    @contextmanager
    def using(self, key: str) -> Iterator[Served]:
        """The Ready server of ``key`` (started now if it was queued); released when the block ends."""
        server = self.servers[key]
        try:
            if server.applied_at is None:  # wanted later than servers still alive: make room by order
                self._fill()
            assert server.applied_at is not None, f"no free slot for {key}: release a server first"
            if server.served is None:
                server.served = self.deployer.await_ready(server.doc, server.applied_at)
            yield server.served
        finally:
            self.release(key)

    @contextmanager
    def holding(self, slot_doc: dict[str, Any]) -> Iterator[None]:
        """Hold a ``slot`` (wanted up front, or now) for the block; the next queued server starts when it ends."""
        key = pool_key(slot_doc)
        if key not in self.servers:
            self.want(slot_doc)
        try:
            if self.servers[key].applied_at is None:
                self._fill()
            assert self.servers[key].applied_at is not None, f"no free slot for {key}: release a server first"
            yield
        finally:
            self.release(key)

    def release(self, key: str) -> None:
        server = self.servers[key]
        server.users -= 1
        if server.users > 0:
            return
        del self.servers[key]
        if server.applied_at is not None:
            self._stop(server)
        self._fill()

    def _stop(self, server: _Server, wait: bool = False) -> None:
        if "slot" not in server.doc:
            self.deployer.delete(server.doc, wait=wait)

    def close(self) -> None:
        """Stop what is still alive, start nothing more, and wait until every pod is gone."""
        servers, self.servers = list(self.servers.values()), {}
        for server in servers:
            if server.applied_at is not None:
                self._stop(server)
        self.deployer.drained(self.namespace)
