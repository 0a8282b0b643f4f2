"""engine.extraArgs parsed once (vllm/extra_args.py): what vLLM's parser would take each element to be."""

from __future__ import annotations

from pooling_operator.vllm.contract import contract
from pooling_operator.vllm.extra_args import option_names, parse

C = contract("0.33")


def test_tokens_values_and_the_last_occurrence_wins() -> None:
    xa = parse(["--block-size", "2", "--enforce-eager", "-O3", "--seed=-1", "--seed", "-5",
                "stray", "--no-such-flag", "v", "--kv-cache-dtype"], C)  # fmt: skip
    kinds = [(t.index, t.name, t.flag, t.value, t.missing_value) for t in xa.tokens]
    assert kinds == [
        (0, "--block-size", "--block-size", "2", False),
        (2, "--enforce-eager", "--enforce-eager", None, False),
        (3, "-O3", C.canonical("-O3"), "3", False),
        (4, "--seed", "--seed", "-1", False),
        (5, "--seed", "--seed", "-5", False),  # a negative number is a value, not a flag
        (7, "stray", None, None, False),
        (8, "--no-such-flag", None, "v", False),  # an unknown flag takes its value with it
        (10, "--kv-cache-dtype", "--kv-cache-dtype", None, True),
    ]
    assert xa.given["--seed"] == "-5"
    assert "--kv-cache-dtype" not in xa.given and "--no-such-flag" not in xa.given


def test_option_names_read_underscores_as_dashes_without_a_contract() -> None:
    assert option_names(["--max_logprobs=30", "--no-enable-chunked-prefill", "7"]) == {"--max-logprobs", "--no-enable-chunked-prefill"}
