"""Fixtures for the e2e tests that run third-party controllers beside the control plane.

- ``kueue`` (session) real Kueue v0.17.0 (``e2e/kube/kueue.py``), its CRDs installed and its webhooks answering.
  It waits for the controllers' build (``make test`` starts it in the background) with a deadline. It needs a
  private mount namespace (root): elsewhere it is skipped with the reason, except under ``CI=true``, where that
  fails the run. Tests that use it are marked ``controllers``, so they run after the other e2e tests.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from e2e.kube.controlplane import ControlPlane
from e2e.kube.kueue import Kueue, mount_namespaces
from e2e.kube.thirdparty import start_controller


@pytest.fixture(scope="session")
def kueue(cluster: ControlPlane) -> Iterator[Kueue]:
    k = start_controller("Kueue", mount_namespaces(), lambda binaries: Kueue(cluster, binaries).start(),
                         lambda k: f"CRDs installed, webhooks answering in {k.started_seconds:.1f} s")
    yield k
    k.stop()
