"""make test's e2e phase: the real_vllm tier and the other e2e tiers side by side, each in a pytest of its own with
a control plane of its own.

    python -m e2e.tiers --log-dir .cluster [PYTEST_ARGS ...]

The real_vllm tier is CPU-bound (vLLM on the pod runner's two CPUs); the control-plane, operator and
third-party controllers' tiers mostly wait on the API server. Run one after the other, their sum was the e2e
time; side by side it is about the longer of the two. The real tier runs at nice 10 and its pod runner's vLLM
processes at SCHED_IDLE (``VPO_RUNNER_IDLE``), so the waiting tiers get the CPU whenever they ask for it.

The other tiers print live; the real tier writes to ``<log-dir>/real-vllm.log``, which is followed on the
terminal once the other tiers are done. The exit status is 0 only when both pytest runs passed. (pytest-xdist's
``--dist loadgroup`` would do this in one process, but with pytest 9.2 it no longer groups: xdist 3.8 sets
``item._nodeid``, which pytest 9.2's ``Node.nodeid`` no longer reads.)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

# The machine is busy ~90 % of the e2e phase (sampled from /proc/stat), so the order of the work, not its sum, is
# what a priority changes: the other tiers first (their tests wait on API servers with deadlines: 50 services Ready
# within 240 s missed when a real-tier oracle or vLLM import ran at the same priority), the real tier with what is
# left. Wall time is still about the longer tier, the real one.
REAL_TIER_NICE = 10


def pytest_argv(marker: str, extra: list[str]) -> list[str]:
    return [sys.executable, "-m", "pytest", "e2e/tests", "-m", marker, *extra]


def follow(log: Path, proc: subprocess.Popen[bytes]) -> None:
    """Copy ``log`` to stdout until ``proc`` has ended and everything it wrote is out."""
    with open(log, "rb") as f:
        while True:
            chunk = f.read(1 << 16)
            if chunk:
                sys.stdout.buffer.write(chunk)
                sys.stdout.flush()
                continue
            if proc.poll() is not None:
                rest = f.read()
                sys.stdout.buffer.write(rest)
                sys.stdout.flush()
                return
            time.sleep(0.5)  # polling a log file for new bytes: nothing here waits on the tests' state


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m e2e.tiers", description=__doc__.split("\n\n")[0])
    ap.add_argument("--log-dir", type=Path, required=True)
    args, extra = ap.parse_known_args(argv)
    args.log_dir.mkdir(parents=True, exist_ok=True)
    log = args.log_dir / "real-vllm.log"
    env = {**os.environ, "VPO_RUNNER_IDLE": "1"}
    print(f"==> real_vllm tier: started beside the other e2e tiers (log: {log}; followed here when they are done)", flush=True)
    with open(log, "wb") as out:
        # nice 10 for the whole real tier (its control plane, operator, oracles and the vllm processes some tests
        # start themselves); its pod runner's pods run at SCHED_IDLE beneath that (VPO_RUNNER_IDLE)
        real = subprocess.Popen(pytest_argv("real_vllm", extra), stdout=out, stderr=subprocess.STDOUT, env=env,
                                stdin=subprocess.DEVNULL, preexec_fn=lambda: os.nice(REAL_TIER_NICE))  # fmt: skip
    began = time.monotonic()
    try:
        print("==> control-plane, operator and third-party controllers' tiers", flush=True)
        other = subprocess.call(pytest_argv("not real_vllm", extra), stdin=subprocess.DEVNULL)
        print(f"==> the other e2e tiers ended after {time.monotonic() - began:.0f} s (exit {other}); the real_vllm "
              f"tier so far, then live:", flush=True)
        follow(log, real)
    except BaseException:
        real.terminate()
        real.wait(timeout=120)
        raise
    code = real.wait()
    print(f"==> e2e: the other tiers exit {other}, the real_vllm tier exit {code}, {time.monotonic() - began:.0f} s "
          f"side by side", flush=True)
    return 0 if other == 0 and code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
