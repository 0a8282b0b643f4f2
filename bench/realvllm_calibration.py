"""The simulator's service model next to real vLLM on this machine: a short closed-loop sweep.

Starts real vLLM 0.32 (the CPU runtime of e2e/realvllm) with the command line the operator renders for
examples/minilm-embeddings.yaml (changed only where this machine forces it: runner_process.MACHINE_OVERRIDES;
``engine.dtype: float32`` like the service model's fit, see --dtype; and the port), runs c clients in a closed loop (each with one request in flight, one short sentence per
request) at each concurrency, and prints the measured throughput and latencies next to what
``pooling_operator.autoscaling.simulator.servicemodel`` predicts for the same server settings (max_num_seqs,
max_num_batched_tokens from the argv) and the same measured mean prompt length.

    .venv/bin/python bench/realvllm_calibration.py [--concurrency 1,8,32] [--seconds 20] [--url URL]

Prints figures; never gates anything. Results are recorded in bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import json
import math
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import yaml
from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from e2e.harness.poll import wait_for  # noqa: E402
from e2e.harness.processes import _free_ports, stop_process  # noqa: E402
from e2e.realvllm import runtime  # noqa: E402
from e2e.realvllm.runner_process import on_this_machine  # noqa: E402
from pooling_operator.autoscaling.simulator.servicemodel import Replica, ServiceParams  # noqa: E402
from pooling_operator.vllm import metrics as m  # noqa: E402

WORDS = "the quick brown fox jumps over a lazy dog while kubernetes schedules pods onto nodes".split()


def rendered_argv(dtype: str | None) -> list[str]:
    doc = next(
        d for d in yaml.safe_load_all((REPO / "examples" / "minilm-embeddings.yaml").read_text()) if d and d.get("kind")
    )
    doc = on_this_machine(doc)
    if dtype:
        doc["spec"]["engine"]["dtype"] = dtype
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        yaml.safe_dump(doc, f)
    out = subprocess.run(
        [sys.executable, "-m", "pooling_operator", "render", "--vllm-args", f.name],
        check=True, capture_output=True, text=True, cwd=REPO,
    ).stdout.splitlines()  # fmt: skip
    os.unlink(f.name)
    return shlex.split(out[1])


def flag(argv: list[str], name: str, default: int) -> int:
    return int(argv[argv.index(name) + 1]) if name in argv else default


def start_server(rt: runtime.Runtime, argv: list[str]) -> tuple[subprocess.Popen[bytes], str, float]:
    port = _free_ports(1)[0]
    argv = list(argv)
    argv[argv.index("--port") + 1] = str(port)
    argv[argv.index("serve") + 1] = str(rt.model_dir(runtime.MINILM))  # the prepared folder (offline)
    argv[0] = str(rt.bin / "vllm")
    log = Path(tempfile.gettempdir()) / "vllm-calibration.log"
    print(f"starting: {shlex.join(argv)}\n  log: {log}", flush=True)
    began = time.monotonic()
    proc = subprocess.Popen(
        argv, env={**os.environ, **rt.env()}, stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True
    )
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"vLLM exited {proc.returncode}; see {log}")
        import urllib.request

        with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
            return r.status == 200

    wait_for(healthy, timeout=900, what="vLLM /health")
    return proc, url, time.monotonic() - began


def scrape(text: str) -> dict[str, float]:
    out = {"success": 0.0, "tokens": 0.0, "e2e_sum": 0.0, "e2e_count": 0.0}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == m.SUCCESS:
                out["success"] += s.value
            elif s.name == m.PROMPT_TOKENS:
                out["tokens"] += s.value
            elif s.name == m.E2E_LATENCY + "_sum":
                out["e2e_sum"] += s.value
            elif s.name == m.E2E_LATENCY + "_count":
                out["e2e_count"] += s.value
    return out


async def closed_loop(url: str, c: int, seconds: float, warmup: float = 3.0) -> dict[str, float]:
    latencies: list[float] = []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as s:
        t_start = time.monotonic()
        t_measure, t_end = t_start + warmup, t_start + warmup + seconds
        before: dict[str, float] = {}

        async def worker(w: int) -> None:
            i = 0
            while time.monotonic() < t_end:
                text = f"{' '.join(WORDS[(w + i) % 5 : (w + i) % 5 + 9])} number {w}-{i}."
                t0 = time.monotonic()
                async with s.post(f"{url}/v1/embeddings", json={"model": "minilm", "input": text}) as r:
                    await r.read()
                    assert r.status == 200, r.status
                t1 = time.monotonic()
                if t0 >= t_measure and t1 <= t_end:
                    latencies.append(t1 - t0)
                i += 1

        async def metrics_at(t: float) -> dict[str, float]:
            await asyncio.sleep(max(0.0, t - time.monotonic()))
            async with s.get(f"{url}/metrics") as r:
                return scrape(await r.text())

        tasks = [asyncio.create_task(worker(w)) for w in range(c)]
        before = await metrics_at(t_measure)
        after = await metrics_at(t_end)
        await asyncio.gather(*tasks)
    done = after["success"] - before["success"]
    latencies.sort()
    return {
        "rps": len(latencies) / seconds,
        "client_mean_ms": 1000 * sum(latencies) / len(latencies),
        "client_p99_ms": 1000 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))],
        "server_mean_ms": 1000 * (after["e2e_sum"] - before["e2e_sum"]) / max(1.0, after["e2e_count"] - before["e2e_count"]),
        "tokens": (after["tokens"] - before["tokens"]) / max(1.0, done),
    }


def simulate(params: ServiceParams, c: int, tokens: int, seconds: float, warmup: float = 3.0, dt: float = 0.0005) -> dict[str, float]:
    """The service model under the same closed loop: a client resubmits when its answer (plus the HTTP
    overhead) is back. ``dt`` < http_overhead_s / 2 keeps submissions in time order."""
    rep = Replica(params, seed=1)
    half = params.http_overhead_s / 2
    pending = [(half * (1 + k / max(1, c)), k) for k in range(c)]  # (arrival at the server, client)
    heapq.heapify(pending)
    sent: dict[float, list[int]] = {}  # arrival time at the server -> clients (a batch finishes together)
    latencies, server = [], []
    t, end = 0.0, warmup + seconds
    while t < end:
        t += dt
        while pending and pending[0][0] <= t:
            arrival, k = heapq.heappop(pending)
            rep.submit(arrival, tokens)
            sent.setdefault(arrival, []).append(k)
        for done in rep.advance(t):
            k = sent[done.arrival].pop()
            back = done.finish + half
            t0 = done.arrival - half
            if t0 >= warmup and back <= end:
                latencies.append(back - t0)
                server.append(done.latency)
            heapq.heappush(pending, (back + half, k))
    latencies.sort()
    return {
        "rps": len(latencies) / seconds,
        "client_mean_ms": 1000 * sum(latencies) / len(latencies),
        "client_p99_ms": 1000 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))],
        "server_mean_ms": 1000 * sum(server) / len(server),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--concurrency", default="1,8,32")
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--url", help="use a running MiniLM server instead of starting one")
    p.add_argument("--dtype", default="float32", help="engine.dtype set in the spec before rendering ('' keeps the "
                   "example's auto, which vLLM resolves to float16 on CPU); the service model was fitted on float32")  # fmt: skip
    p.add_argument("--client-core", type=int, default=1, help="pin the load client to this core (-1: no pinning)")
    a = p.parse_args()
    levels = [int(x) for x in a.concurrency.split(",")]
    argv = rendered_argv(a.dtype or None)
    params = ServiceParams(
        max_num_seqs=flag(argv, "--max-num-seqs", 128), max_num_batched_tokens=flag(argv, "--max-num-batched-tokens", 2048)
    )
    proc = None
    if a.url:
        url, start_s = a.url, math.nan
    else:
        proc, url, start_s = start_server(runtime.find(install_missing=True), argv)
        print(f"vLLM answered /health {start_s:.0f} s after start", flush=True)
    if a.client_core >= 0 and a.client_core < (os.cpu_count() or 1):
        # like the reference sweep (load-curve.md): the client on core 1, off vLLM's worker core 0
        os.sched_setaffinity(0, {a.client_core})
    rows = []
    try:
        asyncio.run(closed_loop(url, 4, 5.0, warmup=0.0))  # warm-up, discarded
        for c in levels:
            real = asyncio.run(closed_loop(url, c, a.seconds))
            sim = simulate(params, c, round(real["tokens"]), a.seconds)
            rows.append({"c": c, "real": real, "sim": sim})
            print(json.dumps(rows[-1]), flush=True)
    finally:
        stop_process(proc, 60)
    print(f"\nserver settings: max_num_seqs={params.max_num_seqs} max_num_batched_tokens={params.max_num_batched_tokens}")
    print(f"{'c':>3} {'tok':>5} | {'req/s real':>10} {'sim':>7} {'ratio':>6} | {'client mean ms':>14} {'sim':>7} | "
          f"{'client p99 ms':>13} {'sim':>7} | {'server mean ms':>14} {'sim':>7}")  # fmt: skip
    for r in rows:
        re, si = r["real"], r["sim"]
        print(f"{r['c']:>3} {re['tokens']:>5.1f} | {re['rps']:>10.1f} {si['rps']:>7.1f} {si['rps'] / re['rps']:>6.2f} | "
              f"{re['client_mean_ms']:>14.1f} {si['client_mean_ms']:>7.1f} | {re['client_p99_ms']:>13.1f} "
              f"{si['client_p99_ms']:>7.1f} | {re['server_mean_ms']:>14.1f} {si['server_mean_ms']:>7.1f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
