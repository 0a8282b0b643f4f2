"""The simulator's service model measured on a real vLLM server: a sweep, a fit, and a check.

Starts real vLLM 0.32 (the CPU runtime of e2e/realvllm) with the command line the operator renders for
examples/minilm-embeddings.yaml (changed only where this machine forces it: runner_process.MACHINE_OVERRIDES;
``engine.dtype: float32`` like the service model's fit, see --dtype; and the port), or uses the server at
--url. It runs c clients in a closed loop (each with one request in flight, one short sentence per request)
at each closed-loop level and Poisson arrivals at shares of the capacity it measured, fits the service model
(pooling_operator.autoscaling.simulator.calibrate: fit on the closed loop, fit_open on the open loops too) and
checks it: open-loop p50 and p99 within 25 %, closed-loop requests/s within 15 %, on the check levels of this
run or, with --check-run FILE, on every level of another run the fit never saw. --save FILE keeps the levels so
a fit reruns without vLLM (--measurements FILE). With --write FILE the fitted parameters go to a YAML file
that ``pooling-operator simulate --service-model FILE`` reads.

    .venv/bin/python bench/realvllm_calibration.py --write bench/results/service-model.yaml
    .venv/bin/python bench/realvllm_calibration.py --url http://127.0.0.1:18200 --write /tmp/model.yaml
    .venv/bin/python bench/realvllm_calibration.py --measurements A.json --fit 1,4,8,16,32 --open-fit all \
        --check-run B.json --write bench/results/service-model-minilm-open.yaml

Prints figures and exits 1 when a check misses; never gates the test suite. Results: bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import math
import os
import random
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from e2e.harness.poll import wait_for  # noqa: E402
from e2e.harness.processes import _free_ports, stop_process  # noqa: E402
from e2e.podrunner.runner_process import UNIPROC_ENV, on_this_machine  # noqa: E402
from e2e.realvllm import runtime  # noqa: E402
from pooling_operator.autoscaling.simulator.calibrate import FIELDS, Point, fit, fit_open, to_file, within  # noqa: E402
from pooling_operator.autoscaling.simulator.calibrate import closed_loop as closed_loop_model  # noqa: E402
from pooling_operator.autoscaling.simulator.calibrate import open_loop as open_loop_model  # noqa: E402
from pooling_operator.autoscaling.simulator.servicemodel import ServiceParams  # noqa: E402
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


def start_server(rt: runtime.Runtime, argv: list[str], cpu_worker: bool = False) -> tuple[subprocess.Popen[bytes], str, float]:
    port = _free_ports(1)[0]
    argv = list(argv)
    argv[argv.index("--port") + 1] = str(port)
    argv[argv.index("serve") + 1] = str(rt.model_dir(runtime.MINILM))  # the prepared folder (offline)
    argv[0] = str(rt.bin / "vllm")
    log = Path(tempfile.gettempdir()) / "vllm-calibration.log"
    print(f"starting: {shlex.join(argv)}\n  log: {log}", flush=True)
    began = time.monotonic()
    proc = subprocess.Popen(
        argv, env={**os.environ, **rt.env(), **({} if cpu_worker else UNIPROC_ENV)}, stdout=log.open("wb"),
        stderr=subprocess.STDOUT, start_new_session=True
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
    """The counters a level is measured by (sums over engines), from one /metrics text."""
    wanted = {
        m.SUCCESS: "success", m.PROMPT_TOKENS: "tokens", m.E2E_LATENCY + "_sum": "e2e_sum", m.E2E_LATENCY + "_count": "e2e_count",
        m.QUEUE_TIME + "_sum": "queue_sum", m.INFERENCE_TIME + "_sum": "inference_sum",
        m.INFERENCE_TIME + "_count": "inference_count", m.ITERATION_TOKENS + "_sum": "step_tokens_sum",
        m.ITERATION_TOKENS + "_count": "steps",
    }
    out = dict.fromkeys(wanted.values(), 0.0)
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name in wanted:
                out[wanted[s.name]] += s.value
    return out


def point(latencies: list[float], before: dict[str, float], after: dict[str, float], seconds: float) -> tuple[Point, float]:
    """The level as calibrate.Point, and its client p99."""
    d = {k: after[k] - before[k] for k in after}
    latencies.sort()
    measured = d["inference_count"] > 0 and d["steps"] > 0
    return Point(
        rps=len(latencies) / seconds,
        client_mean_s=statistics.fmean(latencies), client_p50_s=statistics.median(latencies),
        server_mean_s=d["e2e_sum"] / max(1.0, d["e2e_count"]), tokens=d["tokens"] / max(1.0, d["success"]),
        queue_s=d["queue_sum"] / d["inference_count"] if measured else None,
        inference_s=d["inference_sum"] / d["inference_count"] if measured else None,
        step_tokens=d["step_tokens_sum"] / d["steps"] if measured else None,
        client_p99_s=latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))],
    ), latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]


def cpu_seconds(root: int | None) -> dict[str, float]:
    """CPU seconds (user + system) so far of the server's processes: the one started and every descendant, by
    name (vLLM names its engine process VLLM::EngineCore); {} without a process of ours."""
    if root is None:
        return {}
    tick = os.sysconf("SC_CLK_TCK")
    stats: dict[int, tuple[int, str, float]] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            raw = (d / "stat").read_text()
        except OSError:
            continue
        name = raw[raw.index("(") + 1 : raw.rindex(")")]
        fields = raw[raw.rindex(")") + 2 :].split()
        stats[int(d.name)] = (int(fields[1]), name, (int(fields[11]) + int(fields[12])) / tick)
    ours, frontier = {root}, [root]
    while frontier:
        parent = frontier.pop()
        for pid, (ppid, _, _) in stats.items():
            if ppid == parent and pid not in ours:
                ours.add(pid)
                frontier.append(pid)
    out: dict[str, float] = {}
    for pid in ours:
        if pid in stats:
            label = "api" if pid == root else stats[pid][1]
            out[label] = out.get(label, 0.0) + stats[pid][2]
    return out


def text_for(w: int, i: int) -> str:
    return f"{' '.join(WORDS[(w + i) % 5 : (w + i) % 5 + 9])} number {w}-{i}."


async def _embed(s: aiohttp.ClientSession, url: str, text: str) -> None:
    for attempt in (1, 2):
        try:
            async with s.post(f"{url}/v1/embeddings", json={"model": "minilm", "input": text}) as r:
                await r.read()
                assert r.status == 200, r.status
                return
        except aiohttp.ServerDisconnectedError:
            # a kept-alive connection the server closed as it was reused: the request never reached it
            if attempt == 2:
                raise


async def _metrics_at(s: aiohttp.ClientSession, url: str, t: float) -> dict[str, float]:
    await asyncio.sleep(max(0.0, t - time.monotonic()))
    async with s.get(f"{url}/metrics") as r:
        return scrape(await r.text())


async def closed_loop(url: str, c: int, seconds: float, warmup: float = 3.0) -> tuple[Point, float]:
    """c clients, each sending its next request when the last is answered."""
    latencies: list[float] = []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as s:
        t_start = time.monotonic()
        t_measure, t_end = t_start + warmup, t_start + warmup + seconds

        async def worker(w: int) -> None:
            i = 0
            while time.monotonic() < t_end:
                t0 = time.monotonic()
                await _embed(s, url, text_for(w, i))
                t1 = time.monotonic()
                if t0 >= t_measure and t1 <= t_end:
                    latencies.append(t1 - t0)
                i += 1

        tasks = [asyncio.create_task(worker(w)) for w in range(c)]
        before = await _metrics_at(s, url, t_measure)
        after = await _metrics_at(s, url, t_end)
        await asyncio.gather(*tasks)
    return point(latencies, before, after, seconds)


async def open_loop(url: str, rate: float, seconds: float, warmup: float = 3.0, seed: int = 1) -> tuple[Point, float]:
    """Poisson arrivals at `rate` per second (bounded: at most rate x (warmup + seconds) x 1.5 requests): rps is
    what was answered within the measured seconds, the latencies those of every request sent in them."""
    rng = random.Random(seed)
    latencies: list[float] = []
    served: list[float] = []  # when each answer came back
    limit = int(rate * (warmup + seconds) * 1.5) + 10
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120),
                                     connector=aiohttp.TCPConnector(limit=0)) as s:
        t_start = time.monotonic()
        t_measure, t_end = t_start + warmup, t_start + warmup + seconds

        async def one(i: int, measured: bool) -> None:
            t0 = time.monotonic()
            await _embed(s, url, text_for(i % 97, i))
            t1 = time.monotonic()
            served.append(t1)
            if measured:
                latencies.append(t1 - t0)

        before_read = asyncio.create_task(_metrics_at(s, url, t_measure))
        tasks, at = [], t_start
        for i in range(limit):
            at += rng.expovariate(rate)
            if at >= t_end:
                break
            await asyncio.sleep(max(0.0, at - time.monotonic()))
            tasks.append(asyncio.create_task(one(i, at >= t_measure)))
        await asyncio.gather(*tasks)
        before = await before_read
        after = await _metrics_at(s, url, time.monotonic())
    level, p99 = point(latencies, before, after, seconds)
    return dataclasses.replace(level, rps=sum(t_measure <= t < t_end for t in served) / seconds), p99


def levels(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def shares(text: str) -> list[float]:
    if text == "all":
        return [0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95]
    return [float(x) for x in text.split(",") if x.strip()]


def scaled(params: ServiceParams, slower: float) -> ServiceParams:
    """Every time the model spends on a request times `slower` (a slower or faster run of the same machine)."""
    return dataclasses.replace(
        params, step_base_s=params.step_base_s * slower, step_per_token_s=params.step_per_token_s * slower,
        api_s=params.api_s * slower, server_overhead_s=params.server_overhead_s * slower,
        http_overhead_s=params.http_overhead_s * slower)


def load(path: Path) -> tuple[dict[str, Any], dict[str, float], dict[str, Any], dict[str, Any]]:
    """A --save file: its levels (name -> (Point, p99)), open-loop rates, CPU per level, and the rest."""
    saved = json.loads(path.read_text())
    measured = {name: (Point(**m["point"]), m["p99"]) for name, m in saved["levels"].items()}
    return measured, saved["rates"], saved["cpu"], saved


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--fit", type=levels, default=[1, 8, 32], metavar="C,C,..", help="closed-loop levels fitted (default 1,8,32)")
    p.add_argument("--check", type=levels, default=[4, 16], metavar="C,C,..", help="closed-loop levels checked (default 4,16)")
    p.add_argument("--open-fit", type=shares, default=[0.6, 0.8, 0.9], metavar="SHARE,..",
                   help="open loops fitted, at these shares of the measured capacity (default 0.6,0.8,0.9)")
    p.add_argument("--open-check", "--open-loop", type=shares, default=[0.5, 0.7, 0.85, 0.95], metavar="SHARE,..",
                   help="open loops checked, at these shares of the measured capacity (default 0.5,0.7,0.85,0.95)")
    p.add_argument("--seconds", type=float, default=20.0, help="measured seconds per level (after 3 s of warm-up)")
    p.add_argument("--url", help="use a running MiniLM server instead of starting one")
    p.add_argument("--measurements", type=Path, metavar="FILE",
                   help="fit and check the levels measured before (a --save file) instead of measuring")
    p.add_argument("--check-run", type=Path, metavar="FILE",
                   help="check the fit on every level of another run (a --save file: fresh arrivals the fit never saw) "
                        "instead of on the check levels of this one; fit on every level here with --fit 1,4,8,16,32 --open-fit all")
    p.add_argument("--save", type=Path, metavar="FILE", help="write every measured level here (JSON), to refit without vLLM")
    p.add_argument("--write", type=Path, metavar="FILE", help="write the fitted parameters here (YAML, simulate's flag names)")
    p.add_argument("--dtype", default="float32", help="engine.dtype set in the spec before rendering ('' keeps the "
                   "example's auto, which vLLM resolves to float16 on CPU); the service model was fitted on float32")  # fmt: skip
    p.add_argument("--client-core", type=int, default=1, help="pin the load client to this core (-1: no pinning)")
    p.add_argument("--cpu-worker", action="store_true", help="let the CPU platform run the model in a worker process of its "
                   "own (vLLM's CPU default) instead of in the engine core, as the pod runner and a GPU server run it")
    a = p.parse_args()
    argv = rendered_argv(a.dtype or None)
    base = ServiceParams(
        max_num_seqs=flag(argv, "--max-num-seqs", 128), max_num_batched_tokens=flag(argv, "--max-num-batched-tokens", 2048)
    )
    began = time.perf_counter()
    if a.measurements:
        measured, rates, cpu, saved = load(a.measurements)
        base = dataclasses.replace(base, startup_s=saved["startup_s"])
        source = f"{a.measurements} (measured {saved['measured']})"
    else:
        measured, rates, cpu, start_s = measure(a, argv)
        if not math.isnan(start_s):
            base = dataclasses.replace(base, startup_s=round(start_s, 1))
        source = a.url or "bench/realvllm_calibration.py (MiniLM, real vLLM 0.32)"
        if a.save:
            a.save.write_text(json.dumps({
                "measured": time.strftime("%Y-%m-%d"), "server": source, "argv": argv, "startup_s": base.startup_s,
                "model in the engine core": not a.cpu_worker, "rates": rates, "cpu": cpu,
                "levels": {name: {"point": dataclasses.asdict(pt), "p99": p99} for name, (pt, p99) in measured.items()},
            }, indent=1) + "\n")
            print(f"wrote {a.save}")
    closed = {int(n[2:]): pt for n, (pt, _) in measured.items() if n.startswith("c=")}
    tokens = round(statistics.fmean(closed[c].tokens for c in a.fit))
    closed_fit = fit({c: closed[c] for c in a.fit}, base)
    open_fit = {rates[n]: pt for n, (pt, _) in measured.items() if n.startswith("open") and float(n.split()[1]) in a.open_fit}
    api_cpu = [cpu[n]["api"] / pt.rps for n, (pt, _) in measured.items()
               if n.startswith("open") and "api" in cpu.get(n, {}) and pt.rps > 0 and float(n.split()[1]) in a.open_fit]
    fitted = fit_open(closed_fit, {c: closed[c] for c in a.fit}, open_fit, statistics.fmean(api_cpu) if api_cpu else None,
                      a.seconds) if open_fit else closed_fit
    if api_cpu:
        print(f"the API process's CPU per request at the open-loop fit levels: {1000 * statistics.fmean(api_cpu):.2f} ms")

    def model(params: ServiceParams, name: str, at: dict[str, float] = rates) -> Point:
        if name.startswith("c="):
            return closed_loop_model(params, int(name[2:]), tokens, a.seconds)
        return open_loop_model(params, at[name], tokens, a.seconds)

    def check(params: ServiceParams, name: str, real: Point, at: dict[str, float] = rates) -> tuple[bool, str]:
        """The issue's goals: open-loop p50 and p99 within 25 %, closed-loop requests/s within 15 %."""
        if name.startswith("open"):
            return within(model(params, name, at), real, p50=0.25, p99=0.25)
        return within(model(params, name, at), real, p50=math.inf)

    print(f"\nserver settings: max_num_seqs={base.max_num_seqs} max_num_batched_tokens={base.max_num_batched_tokens}; "
          f"{tokens} tokens per request; measured capacity {max(pt.rps for pt in closed.values()):.1f} req/s")
    print(f"fitted on {', '.join(f'c={c}' for c in a.fit)}: " + ", ".join(
        f"{k}={getattr(fitted, f.name):.6g}" for k, f in FIELDS.items() if getattr(fitted, f.name) != getattr(base, f.name)))
    print(f"capacity at {tokens} tokens: fitted {fitted.capacity_rps(tokens):.1f} req/s, default model {ServiceParams().capacity_rps(tokens):.1f}")
    print(f"\n{'level':>16} {'role':>5} | {'req/s real':>10} {'fit':>7} | {'p50 ms real':>11} {'fit':>7} | "
          f"{'p99 ms real':>11} {'fit':>7} | {'server e2e ms':>13} | {'CPU s/s by process':<40} | check")
    failed = 0
    fit_names = {f"c={c}" for c in a.fit} | {n for n in measured if n.startswith("open") and float(n.split()[1]) in a.open_fit}
    table = [(name, "fit" if name in fit_names or a.check_run else "check", real, p99, cpu, rates)
             for name, (real, p99) in measured.items() if not a.check_run or name in fit_names]
    if a.check_run:
        other, other_rates, other_cpu, other_saved = load(a.check_run)
        print(f"checked on {a.check_run} (measured {other_saved['measured']}, capacity "
              f"{max(pt.rps for n, (pt, _) in other.items() if n.startswith('c=')):.1f} req/s): every level")
        table += [(name, "check", real, p99, other_cpu, other_rates) for name, (real, p99) in other.items()]
    checks: dict[str, str] = {}
    checked = fitted
    if a.check_run:
        # The same machine ran 5 % slower or faster from one run to the next, and latency near saturation is a
        # function of the share of capacity: the fit's times are carried to the check run's measured capacity
        # (its best closed loop), as the operator measures a replica's capacity where it runs.
        slower = max(pt.rps for n, (pt, _) in measured.items() if n.startswith("c=")) / max(
            pt.rps for n, (pt, _) in other.items() if n.startswith("c="))
        checked = scaled(fitted, slower)
        print(f"the fit's times x {slower:.3f} for the check run (its capacity over the fit run's)")
    for name, role, real, p99, use_of, at in table:
        params = fitted if role == "fit" else checked
        f = model(params, name, at)
        ok, figures = check(params, name, real, at)
        verdict = "" if role == "fit" else ("ok" if ok else "MISSED") + f" ({figures})"
        if role == "check":
            checks[name] = ("met: " if ok else "MISSED: ") + figures
        failed += role == "check" and not ok
        use = " ".join(f"{k} {v:.2f}" for k, v in sorted(use_of.get(name, {}).items()))
        print(f"{name:>16} {role:>5} | {real.rps:>10.1f} {f.rps:>7.1f} | {1000 * real.client_p50_s:>11.1f} "
              f"{1000 * f.client_p50_s:>7.1f} | {1000 * p99:>11.1f} {1000 * (f.client_p99_s or math.nan):>7.1f} | "
              f"{1000 * real.server_mean_s:>13.1f} | {use:<40} | {verdict}")
    if a.write:
        about = {"fitted": time.strftime("%Y-%m-%d"), "server": source, "fit levels": a.fit, "open fit shares": a.open_fit,
                 "tokens per request": tokens, "checked on": str(a.check_run or source), "checks": checks}
        a.write.write_text(yaml.safe_dump(to_file(fitted, about), sort_keys=False))
        print(f"\nwrote {a.write} (pooling-operator simulate ... --service-model {a.write})")
    print(f"{time.perf_counter() - began:.0f} s in all")
    return 1 if failed else 0


def measure(a: argparse.Namespace, argv: list[str]) -> tuple[dict[str, tuple[Point, float]], dict[str, float],
                                                               dict[str, dict[str, float]], float]:
    """Every level on the server: the closed loops, then the open loops at shares of the capacity they measured."""
    proc = None
    if a.url:
        url, start_s = a.url, math.nan
    else:
        proc, url, start_s = start_server(runtime.find(install_missing=True), argv, a.cpu_worker)
        print(f"vLLM answered /health {start_s:.0f} s after start", flush=True)
    if a.client_core >= 0 and a.client_core < (os.cpu_count() or 1):
        # like the reference sweep (load-curve.md): the client on core 1, off vLLM's worker core 0
        os.sched_setaffinity(0, {a.client_core})
    measured: dict[str, tuple[Point, float]] = {}
    rates: dict[str, float] = {}
    cpu: dict[str, dict[str, float]] = {}
    root = proc.pid if proc is not None else None

    def timed(name: str, go: Any) -> None:
        before, t0 = cpu_seconds(root), time.monotonic()
        measured[name] = asyncio.run(go)
        after, wall = cpu_seconds(root), time.monotonic() - t0
        cpu[name] = {k: (after[k] - before.get(k, 0.0)) / wall for k in after}
        print(f"{name}: {measured[name][0]} p99 {measured[name][1]:.4f}; CPU s/s {cpu[name]}", flush=True)

    try:
        asyncio.run(closed_loop(url, 4, 5.0, warmup=0.0))  # warm-up, discarded
        for c in sorted({*a.fit, *a.check}):
            timed(f"c={c}", closed_loop(url, c, a.seconds))
        capacity = max(pt.rps for n, (pt, _) in measured.items())
        for share in sorted({*a.open_fit, *a.open_check}):
            name = f"open {share:g} {share * capacity:.0f}/s"
            rates[name] = share * capacity
            timed(name, open_loop(url, rates[name], a.seconds))
    finally:
        stop_process(proc, 60)
    return measured, rates, cpu, start_s


if __name__ == "__main__":
    raise SystemExit(main())
