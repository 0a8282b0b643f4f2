"""What every part shares: where the tables live, the name the tables credit, the progress log on stderr,
and how a table is written."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
REGISTRY_DIR = REPO / "operator" / "pooling_operator" / "vllm" / "registry"
PROG = "tools/registry"  # what the tables say made them ("generated_by", "source")

_T0 = time.monotonic()


def say(msg: str) -> None:
    print(f"[registry {time.monotonic() - _T0:5.1f}s] {msg}", file=sys.stderr, flush=True)


def write_json(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    say(f"wrote {path} ({path.stat().st_size // 1024} KiB)")
