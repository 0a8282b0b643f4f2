"""The webhook's answer (vllm/validate.admission_verdict): the lines of `validate`, and never a refusal of an
update that leaves the spec alone."""

from __future__ import annotations

import copy

from pooling_operator.vllm.validate import admission_verdict, problem_line, validate
from tests.factories import invalid_examples, pooling


def test_refusal_carries_every_error_line_and_allowance_every_warning() -> None:
    bad = pooling({"engine": {"maxModelLen": 512, "maxNumBatchedTokens": 256}, "pooling": {"type": "MEAN", "normalize": True}})
    result = validate(bad)
    assert result.errors
    verdict = admission_verdict(bad)
    assert not verdict.allowed
    assert verdict.message.splitlines() == [problem_line(result, p) for p in result.errors]

    good = pooling({"model": {"revision": None}})  # valid, with the unpinned-revision warning
    verdict = admission_verdict(good)
    assert verdict.allowed and verdict.message == ""
    assert verdict.warnings and list(verdict.warnings) == [problem_line(validate(good), p) for p in validate(good).warnings]


def test_an_update_that_keeps_the_spec_is_allowed_even_when_invalid() -> None:
    bad = pooling({"engine": {"maxModelLen": 512, "maxNumBatchedTokens": 256}, "pooling": {"type": "MEAN", "normalize": True}})
    relabelled = copy.deepcopy(bad)
    relabelled["metadata"].setdefault("labels", {})["team"] = "search"
    assert admission_verdict(relabelled, old=bad).allowed
    changed = copy.deepcopy(bad)
    changed["spec"]["engine"]["maxModelLen"] = 1024
    assert not admission_verdict(changed, old=bad).allowed


def test_the_webhook_judges_every_kind_of_ours_and_refuses_each_ones_invalid_example() -> None:
    """PoolingJob was once missing from the webhook's hand list of kinds (and from the chart's): both now come from
    the table of kinds, and every kind has an example the schema lets in and the webhook refuses."""
    from pooling_operator.api.resources import KINDS
    from pooling_operator.handlers.admission import WEBHOOK_PATHS

    examples = invalid_examples()
    assert set(examples) == set(KINDS)
    assert set(WEBHOOK_PATHS) == {info.plural for info in KINDS.values()}
    for kind, doc in examples.items():
        verdict = admission_verdict(doc)
        assert not verdict.allowed and verdict.message, kind
