"""The one way a test says that a part it needs is not here: ``unavailable(reason)``.

On a developer's machine the test is skipped with the reason (pytest's ``-ra`` summary lists every one); under
``CI=true`` the same call fails the test, so a CI run never passes by skipping what it was meant to prove (a
Prometheus that is missing, a tmpfs that cannot be mounted, a runtime that did not install). Every skip of the
suite for a missing part goes through here; a skip that is not about a missing part (a table row that does not
apply) is not a skip of this kind and says so at its call.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def under_ci() -> bool:
    return os.environ.get("CI") == "true"


def unavailable(reason: str) -> NoReturn:
    """Skip the calling test (or fixture) with ``reason``; under ``CI=true``, fail it with the same words."""
    if under_ci():
        pytest.fail(f"unavailable under CI=true (a CI run must not skip it): {reason}", pytrace=False)
    pytest.skip(reason)
