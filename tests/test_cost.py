"""status.cost (autoscaling/cost.py, pure): GPU-seconds integrated from the autoscaler's readings over whole
windows, the tokens and inputs read at the window's end, per million, and priced by the policy."""

from __future__ import annotations

from decimal import Decimal

import pytest

from pooling_operator.api.policy import Pricing
from pooling_operator.autoscaling.cost import (
    INPUTS,
    TOKENS,
    cost_queries,
    cost_status,
    gpu_seconds,
    grace,
    price_per_gpu_hour,
    record,
    start,
    window_end,
)
from pooling_operator.vllm.metrics import matchers
from pooling_operator.vllm.validate import validate

HOUR = 3600.0


def test_gpu_seconds_integrate_the_readings_over_the_window() -> None:
    held = start(7200 - 100, 1.0, None, 15)  # tracked before the window [7200, 10800)
    for t, gpus in [(7200 + 600, 3.0), (7200 + 615, 3.0), (7200 + 1800, 0.5), (7200 + 3000, 0.5)]:
        held = record(held, t, gpus, HOUR)
    # 600 s of 1, 1200 s of 3, 1800 s of 0.5
    assert gpu_seconds(held, 7200, 10800) == pytest.approx(600 + 3600 + 900)
    assert held.points == ((7100, 1.0), (7800, 3.0), (9000, 0.5)), "a point only where the count changed"


def test_a_window_not_watched_whole_is_not_reported_but_a_service_created_in_it_is() -> None:
    assert gpu_seconds(start(7300, 2.0, None, 15), 7200, 10800) is None  # the operator came in late
    assert gpu_seconds(start(7300, 2.0, 7300 - 40, 15), 7200, 10800) is None  # created long before its first read
    fresh = start(7300, 2.0, 7300 - 20, 15)  # created 20 s before its first read: nothing held before it existed
    assert fresh.points[0][0] == 7280 and gpu_seconds(fresh, 7200, 10800) == pytest.approx(2.0 * (10800 - 7280))


def test_old_points_are_folded_and_the_record_still_covers_two_windows() -> None:
    held = start(0, 1.0, None, 15)
    for i in range(1, 400):
        held = record(held, i * 60.0, float(i % 3), HOUR)
    assert len(held.points) <= 3 * 60 + 1
    now = 399 * 60.0
    end = window_end(now - grace(HOUR), HOUR)  # the window the loop reads next, as it computes it
    assert gpu_seconds(held, end - HOUR, end) is not None and held.since <= end - HOUR


@pytest.mark.parametrize(("now", "end"), [(3600, 3600), (3599.9, 0), (7300, 7200), (10799, 7200)])
def test_windows_are_whole_and_aligned(now: float, end: float) -> None:
    assert window_end(now, HOUR) == end


def test_grace_waits_for_the_last_scrapes() -> None:
    assert grace(HOUR) == 60 and grace(20) == 5


def test_the_queries_read_the_window_at_its_end() -> None:
    q = cost_queries(matchers("search", "minilm", "pooling-service"), HOUR, 7200)
    assert q[TOKENS] == ('sum(increase(vllm:prompt_tokens_total{namespace="search",vllm_pooling_io_instance="minilm",'
                         'vllm_pooling_io_component="pooling-service"}[3600s] @ 7200))')  # fmt: skip
    assert q[INPUTS].startswith("sum(increase(vllm:request_success_total{") and q[INPUTS].endswith("[3600s] @ 7200))")


def test_the_status_per_million_and_priced() -> None:
    price = price_per_gpu_hour(Pricing(currency="EUR", gpu_hour={"NVIDIA-H100-80GB-HBM3": "2.50"}), "NVIDIA-H100-80GB-HBM3")
    assert price == (Decimal("2.50"), "EUR")
    out = cost_status(HOUR, 7200, 7200.0, 36_000_000.4, 2_000_000, price)
    assert out == {
        "window": "3600s", "windowEnd": "1970-01-01T02:00:00Z", "gpuSeconds": 7200.0, "promptTokens": 36_000_000,
        "inputs": 2_000_000, "gpuSecondsPerMillionTokens": 200.0, "gpuSecondsPerMillionInputs": 3600.0,
        "pricePerMillionTokens": 0.1389, "currency": "EUR",  # 2 GPU-hours at 2.50 for 36 M tokens
    }


def test_no_traffic_no_ratio_and_no_series_no_count() -> None:
    assert cost_status(HOUR, 7200, 3600.0, 0.0, 0.0, None) == {
        "window": "3600s", "windowEnd": "1970-01-01T02:00:00Z", "gpuSeconds": 3600.0, "promptTokens": 0, "inputs": 0}
    assert "promptTokens" not in cost_status(HOUR, 7200, 3600.0, None, None, None)


@pytest.mark.parametrize(
    ("product", "priced"), [("NVIDIA-H100-80GB-HBM3", True), ("NVIDIA-L4", False), (None, False)]
)
def test_a_price_only_for_a_listed_product(product: str | None, priced: bool) -> None:
    pricing = Pricing(gpu_hour={"NVIDIA-H100-80GB-HBM3": "2.50"})
    assert (price_per_gpu_hour(pricing, product) is not None) is priced
    assert price_per_gpu_hour(None, "NVIDIA-H100-80GB-HBM3") is None


def policy(pricing: object) -> dict[str, object]:
    return {"apiVersion": "vllm-pooling.io/v1alpha1", "kind": "AutoscalingPolicy", "metadata": {"name": "p"},
            "spec": {"pricing": pricing}}  # fmt: skip


@pytest.mark.parametrize(
    ("pricing", "path"),
    [
        ({"gpuHour": {"NVIDIA-H100-80GB-HBM3": "2,50"}}, "spec.pricing.gpuHour.NVIDIA-H100-80GB-HBM3"),
        ({"gpuHour": {"NVIDIA-H100-80GB-HBM3": 2.5}}, "spec.pricing.gpuHour.NVIDIA-H100-80GB-HBM3"),
        ({"currency": "usd", "gpuHour": {"x": "1"}}, "spec.pricing.currency"),
        ({"gpuHour": {}}, "spec.pricing.gpuHour"),
        ({"currency": "USD"}, "spec.pricing.gpuHour"),
    ],
)
def test_bad_pricing_is_refused_naming_the_field(pricing: object, path: str) -> None:
    result = validate(policy(pricing))
    assert not result.ok
    assert any(str(p).startswith(path) or p.path == path for p in result.errors), [str(p) for p in result.errors]


def test_a_priced_policy_is_accepted() -> None:
    assert validate(policy({"currency": "EUR", "gpuHour": {"NVIDIA-H100-80GB-HBM3": "2.50", "NVIDIA-L4": "0.7"}})).ok


def test_the_window_read_within_its_grace_is_still_inside_the_record() -> None:
    """Read 30 s after the hour (inside the 60 s grace) the loop reads the window that ended an hour earlier, which
    began two hours and 30 s before now: the record, its old readings folded, still covers it."""
    held = start(0, 1.0, None, 15)
    t = 0.0
    while t < 3 * HOUR + 30:
        t += 15
        held = record(held, t, float(int(t // 15) % 2 + 1), HOUR)
    end = window_end(t - grace(HOUR), HOUR)
    assert end == 2 * HOUR
    assert gpu_seconds(held, end - HOUR, end) == pytest.approx(1.5 * HOUR, abs=1e-6)
