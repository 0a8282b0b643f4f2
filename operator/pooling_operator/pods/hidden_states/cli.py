"""``pooling-operator hidden-states run``: the command line of the Job's driver container.

builders/jobs.py renders exactly the required flags; the optional ones tune retries and timeouts and
keep their defaults in a Job. The driver itself is imported only when it runs, so registering this
parser costs the other subcommands nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pooling_operator.api.shard_contract import EXIT_USAGE
from pooling_operator.pods.shard.cli import non_negative, positive, reporting, run_info

if TYPE_CHECKING:
    from pooling_operator.pods.hidden_states.driver import Config


def _layers(text: str) -> tuple[int, ...]:
    try:
        layers = tuple(int(x) for x in text.split(","))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected comma-separated layer ids, got {text!r}") from exc
    if not layers or any(x < 0 for x in layers):
        raise argparse.ArgumentTypeError(f"expected non-negative layer ids, got {text!r}")
    return layers


def _dtype_bytes(text: str) -> int | None:
    if text == "auto":
        return None
    if text in ("2", "4"):
        return int(text)
    raise argparse.ArgumentTypeError(f"expected 2, 4 or auto, got {text!r}")


def add_parser(subparsers: Any) -> None:
    """Register ``hidden-states run`` on the main CLI's subparsers."""
    hs = subparsers.add_parser("hidden-states", help="the HiddenStateJob driver (runs inside the Job's pods)")
    hs_sub = hs.add_subparsers(dest="hidden_states_command", required=True)
    r = hs_sub.add_parser(
        "run",
        help="extract the hidden states of one dataset shard through the vLLM beside it",
        description="Exit codes: 0 done, 1 vLLM unavailable or an unexpected error, 2 bad arguments, "
        "3 storage budget reached, 4 dataset unreadable, 5 output volume full.",
    )
    r.add_argument("--shard", type=non_negative, required=True, help="this shard's index ($(JOB_COMPLETION_INDEX))")
    r.add_argument("--shards", type=positive, required=True, help="number of shards")
    r.add_argument("--dataset", type=Path, required=True, help="the JSONL dataset")
    r.add_argument("--output", type=Path, required=True, help="the job's output folder")
    r.add_argument("--endpoint", required=True, help="vLLM's base URL")
    r.add_argument("--model", required=True, help="vLLM's served model name")
    r.add_argument("--layers", type=_layers, required=True, help="the extracted layer ids, comma-separated")
    r.add_argument("--progress-configmap", default="", help="ConfigMap for progress in $POD_NAMESPACE; empty: none")
    r.add_argument("--dtype-bytes", type=_dtype_bytes, required=True, metavar="{2,4,auto}",
                   help="bytes per hidden-state value; auto: what the first file holds (engine.dtype auto)")  # fmt: skip
    r.add_argument("--hidden-size", type=positive, help="the model's hidden size (checked in every file)")
    r.add_argument("--run-info", type=run_info, default=None, metavar="JSON",
                   help="what the operator ran, for the run record: model, revision, image and vLLM's command")  # fmt: skip
    r.add_argument("--budget-bytes", type=non_negative, help="this shard's share of the storage budget")
    r.add_argument("--concurrency", type=positive, default=32, help="requests in flight (default 32)")
    r.add_argument("--max-attempts", type=positive, default=4, help="tries per sample (default 4)")
    r.add_argument("--retry-base-seconds", type=float, default=0.5, help="first retry delay, doubling (default 0.5)")
    r.add_argument("--health-timeout", type=float, default=1800.0, help="seconds to wait for vLLM /health (default 1800)")
    r.add_argument("--request-timeout", type=float, default=600.0, help="seconds per request (default 600)")
    r.add_argument("--lock-timeout", type=float, default=600.0, help="seconds to wait for a file's write lock (default 600)")
    r.add_argument("--progress-interval", type=float, default=5.0, help="seconds between progress writes (default 5)")
    r.set_defaults(func=cmd_run)


def config_from(args: argparse.Namespace) -> Config:
    from pooling_operator.pods.hidden_states.driver import Config

    return Config(
        shard=args.shard, shards=args.shards, dataset=args.dataset, output=args.output, endpoint=args.endpoint,
        model=args.model, layers=args.layers, dtype_bytes=args.dtype_bytes, hidden_size=args.hidden_size,
        run_info=args.run_info,
        budget_bytes=args.budget_bytes, concurrency=args.concurrency, max_attempts=args.max_attempts,
        retry_base_seconds=args.retry_base_seconds, health_timeout=args.health_timeout,
        request_timeout=args.request_timeout, lock_timeout=args.lock_timeout, progress_interval=args.progress_interval,
    )


def check(args: argparse.Namespace) -> str | None:
    """Cross-flag rules argparse cannot express; the message, or None."""
    if args.shard >= args.shards:
        return f"--shard {args.shard} is not below --shards {args.shards}"
    if args.budget_bytes is not None and args.hidden_size is None:
        return "--budget-bytes needs --hidden-size to estimate each file before asking for it"
    return None


def cmd_run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    problem = check(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return EXIT_USAGE
    return asyncio.run(_run(config_from(args), args.progress_configmap))


async def _run(config: Config, configmap: str) -> int:
    from pooling_operator.pods.hidden_states.driver import Driver

    return await reporting(configmap, config.shard, "the HiddenStateJob driver", lambda sink: Driver(config, sink).run())


def main(argv: Sequence[str] | None = None) -> int:
    """``hidden-states run ...`` on its own, for tests and tools that do not go through pooling-operator."""
    parser = argparse.ArgumentParser(prog="pooling-operator")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
