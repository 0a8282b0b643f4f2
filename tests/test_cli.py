"""The offline CLI as API.md fixes it: line format, exit codes 0/1/2, folders, both entry points."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pooling_operator.cli import main
from tests.factories import pooling

ROOT = Path(__file__).resolve().parents[1]


def write(tmp_path: Path, name: str, *docs: object) -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump_all(list(docs)))
    return path


def test_examples_validate_without_a_single_warning(capsys: pytest.CaptureFixture[str]) -> None:
    """A newcomer's first command: every example pins a revision and gives the model's facts, so nothing is printed
    but the notes of the GPU shares' minimum and the summary."""
    assert main(["validate", str(ROOT / "examples")]) == 0
    captured = capsys.readouterr()
    *lines, summary = captured.err.splitlines()
    notes = [line for line in lines if ": note: " in line]  # a GPU share's minimum, shown
    assert (captured.out, [line for line in lines if line not in notes]) == ("", [])
    assert len(notes) == 2 and all("for a minimum of" in line for line in notes)
    assert re.fullmatch(r"(\d+) resources checked: \1 valid, 0 invalid \(0 errors, 0 warnings, 0 notices\)", summary), summary


def test_every_pinned_revision_is_cited_in_examples_readme() -> None:
    readme = (ROOT / "examples" / "README.md").read_text()
    pinned = set()
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            model = ((doc or {}).get("spec") or {}).get("model") or {}
            if model.get("revision"):
                pinned.add((model["name"], model["revision"]))
    assert len(pinned) == 8
    for name, revision in pinned:
        row = next((line for line in readme.splitlines() if line.startswith(f"| {name} |")), "")
        assert f"`{revision}`" in row, f"{name}@{revision} has no row in examples/README.md saying where it was seen"


def test_problem_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = pooling(name="good")
    bad = pooling({"pooling": {"type": "ALL"}, "engine": {"extraArgs": ["--task", "embed"]}}, name="bad")
    nested = tmp_path / "nested"
    nested.mkdir()
    path = write(nested, "svc.yaml", good, bad)
    write(nested, "ignored.txt", bad)
    assert main(["validate", str(tmp_path)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        f"{path}: PoolingService/bad: spec.engine.extraArgs[0]: vLLM has no --task flag (it became --runner/--convert and the pooler task); set spec.task instead",
        f"{path}: PoolingService/bad: spec.pooling.type: ALL does not fit task embed: pooling.type must be CLS, MEAN or LAST for the sequence tasks embed and classify, ALL or STEP for the token tasks token_embed and token_classify (use CLS, MEAN or LAST)",
    ]


@pytest.mark.parametrize(
    ("content", "words"),
    [("a: [unclosed", "malformed YAML"), ("a: 1\na: 2\n", "duplicate key 'a'")],
    ids=["malformed", "duplicate-key"],
)
def test_malformed_input_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, words: str) -> None:
    path = tmp_path / "x.yaml"
    path.write_text(content)
    assert main(["validate", str(path)]) == 2
    assert words in capsys.readouterr().err


def test_missing_path_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(tmp_path / "nope.yaml")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_render_refuses_invalid_resources(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "x.yaml", pooling({"task": "nope"}))
    assert main(["render", str(path)]) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and "spec.task" in captured.err


def test_crds_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["crds"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [d["spec"]["names"]["kind"] for d in docs] == ["PoolingService", "ScoringService", "HiddenStateJob", "PoolingJob", "ModelCache", "AutoscalingPolicy"]
    assert main(["crds", "--output-dir", str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in (ROOT / "crds").iterdir())


@pytest.mark.integration  # starts a process
def test_module_and_script_are_the_same_program() -> None:
    for argv in ([sys.executable, "-m", "pooling_operator", "validate", "examples"],
                 [str(Path(sys.executable).parent / "pooling-operator"), "validate", "examples"]):
        done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
