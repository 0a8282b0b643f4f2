"""What `engine.extraArgs` and `engine.env` may not do, whatever else vLLM accepts: name files outside the
volumes the operator mounts, set variables the operator owns, or load code through the environment. Pure tables
and checks; the rules of vllm/engine_rules.py and vllm/rules.py report them. Each flag's class (owned, refused,
code, path, plain) is in flags/classes.json, read by vllm/flag_classes.py.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Iterator

from pooling_operator.vllm.args import CACHE_MOUNT, MODEL_MOUNT
from pooling_operator.vllm.workload import Workload

# Flags whose values are routes, not files.
ROUTE_FLAGS = frozenset({"--disable-access-log-for-endpoints"})

# Environment variables refused whatever their form: name -> the field to use instead, or why.
OWNED_ENV = {
    "VLLM_API_KEY": "the API key comes from spec.service.apiKeySecretRef, which status.unprotectedRoutes reports on",
    "VLLM_SERVER_DEV_MODE": "it mounts development routes (/sleep, /collective_rpc, /reset_prefix_cache) that run "
    "commands in the engine",
}
# Environment variables that load code into the server: allowed only where a model's own code is.
CODE_ENV = {
    "LD_PRELOAD": "loads a shared library into every process",
    "LD_AUDIT": "loads a shared library into every process",
    "LD_LIBRARY_PATH": "changes which shared libraries every process loads",
    "PYTHONPATH": "changes which Python code vLLM imports",
    "PYTHONHOME": "changes which Python runs",
    "PYTHONSTARTUP": "runs a Python file",
    "PYTHONUSERBASE": "changes which Python code vLLM imports",
}
CODE_ADVICE = "code that is not part of vLLM runs only where the operator's settings allow it (--allow-trust-remote-code)"


def roots(w: Workload) -> tuple[str, ...]:
    """The folders a path in extraArgs or env may name: the model volume (when the model comes from one) and
    the cache folder the operator mounts."""
    source = w.model.source
    mounted = source is not None and source.volume is not None
    return (MODEL_MOUNT, CACHE_MOUNT) if mounted else (CACHE_MOUNT,)


def _strings(value: str) -> Iterator[str]:
    """The value, and every string inside it when it is JSON (vLLM reads the JSON flags' values as JSON)."""
    yield value
    if value[:1] in "{[":
        try:
            doc = json.loads(value)
        except ValueError:
            return
        stack = [doc]
        while stack:
            item = stack.pop()
            if isinstance(item, str):
                yield item
            elif isinstance(item, dict):
                stack += list(item.values())
            elif isinstance(item, list):
                stack += item


def outside(value: str, allowed: tuple[str, ...]) -> str | None:
    """The first file path in the value that lies outside the allowed folders, or None. A path is what starts
    with '/', '~' or 'file:' (after `name=`, as in --lora-modules name=/path), or climbs with '..'."""
    for text in _strings(value):
        for part in text.split(","):
            candidate = part.split("=", 1)[1] if "=" in part and not part.startswith("/") else part
            candidate = candidate.strip()
            if candidate.startswith("file:"):
                candidate = "/" + candidate.removeprefix("file:").lstrip("/")
            if not (candidate.startswith(("/", "~")) or ".." in candidate.split("/")):
                continue
            if candidate.startswith("~"):
                return candidate
            normal = posixpath.normpath(candidate)
            if not any(normal == root or normal.startswith(root + "/") for root in allowed):
                return candidate
    return None


def paths_message(found: str, allowed: tuple[str, ...]) -> str:
    where = " or ".join(allowed)
    return (f"{found!r} is a file path outside the folders the operator mounts for the model ({where}); the pod "
            "has nothing else of yours, and reaching past them is refused")
