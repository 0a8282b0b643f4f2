"""The one helper for a missing part: a skip with the reason here, a failure under CI=true."""

from __future__ import annotations

import pytest

from tests.unavailable import unavailable


@pytest.mark.parametrize(("ci", "outcome"), [(None, pytest.skip.Exception), ("true", pytest.fail.Exception),
                                              ("false", pytest.skip.Exception)])
def test_a_missing_part_skips_with_its_reason_and_fails_under_ci(monkeypatch: pytest.MonkeyPatch, ci: str | None,
                                                                 outcome: type[BaseException]) -> None:
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    with pytest.raises(outcome) as raised:
        unavailable("no Prometheus: /usr/bin/prometheus not found")
    assert "no Prometheus: /usr/bin/prometheus not found" in str(raised.value)
