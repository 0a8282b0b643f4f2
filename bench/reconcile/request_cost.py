"""What one API request costs the operator's process: the Kube facade (k8s/api.py) sending GETs to a real API server,
with kubernetes_asyncio's session as it comes (trusting the environment: aiohttp reads ~/.netrc and the proxy
variables for every request, each in a worker thread) against the session made by `env_proxy_once` (the proxy looked
up once). Rounds alternate between the two in one process against one control plane; each round sends --requests GETs
from --workers concurrent tasks over a rotation of paths (objects that exist, a list, one that does not), and the
figure is the process's CPU time (all its threads) per request, with the wall time beside it.

    .venv/bin/python bench/reconcile/request_cost.py                    # ~1 min: 4 rounds of 3,000 GETs each way
    .venv/bin/python bench/reconcile/request_cost.py --rounds 6 --requests 5000 --out FILE
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "operator")]

from kubernetes_asyncio import client, config  # noqa: E402

from e2e.harness.config import ClusterConfig  # noqa: E402
from e2e.kube.controlplane import ControlPlane  # noqa: E402
from pooling_operator.k8s import api  # noqa: E402
from pooling_operator.k8s.api import ApiError  # noqa: E402

PATHS = (
    "/api/v1/namespaces/default",
    "/api/v1/namespaces/kube-system",
    "/api/v1/namespaces/default/configmaps",
    "/api/v1/namespaces/default/configmaps/kube-root-ca.crt",
    "/api/v1/namespaces/default/services/kubernetes",
    "/api/v1/namespaces/default/configmaps/not-there",
)


async def one_round(kubeconfig: Path, once: bool, requests: int, workers: int) -> dict[str, float]:
    configuration = client.Configuration()
    await config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    real = api.env_proxy_once
    if not once:
        api.env_proxy_once = lambda rest, host: None  # the session as kubernetes_asyncio makes it
    kube = api.Kube(configuration)
    try:
        await kube.request("GET", PATHS[0])  # connect (and, for `once`, look the proxy up) outside the timing
    finally:
        api.env_proxy_once = real
    sent = 0

    async def worker() -> None:
        nonlocal sent
        while sent < requests:
            path = PATHS[sent % len(PATHS)]
            sent += 1
            try:
                await kube.request("GET", path)
            except ApiError:
                pass  # the object that does not exist: a 404 is a request too

    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(workers)))
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    await kube.close()
    return {"cpu_us_per_request": cpu / requests * 1e6, "wall_us_per_request": wall / requests * 1e6}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=4, help="rounds each way, alternating (default 4)")
    ap.add_argument("--requests", type=int, default=3000, help="GETs per round (default 3,000)")
    ap.add_argument("--workers", type=int, default=16, help="concurrent tasks (default 16)")
    ap.add_argument("--out", type=Path, help="write every round and the medians as JSON here")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="vpo-bench-requests-") as run_dir:
        cp = ControlPlane(ClusterConfig(gpu_nodes=0, cpu_nodes=1), run_dir=run_dir).start()
        try:
            rows: list[dict[str, Any]] = []
            for r in range(args.rounds):
                for once in ((False, True) if r % 2 == 0 else (True, False)):
                    row = {"round": r, "session": "proxy once" if once else "trust_env"}
                    row.update(asyncio.run(one_round(cp.kubeconfig, once, args.requests, args.workers)))
                    print(f"round {r} {row['session']:>10}: {row['cpu_us_per_request']:7.1f} us CPU, "
                          f"{row['wall_us_per_request']:7.1f} us wall per request", flush=True)  # fmt: skip
                    rows.append(row)
        finally:
            cp.stop()
    medians = {
        s: {k: statistics.median(r[k] for r in rows if r["session"] == s) for k in ("cpu_us_per_request", "wall_us_per_request")}
        for s in ("trust_env", "proxy once")
    }
    for s, m in medians.items():
        print(f"median {s:>10}: {m['cpu_us_per_request']:7.1f} us CPU, {m['wall_us_per_request']:7.1f} us wall per request")
    ratio = medians["proxy once"]["cpu_us_per_request"] / medians["trust_env"]["cpu_us_per_request"]
    print(f"CPU per request, proxy once / trust_env: {ratio:.2f}")
    if args.out:
        args.out.write_text(json.dumps({"rounds": rows, "medians": medians, "cpu_ratio": ratio, "args": vars(args) | {"out": str(args.out)}}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
