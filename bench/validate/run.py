"""`pooling-operator validate` and `render` over 1,000 resources: wall time per resource, as a user runs them.

Writes N copies of a minimal PoolingService (one file, N documents) and a mixed set (every example under
examples/, renamed, repeated to N), runs each command as a subprocess three times, and prints the best wall
time per resource; with --profile, a cProfile summary of one in-process render. Results go to
bench/results/validate.json. Not part of `make test`.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import platform
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
MINIMAL = {
    "apiVersion": "vllm-pooling.io/v1alpha1",
    "kind": "PoolingService",
    "metadata": {"name": "emb", "namespace": "bench"},
    "spec": {"model": {"name": "sentence-transformers/all-MiniLM-L6-v2"}, "task": "embed"},
}


def minimal(n: int) -> list[dict]:
    return [{**MINIMAL, "metadata": {"name": f"emb-{i:05d}", "namespace": "bench"}} for i in range(n)]


def mixed(n: int) -> list[dict]:
    examples = []
    for path in sorted((ROOT / "examples").rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") in ("PoolingService", "ScoringService", "HiddenStateJob"):
                examples.append(doc)
    out = []
    for i in range(n):
        doc = json.loads(json.dumps(examples[i % len(examples)]))
        doc["metadata"]["name"] = f"{doc['metadata']['name'][:40]}-{i:05d}"
        out.append(doc)
    return out


def timed(argv: list[str], runs: int) -> float:
    best = float("inf")
    for _ in range(runs):
        started = time.perf_counter()
        proc = subprocess.run(argv, capture_output=True, text=True)
        elapsed = time.perf_counter() - started
        if proc.returncode not in (0,):
            sys.exit(f"{' '.join(argv[:3])} failed ({proc.returncode}): {proc.stderr[-2000:]}")
        best = min(best, elapsed)
    return best


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("-n", type=int, default=1000)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--profile", action="store_true", help="print where one in-process render spends its time")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "validate.json")
    args = p.parse_args()
    cli = [sys.executable, "-m", "pooling_operator.cli"]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, docs in (("minimal", minimal(args.n)), ("mixed", mixed(args.n))):
            f = Path(tmp) / f"{name}.yaml"
            f.write_text(yaml.safe_dump_all(docs, sort_keys=False))
            empty = Path(tmp) / "one.yaml"
            empty.write_text(yaml.safe_dump(docs[0], sort_keys=False))
            start_up = timed([*cli, "validate", str(empty)], args.runs)  # interpreter + imports, one resource
            v = timed([*cli, "validate", str(f)], args.runs)
            r = timed([*cli, "render", str(f)], args.runs)
            row = {"set": name, "n": args.n, "startup_s": round(start_up, 3), "validate_s": round(v, 3), "render_s": round(r, 3),
                   "validate_ms_per_resource": round((v - start_up) / args.n * 1000, 3),
                   "render_ms_per_resource": round((r - start_up) / args.n * 1000, 3)}
            rows.append(row)
            print(f"{name:8} n={args.n}: start-up {start_up:.2f}s; validate {v:.2f}s ({row['validate_ms_per_resource']} ms each); "
                  f"render {r:.2f}s ({row['render_ms_per_resource']} ms each)", flush=True)
            if args.profile and name == "minimal":
                from pooling_operator.cli import main as cli_main

                out, sys.stdout = sys.stdout, io.StringIO()
                prof = cProfile.Profile()
                try:
                    prof.runcall(cli_main, ["render", str(f)])
                finally:
                    sys.stdout = out
                s = io.StringIO()
                pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(25)
                print(s.getvalue())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    machine = {"python": platform.python_version(), "cpus": __import__("os").cpu_count(), "platform": platform.platform(),
               "libyaml": bool(getattr(yaml, "__with_libyaml__", False))}
    args.out.write_text(json.dumps({"machine": machine, "runs": rows}, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
