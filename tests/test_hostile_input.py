"""Hostile input, as a user trying to break the CLI and the rules would write it (issue 13): every file ends in
one clear line and exit 2 within bounded time and memory, never a traceback; objects that would silently
replace each other, Matryoshka sizes the model cannot give, and extraArgs/env that reach past the resource are
refused with the field path."""

from __future__ import annotations

import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
import yaml

from pooling_operator import MAX_NESTING
from pooling_operator.builders import BuildContext, build
from pooling_operator.cli import main
from pooling_operator.manifests import MAX_DOCUMENTS, ManifestError, load, measure
from pooling_operator.vllm.confinement import CODE_ENV, outside
from pooling_operator.vllm.contract import contract
from pooling_operator.vllm.flag_classes import flags_of
from pooling_operator.vllm.settings import Settings
from pooling_operator.vllm.validate import duplicate_problems, problem_line, validate
from tests.factories import pooling, scoring

HEADER = (
    "apiVersion: vllm-pooling.io/v1alpha1\nkind: PoolingService\nmetadata: {name: x, namespace: d}\n"
    "spec:\n  task: embed\n  model:\n    name: org/model\n    revision: abc\n"
)


def _bomb(indent: str, levels: int = 9) -> str:
    lines = [f'{indent}a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels):
        name, prev = chr(ord("a") + i), chr(ord("a") + i - 1)
        lines.append(f"{indent}{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    return "\n".join(lines) + "\n"


PATHOLOGICAL: dict[str, tuple[bytes, str]] = {
    "alias bomb": (_bomb("").encode(), "expands to more than 100,000 values"),
    "alias bomb in hfOverrides": ((HEADER + "    hfOverrides:\n" + _bomb("      ")).encode(), "expands to more than"),
    "recursive alias": (b"a: &a [*a]\n", "an alias refers to a value that contains it"),
    "recursive alias in hfOverrides": ((HEADER + "    hfOverrides: {x: &a [*a]}\n").encode(), "contains it"),
    "flow nesting 5000 deep": (b"a: " + b"[" * 5000 + b"]" * 5000 + b"\n", "nesting depth"),
    "flow nesting 150 deep": ((HEADER + "    hfOverrides: {x: " + "[" * 150 + "]" * 150 + "}\n").encode(), f"more than {MAX_NESTING} levels"),
    "block nesting 3000 deep": (b"a:\n  " + b"- " * 3000 + b"x\n", "nesting depth"),
    "10 MB string": ((HEADER.replace("org/model", "x" * 10_000_000)).encode(), "more than 1.5 MiB"),
    "10 MB key": ((HEADER + "    hfOverrides:\n      ? " + "k" * 10_000_000 + "\n      : 1\n").encode(), "more than 1.5 MiB"),
    "not UTF-8": (b"kind: \xff\xfe\n", "line 1: not UTF-8 (byte 0xff)"),
    "UTF-16": ("kind: PoolingService\n".encode("utf-16"), "not UTF-8"),
    "top-level list": (b"- a\n- b\n", "a list, not an object"),
    "top-level scalar": (b"hello\n", "a single str value, not an object"),
    "top-level number": (b"42\n", "a single int value, not an object"),
    "scalar second document": (HEADER.encode() + b"---\n7\n", "document 2: a single int value"),
    "duplicate key": (b"a: 1\na: 2\n", "duplicate key 'a'"),
    "tab indentation": (b"a:\n\tb: 1\n", "malformed YAML"),
    "python tag": (b"!!python/object/apply:os.system ['true']\n", "malformed YAML"),
    "100k documents": ("".join(f"---\nkind: K\nmetadata: {{name: n{i}}}\n" for i in range(100_000)).encode(),
                       f"more than {MAX_DOCUMENTS:,} documents"),
}


@pytest.mark.thorough
@pytest.mark.parametrize("name", list(PATHOLOGICAL))
@pytest.mark.parametrize("command", ["validate", "render"])
def test_pathological_files_end_in_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, command: str) -> None:
    content, words = PATHOLOGICAL[name]
    path = tmp_path / "input.yaml"
    path.write_bytes(content)
    traced = name != "100k documents"  # tracing every allocation of 10,000 documents multiplies their time by 5
    if traced:
        tracemalloc.start()
    started = time.perf_counter()
    try:
        code = main([command, str(path)])
    finally:
        elapsed = time.perf_counter() - started
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    out, err = capsys.readouterr()
    assert code == 2, (out, err[:500])
    assert out == ""
    assert err.count("\n") == 1 and err.startswith(f"error: {path}: "), err[:500]
    assert words in err and "Traceback" not in err
    assert len(err) < 600
    assert elapsed < 20, f"{name}: {elapsed:.1f} s"
    assert peak < 400 << 20, f"{name}: {peak >> 20} MiB"  # the inputs themselves are up to 10 MB, read once


def test_measure_bounds_nesting_without_recursion() -> None:
    """The check itself never recurses: a composed document far deeper than Python's stack is measured."""
    node: yaml.Node = yaml.ScalarNode("tag:yaml.org,2002:str", "x")
    for _ in range(50_000):
        node = yaml.SequenceNode("tag:yaml.org,2002:seq", [node])
    assert measure(node) == f"nested more than {MAX_NESTING} levels deep"


def test_anchors_within_bounds_still_load(tmp_path: Path) -> None:
    path = tmp_path / "anchors.yaml"
    path.write_text(HEADER + "    hfOverrides: {a: &x {k: [1, 2]}, b: *x}\n")
    [doc] = list(load([str(path)]))
    assert doc.body["spec"]["model"]["hfOverrides"] == {"a": {"k": [1, 2]}, "b": {"k": [1, 2]}}


def test_a_missing_file_and_an_empty_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty.yaml").write_text("# nothing\n---\n")
    assert main(["validate", str(tmp_path / "empty.yaml")]) == 2
    assert capsys.readouterr().err == "no documents found\n"
    with pytest.raises(ManifestError, match="no such file"):
        list(load([str(tmp_path / "absent.yaml")]))


# ---- the same object twice in one input ----------------------------------------------------------------------


def _write(tmp_path: Path, name: str, *bodies: dict[str, Any]) -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump_all(bodies))
    return str(path)


def test_the_same_kind_namespace_and_name_twice_is_refused_in_validate_and_render(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = _write(tmp_path, "a.yaml", pooling(name="emb", namespace="search"))
    b = _write(tmp_path, "b.yaml", pooling({"replicas": 3}, name="emb", namespace="search"))
    assert main(["validate", a, b]) == 1
    out = capsys.readouterr().out
    assert f"{b}: PoolingService/emb: metadata.name: PoolingService search/emb is also defined in {a} (document 1)" in out
    assert main(["render", a, b]) == 1
    rendered = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [o["metadata"]["name"] for o in rendered if o["kind"] == "Deployment"] == ["emb"]  # the first only


@pytest.mark.parametrize(
    ("first", "second", "clash"),
    [
        (pooling(name="a", namespace=None), pooling(name="a", namespace="default"), True),  # no namespace: default
        (pooling(name="a", namespace="x"), pooling(name="a", namespace="y"), False),
        (pooling(name="a", namespace="x"), scoring(name="a", namespace="x"), False),  # another kind
        ({"apiVersion": "vllm-pooling.io/v1alpha1", "kind": "AutoscalingPolicy", "metadata": {"name": "p", "namespace": "x"}},
         {"apiVersion": "vllm-pooling.io/v1alpha1", "kind": "AutoscalingPolicy", "metadata": {"name": "p"}}, True),  # cluster-scoped
        ({"kind": "ConfigMap", "metadata": {"name": "a"}}, {"kind": "ConfigMap", "metadata": {"name": "a"}}, False),  # not ours
    ],
)
def test_duplicate_identity(first: dict[str, Any], second: dict[str, Any], clash: bool) -> None:
    found = duplicate_problems([("one", first), ("two", second)])
    assert (1 in found) == clash and 0 not in found


# ---- Matryoshka sizes the model cannot give ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "problem"),
    [
        ({"matryoshkaDimensions": [384, 256]}, None),  # hiddenSize 384
        ({"matryoshkaDimensions": [512, 256]}, "spec.model.matryoshkaDimensions[0]: 512 is larger than the model's embedding size 384 (model.hints.hiddenSize)"),
        ({"matryoshkaDimensions": [256, 1024], "hints": {"embeddingSize": 1024}}, None),
        ({"matryoshkaDimensions": [256, 2048], "hints": {"embeddingSize": 1024}}, "matryoshkaDimensions[1]: 2048 is larger than the model's embedding size 1024 (model.hints.embeddingSize)"),
        ({"matryoshkaDimensions": [256, 768], "hfOverrides": {"embedding_size": 512}}, "768 is larger than the model's embedding size 512 (model.hfOverrides.embedding_size)"),
        ({"matryoshkaDimensions": [4096], "hints": {"hiddenSize": None}}, None),  # nothing known: vLLM decides
    ],
)
def test_matryoshka_sizes_above_the_embedding_size_are_refused(model: dict[str, Any], problem: str | None) -> None:
    result = validate(pooling({"model": model}))
    lines = [str(p) for p in result.errors]
    if problem is None:
        assert lines == []
    else:
        assert len(lines) == 1 and problem in lines[0] and "only supports dimensions in range" in lines[0]


# ---- extraArgs and env that reach past the resource -------------------------------------------------------------


VOLUME = {"model": {"source": {"volume": {"claimName": "weights"}}, "revision": None}}


def _errors(spec: dict[str, Any], settings: Settings | None = None) -> list[str]:
    return [str(p) for p in validate(pooling(spec), settings).errors]


def _args(flag: str, value: str) -> list[str]:
    """The flag as a user writes it for the factory's image (vLLM 0.33), with a value when it takes one."""
    return [flag, value] if contract("0.33").flags[flag].takes_value else [flag]


@pytest.mark.parametrize("flag", sorted(f for f in flags_of("refused") if f in contract("0.33").flags))
def test_flags_that_change_the_listener_or_read_arguments_are_refused(flag: str) -> None:
    args = _args(flag, "1" if "port" in flag else "x")
    for settings in (None, Settings(allow_trust_remote_code=True)):
        errors = _errors({"engine": {"extraArgs": args}}, settings)
        assert any(e.startswith("spec.engine.extraArgs[0]: " + flag) for e in errors), errors


@pytest.mark.parametrize("flag", sorted(f for f in flags_of("code") if f in contract("0.33").flags))
def test_flags_that_load_code_follow_the_trust_remote_code_setting(flag: str) -> None:
    args = _args(flag, "mod.Cls")
    assert any("--allow-trust-remote-code" in e and e.startswith("spec.engine.extraArgs[0]") for e in _errors({"engine": {"extraArgs": args}}))
    assert not any("--allow-trust-remote-code" in e for e in _errors({"engine": {"extraArgs": args}}, Settings(allow_trust_remote_code=True)))


@pytest.mark.parametrize(
    ("args", "refused"),
    [
        (["--chat-template", "/etc/passwd"], "/etc/passwd"),
        (["--download-dir=/tmp/weights"], "/tmp/weights"),
        (["--allowed-local-media-path", "/"], "/"),
        (["--chat-template", "/models/../etc/shadow"], "/models/../etc/shadow"),  # no volume here
        (["--chat-template", "file:///etc/hosts"], "/etc/hosts"),
        (["--chat-template", "~/.ssh/id_rsa"], "~/.ssh/id_rsa"),
        (["--tokenizer", "../../etc"], "../../etc"),
        (["--lora-modules", "a=/srv/lora"], "/srv/lora"),
        (["--model-loader-extra-config", '{"path": "/srv/x"}'], "/srv/x"),
        (["--chat-template", "/cache/template.jinja"], None),
        (["--tokenizer", "org/name"], None),
        (["--disable-access-log-for-endpoints", "/health,/metrics"], None),  # routes, not files
    ],
)
def test_file_paths_outside_the_mounted_folders_are_refused(args: list[str], refused: str | None) -> None:
    errors = [e for e in _errors({"engine": {"extraArgs": args}}) if "file path outside" in e]
    if refused is None:
        assert errors == []
    else:
        assert len(errors) == 1 and errors[0].startswith("spec.engine.extraArgs[0]: ") and repr(refused) in errors[0], errors


def test_the_model_volume_is_inside_and_climbing_out_of_it_is_not() -> None:
    spec = {**VOLUME, "engine": {"extraArgs": ["--chat-template", "/models/t.jinja", "--tokenizer", "/models/../etc"]}}
    errors = [e for e in _errors(spec) if "file path outside" in e]
    assert len(errors) == 1 and errors[0].startswith("spec.engine.extraArgs[2]: --tokenizer: '/models/../etc'")
    assert outside("/models/a,/cache/b", ("/models", "/cache")) is None


@pytest.mark.parametrize(
    ("env", "path", "words", "allowed_with_trust"),
    [
        ({"name": "VLLM_API_KEY", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}, "spec.engine.env[0].name", "apiKeySecretRef", False),
        ({"name": "VLLM_SERVER_DEV_MODE", "value": "1"}, "spec.engine.env[0].name", "/collective_rpc", False),
        ({"name": "HF_HOME", "value": "/tmp/hf"}, "spec.engine.env[0].value", "file path outside", False),
        *[({"name": name, "value": "x"}, "spec.engine.env[0].name", "--allow-trust-remote-code", True) for name in sorted(CODE_ENV)],
    ],
)
def test_env_cannot_smuggle_keys_dev_routes_code_or_paths(env: dict[str, Any], path: str, words: str, allowed_with_trust: bool) -> None:
    errors = _errors({"engine": {"env": [env]}})
    assert any(e.startswith(path) and words in e for e in errors), errors
    trusted = _errors({"engine": {"env": [env]}}, Settings(allow_trust_remote_code=True))
    assert (not any(words in e for e in trusted)) == allowed_with_trust


def test_env_inside_the_cache_is_fine() -> None:
    assert _errors({"engine": {"env": [{"name": "HF_HOME", "value": "/cache/hf"}, {"name": "VLLM_LOGGING_LEVEL", "value": "DEBUG"}]}}) == []


def test_trust_remote_code_follows_the_setting() -> None:
    spec = {"model": {"trustRemoteCode": True}}
    assert [e for e in _errors(spec) if e.startswith("spec.model.trustRemoteCode")]
    assert _errors(spec, Settings(allow_trust_remote_code=True)) == []
    assert any(e.startswith("spec.engine.extraArgs[0]: --trust-remote-code is set by the operator from spec.model.trustRemoteCode")
               for e in _errors({"engine": {"extraArgs": ["--trust-remote-code"]}}, Settings(allow_trust_remote_code=True)))


def test_huge_values_are_quoted_short() -> None:
    result = validate(pooling({"engine": {"extraArgs": ["x" * 1_000_000]}}, name="n" * 100_000))
    lines = [problem_line(result, p) for p in result.problems]
    assert lines and all(len(line) < 1500 and "more characters)" in line for line in lines)


# ---- the optional NetworkPolicy ----------------------------------------------------------------------------------


def _children(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    result = validate(body)
    assert result.ok, result.problems
    return {o["kind"]: o for o in build(result.resource, contract("0.33"), BuildContext(operator_image="op:1"))}  # type: ignore[arg-type]


def test_no_network_policy_unless_asked() -> None:
    assert "NetworkPolicy" not in _children(pooling())


def test_network_policy_admits_the_serving_port_from_clients_and_monitoring_only() -> None:
    np = _children(pooling({"service": {"port": 9000}, "networkPolicy": {}}))["NetworkPolicy"]
    assert np["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/instance"] == "demo"
    assert np["spec"]["policyTypes"] == ["Ingress"]
    same_namespace, monitoring = np["spec"]["ingress"]
    assert same_namespace == {"from": [{"podSelector": {}}], "ports": [{"protocol": "TCP", "port": 9000}]}
    assert monitoring["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    selected = {"clientNamespaces": {"matchLabels": {"team": "search"}}, "monitoringNamespace": ""}
    np = _children(pooling({"networkPolicy": selected}))["NetworkPolicy"]
    assert np["spec"]["ingress"] == [{"from": [{"namespaceSelector": {"matchLabels": {"team": "search"}}}], "ports": [{"protocol": "TCP", "port": 8000}]}]


def test_network_policy_selector_requirements_are_checked() -> None:
    bad = {"networkPolicy": {"clientNamespaces": {"matchExpressions": [{"key": "a", "operator": "In"}, {"key": "b", "operator": "Exists", "values": ["x"]}]}}}
    assert _errors(bad) == [
        "spec.networkPolicy.clientNamespaces.matchExpressions[0].values: In needs a non-empty values list",
        "spec.networkPolicy.clientNamespaces.matchExpressions[1].values: Exists takes no values",
    ]
    assert any(e.startswith("spec.networkPolicy.monitoringNamespace") for e in _errors({"networkPolicy": {"monitoringNamespace": "Not A Name"}}))


# ---- objects from the API server, which stores nesting up to 10,000 deep --------------------------------------


def _nested(depth: int) -> Any:
    value: Any = "x"
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


@pytest.mark.parametrize(("depth", "refused"), [(90, False), (100, True), (9_000, True)])
def test_validate_refuses_deep_nesting_before_anything_recurses_into_it(depth: int, refused: bool) -> None:
    body = pooling()
    body["spec"]["model"]["hfOverrides"] = {"x": _nested(depth)}  # not through the factory: it deep-copies
    result = validate(body)
    if refused:
        assert [str(p) for p in result.problems] == ["spec.model.hfOverrides: nested more than 100 levels deep; flatten it"]
    else:
        assert result.ok, result.problems
