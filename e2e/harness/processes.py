"""Local processes and their cleanup: free ports, starting a component in its own process group with its
log file (``spawn``, ``Component``, ``_child_setup``), the per-run registry in ``$TMPDIR/vpo-e2e-<uid>/``
that lets a later run kill the processes and remove the folders of a run that was killed (``reap_strays``),
and ``log_tails`` for reading the components' logs.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from e2e.harness.poll import Fatal, Timeout, wait_for

ORDER = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")


def _free_ports(n: int) -> list[int]:
    """``n`` distinct free TCP ports on 127.0.0.1 (held together so they differ, then released)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _proc_start_time(pid: int) -> int | None:
    """Kernel start time of ``pid`` (clock ticks since boot), to tell our process from a reused pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2 :].split()[19])


def _alive(pid: int, start_time: int | None) -> bool:
    if start_time is not None and Path("/proc").is_dir():
        return _proc_start_time(pid) == start_time
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_PR_SET_PDEATHSIG = 1
try:
    _prctl = ctypes.CDLL(None, use_errno=True).prctl if sys.platform == "linux" else None
except (OSError, AttributeError):
    _prctl = None


def _child_setup() -> None:
    """Runs in the child between fork and exec: default signal mask; die with the thread that started us."""
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def registry_dir() -> Path:
    """Where each run lists its processes and folders for a later run to reap if it crashed."""
    return Path(os.environ.get("VPO_STATE_DIR") or Path(tempfile.gettempdir()) / f"vpo-e2e-{os.getuid()}")


def write_registry(run_id: str, run_dir: Path, components: Iterable[Component], remove: list[str]) -> None:
    """Record this process as the owner of run ``run_id``, its ``components`` and the folders to ``remove``,
    for ``reap_strays`` in a later run (replaced atomically)."""
    reg = registry_dir()
    reg.mkdir(parents=True, exist_ok=True)
    data = {
        "run_id": run_id,
        "owner": {"pid": os.getpid(), "start_time": _proc_start_time(os.getpid())},
        "run_dir": str(run_dir),
        "processes": [
            {"name": c.name, "pid": c.proc.pid, "start_time": c.start_time, "exe": c.argv[0]}
            for c in components
        ],
        "remove": remove,
    }
    tmp = reg / f".{run_id}.tmp"
    tmp.write_text(json.dumps(data, indent=2))
    os.replace(tmp, reg / f"{run_id}.json")


def _kill_group(pid: int, start_time: int | None, sig: int) -> None:
    """`sig` to the process group `pid` leads, or to the process alone when it leads none."""
    if not _alive(pid, start_time):
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)


def stop_process(proc: subprocess.Popen[Any] | None, timeout: float = 20, *, sig: int = signal.SIGTERM,
                 start_time: int | None = None) -> int | None:
    """The one way a harness process stops: `sig` (SIGTERM) to its process group (every process is started in
    a group of its own, so what it forked goes too), a wait of `timeout` seconds, then SIGKILL and a wait.
    Returns the exit code (None when there was no process)."""
    if proc is None:
        return None
    if proc.poll() is None:
        _kill_group(proc.pid, start_time, sig)
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc.pid, start_time, signal.SIGKILL)
    return proc.wait()


def stop_processes(procs: Iterable[tuple[subprocess.Popen[Any], int | None]], timeout: float = 10) -> None:
    """stop_process for several (process, start time) pairs at once: all are signalled, then each is waited
    for (and killed when it outlasts `timeout`)."""
    procs = list(procs)
    for proc, start_time in procs:
        if proc.poll() is None:
            _kill_group(proc.pid, start_time, signal.SIGTERM)
    for proc, start_time in procs:
        stop_process(proc, timeout, start_time=start_time)


def stop_pid(pid: int, timeout: float = 20, *, start_time: int | None = None) -> bool:
    """stop_process for a process this one did not start (a pid file's): True when it was running."""
    if not _alive(pid, start_time):
        return False
    _kill_group(pid, start_time, signal.SIGTERM)
    with contextlib.suppress(Timeout):  # no handle to wait on: poll its exit, then make sure
        wait_for(lambda: not _alive(pid, start_time), timeout=timeout, what=f"process {pid} to exit")
    _kill_group(pid, start_time, signal.SIGKILL)
    return True


def reap_strays(log: Callable[[str], None] | None = None) -> list[str]:
    """Kill the processes and remove the folders of runs whose owner process is gone."""
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    reaped = []
    reg = registry_dir()
    if not reg.is_dir():
        return reaped
    for entry in sorted(reg.glob("*.json")):
        try:
            data = json.loads(entry.read_text())
        except (OSError, ValueError):
            continue
        owner = data.get("owner", {})
        if owner and _alive(owner["pid"], owner.get("start_time")):
            continue
        for p in data.get("processes", []):
            if _alive(p["pid"], p.get("start_time")):
                log(f"Killed stray {p['name']} (pid {p['pid']}) of run {data.get('run_id')}")
                _kill_group(p["pid"], p.get("start_time"), signal.SIGKILL)
        for d in data.get("remove", []):
            shutil.rmtree(d, ignore_errors=True)
        entry.unlink(missing_ok=True)
        reaped.append(data.get("run_id", entry.stem))
    _prune_kept_runs()
    return reaped


KEPT_MARKER = ".vpo-e2e-kept"


def _prune_kept_runs(max_age_hours: float = 24) -> None:
    """Temporary run folders kept for a post-mortem (a failed test run) are removed after a day."""
    cutoff = time.time() - max_age_hours * 3600
    for d in Path(tempfile.gettempdir()).glob("vpo-e2e-run-*"):
        marker = d / KEPT_MARKER
        with contextlib.suppress(OSError):
            if marker.exists() and marker.stat().st_mtime < cutoff:
                shutil.rmtree(d, ignore_errors=True)


@dataclass
class Component:
    name: str
    argv: list[str]
    proc: subprocess.Popen[bytes]
    log: Path
    start_time: int | None


class ComponentDied(Fatal):
    pass


def spawn(name: str, argv: list[str], log: Path, *, run_id: str, cwd: Path, env: dict[str, str] | None = None) -> Component:
    """Start ``argv`` in its own process group, its output appended to ``log`` after a header line."""
    with open(log, "ab") as fh:
        fh.write(f"# {time.strftime('%Y-%m-%dT%H:%M:%S')} run {run_id}\n# {' '.join(argv)}\n".encode())
        fh.flush()
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=fh,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=env,
            start_new_session=True,  # own process group: killpg reaches anything it forks
            preexec_fn=_child_setup,  # only a prctl call
        )
    return Component(name, argv, proc, log, _proc_start_time(proc.pid))


def log_tails(log_dir: Path, lines: int = 30, names: Iterable[str] | None = None) -> str:
    """The last ``lines`` lines of each component's log, headed by its name."""
    out = []
    for name in names or ORDER:
        p = log_dir / f"{name}.log"
        if not p.exists():
            continue
        text = p.read_text(errors="replace").splitlines()[-lines:]
        out.append(f"----- {name} ({p}) last {len(text)} lines -----")
        out.extend(text)
    return "\n".join(out)


def _exit_on_signal(signum: int, _frame: object) -> None:
    """SIGTERM/SIGHUP unwind like Ctrl-C: pytest then stops the session and runs fixture teardown (a
    SystemExit would only fail the current test), scripts run their finally blocks and atexit."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)  # a second signal must not interrupt the teardown
    raise KeyboardInterrupt(f"signal {signum}")
