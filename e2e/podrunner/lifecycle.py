"""What the pod runner does next with a pod's containers, as a kubelet would: pure, no I/O (tests:
test_pod_lifecycle.py).

The runner calls :func:`step` every tick with what it sees of each container and carries out what comes back.
The rules are the kubelet's (KEP-753 native sidecars, the pod's ``restartPolicy``):

- **Init containers run in order.** A regular one must exit 0 before the next starts (under ``Never`` a
  failure fails the pod; otherwise it is restarted). A *sidecar* (an init container with ``restartPolicy:
  Always``) is started, and the next one starts only once its startup probe has passed (``started``); it is
  restarted whenever it exits, whatever the pod's policy, for as long as the main containers run.
- **Main containers** all start once every init container has completed or started. One that exits is
  restarted under ``Always``, under ``OnFailure`` only when it failed, never under ``Never``.
- **The end.** When every main container has exited for good, the running sidecars are stopped; once none
  runs, the pod's phase is ``Succeeded`` when every main container exited 0, else ``Failed``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["init", "sidecar", "main"]
# new: never started; running: started, its startup probe not yet passed; started: startup passed (or none);
# exited: the process ended (exit_code set); backoff: exited, a restart is already scheduled
State = Literal["new", "running", "started", "exited", "backoff"]
Verb = Literal["start", "restart", "stop"]


@dataclass(frozen=True)
class Seen:
    name: str
    kind: Kind
    state: State
    exit_code: int | None = None


@dataclass(frozen=True)
class Step:
    actions: tuple[tuple[Verb, str], ...] = ()
    initialized: bool = False  # every init container completed, every sidecar started (the Initialized condition)
    phase: str = "Pending"  # Pending | Running | Succeeded | Failed


def _main_done(c: Seen, policy: str) -> bool:
    """A main container that has exited and will not be started again."""
    if c.state != "exited":
        return False
    return policy == "Never" or (policy == "OnFailure" and c.exit_code == 0)


def step(policy: str, containers: list[Seen], initialized: bool = False) -> Step:
    """The actions for this tick (``start``/``restart``/``stop`` a container by name), and the pod's phase.
    ``initialized``: the pod was initialized on an earlier tick (it stays so: a sidecar restarting later does
    not hold the main containers back, and regular init containers do not run again)."""
    acts: list[tuple[Verb, str]] = []
    inits = [c for c in containers if c.kind in ("init", "sidecar")]
    mains = [c for c in containers if c.kind == "main"]
    sidecars = [c for c in inits if c.kind == "sidecar"]

    if initialized and mains and all(_main_done(c, policy) for c in mains):
        running = [c.name for c in sidecars if c.state in ("running", "started")]
        if running:  # stopped in the reverse of their start order
            return Step(tuple(("stop", n) for n in reversed(running)), initialized=True, phase="Running")
        ok = all(c.exit_code == 0 for c in mains)
        return Step(initialized=True, phase="Succeeded" if ok else "Failed")

    if initialized:
        acts += [("restart", c.name) for c in sidecars if c.state == "exited"]
    else:
        initialized = True
        for c in inits:
            if c.state == "new":
                acts.append(("start", c.name))
            elif c.kind == "sidecar" and c.state == "exited":
                acts.append(("restart", c.name))
            elif c.kind == "init" and c.state == "exited" and c.exit_code != 0:
                if policy == "Never":
                    return Step(tuple(acts), phase="Failed")
                acts.append(("restart", c.name))
            if not (c.state == "started" if c.kind == "sidecar" else c.state == "exited" and c.exit_code == 0):
                initialized = False
                break
    if initialized:
        for c in mains:
            if c.state == "new":
                acts.append(("start", c.name))
            elif c.state == "exited" and not _main_done(c, policy):
                acts.append(("restart", c.name))
    return Step(tuple(acts), initialized=initialized, phase="Running" if initialized else "Pending")
