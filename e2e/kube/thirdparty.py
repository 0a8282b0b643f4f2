"""What the harnesses of third-party controllers (e2e/kube/keda.py, e2e/kube/kueue.py) share: starting one for a test
session or module (skip with the reason where this machine cannot run it, fail under ``CI=true``, wait for the
background build with one deadline), their log tails, their namespace, and their health probes."""

from __future__ import annotations

import contextlib
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, Self, TypeVar

from e2e.kube import build

# make test starts the controllers' build when the control plane is built; a cold one takes minutes on two
# cores at low priority beside the tiers
CONTROLLERS_WAIT_SECONDS = 2400.0

T = TypeVar("T")


def start_controller(name: str, why_not: str | None, start: Callable[[dict[str, Path]], T], started: Callable[[T], str]) -> T:
    """`start(binaries)` once the controllers' build is there, unless `why_not` says this machine cannot run
    it: then skipped with the reason, or failed under CI=true. Prints how long the wait and the start took.
    For pytest fixtures only (pytest is imported here, not by the harness's other users: the demo)."""
    if why_not:
        from tests.unavailable import unavailable

        unavailable(f"real {name}: {why_not}")
    began = time.monotonic()
    binaries = build.controllers(wait_seconds=CONTROLLERS_WAIT_SECONDS, log=print)
    waited = time.monotonic() - began
    controller = start(binaries)
    print(f"\nreal {name}: waited {waited:.0f} s for the build; {started(controller)}")
    return controller


def log_tails(log_dir: Path, names: tuple[str, ...], lines: int) -> str:
    """The last `lines` of each component's log, headed by its name and path."""
    out: list[str] = []
    for name in names:
        p = log_dir / f"{name}.log"
        if p.exists():
            out.append(f"----- {name} ({p}) -----")
            out.extend(p.read_text(errors="replace").splitlines()[-lines:])
    return "\n".join(out)


def ensure_namespace(api: Any, name: str) -> None:
    status, body = api.request("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
    if status not in (201, 409):
        raise RuntimeError(f"creating namespace {name}: {status} {body}")


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=3) as r:
            return r.status == 200
    except OSError:
        return False


class Controller:
    """The lifecycle a third-party controller's harness shares: `start` runs `_start` (the controller's own
    steps) under one clock, and on any failure prints its log tails, stops what was started and re-raises;
    `stop` undoes it (idempotent). Subclasses name their component logs in LOGS."""

    LOGS: tuple[str, ...] = ()

    def __init__(self, cluster: Any, binaries: dict[str, Path], name: str):
        self.cluster = cluster
        self.binaries = binaries
        self.dir = Path(cluster.run_dir) / name
        self.log_dir = self.dir / "logs"
        self.ports: dict[str, int] = {}
        self.started_seconds = 0.0

    def _start(self, timeout: float) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def start(self, timeout: float = 180) -> Self:
        began = time.monotonic()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        try:
            self._start(timeout)
        except BaseException:
            with contextlib.suppress(Exception):
                print(self.log_tails(40))
            self.stop()
            raise
        self.started_seconds = time.monotonic() - began
        return self

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def log_tails(self, lines: int = 30) -> str:
        return log_tails(self.log_dir, self.LOGS, lines)
