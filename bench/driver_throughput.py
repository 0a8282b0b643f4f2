"""Hidden-state driver throughput against the vLLM stand-in, next to a plain ``dd`` of the same bytes.

Not part of the test suite. For each profile (small and large files) it prints:
  dd          one ``dd if=/dev/zero bs=1M conv=fsync`` of the driver's total bytes into the same folder;
  stand-in    a bare client that asks the stand-in for every sample and only waits for each file's lock
              (the producer's ceiling: what any driver could collect on this machine);
  driver      ``hidden-states run`` end to end: wait for the lock, check the header, sha256, fsync,
              rename, manifest line with fsync (wall time of the process, start-up included).

    .venv/bin/python bench/driver_throughput.py [--dir DIR] [--profile small|large|all]
"""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "operator")]

from tests.hidden_states_support import driver_argv, env, start_standin  # noqa: E402

PROFILES = {
    # name: (samples, tokens per prompt, layers, hidden size, concurrency)
    "small": (2000, 64, 4, 256, 16),
    "large": (120, 256, 4, 4096, 8),
}


def write_dataset(path: Path, samples: int, tokens: int) -> None:
    with path.open("w") as f:
        for i in range(samples):
            ids = [1, *((i * 7919 + j) % 30000 + 3 for j in range(tokens - 1))]
            f.write(json.dumps({"id": f"bench-{i}", "token_ids": ids}) + "\n")


def dd(folder: Path, total: int) -> float:
    """MB/s of one fsynced dd of ``total`` bytes into ``folder``."""
    target = folder / "dd.bin"
    count = max(1, total // (1 << 20))
    started = time.perf_counter()
    subprocess.run(["dd", "if=/dev/zero", f"of={target}", "bs=1M", f"count={count}", "conv=fsync"], check=True,
                   capture_output=True)
    elapsed = time.perf_counter() - started
    target.unlink()
    return count * (1 << 20) / elapsed / 1e6


async def bare_client(url: str, dataset: Path, concurrency: int) -> tuple[int, int]:
    """Ask for every sample, wait for each file's lock, then delete it: no checks, no hashing, no fsync."""
    prompts = [json.loads(line)["token_ids"] for line in dataset.read_text().splitlines()]
    total = 0
    queue = iter(prompts)

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal total
        for prompt in queue:
            async with session.post(f"{url}/v1/completions", json={"model": "m", "prompt": prompt, "max_tokens": 1}) as r:
                path = (await r.json())["kv_transfer_params"]["hidden_states_path"]
            size = await asyncio.to_thread(collect, path)
            total += size

    async with aiohttp.ClientSession() as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
    return len(prompts), total


def collect(path: str) -> int:
    with open(path + ".lock") as lock:
        fcntl.flock(lock, fcntl.LOCK_SH)
        size = os.path.getsize(path)
    os.unlink(path)
    os.unlink(path + ".lock")
    return size


def run_profile(name: str, base: Path) -> None:
    samples, tokens, layers, hidden, concurrency = PROFILES[name]
    work = Path(tempfile.mkdtemp(prefix=f"hs-bench-{name}-", dir=base))
    try:
        dataset = work / "d.jsonl"
        write_dataset(dataset, samples, tokens)
        out = work / "out"
        server = start_standin(out / ".staging" / "shard-0", layers=layers, hidden=hidden)
        try:
            started = time.perf_counter()
            n, bare_bytes = asyncio.run(bare_client(server.url, dataset, concurrency))
            bare_s = time.perf_counter() - started
            args = driver_argv(dataset, out, server.url, 0, 1, "--concurrency", str(concurrency))
            args[args.index("--hidden-size") + 1] = str(hidden)
            args[args.index("--layers") + 1] = ",".join(str(i) for i in range(layers))
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            started = time.perf_counter()
            result = subprocess.run([sys.executable, "-c", "import sys; from pooling_operator.pods.hidden_states.cli import "
                                     "main; sys.exit(main(sys.argv[1:]))", *args], cwd=ROOT, env=env(),
                                    capture_output=True, text=True)
            driver_s = time.perf_counter() - started
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        finally:
            server.stop()
        if result.returncode != 0:
            raise SystemExit(f"driver failed ({result.returncode}):\n{result.stderr[-3000:]}")
        success = json.loads((out / "shard-0" / "_SUCCESS").read_text())
        assert success["done"] == samples, success
        total = success["bytes"]
        shutil.rmtree(out)
        dd_mbs = dd(work, total)
        per_file = total / samples
        print(f"\n{name}: {samples} samples of {tokens} tokens x {layers} layers x {hidden} hidden (bf16), "
              f"{per_file / 1e6:.2f} MB each, {total / 1e6:.0f} MB in all, concurrency {concurrency}")
        print(f"  dd (1 MiB blocks, fsync)  {dd_mbs:8.1f} MB/s")
        print(f"  stand-in, bare client     {n / bare_s:8.1f} samples/s  {bare_bytes / bare_s / 1e6:8.1f} MB/s")
        print(f"  driver (end to end)       {samples / driver_s:8.1f} samples/s  {total / driver_s / 1e6:8.1f} MB/s  "
              f"({driver_s:.1f} s)")
        print(f"  driver CPU                {cpu_s:8.2f} s in all, {cpu_s / (total / 1e9):.2f} s per GB, "
              f"{cpu_s / samples * 1000:.2f} ms per sample")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()), help="where to write (the disk under test)")
    p.add_argument("--profile", choices=[*PROFILES, "all"], default="all")
    a = p.parse_args()
    print(f"machine: {os.cpu_count()} cores; folder {a.dir} on {subprocess.run(['df', '--output=source,fstype', str(a.dir)], capture_output=True, text=True).stdout.split()[-2:]}")
    for name in PROFILES if a.profile == "all" else [a.profile]:
        run_profile(name, a.dir)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
