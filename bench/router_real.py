"""vllm-router (api/routing.py: ROUTER_VERSION) in front of real vLLM 0.32 (the CPU runtime of e2e/realvllm), MiniLM
as examples/minilm-embeddings.yaml renders it on this machine. Two parts, one run, never part of the suite:

1. Routes. One MiniLM server, the router before it (--worker-urls, round_robin). Every route the server answers
   (vllm/router.py: served_routes, plus the deprecated /v1/score and /v1/rerank) is sent the same body directly
   and through the router: the status of each, and whether the router's answer is the server's. Checked against
   what vllm/router.py states (NOT_CARRIED, ALTERED): a row that disagrees is printed as such and the exit
   status is 1.
2. Load. Two MiniLM replicas, one of them slowed (pinned to one core beside a busy loop that takes half of it).
   The same open-loop Poisson arrivals (--seed; a share of long inputs) sent three ways, one after the other:
   spread evenly as a Service does (round robin over the two), through the router with power_of_two, and through
   the router with round_robin. Per way: p50, p99, the mean, and requests lost (non-200 or no answer within
   --timeout); and how many each replica took.

    .venv/bin/python bench/router_real.py [--rate 6] [--seconds 40] [--long-share 0.25] [--seed 11]

The router is vllm-router's wheel from PyPI, installed once into a venv of its own under the project's cache
(keyed by its version). Traffic stays on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.realvllm_calibration import _free_ports, rendered_argv, start_server  # noqa: E402
from e2e.harness.poll import wait_for  # noqa: E402
from e2e.harness.processes import stop_process  # noqa: E402
from e2e.realvllm import runtime  # noqa: E402
from e2e.router.install import ensure_router  # noqa: E402
from pooling_operator.api.routing import ROUTER_VERSION  # noqa: E402
from pooling_operator.vllm.router import ALTERED, NOT_CARRIED  # noqa: E402

WORDS = "the index holds vectors of every document a cluster of pods embedded during the night".split()
QUERY, DOCS = "what holds the vectors", ["the index holds vectors", "pods run on nodes", "a cache is warm"]


def router_bin() -> Path:
    """vllm-router's launcher from its PyPI wheel (e2e/router/install.py: installed once, printed)."""
    return ensure_router() / "bin" / "vllm-router"


def start_router(urls: list[str], policy: str) -> tuple[subprocess.Popen[bytes], str]:
    port, metrics = _free_ports(2)
    log = Path(tempfile.gettempdir()) / f"vllm-router-{policy}.log"
    argv = [str(router_bin()), "--host", "127.0.0.1", "--port", str(port), "--worker-urls", *urls, "--policy", policy,
            "--prometheus-host", "127.0.0.1", "--prometheus-port", str(metrics), "--log-level", "error"]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"vllm-router exited {proc.returncode}; see {log}")
        with urllib.request.urlopen(f"{url}/readiness", timeout=2) as r:
            return r.status == 200

    wait_for(ready, timeout=120, what="vllm-router /readiness")
    return proc, url


def post(url: str, body: dict[str, Any], timeout: float = 60) -> tuple[int, Any]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, (e.read() or b"")[:200].decode(errors="replace")


def bodies() -> dict[str, dict[str, Any]]:
    texts = ["Kubernetes schedules pods onto nodes.", "Embeddings map text to vectors."]
    return {
        "/v1/embeddings": {"model": "minilm", "input": texts, "truncate_prompt_tokens": 4},
        "/v2/embed": {"model": "minilm", "texts": texts, "embedding_types": ["float"]},
        "/pooling": {"model": "minilm", "input": texts},
        "/score": {"model": "minilm", "text_1": QUERY, "text_2": DOCS},
        "/v1/score": {"model": "minilm", "text_1": QUERY, "text_2": DOCS},
        "/rerank": {"model": "minilm", "query": QUERY, "documents": DOCS, "top_n": 2},
        "/v1/rerank": {"model": "minilm", "query": QUERY, "documents": DOCS, "top_n": 2},
        "/v2/rerank": {"model": "minilm", "query": QUERY, "documents": DOCS, "top_n": 2},
    }


def comparable(answer: Any) -> Any:
    """An answer without what differs per request (ids, timestamps, usage)."""
    if isinstance(answer, dict):
        return {k: comparable(v) for k, v in answer.items() if k not in ("id", "created", "usage", "meta")}
    if isinstance(answer, list):
        return [comparable(v) for v in answer]
    if isinstance(answer, float):
        return round(answer, 5)
    return answer


def routes_part(rt: runtime.Runtime) -> bool:
    proc, direct = start_server(rt, rendered_argv("float32"))[:2]
    router, via = start_router([direct], "round_robin")
    agree = True
    try:
        print(f"\n1. routes: MiniLM at {direct}, vllm-router {ROUTER_VERSION} at {via} (round_robin)")
        print(f"   {'route':16} {'direct':>6} {'router':>6}  same answer  vllm/router.py says        agrees")
        for route, body in bodies().items():
            (ds, da), (rs, ra) = post(direct + route, body), post(via + route, body)
            same = ds == rs == 200 and comparable(da) == comparable(ra)
            stated = "not carried" if route in NOT_CARRIED else "altered" if route in ALTERED else "carried as written"
            # altered: /v1/embeddings drops truncate_prompt_tokens, so the answer differs from the server's own
            ok = {"not carried": rs != 200, "altered": rs == 200 and not same, "carried as written": same}[stated]
            agree &= ok
            print(f"   {route:16} {ds:>6} {rs:>6}  {'yes' if same else 'no':11}  {stated:26} {'yes' if ok else 'NO'}")
    finally:
        stop_process(router, timeout=10)
        stop_process(proc, timeout=30)
    return agree


class Burner:
    """A busy loop pinned to `core` at the servers' priority: the slowed replica gets about half of that core."""

    def __init__(self, core: int) -> None:
        self.proc = subprocess.Popen(["taskset", "-c", str(core), sys.executable, "-c", "while True: pass"])

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


def pinned(proc: subprocess.Popen[bytes], core: int) -> None:
    """Pin a started server (its whole session: the API process and its engine) to one core."""
    out = subprocess.run(["pgrep", "-s", str(proc.pid)], capture_output=True, text=True).stdout.split()
    for pid in out:
        subprocess.run(["taskset", "-a", "-p", "-c", str(core), pid], capture_output=True)


def arrival_plan(rate: float, seconds: float, long_share: float, seed: int) -> list[tuple[float, str]]:
    """(time, text) of every request of a load: Poisson arrivals from `seed`, `long_share` of them 120-230 words,
    the rest 5-20 (within --max-model-len 256). bench/router_sim_check.py replays the same plan in the simulator."""
    rng = random.Random(seed)
    plan, t = [], 0.0
    while t < seconds:
        t += rng.expovariate(rate)
        n = rng.randint(120, 230) if rng.random() < long_share else rng.randint(5, 20)
        plan.append((t, " ".join(rng.choice(WORDS) for _ in range(n))))
    return plan


def load(target: Any, rate: float, seconds: float, long_share: float, seed: int, timeout: float) -> dict[str, Any]:
    """Open loop: Poisson arrivals from `seed`, each sent when due whatever the earlier ones are doing."""
    plan = arrival_plan(rate, seconds, long_share, seed)
    latencies: list[float] = []
    lost = 0
    lock = threading.Lock()

    def one(i: int, text: str) -> None:
        nonlocal lost
        url = target(i)
        began = time.monotonic()
        status, _ = post(url + "/pooling", {"model": "minilm", "input": [text]}, timeout=timeout)
        with lock:
            if status == 200:
                latencies.append(time.monotonic() - began)
            else:
                lost += 1

    start = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=64) as pool:
        futures = []
        for i, (due, text) in enumerate(plan):
            time.sleep(max(0.0, start + due - time.monotonic()))  # the arrival schedule, not synchronisation
            futures.append(pool.submit(one, i, text))
        for f in futures:
            f.result()
    latencies.sort()
    q = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else [float("nan")] * 99
    return {"sent": len(plan), "lost": lost, "p50": q[49], "p99": q[98], "mean": statistics.fmean(latencies) if latencies else None}


def served_counts(urls: list[str]) -> list[float]:
    out = []
    for url in urls:
        with urllib.request.urlopen(url + "/metrics", timeout=5) as r:
            text = r.read().decode()
        out.append(sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("vllm:request_success_total")))
    return out


def load_part(rt: runtime.Runtime, a: argparse.Namespace) -> list[dict[str, Any]]:
    fast, fast_url = start_server(rt, rendered_argv("float32"))[:2]
    slow, slow_url = start_server(rt, rendered_argv("float32"))[:2]
    pinned(fast, 0)
    pinned(slow, 1)
    burner = Burner(1)
    urls = [fast_url, slow_url]
    rows = []
    try:
        print(f"\n2. load: replica 0 at {fast_url} (core 0), replica 1 at {slow_url} (core 1 beside a busy loop); "
              f"{a.rate}/s for {a.seconds:.0f} s, {a.long_share:.0%} long inputs, seed {a.seed}")  # fmt: skip
        ways: list[tuple[str, str | None]] = [("Service (even)", None), ("router power_of_two", "power_of_two"),
                                               ("router round_robin", "round_robin")]
        for name, policy in ways:
            before = served_counts(urls)
            router = None
            if policy is None:
                target = lambda i: urls[i % 2]  # noqa: E731  kube-proxy's even spreading, as round robin
            else:
                router, via = start_router(urls, policy)
                target = lambda i, via=via: via  # noqa: E731
            try:
                row = load(target, a.rate, a.seconds, a.long_share, a.seed, a.timeout)
            finally:
                if router is not None:
                    stop_process(router, timeout=10)
            after = served_counts(urls)
            row["took"] = [int(x - y) for x, y in zip(after, before, strict=True)]
            row["way"] = name
            rows.append(row)
            print(f"   {name:22} sent {row['sent']:4} lost {row['lost']:3}  p50 {row['p50']:.3f} s  p99 {row['p99']:.3f} s  "
                  f"mean {row['mean']:.3f} s  replica 0/1 took {row['took'][0]}/{row['took'][1]}", flush=True)  # fmt: skip
    finally:
        burner.stop()
        stop_process(fast, timeout=30)
        stop_process(slow, timeout=30)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=float, default=6.0, help="arrivals per second")
    ap.add_argument("--seconds", type=float, default=40.0)
    ap.add_argument("--long-share", type=float, default=0.25)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--timeout", type=float, default=30.0, help="a request unanswered this long is lost")
    ap.add_argument("--skip-load", action="store_true")
    ap.add_argument("--json", type=Path, help="write the figures here")
    a = ap.parse_args()
    rt = runtime.find(install_missing=True)
    agree = routes_part(rt)
    rows = [] if a.skip_load else load_part(rt, a)
    if a.json:
        a.json.write_text(json.dumps({"router": ROUTER_VERSION, "routes_agree": agree, "load": rows, "args": vars(a) | {"json": str(a.json)}}, indent=1))
    print(f"\nvllm/router.py's table {'agrees with' if agree else 'DISAGREES with'} the real server and router")
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
