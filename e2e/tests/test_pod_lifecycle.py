"""The pod runner's container lifecycle (e2e/podrunner/lifecycle.py): init order, native sidecars, restart
policies and the pod's phase, one row per case."""

from __future__ import annotations

import pytest

from e2e.podrunner.lifecycle import Seen, step


def S(name: str, kind: str, state: str, code: int | None = None) -> Seen:
    return Seen(name, kind, state, code)  # type: ignore[arg-type]


CASES = [
    # (id, policy, initialized before, containers, actions, initialized after, phase)
    ("a Deployment pod starts its container", "Always", False, [S("vllm", "main", "new")],
     [("start", "vllm")], True, "Running"),
    ("a sidecar starts first, alone", "Never", False, [S("vllm", "sidecar", "new"), S("driver", "main", "new")],
     [("start", "vllm")], False, "Pending"),
    ("the main container waits for the sidecar's startup probe", "Never", False,
     [S("vllm", "sidecar", "running"), S("driver", "main", "new")], [], False, "Pending"),
    ("the main container starts once the sidecar has started", "Never", False,
     [S("vllm", "sidecar", "started"), S("driver", "main", "new")], [("start", "driver")], True, "Running"),
    ("a sidecar that dies before it started is restarted, under Never too", "Never", False,
     [S("vllm", "sidecar", "exited", 1), S("driver", "main", "new")], [("restart", "vllm")], False, "Pending"),
    ("a sidecar that dies later is restarted and holds nothing back", "Never", True,
     [S("vllm", "sidecar", "exited", 137), S("driver", "main", "started")], [("restart", "vllm")], True, "Running"),
    ("a sidecar in back-off is left alone", "Never", True,
     [S("vllm", "sidecar", "backoff", 137), S("driver", "main", "started")], [], True, "Running"),
    ("the sidecar is stopped once the main container exits", "Never", True,
     [S("vllm", "sidecar", "started"), S("driver", "main", "exited", 0)], [("stop", "vllm")], True, "Running"),
    ("Succeeded once the sidecar has stopped", "Never", True,
     [S("vllm", "sidecar", "exited", 143), S("driver", "main", "exited", 0)], [], True, "Succeeded"),
    ("Failed when the main container failed under Never", "Never", True,
     [S("vllm", "sidecar", "exited", 143), S("driver", "main", "exited", 3)], [], True, "Failed"),
    ("OnFailure restarts a failed main container", "OnFailure", True,
     [S("vllm", "sidecar", "started"), S("driver", "main", "exited", 1)], [("restart", "driver")], True, "Running"),
    ("OnFailure: exit 0 ends the pod", "OnFailure", True,
     [S("vllm", "sidecar", "exited", 143), S("driver", "main", "exited", 0)], [], True, "Succeeded"),
    ("Always restarts a main container that exited 0", "Always", True, [S("vllm", "main", "exited", 0)],
     [("restart", "vllm")], True, "Running"),
    ("regular init containers run in order", "Never", False,
     [S("a", "init", "exited", 0), S("b", "init", "new"), S("m", "main", "new")], [("start", "b")], False, "Pending"),
    ("a running init container holds the rest", "Never", False,
     [S("a", "init", "started"), S("b", "init", "new"), S("m", "main", "new")], [], False, "Pending"),
    ("a failed init container fails the pod under Never", "Never", False,
     [S("a", "init", "exited", 2), S("m", "main", "new")], [], False, "Failed"),
    ("a failed init container is retried under OnFailure", "OnFailure", False,
     [S("a", "init", "exited", 2), S("m", "main", "new")], [("restart", "a")], False, "Pending"),
    ("init, then sidecar, then main", "Never", False,
     [S("a", "init", "exited", 0), S("s", "sidecar", "new"), S("m", "main", "new")], [("start", "s")], False, "Pending"),
    ("two sidecars are stopped in reverse order", "Never", True,
     [S("s1", "sidecar", "started"), S("s2", "sidecar", "started"), S("m", "main", "exited", 0)],
     [("stop", "s2"), ("stop", "s1")], True, "Running"),
    ("a pod ends only when every main container is done", "Never", True,
     [S("s", "sidecar", "started"), S("m1", "main", "exited", 0), S("m2", "main", "started")], [], True, "Running"),
]  # fmt: skip


@pytest.mark.parametrize(("policy", "before", "containers", "actions", "initialized", "phase"),
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])  # fmt: skip
def test_step(policy: str, before: bool, containers: list[Seen], actions: list[tuple[str, str]],
              initialized: bool, phase: str) -> None:  # fmt: skip
    got = step(policy, containers, before)
    assert list(got.actions) == actions
    assert got.initialized is initialized
    assert got.phase == phase
