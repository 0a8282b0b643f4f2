"""engine.loadFormat (vllm/storage_rules.py): every built-in format of vLLM's loader registry is accepted, the
ones needing an optional package warn and name it, others are refused with the list; the flag is owned."""

from __future__ import annotations

import pytest

from pooling_operator.vllm.args import vllm_command
from pooling_operator.vllm.contract import LOAD_FORMAT_NOTES, LOAD_FORMAT_PACKAGES, LOAD_FORMATS, contract
from pooling_operator.vllm.validate import validate
from tests.factories import hidden_states, pooling, scoring

PATH = "spec.engine.loadFormat"


def _at(obj: dict, severity: str) -> list[str]:
    result = validate(obj)
    return [p.message for p in (result.errors if severity == "error" else result.warnings) if p.path == PATH]


@pytest.mark.parametrize("fmt", LOAD_FORMATS)
def test_every_registered_format_is_accepted_and_rendered(fmt: str) -> None:
    obj = pooling({"engine": {"loadFormat": fmt}})
    assert _at(obj, "error") == []
    warnings = _at(obj, "warning")
    package = LOAD_FORMAT_PACKAGES.get(fmt)
    assert (package is not None and any(repr(package) in w for w in warnings)) or package is None
    assert len(warnings) == (package is not None) + (fmt in LOAD_FORMAT_NOTES), warnings
    argv = vllm_argv_of(obj)
    assert argv[argv.index("--load-format") + 1] == fmt


def vllm_argv_of(obj: dict) -> list[str]:
    result = validate(obj)
    assert result.resource is not None
    return vllm_command(result.resource, contract("0.33"))


@pytest.mark.parametrize(("given", "words"), [
    ("runai_streamr", "did you mean 'runai_streamer'"),
    ("gguf", "accepted: auto, hf, dummy"),
    ("s3", "not a load format of vLLM 0.33"),
])
def test_an_unknown_format_is_refused_with_what_would_be_accepted(given: str, words: str) -> None:
    messages = _at(pooling({"engine": {"loadFormat": given}}), "error")
    assert messages and words in messages[0], messages


def test_case_is_read_as_vllm_reads_it_and_kept_as_written() -> None:
    obj = scoring({"engine": {"loadFormat": "SafeTensors"}})
    assert _at(obj, "error") == [] and _at(obj, "warning") == []
    argv = vllm_argv_of(obj)
    assert argv[argv.index("--load-format") + 1] == "SafeTensors"  # what the user wrote, not a normalised copy


def test_unset_leaves_the_flag_out_and_the_flag_is_owned() -> None:
    assert "--load-format" not in vllm_argv_of(pooling())
    errors = [str(p) for p in validate(hidden_states({"engine": {"extraArgs": ["--load-format", "pt"]}})).errors]
    assert any("spec.engine.extraArgs[0]" in e and "spec.engine.loadFormat" in e for e in errors), errors
