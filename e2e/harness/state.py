"""The run folder's state files: ``state.json``, written by a ``ControlPlane`` as it becomes ready, degrades or
stops (read by ``ControlPlane.attach`` and the ``up``/``down``/``status`` commands), and ``supervisor.json``,
the pid and start time of the detached supervisor that ``up`` starts.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from e2e.harness.processes import _alive, _proc_start_time


def read_state(run_dir: Path) -> dict[str, Any] | None:
    try:
        return json.loads((run_dir / "state.json").read_text())
    except (OSError, ValueError):
        return None


def write_state(run_dir: Path, state: dict[str, Any]) -> None:
    """Replace ``state.json`` atomically."""
    tmp = run_dir / ".state.json.tmp"
    tmp.write_text(json.dumps(state, indent=2) + "\n")
    os.replace(tmp, run_dir / "state.json")


def read_supervisor(run_dir: Path) -> dict[str, Any] | None:
    try:
        return {"supervisor": json.loads((run_dir / "supervisor.json").read_text())}
    except (OSError, ValueError):
        return None


def write_supervisor(run_dir: Path, pid: int) -> None:
    sup = {"pid": pid, "start_time": _proc_start_time(pid)}
    (run_dir / "supervisor.json").write_text(json.dumps(sup))


def supervisor_alive(state: dict[str, Any] | None) -> bool:
    return bool(
        state
        and state.get("supervisor")
        and _alive(state["supervisor"]["pid"], state["supervisor"].get("start_time"))
    )
