"""``pooling-operator pooling-job run|preflight``: the command lines of a PoolingJob's containers.

``preflight`` is the pod's init container (it runs before the vLLM sidecar starts): it reads the dataset and
reports the shard's counts. ``run`` is the main container. builders/ renders exactly the required flags; the
optional ones tune retries and timeouts. The driver is imported only when it runs. Exit codes are the
HiddenStateJob's (api/shard_contract).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pooling_operator.api.pooling_job_contract import (
    DATASET_FORMATS,
    JSONL,
    OUTPUT_FORMATS,
    ROUTES,
    SAFETENSORS,
    SCORE_DTYPE,
    SCORING_MODES,
    VECTOR_DTYPES,
)
from pooling_operator.api.shard_contract import EXIT_USAGE
from pooling_operator.pods.shard.cli import non_negative, positive, reporting, run_info

if TYPE_CHECKING:
    from pooling_operator.pods.shard.progress import Sink
    from pooling_operator.pods.vectors.driver import PoolingConfig

EXIT_CODES = ("Exit codes: 0 done, 1 vLLM unavailable or an unexpected error, 2 bad arguments, 3 storage budget "
              "reached, 4 dataset unreadable, 5 output volume full.")  # fmt: skip


def _seconds(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text}")
    return value


def _ids(text: str) -> tuple[int, ...]:
    try:
        ids = tuple(int(x) for x in text.split(",") if x)
    except ValueError:
        ids = ()
    if not ids or min(ids) < 0:
        raise argparse.ArgumentTypeError(f"expected non-negative token ids, comma-separated: {text!r}")
    return ids


def _outputs(text: str) -> tuple[str, ...]:
    formats = tuple(x for x in text.split(",") if x)
    wrong = [x for x in formats if x not in OUTPUT_FORMATS]
    if wrong or not formats:
        raise argparse.ArgumentTypeError(f"expected {' and/or '.join(OUTPUT_FORMATS)}, comma-separated: {text!r}")
    return formats


def _shard_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--shard", type=non_negative, required=True, help="this shard's index ($(JOB_COMPLETION_INDEX))")
    p.add_argument("--shards", type=positive, required=True, help="number of shards")
    p.add_argument("--dataset", type=Path, required=True, help='the JSONL dataset: {"id", "text"} or {"id", "token_ids"}, '
                   "or an OpenAI Batch input file (--format openaiBatch)")
    p.add_argument("--format", choices=DATASET_FORMATS, default=JSONL, help="the dataset's format (default jsonl)")
    p.add_argument("--mode", choices=SCORING_MODES, default=None,
                   help="score instead of pool: each line a (query, documents) group or (text_1, text_2) pairs")
    p.add_argument("--model-name", action="append", default=[], metavar="NAME",
                   help="a name an OpenAI Batch line's body.model may give (repeatable; run's --model is one too)")
    p.add_argument("--progress-configmap", default="", help="ConfigMap for progress in $POD_NAMESPACE; empty: none")


def add_parser(subparsers: Any) -> None:
    """Register ``pooling-job run`` and ``pooling-job preflight`` on the main CLI's subparsers."""
    pj = subparsers.add_parser("pooling-job", help="the PoolingJob driver (runs inside the Job's pods)")
    pj_sub = pj.add_subparsers(dest="pooling_job_command", required=True)
    r = pj_sub.add_parser("run", help="embed one dataset shard through the vLLM beside it, resumably",
                          description=EXIT_CODES)  # fmt: skip
    _shard_flags(r)
    r.add_argument("--output", type=Path, required=True, help="the job's output folder")
    r.add_argument("--endpoint", required=True, help="vLLM's base URL")
    r.add_argument("--model", required=True, help="vLLM's served model name")
    r.add_argument("--task", choices=tuple(ROUTES), default=None, help="the pooling task vLLM serves (or --mode)")
    r.add_argument("--label-token-ids", type=_ids, default=(), metavar="ID,..", help="--mode generative: label_token_ids")
    r.add_argument("--apply-softmax", action=argparse.BooleanOptionalAction, default=True,
                   help="--mode generative: softmax over the labels only (default) or full-vocabulary probabilities")
    r.add_argument("--item-first", action="store_true", help="--mode generative: the item before the query")
    r.add_argument("--batch-size", type=positive, required=True, help="inputs a request")
    r.add_argument("--dtype", choices=tuple(VECTOR_DTYPES), required=True, help="the vectors' dtype in the files")
    r.add_argument("--outputs", type=_outputs, default=(SAFETENSORS,), metavar="FORMAT,..",
                   help=f"what the job publishes: {' and/or '.join(OUTPUT_FORMATS)} (default safetensors; the part files "
                   "are written either way, as the record resume reads)")
    r.add_argument("--run-info", type=run_info, default=None, metavar="JSON",
                   help="what the operator ran, for run.json: model, revision, image, command, task, embeddingSpace")  # fmt: skip
    r.add_argument("--document-instruction", default="", metavar="TEXT",
                   help="prepended to every text input (spec.vectors.documentInstruction); token ids then fail")
    r.add_argument("--budget-bytes", type=non_negative, help="this shard's share of the storage budget")
    r.add_argument("--space-check", type=_space_check, default=None, metavar="JSON",
                   help="spec.spaceCheck: send the canaries first and end the shard (exit 6) if they drift from the "
                   "space's reference: {fingerprint, label, minCosine, normalize, canaries, reference}")
    r.add_argument("--concurrency", type=positive, default=4, help="batches in flight (default 4)")
    r.add_argument("--max-attempts", type=positive, default=4, help="tries per batch (default 4)")
    r.add_argument("--retry-base-seconds", type=float, default=0.5, help="first retry delay, doubling (default 0.5)")
    r.add_argument("--health-timeout", type=_seconds, default=1800.0, help="seconds to wait for vLLM /health (default 1800)")
    r.add_argument("--request-timeout", type=_seconds, default=600.0, help="seconds per request (default 600)")
    r.add_argument("--progress-interval", type=_seconds, default=5.0, help="seconds between progress writes (default 5)")
    r.set_defaults(func=cmd_run)
    p = pj_sub.add_parser("preflight", help="read the dataset and report the shard's counts (before vLLM starts)",
                          description="Exit codes: 0 read (bad lines included), 2 bad arguments, 4 dataset unreadable.")  # fmt: skip
    _shard_flags(p)
    p.set_defaults(func=cmd_preflight)


def _space_check(text: str) -> Any:
    from pooling_operator.pods.vectors.space import SpaceCheckConfig

    try:
        return SpaceCheckConfig.parse(text)
    except (ValueError, KeyError, TypeError) as exc:
        raise argparse.ArgumentTypeError(f"not a space check: {exc}") from None


def config_from(args: argparse.Namespace) -> PoolingConfig:
    from pooling_operator.pods.vectors.driver import PoolingConfig

    return PoolingConfig(
        shard=args.shard, shards=args.shards, dataset=args.dataset, output=args.output, endpoint=args.endpoint,
        model=args.model, task=args.task, batch_size=args.batch_size, dtype=args.dtype, run_info=args.run_info,
        budget_bytes=args.budget_bytes, concurrency=args.concurrency, max_attempts=args.max_attempts,
        retry_base_seconds=args.retry_base_seconds, health_timeout=args.health_timeout,
        request_timeout=args.request_timeout, progress_interval=args.progress_interval, format=args.format,
        outputs=args.outputs, models=tuple(args.model_name), mode=args.mode, labels=args.label_token_ids,
        apply_softmax=args.apply_softmax, item_first=args.item_first, space_check=args.space_check,
        document_instruction=args.document_instruction,
    )  # fmt: skip


def _setup(args: argparse.Namespace) -> str | None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    if args.shard >= args.shards:
        return f"--shard {args.shard} is not below --shards {args.shards}"
    if hasattr(args, "task") and (args.task is None) == (args.mode is None):
        return "give exactly one of --task (pool each input) or --mode (score each line)"
    if getattr(args, "run_info", None) is not None and args.run_info.get("task") not in (None, args.task):
        return f"--task {args.task} differs from --run-info's task {args.run_info.get('task')!r}"
    if getattr(args, "run_info", None) is not None and args.run_info.get("mode") not in (None, args.mode):
        return f"--mode {args.mode} differs from --run-info's mode {args.run_info.get('mode')!r}"
    if getattr(args, "mode", None) and getattr(args, "dtype", SCORE_DTYPE) != SCORE_DTYPE:
        return f"--mode writes scores as {SCORE_DTYPE}: --dtype {args.dtype} is not taken"
    if getattr(args, "space_check", None) is not None and args.mode is not None:
        return "--space-check guards a space of vectors: not for --mode (scores)"
    if getattr(args, "label_token_ids", ()) and args.mode != "generative":
        return "--label-token-ids is for --mode generative"
    if getattr(args, "mode", None) == "generative" and not args.label_token_ids:
        return "--mode generative needs --label-token-ids"
    return None


def cmd_run(args: argparse.Namespace) -> int:
    problem = _setup(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return EXIT_USAGE
    config = config_from(args)

    async def go(sink: Sink | None) -> int:
        from pooling_operator.pods.vectors.driver import PoolingDriver

        return await PoolingDriver(config, sink).run()

    return asyncio.run(reporting(args.progress_configmap, args.shard, "the PoolingJob driver", go))


def cmd_preflight(args: argparse.Namespace) -> int:
    problem = _setup(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return EXIT_USAGE

    async def go(sink: Sink | None) -> int:
        from pooling_operator.pods.vectors.driver import preflight
        from pooling_operator.pods.vectors.scoring import line_parser

        parse, id_field = line_parser(args.format, args.mode, tuple(args.model_name))
        return await preflight(args.dataset, args.shard, args.shards, sink, parse, id_field)

    return asyncio.run(reporting(args.progress_configmap, args.shard, "the PoolingJob driver", go))


def main(argv: Sequence[str] | None = None) -> int:
    """``pooling-job ...`` on its own, for tests and tools that do not go through pooling-operator."""
    parser = argparse.ArgumentParser(prog="pooling-operator")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
