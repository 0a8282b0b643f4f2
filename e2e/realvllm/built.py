"""Build the tiny scoring models (tiny_models.py, in the runtime's interpreter) from the packaged MiniLM."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from e2e.realvllm import runtime

BUILD = Path(__file__).resolve().parent / "tiny_models.py"
SEEDS = (0, 1)  # seed 0 is served; seed 1 only shows that another seed answers otherwise


def build(rt: runtime.Runtime, out: Path, seed: int) -> dict[str, dict[str, str]]:
    """``out/<family>/`` for every family; returns what tiny_models.py printed (dir, architecture, sha256)."""
    res = subprocess.run(
        [str(rt.python), str(BUILD), str(out), "--source", str(rt.model_dir(runtime.MINILM)), "--seed", str(seed)],
        capture_output=True, text=True, env=rt.env(), timeout=300,
    )  # fmt: skip
    if res.returncode != 0:
        raise RuntimeError(f"tiny_models.py failed:\n{res.stderr[-3000:]}")
    return json.loads(res.stdout)
