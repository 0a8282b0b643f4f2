"""``pooling-operator model-cache fill``: the command line of a ModelCache's fill Job (builders/caches.py
renders it). The token comes from HF_TOKEN (the Job's env, from the ModelCache's Secret), never an argument.
The fill itself is imported only when it runs."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from pathlib import Path

from pooling_operator.api import cache_fill_contract as F


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("model-cache", help="a ModelCache's fill Job")
    actions = p.add_subparsers(dest="action", required=True)
    f = actions.add_parser("fill", help="download one revision into the claim's hub cache, verified, renamed into place")
    f.add_argument("--repo", required=True, help="Hugging Face repo id, e.g. BAAI/bge-m3")
    f.add_argument("--revision", required=True, help="commit sha, branch or tag")
    f.add_argument("--claim", required=True, type=Path, help="where the claim is mounted")
    f.add_argument("--endpoint", default=None, help="the Hub's URL (default: HF_ENDPOINT, else huggingface.co)")
    f.add_argument("--result", type=Path, default=Path(F.TERMINATION_LOG),
                   help=f"where the result goes (default {F.TERMINATION_LOG}, the termination message)")
    f.add_argument("--max-workers", type=int, default=8, help="files downloaded at once (default 8)")
    f.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pooling_operator.pods.model_cache.fill import FillError, fill

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    def stop(signum: int, _frame: object) -> None:  # a deleted Job or a preemption: clean up the staging folder
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    result: dict[str, object]
    try:
        filled = fill(args.repo, args.revision, args.claim, endpoint=args.endpoint, token=os.environ.get("HF_TOKEN"),
                      max_workers=args.max_workers)
        result, reason = filled.result(), None
        print(f"filled {args.repo}@{filled.revision}: {filled.files} files, {filled.bytes} bytes "
              f"({filled.downloaded} downloaded)", flush=True)
    except FillError as exc:
        result, reason = {F.RESULT_REASON: exc.reason, F.RESULT_MESSAGE: str(exc)}, exc.reason
        print(f"fill failed: {exc.reason}: {exc}", file=sys.stderr, flush=True)
    try:
        args.result.write_text(F.encode(result))
    except OSError as exc:
        print(f"cannot write the result to {args.result}: {exc}", file=sys.stderr)
    return F.exit_code(reason)
