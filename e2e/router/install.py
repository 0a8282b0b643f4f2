"""vllm-router (api/routing.py: ROUTER_VERSION) from its PyPI wheel, in a venv of its own under the project's cache,
keyed by its version: installed once (printed), then reused by bench/router_real.py and the launcher-flags test.

    ${VPO_CACHE_DIR:-~/.cache/vllm-pooling-operator}/vllm-router-<version>/

The wheel carries the Python launcher (`vllm_router.launch_router`, argparse) over the same Rust router the
image's binary is; the image itself (vllm/vllm-router) cannot be pulled here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from pooling_operator.api.routing import ROUTER_VERSION

CACHE = Path(os.environ.get("VPO_CACHE_DIR") or Path.home() / ".cache" / "vllm-pooling-operator")


class RouterUnavailable(RuntimeError):
    """The wheel could not be installed (no package index reachable, or the version is gone)."""


def venv() -> Path:
    return CACHE / f"vllm-router-{ROUTER_VERSION}"


def ensure_router() -> Path:
    """The venv holding vllm-router ROUTER_VERSION; installed when missing (a half-made one is made again)."""
    root = venv()
    done = root / ".installed"
    if done.exists():
        return root
    print(f"installing vllm-router {ROUTER_VERSION} into {root}", flush=True)
    try:
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(root)], check=True, capture_output=True, timeout=300)
        subprocess.run([str(root / "bin" / "pip"), "install", "-q", f"vllm-router=={ROUTER_VERSION}"], check=True,
                       capture_output=True, timeout=600)  # fmt: skip
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        output = getattr(exc, "stderr", b"") or b""
        raise RouterUnavailable(f"pip install vllm-router=={ROUTER_VERSION} failed: {output.decode(errors='replace')[-400:]}") from exc
    done.write_text(ROUTER_VERSION + "\n")
    return root
