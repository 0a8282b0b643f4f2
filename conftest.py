"""Root pytest plugin: how long each tier took, printed at the end of every run (make test, .ci/run)."""

from __future__ import annotations

import time
from collections import defaultdict

import pytest

# first matching prefix of a test's node id names its tier
TIERS = (
    ("e2e/tests/operator/real_vllm/", "real_vllm (real vLLM through the pod runner)"),
    ("e2e/tests/operator/", "operator (operator process + control plane)"),
    ("e2e/tests/", "control plane and integration"),
    ("tests/", "unit"),
)
_SECONDS: dict[str, float] = defaultdict(float)
_COUNTS: dict[str, int] = defaultdict(int)
_FIRST: dict[str, float] = {}
_LAST: dict[str, float] = {}


def _tier(nodeid: str) -> str:
    return next((name for prefix, name in TIERS if nodeid.startswith(prefix)), "other")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    tier = _tier(report.nodeid)
    _SECONDS[tier] += report.duration
    now = time.monotonic()
    _FIRST.setdefault(tier, now - report.duration)
    _LAST[tier] = now
    if report.when == "call" or (report.when == "setup" and report.skipped):
        _COUNTS[tier] += 1


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _COUNTS:
        return
    terminalreporter.section("time per tier")
    for _, name in (*TIERS, ("", "other")):
        if name in _COUNTS:
            wall = _LAST[name] - _FIRST[name]
            terminalreporter.write_line(
                f"{name:48s} {_COUNTS[name]:4d} tests  {_SECONDS[name]:7.1f} s in tests and fixtures, {wall:7.1f} s wall"
            )
