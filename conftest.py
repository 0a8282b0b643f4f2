"""Root pytest plugin: the suite's one hypothesis profile, and how long each tier took, printed at the end of every
run (make test, .ci/run)."""

from __future__ import annotations

import time
from collections import defaultdict

import pytest
from hypothesis import HealthCheck, settings

from e2e import ledger

# One hypothesis profile for every @given of the suite: the same draws on every run, CI's too (derandomize: the
# seed comes from each test's own name), no example database to carry state from run to run, and no deadline
# (a loaded 2-core machine is not a slow function). Tests set only how many examples they draw.
settings.register_profile(
    "suite", derandomize=True, database=None, deadline=None, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
settings.load_profile("suite")

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
_TESTS: dict[str, float] = defaultdict(float)  # node id -> setup + call + teardown seconds


def _tier(nodeid: str) -> str:
    return next((name for prefix, name in TIERS if nodeid.startswith(prefix)), "other")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    tier = _tier(report.nodeid)
    _SECONDS[tier] += report.duration
    _TESTS[report.nodeid] += report.duration
    now = time.monotonic()
    _FIRST.setdefault(tier, now - report.duration)
    _LAST[tier] = now
    if report.when == "call" or (report.when == "setup" and report.skipped):
        _COUNTS[tier] += 1


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _COUNTS or hasattr(terminalreporter.config, "workerinput"):  # an xdist worker: the controller sums up
        return
    terminalreporter.section("time per tier")
    tiers = {}
    for _, name in (*TIERS, ("", "other")):
        if name in _COUNTS:
            wall = _LAST[name] - _FIRST[name]
            tiers[name] = {"wall": round(wall, 1), "tests": _COUNTS[name], "in_tests": round(_SECONDS[name], 1)}
            terminalreporter.write_line(
                f"{name:48s} {_COUNTS[name]:4d} tests  {_SECONDS[name]:7.1f} s in tests and fixtures, {wall:7.1f} s wall"
            )
    # make test's ledger (e2e/ledger.py) sums this run with the builds and the other pytest runs (each real vLLM
    # start is recorded where it happens: e2e/tests/operator/real_vllm/serving.py)
    slowest = sorted(_TESTS.items(), key=lambda x: -x[1])[:50]
    ledger.record("pytest", {"tiers": tiers, "tests": [[n, round(s, 1)] for n, s in slowest]})
