"""Every `vllm serve` flag of every version's table has one class (vllm/flags/classes.json): a flag a new
version adds cannot slip through extraArgs unclassified. And what each class does to extraArgs."""

from __future__ import annotations

from typing import Any

import pytest

from pooling_operator.vllm.contract import SUPPORTED_VERSIONS, contract
from pooling_operator.vllm.flag_classes import CLASSES, classify, code_keys, flags_of
from pooling_operator.vllm.settings import Settings
from pooling_operator.vllm.validate import validate
from tests.factories import hidden_states, pooling


@pytest.mark.parametrize("version", SUPPORTED_VERSIONS)
def test_every_flag_of_the_table_has_a_class(version: str) -> None:
    c = contract(version)
    missing = sorted(f for f in c.flags if classify(c.owner_of(f), hidden_states=False) is None)
    assert missing == [], f"vLLM {version} flags with no class in vllm/flags/classes.json: {missing}"
    for alias, flag in c.aliases.items():
        assert classify(c.owner_of(flag), hidden_states=False) is not None, alias


def test_the_classes_are_well_formed() -> None:
    for hs in (False, True):
        for name in CLASSES:
            for flag, cls in flags_of(name, hidden_states=hs).items():
                assert cls.name in CLASSES
                if name == "owned":
                    assert cls.field, flag
                if name in ("refused", "code"):
                    assert cls.why and not cls.why[0].isupper(), flag  # reads after the flag's name


ERRORS = [
    # (extraArgs, words of the problem at spec.engine.extraArgs[0]) — flags and keys that load code from outside
    # vLLM passed `validate` before; the README promised them only where trustRemoteCode is allowed.
    (["--io-processor-plugin", "my_plugin"], "IO-processor plugin"),
    (["--worker-cls", "my.Worker"], "as every worker"),
    (["--scheduler-cls", "my.Scheduler"], "scheduler"),
    (["--model-class-overrides", '{"BertModel": "my.Model"}'], "model implementations"),
    (["--distributed-executor-backend", "my.Executor"], "executor class"),
    (["--logging-config", '{"pylogging_config_file": "/cache/log.json"}'], "pylogging_config_file"),
    (["--kv-transfer-config", '{"kv_connector": "ExampleConnector", "kv_role": "kv_both", "kv_connector_module_path": "my.conn"}'],
     "kv_connector_module_path"),
    (["--kv-transfer-config.kv_connector_module_path=my.conn"], "kv_connector_module_path"),
    (["--ec-transfer-config", '{"ec_connector": "X", "ec_connector_module_path": "my.ec"}'], "ec_connector_module_path"),
    (["--compilation-config", '{"inductor_passes": {"p": "my.pass"}}'], "inductor_passes"),
]


@pytest.mark.parametrize(("args", "words"), ERRORS, ids=[a[0] for a, _ in ERRORS])
def test_code_from_outside_vllm_needs_the_trust_remote_code_setting(args: list[str], words: str) -> None:
    refused = [str(p) for p in validate(pooling({"engine": {"extraArgs": args}})).errors]
    assert any(e.startswith("spec.engine.extraArgs[0]: ") and words in e and "--allow-trust-remote-code" in e for e in refused), refused
    allowed = validate(pooling({"engine": {"extraArgs": args}}), Settings(allow_trust_remote_code=True))
    assert allowed.errors == [], [str(p) for p in allowed.errors]


@pytest.mark.parametrize("args", [
    ["--distributed-executor-backend", "mp"],  # a built-in backend loads nothing
    ["--compilation-config", '{"mode": 3}'],
    ["--kv-transfer-config", '{"kv_connector": "ExampleConnector", "kv_role": "kv_both"}'],
    ["--logging-config", "{}"],
])
def test_the_same_flags_without_code_pass(args: list[str]) -> None:
    result = validate(pooling({"engine": {"extraArgs": args}}))
    assert result.errors == [], [str(p) for p in result.errors]


@pytest.mark.parametrize(("args", "words"), [
    (["--grpc"], "gRPC"),
    (["--nnodes", "2"], "several pods"),
    (["--enable-elastic-ep"], "/scale_elastic_ep"),
    (["--code-revision", "main"], "spec.model.revision"),
    (["--help"], "exits"),
])
def test_refused_whatever_the_settings(args: list[str], words: str) -> None:
    for settings in (None, Settings(allow_trust_remote_code=True)):
        errors = [str(p) for p in validate(pooling({"engine": {"extraArgs": args}}), settings).errors]
        assert any(e.startswith("spec.engine.extraArgs[0]: ") and words in e for e in errors), errors


def test_offloading_flags_are_the_operators_for_hidden_states_only() -> None:
    """--kv-offloading-size rewrites kv_transfer_config's connector: on a HiddenStateJob it would replace the
    hidden-state connector the operator renders."""
    job: dict[str, Any] = hidden_states({"engine": {"extraArgs": ["--kv-offloading-size", "4"]}})
    assert any("spec.connector" in str(p) for p in validate(job).errors)
    assert not any("--kv-offloading-size" in str(p) for p in validate(pooling({"engine": {"extraArgs": ["--kv-offloading-size", "4"]}})).errors)


def test_code_keys_are_read_from_values_and_dotted_options() -> None:
    assert code_keys("--kv-transfer-config", "--kv-transfer-config", '{"kv_connector_module_path": "m"}')[0][0] == "kv_connector_module_path"
    assert code_keys("--kv-transfer-config", "--kv-transfer-config.kv_connector_module_path", "m")[0][0] == "kv_connector_module_path"
    nested = code_keys("--kv-transfer-config", "--kv-transfer-config.kv_connector_extra_config",
                       '{"connectors": [{"kv_connector_module_path": "m"}]}')
    assert [k for k, _ in nested] == ["kv_connector_extra_config.connectors[].kv_connector_module_path"]
    assert code_keys("--kv-transfer-config", "--kv-transfer-config", '{"kv_connector": "NixlConnector"}') == []
    assert code_keys("--kv-transfer-config", "--kv-transfer-config", "not json") == []


def test_an_io_processor_plugin_in_hf_overrides_needs_the_setting_too() -> None:
    spec = {"model": {"hfOverrides": {"io_processor_plugin": "my_plugin"}}}
    errors = [str(p) for p in validate(pooling(spec)).errors]
    assert any(e.startswith("spec.model.hfOverrides.io_processor_plugin: ") and "--allow-trust-remote-code" in e for e in errors), errors
    assert validate(pooling(spec), Settings(allow_trust_remote_code=True)).errors == []
