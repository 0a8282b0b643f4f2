"""The models: quantities, unknown fields, a round trip through the wire form."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pooling_operator.api import PoolingService
from pooling_operator.api.quantity import parse_quantity
from pooling_operator.vllm.validate import validate
from tests.factories import hidden_states, pooling


@pytest.mark.parametrize(
    ("text", "value"),
    [("2Ti", 2 * 2**40), ("500m", Decimal("0.5")), ("64Gi", 64 * 2**30), ("1.5G", 1_500_000_000), ("1e3", 1000), (7, 7)],
)
def test_quantities(text: str | int, value: Decimal | int) -> None:
    assert parse_quantity(text) == value


@given(st.integers(min_value=0, max_value=2**62), st.sampled_from(["", "k", "Ki", "M", "Mi", "G", "Gi", "Ti"]))
def test_quantity_suffixes_scale(number: int, suffix: str) -> None:
    assert parse_quantity(f"{number}{suffix}") == number * parse_quantity(f"1{suffix}")


def test_wire_round_trip_keeps_what_the_user_wrote() -> None:
    obj = pooling({"pooling": {"type": "CLS", "dimensions": 384}, "model": {"matryoshkaDimensions": [384]}})
    parsed = PoolingService.model_validate(obj)
    assert parsed.spec.wire()["pooling"] == {"type": "CLS", "dimensions": 384}
    assert parsed.spec.wire()["model"]["hints"]["numAttentionHeads"] == 12


def test_unknown_nested_field_names_the_path_and_the_choices() -> None:
    [problem] = validate(hidden_states({"output": {"storageBuget": "1Ti"}})).errors
    assert problem.path == "spec.output.storageBuget"
    assert "did you mean 'storageBudget'" in problem.message and "volume" in problem.message


@given(st.text(min_size=1, max_size=70))
def test_any_name_gets_an_answer_not_a_crash(name: str) -> None:
    result = validate(pooling(name=name))
    if not result.ok:
        assert {p.path for p in result.errors} == {"metadata.name"}
