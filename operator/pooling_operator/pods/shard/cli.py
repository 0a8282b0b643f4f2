"""What both dataset-shard subcommands share on the command line: argument types, and the wrapper that runs a
driver with its progress going to a ConfigMap (or nowhere) and turns an unexpected error into EXIT_FAILED."""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from pooling_operator.api.shard_contract import EXIT_FAILED

if TYPE_CHECKING:
    from pooling_operator.pods.shard.progress import Sink


def non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative: {text}")
    return value


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text}")
    return value


def run_info(text: str) -> dict[str, Any]:
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected a JSON object: {exc}") from exc
    if not isinstance(doc, dict):
        raise argparse.ArgumentTypeError("expected a JSON object")
    return doc


async def reporting(configmap: str, shard: int, what: str, go: Callable[[Sink | None], Awaitable[int]]) -> int:
    """Run a driver (`go`, given where its progress goes: the ConfigMap `configmap`, or nowhere); an unexpected
    error is logged and exits EXIT_FAILED."""
    writer = None
    if configmap:
        # Imported here: only a driver that reports needs the Kubernetes client.
        from pooling_operator.k8s.progress import progress_configmap

        writer = progress_configmap(configmap)
    try:
        return await go(writer.write if writer else None)
    except Exception:
        logging.getLogger(__name__).exception("%s of shard %d failed", what[:1].upper() + what[1:], shard)
        return EXIT_FAILED
    finally:
        if writer is not None:
            await writer.close()
