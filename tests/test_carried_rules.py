"""What a spec may carry into vLLM's argv and env (issue 42.5, vllm/carried_rules.py): beyond 128 KiB in all the
largest free-form field is refused with its size, before a Deployment and a status that cannot be written."""

from __future__ import annotations

from typing import Any

import pytest

from pooling_operator.vllm.carried_rules import MAX_CARRIED_BYTES
from pooling_operator.vllm.validate import validate
from tests.factories import hidden_states, pooling, pooling_job, scoring

BIG = "a" * (1 << 20)


@pytest.mark.parametrize(
    ("spec", "path"),
    [
        ({"model": {"hfOverrides": {"note": BIG}}}, "spec.model.hfOverrides"),
        ({"engine": {"env": [{"name": "A", "value": "x"}, {"name": "B", "value": BIG}]}}, "spec.engine.env[1].value"),
        # 64 arguments of 4 KiB: each within the schema's bound, too many together
        ({"engine": {"extraArgs": ["--override-generation-config", "{" + "x" * 4000 + "}"] * 64}}, "spec.engine.extraArgs[1]"),
    ],
)
def test_too_much_carried_into_argv_and_env_is_refused_naming_the_largest_field(spec: dict[str, Any], path: str) -> None:
    for factory in (pooling, scoring, pooling_job, hidden_states):
        errors = [p for p in validate(factory(spec)).errors if "what a spec carries" in p.message]
        assert [p.path for p in errors] == [path], (factory.__name__, errors)
        assert f"at most {MAX_CARRIED_BYTES:,} bytes" in errors[0].message


def test_within_the_bound_nothing_is_said() -> None:
    doc = pooling({"model": {"hfOverrides": {"note": "a" * 1000}}, "engine": {"env": [{"name": "A", "value": "b" * 1000}]}})
    assert not [p for p in validate(doc).problems if "what a spec carries" in p.message]
