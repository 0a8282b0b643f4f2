"""What one service costs the operator in memory, by where it is held: the profile issue 48 asks for before
10,000 services.

The runtime (runtime/core.py) and the real reconcile run against tests/test_runtime.py's fake API server (no
control plane: the figures are the operator's own objects, not kopf's, the HTTP client's or the informers'
buffers). N PoolingServices are created and reconciled, their children land in the stores as the watch would
place them, then tracemalloc says how many bytes are held per service, grouped by the file that allocated
them; and the stored objects are measured as JSON to say which fields take the room. Prints figures; never
gates anything.

    .venv/bin/python bench/reconcile/cache_cost.py                # N = 1,000 and 4,000, ~2 min
    .venv/bin/python bench/reconcile/cache_cost.py -n 500 -n 2000
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import gc
import json
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "operator"), str(ROOT)]

from tests.test_runtime import World  # noqa: E402


async def drained(world: World) -> None:
    """Every queued reconcile done (tracemalloc slows them: no 30 s cap as in the tests)."""
    await asyncio.wait_for(world.runtime.queue.join(), 1800)


def group(path: str) -> str:
    """A traceback's file as the part of the operator (or library) it is."""
    p = Path(path)
    if "pooling_operator" in p.parts:
        i = p.parts.index("pooling_operator")
        return "/".join(p.parts[i + 1 : i + 3])
    if "site-packages" in p.parts:
        return p.parts[p.parts.index("site-packages") + 1]
    return p.name


def field_bytes(objs: list[dict[str, Any]]) -> dict[str, int]:
    """Bytes of JSON per top-level and metadata field, summed over ``objs``."""
    out: collections.Counter[str] = collections.Counter()
    for obj in objs:
        for key, value in obj.items():
            if key == "metadata":
                for mk, mv in value.items():
                    out[f"metadata.{mk}"] += len(json.dumps(mv, separators=(",", ":")))
            else:
                out[key] += len(json.dumps(value, separators=(",", ":"), default=str))
    return dict(out.most_common())


async def measure(n: int) -> dict[str, Any]:
    world = World(workers=8)
    await world.runtime.start()
    world.runtime.cache_synced()
    gc.collect()
    tracemalloc.start(30)
    base = tracemalloc.take_snapshot()
    began = time.perf_counter()
    for i in range(n):
        world.create(f"svc-{i:05d}", {"autoscaling": {"minReplicas": 1, "maxReplicas": 4}} if i % 10 == 0 else None)
        if i % 200 == 199:
            await drained(world)
    await drained(world)
    world.show_writes()  # the watch catches up: children in the stores, our write memory released
    await drained(world)
    took = time.perf_counter() - began
    gc.collect()
    snap = tracemalloc.take_snapshot()
    tracemalloc.stop()
    by: collections.Counter[str] = collections.Counter()
    for stat in snap.compare_to(base, "traceback"):
        frames = [f.filename for f in stat.traceback]
        # the innermost frame of ours or of the fake API server (a traceback runs from the oldest frame)
        mine = next((f for f in reversed(frames) if "pooling_operator" in f or f.endswith("test_runtime.py")), frames[-1])
        where = ("the fake API server's answers: children as the watch hands them over" if mine.endswith("test_runtime.py")
                 else group(mine))
        by[where] += stat.size_diff
    total = sum(by.values())
    children = {kind: [o for objs in store.values() for o in objs] for kind, store in world.children.items()}
    owners = [o for objs in world.owners.values() for o in objs]
    built = world.runtime.reconciles.memory.built
    await world.runtime.stop()
    return {
        "services": n, "seconds": round(took, 1), "bytes_per_service": round(total / n),
        "by_place": {k: round(v / n) for k, v in by.most_common(14)},
        "stored_json_bytes_per_service": {"owner": round(sum(len(json.dumps(o)) for o in owners) / n),
                                          **{k: round(sum(len(json.dumps(o)) for o in v) / n) for k, v in children.items()}},
        "owner_fields": {k: round(v / n) for k, v in list(field_bytes(owners).items())[:8]},
        "deployment_fields": {k: round(v / n) for k, v in list(field_bytes(children.get("Deployment", [])).items())[:8]},
        "built_plans": len(built),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, action="append", help="services (repeatable; default 1000 and 4000)")
    ap.add_argument("--out", type=Path, help="write the figures here as JSON")
    args = ap.parse_args()
    rows = []
    for n in args.n or [1000, 4000]:
        row = asyncio.run(measure(n))
        rows.append(row)
        print(f"\nN = {n}: {row['bytes_per_service'] / 1024:.1f} KiB a service held ({row['seconds']} s to reconcile all under tracemalloc: 1.2 ms a service without it)")
        for where, b in row["by_place"].items():
            print(f"  {b / 1024:8.1f} KiB  {where}")
        print(f"  stored JSON per service: {row['stored_json_bytes_per_service']}")
        print(f"  the owner's largest fields (JSON bytes): {row['owner_fields']}")
        print(f"  the Deployment's largest fields (JSON bytes): {row['deployment_fields']}")
    if len(rows) > 1:
        a, b = rows[0], rows[-1]
        print(f"\nper service: {a['bytes_per_service'] / 1024:.1f} KiB at {a['services']}, {b['bytes_per_service'] / 1024:.1f} KiB "
              f"at {b['services']} ({b['bytes_per_service'] / a['bytes_per_service']:.2f}x: flat is 1.0)")
    if args.out:
        args.out.write_text(json.dumps({"measured": time.strftime("%Y-%m-%d"), "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
