"""``pooling-operator compile-cache restore|save``: the command lines of a service pod's compile-cache init
container and sidecar (builders/services.py renders them; store.py does the work)."""

from __future__ import annotations

import argparse
import logging
import signal
import time
import urllib.request
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("compile-cache", help="a service pod's compile cache on a volume")
    actions = p.add_subparsers(dest="action", required=True)
    r = actions.add_parser("restore", help="copy the key's entry into vLLM's cache root (a miss is not an error)")
    r.add_argument("--store", required=True, type=Path)
    r.add_argument("--key", required=True)
    r.add_argument("--into", required=True, type=Path)
    r.set_defaults(func=run_restore)
    s = actions.add_parser("save", help="once vLLM answers /health, write the key's entry if none is there; then idle")
    s.add_argument("--store", required=True, type=Path)
    s.add_argument("--key", required=True)
    s.add_argument("--source", required=True, type=Path, help="vLLM's cache root")
    s.add_argument("--health", required=True, help="vLLM's /health URL (loopback)")
    s.add_argument("--wait-seconds", type=float, default=3600.0, help="how long to wait for vLLM (default 3600)")
    s.add_argument("--exit", action="store_true", help="exit after saving instead of idling (tests)")
    s.set_defaults(func=run_save)


def _logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def run_restore(args: argparse.Namespace) -> int:
    from pooling_operator.pods.compile_cache.store import restore

    _logging()
    restore(args.store, args.key, args.into)
    return 0  # a miss is not a failure: vLLM compiles


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def run_save(args: argparse.Namespace) -> int:
    from pooling_operator.pods.compile_cache.store import save

    _logging()
    log = logging.getLogger("pooling_operator.pods.compile_cache")
    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    deadline = time.monotonic() + args.wait_seconds
    while not stop["now"] and time.monotonic() < deadline and not _healthy(args.health):
        time.sleep(2)
    if stop["now"] or time.monotonic() >= deadline:
        log.info("vLLM did not answer %s: nothing saved", args.health)
        return 0
    try:
        log.info("compile cache %s: %s", args.key, save(args.store, args.key, args.source))
    except Exception as exc:
        log.warning("compile cache save of %s failed (%s: %s)", args.key, type(exc).__name__, exc)
    while not stop["now"] and not args.exit:  # a native sidecar lives as long as the pod
        time.sleep(5)
    return 0
