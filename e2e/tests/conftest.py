"""Fixtures for the e2e tests that run third-party controllers beside the control plane.

- ``kueue`` (session) real Kueue v0.17.0 (``e2e/kueue.py``), its CRDs installed and its webhooks answering.
  It waits for the controllers' build (``make test`` starts it in the background) with a deadline. It needs a
  private mount namespace (root): elsewhere it is skipped with the reason, except under ``CI=true``, where that
  fails the run. Tests that use it are marked ``controllers``, so they run after the other e2e tests.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest

from e2e import build
from e2e.controlplane import ControlPlane
from e2e.kueue import Kueue, mount_namespaces

# make test starts the controllers' build when the control plane is built; a cold one takes minutes on two
# cores at low priority beside the tiers (the same deadline as test_keda.py's)
CONTROLLERS_WAIT_SECONDS = 2400.0


@pytest.fixture(scope="session")
def kueue(cluster: ControlPlane) -> Iterator[Kueue]:
    why = mount_namespaces()
    if why:
        if os.environ.get("CI") == "true":
            pytest.fail(f"real Kueue cannot run under CI=true: {why}")
        pytest.skip(f"real Kueue: {why}")
    began = time.monotonic()
    binaries = build.controllers(wait_seconds=CONTROLLERS_WAIT_SECONDS, log=print)
    waited = time.monotonic() - began
    k = Kueue(cluster, binaries).start()
    print(f"\nreal Kueue: waited {waited:.0f} s for the build; CRDs installed, webhooks answering in {k.started_seconds:.1f} s")
    yield k
    k.stop()
