"""Our verdict against real vLLM 0.32 for every oracle case (tests/data/vllm-oracle-0.32.json, copied from the shared reference).

Everything vLLM rejects — at parse, config, startup or on the first request — must be rejected here first;
every command line rendered for a spec we accept must pass vLLM's parser and resolve to the same settings
the oracle recorded.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from pooling_operator.builders import BuildContext, build
from pooling_operator.vllm.contract import contract
from pooling_operator.vllm.settings import Settings
from pooling_operator.vllm.validate import validate
from tests import vllm_argv
from tests.conftest import data_file
from tests.factories import merge, resource

MAPPING = yaml.safe_load((Path(__file__).parent / "oracle" / "mapping.yaml").read_text())
ORACLE = {case["id"]: case for case in json.loads(data_file("vllm-oracle-0.32.json").read_text())}


def vllm_final(case: dict[str, Any], entry: dict[str, Any]) -> str:
    """accept | reject | unknown: what finally happens to this configuration in vLLM."""
    if "final" in entry:
        return entry["final"]
    if not case["accepted"]:
        return "reject"
    decided = case["decided_at"]
    if decided == "config":
        return "accept"
    if decided.startswith(("startup", "first request")):
        return "reject"
    raise AssertionError(f"{case['id']}: decided_at {decided!r} needs a `final` in mapping.yaml")


def test_every_oracle_case_is_in_the_table() -> None:
    assert set(MAPPING["cases"]) == set(ORACLE)
    assert len(ORACLE) == 116


def oracle_view(case: dict[str, Any]) -> dict[str, Any]:
    r = case["resolved"]
    view = {k: r.get(k) for k in ("runner_type", "convert_type", "pooling_task", "max_model_len",
                                   "max_num_batched_tokens", "max_num_seqs", "tensor_parallel_size", "dtype",
                                   "served_model_name")}
    view["seq_pooling_type"] = (r.get("pooler_config") or {}).get("seq_pooling_type")
    return view


@pytest.mark.parametrize("case_id", sorted(ORACLE))
def test_oracle_case(case_id: str, tally: Any) -> None:
    entry = MAPPING["cases"][case_id]
    if "na" in entry:
        tally("na", case_id)
        pytest.skip(f"n/a: {entry['na']}")  # a row of the table that does not apply, not a missing part
    case = ORACLE[case_id]
    base = MAPPING["bases"][entry["base"]]
    obj = resource(base["kind"], merge(base["spec"], entry.get("spec")), name="oracle-case")
    settings = Settings(**entry.get("settings", {}))
    result = validate(obj, settings)
    ours = "accept" if result.ok else "reject"
    final = vllm_final(case, entry)
    for problem in result.errors:
        assert problem.path and problem.message, problem

    if final == "unknown":
        tally("unknown", case_id)
    elif "stricter" in entry:
        assert (ours, final) == ("reject", "accept"), f"{case_id} is marked stricter: {result.problems}"
        tally("stricter", case_id)
    else:
        if ours != final:
            tally("disagree", case_id)
        assert ours == final, f"{case_id}: vLLM {final}s, we {ours}: {[str(p) for p in result.errors]}"
        tally("agree", case_id)

    if ours == "accept":
        c = contract("0.32")
        objects = build(result.resource, c, BuildContext())  # type: ignore[arg-type]
        workload = next(o for o in objects if o["kind"] in ("Deployment", "Job"))
        pod = workload["spec"]["template"]["spec"]
        container = next(x for x in [*pod.get("initContainers", []), *pod["containers"]] if x["name"] == "vllm")
        flags = vllm_argv.parse([*container["command"], *container["args"]], c)
        if case["accepted"] and case.get("resolved"):
            expected = oracle_view(case)
            got = vllm_argv.resolved(flags)
            if "--served-model-name" not in case["argv"]:
                got.pop("served_model_name", None)
            for key, value in got.items():
                if expected.get(key) is not None:
                    assert value == expected[key], f"{case_id}: {key} renders {value!r}, vLLM resolved {expected[key]!r}"
