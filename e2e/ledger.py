"""The suite's ledger: what `make test` spent, printed at its end and kept as JSON for bench/results/suite.json.

    python3 -m e2e.ledger begin                  # make test's first step: the clock starts, the caches are listed
    python3 -m e2e.ledger time NAME -- CMD ...   # run CMD, record its wall time as the build or phase NAME
    python3 -m e2e.ledger report [--json PATH]   # print the ledger; with --json, also write it as one row

pytest adds its part (``record``): each tier's wall time and test count, every test's duration, and every
real vLLM server's apply -> Ready. The records go to ``$VPO_LEDGER`` (a folder; make test sets
``.cluster/ledger``). A run is *cold* when a cache entry appeared under the build cache during it (a build
really ran), *warm* otherwise; the report holds the total against the budget for that kind (cold 45 min, warm
25 min on a quiet 2-core machine). Standard library only (so is e2e/kube/build.py, whose cache it lists): ``begin``
and ``time`` run before the venv exists.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from e2e.kube.build import cache_home

BUDGET_SECONDS = {"cold": 45 * 60, "warm": 25 * 60}
SLOWEST = 15


def folder() -> Path | None:
    d = os.environ.get("VPO_LEDGER")
    return Path(d) if d else None


def cache_entries() -> list[str]:
    """Every keyed entry of the build cache (two levels: <kind>/<key>)."""
    root = cache_home()
    if not root.is_dir():
        return []
    return sorted(f"{kind.name}/{entry.name}" for kind in root.iterdir() if kind.is_dir()
                  for entry in kind.iterdir())  # fmt: skip


def record(kind: str, payload: dict[str, Any]) -> None:
    """Append one record to the ledger, when a ledger is being kept (make test)."""
    d = folder()
    if d is None:
        return
    d.mkdir(parents=True, exist_ok=True)
    with open(d / "records.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps({"kind": kind, **payload}) + "\n")


def begin(d: Path) -> None:
    d.mkdir(parents=True, exist_ok=True)
    (d / "records.jsonl").unlink(missing_ok=True)
    (d / "begin.json").write_text(json.dumps({"wall": time.time(), "cache": cache_entries()}))


def timed(name: str, argv: list[str]) -> int:
    began = time.monotonic()
    rc = subprocess.call(argv)
    record("build", {"name": name, "seconds": round(time.monotonic() - began, 1), "rc": rc})
    return rc


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"


def ledger(d: Path) -> dict[str, Any]:
    """Everything recorded since ``begin``, summed up: one row of bench/results/suite.json (less date and commit)."""
    start = json.loads((d / "begin.json").read_text())
    rows = [json.loads(line) for line in (d / "records.jsonl").read_text().splitlines()] if (d / "records.jsonl").exists() else []
    new = sorted(set(cache_entries()) - set(start["cache"]))
    tiers: dict[str, dict[str, float]] = {}
    tests: list[tuple[str, float]] = []
    starts: list[tuple[str, float]] = []
    for r in rows:
        if r["kind"] == "pytest":
            for name, t in r["tiers"].items():
                tiers[name] = t
            tests += [tuple(x) for x in r["tests"]]  # type: ignore[misc]
        elif r["kind"] == "vllm_start":
            starts.append((r["name"], r["seconds"]))
    kind = "cold" if new else "warm"
    return {
        "kind": kind,
        "total_s": round(time.time() - start["wall"], 1),
        "budget_s": BUDGET_SECONDS[kind],
        "built": new,
        "builds": {r["name"]: r["seconds"] for r in rows if r["kind"] == "build"},
        "failed_builds": [r["name"] for r in rows if r["kind"] == "build" and r["rc"] != 0],
        "tiers": tiers,
        "vllm_starts": starts,
        "slowest": sorted(tests, key=lambda x: -x[1])[:SLOWEST],
    }


def report(d: Path) -> str:
    doc = ledger(d)
    out = ["", "=" * 30 + " make test: the ledger " + "=" * 30]
    for name, seconds in doc["builds"].items():
        out.append(f"build   {name:44s} {seconds:8.1f} s{'  (failed)' if name in doc['failed_builds'] else ''}")
    for name, t in doc["tiers"].items():
        out.append(f"tier    {name:44s} {t['wall']:8.1f} s wall, {int(t['tests'])} tests")
    for name, seconds in doc["vllm_starts"]:
        out.append(f"vLLM    {name:44s} {seconds:8.1f} s apply -> Ready")
    if doc["vllm_starts"]:
        out.append(f"vLLM    {len(doc['vllm_starts'])} starts, {sum(s for _, s in doc['vllm_starts']):.1f} s apply -> Ready in all")
    out.append(f"the {SLOWEST} slowest tests (setup + call + teardown):")
    out += [f"  {seconds:7.1f} s  {nodeid}" for nodeid, seconds in doc["slowest"]]
    why = f"cache entries built during the run: {', '.join(doc['built'])}" if doc["built"] else "every build came from the cache"
    verdict = "within" if doc["total_s"] <= doc["budget_s"] else "OVER"
    out.append(f"total   {_minutes(doc['total_s'])} ({doc['total_s']:.0f} s), a {doc['kind']} run ({why}): "
               f"{verdict} the {doc['kind']} budget of {_minutes(doc['budget_s'])}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m e2e.ledger", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="verb", required=True)
    sub.add_parser("begin")
    t = sub.add_parser("time")
    t.add_argument("name")
    t.add_argument("argv", nargs=argparse.REMAINDER)
    r = sub.add_parser("report")
    r.add_argument("--json", type=Path, help="also write the ledger as JSON here")
    args = ap.parse_args(argv)
    d = folder() or Path(".cluster/ledger")
    os.environ["VPO_LEDGER"] = str(d)
    if args.verb == "begin":
        begin(d)
    elif args.verb == "time":
        return timed(args.name, args.argv[1:] if args.argv[:1] == ["--"] else args.argv)
    else:
        if not (d / "begin.json").exists():
            print(f"no ledger in {d}: make test begins one", file=sys.stderr)
            return 1
        print(report(d))
        if args.json:
            args.json.write_text(json.dumps(ledger(d), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
