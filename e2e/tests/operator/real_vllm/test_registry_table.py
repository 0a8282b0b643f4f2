"""The committed vLLM 0.32 architecture table (operator/pooling_operator/vllm/registry/vllm-0.32.json) is
what real vLLM 0.32 says: ``python -m tools.registry --runtime`` regenerates it in the runtime's
interpreter (vLLM's ModelRegistry, _ModelInfo per class, every pooling class's pooler factory built for
real) and any difference from the committed file fails, printed.

The table's trust_remote_code items of kind "test-case" come from tests/models/registry.py of the vLLM
0.32.0 sdist (the wheel has no tests/): the sdist, unpacked (``vllm-0.32.0/``) or as PyPI's
``vllm-0.32.0.tar.gz`` (sha256 d2c957d5...), is looked for in ``$VPO_VLLM_SDIST_DIR`` or
``<cache>/vllm/sdist/``. Without it the table is regenerated and compared all the same, bar those items, and
the test of those items is skipped with the reason.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from e2e.realvllm import runtime
from tests.unavailable import unavailable
from tools.registry.compare import differences

pytestmark = [pytest.mark.real_vllm, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[4]
GENERATOR = "tools.registry"  # run as -m from ROOT: the runtime's interpreter has no other path to it
COMMITTED = ROOT / "operator" / "pooling_operator" / "vllm" / "registry" / "vllm-0.32.json"
SDIST = "vllm-0.32.0"
BUDGET_S = 60  # the generator's promise on a 2-core machine


def find_sdist() -> Path | None:
    """`make vllm-runtime` puts the sdist beside the runtime (runtime.fetch_sdist); $VPO_VLLM_SDIST_DIR may name
    another folder. Tests send nothing outside this machine, so a missing one is not fetched here."""
    folders = [Path(os.environ["VPO_VLLM_SDIST_DIR"])] if os.environ.get("VPO_VLLM_SDIST_DIR") else []
    for folder in (*folders, runtime.sdist_path().parent):
        unpacked, tarball = folder / SDIST, folder / f"{SDIST}.tar.gz"
        if (unpacked / "tests" / "models" / "registry.py").is_file():
            return unpacked
        if tarball.is_file():
            digest = hashlib.sha256(tarball.read_bytes()).hexdigest()
            assert digest == runtime.SDIST_SHA256, f"{tarball}: sha256 {digest}, not PyPI's {runtime.SDIST_SHA256}"
            return tarball
    return None


@pytest.fixture(scope="module")
def regenerated(vllm_runtime: runtime.Runtime, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("registry") / "vllm-0.32.json"
    sdist = find_sdist()
    argv = [str(vllm_runtime.python), "-m", GENERATOR, "--runtime", "--out", str(out)]
    if sdist is not None:
        argv += ["--sdist", str(sdist)]
    began = time.monotonic()
    env = {**os.environ, **vllm_runtime.env()}
    res = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT, timeout=240)
    seconds = time.monotonic() - began
    progress = "\n".join(ln for ln in res.stderr.splitlines() if ln.startswith("[registry"))
    print(f"{GENERATOR} --runtime: {seconds:.1f} s (sdist: {sdist})\n{progress}")
    assert res.returncode == 0, f"python -m {GENERATOR} --runtime failed:\n{res.stderr[-4000:]}"
    return {"doc": json.loads(out.read_text()), "seconds": seconds, "sdist": sdist}


def without_test_cases(doc: dict[str, Any]) -> dict[str, Any]:
    remote = {a: [i for i in items if i["kind"] != "test-case"] for a, items in doc["remote_code"].items()}
    return {**doc, "remote_code": {a: items for a, items in remote.items() if items}}


def test_runtime_table_is_the_committed_one(regenerated: dict[str, Any]) -> None:
    committed = json.loads(COMMITTED.read_text())
    new = regenerated["doc"]
    if regenerated["sdist"] is None:
        committed, new = without_test_cases(committed), without_test_cases(new)
    diffs = differences(committed, new)
    assert not diffs, (
        f"{COMMITTED.relative_to(ROOT)} differs from what vLLM 0.32 says (first: committed, second: regenerated; "
        f"regenerate with the command in operator/pooling_operator/vllm/registry/README.md):\n" + "\n".join(diffs)
    )
    assert regenerated["seconds"] < BUDGET_S * 2, f"--runtime took {regenerated['seconds']:.0f} s"


def test_remote_code_test_cases_are_the_sdists(regenerated: dict[str, Any]) -> None:
    if regenerated["sdist"] is None:
        why = (f"no {SDIST} sdist in $VPO_VLLM_SDIST_DIR or {runtime.sdist_path().parent} (`make vllm-runtime` puts it "
               "there): the table's test-case items (tests/models/registry.py) were not regenerated")
        unavailable(why)
    committed = json.loads(COMMITTED.read_text())["remote_code"]
    new = regenerated["doc"]["remote_code"]
    pick = lambda r: {a: [i for i in items if i["kind"] == "test-case"] for a, items in r.items()}  # noqa: E731
    assert pick(committed) == pick(new)
