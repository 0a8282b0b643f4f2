"""Unit-tier fixtures; the oracle agreement figures are printed at the end of the run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"

ORACLE_TALLY: dict[str, list[str]] = {}


def data_file(name: str) -> Path:
    """A file of tests/data (reference data copied into the repository; tests/data/README.md says from where)."""
    path = DATA / name
    assert path.exists(), f"{path} is missing"
    return path


@pytest.fixture
def tally(record_property: Any) -> Any:
    """tally(outcome, case): count an oracle case; the report carries it, so the count is the same whether the
    tier runs in one process or across xdist workers (the controller adds them up below)."""
    return lambda outcome, case: record_property("oracle", f"{outcome}:{case}")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when != "teardown":
        return
    for key, value in report.user_properties:
        if key == "oracle":
            outcome, case = str(value).split(":", 1)
            ORACLE_TALLY.setdefault(outcome, []).append(case)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not ORACLE_TALLY:
        return
    t = {k: len(v) for k, v in ORACLE_TALLY.items()}
    mapped = sum(v for k, v in t.items() if k != "na")
    compared = t.get("agree", 0) + t.get("disagree", 0) + t.get("stricter", 0)
    terminalreporter.write_sep("-", "vLLM 0.32 oracle")
    terminalreporter.write_line(
        f"mapped {mapped} of {mapped + t.get('na', 0)} cases ({t.get('na', 0)} n/a); of {compared} with a settled "
        f"outcome: {t.get('agree', 0)} agree, {t.get('stricter', 0)} stricter by design, "
        f"{t.get('disagree', 0)} disagree; {t.get('unknown', 0)} unsettled (needs a multi-process server)"
    )
