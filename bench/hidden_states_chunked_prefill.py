"""Does vLLM's extract_hidden_states need ``--no-enable-chunked-prefill``? Measured on real vLLM 0.32 (CPU).

The operator renders the flag for every HiddenStateJob (vLLM 0.33's docs,
docs/features/speculative_decoding/extract_hidden_states.md, say chunked prefill must be off; no code checks
it: ../shared/reference/vllm-contract.md). This starts real vLLM twice with the command line the operator
renders for a SmolLM2 HiddenStateJob (float32, maxModelLen 512, layers 3, 15, 30) through vLLM's own
ExampleHiddenStatesConnector (the test harness's connector shim on vLLM's PYTHONPATH, nothing else changed):

- **off**: as rendered (``--no-enable-chunked-prefill``);
- **chunked**: without the flag and with ``--max-num-batched-tokens 32``, so every prompt longer than 32 tokens
  is prefilled in chunks of 32 (and a batch mixes chunks of several prompts).

The same prompts (5-400 tokens, generated from a seed) go to both at once (concurrency 8); each sample's
``hidden_states`` are compared: max abs difference, min cosine per layer, identical token ids.

    .venv/bin/python bench/hidden_states_chunked_prefill.py [--prompts 48] [--seed 3]

Prints figures; exits 1 when the two differ beyond float32 noise (cosine < 0.9999 or token ids differ). Never
gates the test suite. Results: bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import json
import os
import random
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import numpy as np
import yaml
from safetensors.numpy import load_file

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from e2e.harness.poll import wait_for  # noqa: E402
from e2e.harness.processes import _free_ports, stop_process  # noqa: E402
from e2e.podrunner.runner_process import CONNECTOR_SHIM, MACHINE_OVERRIDES  # noqa: E402
from e2e.realvllm import runtime  # noqa: E402

LAYERS = [3, 15, 30]
CHUNK = 32
WORDS = ("the quick brown fox jumps over a lazy dog while seven tired engineers count every hidden state of "
         "their small model under a grey winter sky near the river").split()  # fmt: skip


def rendered_argv() -> list[str]:
    spec = {
        "apiVersion": "vllm-pooling.io/v1alpha1", "kind": "HiddenStateJob", "metadata": {"name": "hs", "namespace": "bench"},
        "spec": {"model": {"name": "/smollm2", "source": {"volume": {"claimName": "models", "path": "/smollm2"}}},
                 "layers": LAYERS, "dataset": {"volume": {"claimName": "data", "path": "/p.jsonl"}},
                 "output": {"volume": {"claimName": "data", "path": "/out"}},
                 "engine": {"image": MACHINE_OVERRIDES["engine.image"], "dtype": "float32", "maxModelLen": 512},
                 "resources": MACHINE_OVERRIDES["resources"]},
    }  # fmt: skip
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        yaml.safe_dump(spec, f)
    out = subprocess.run([sys.executable, "-m", "pooling_operator", "render", "--vllm-args", f.name],
                         check=True, capture_output=True, text=True, cwd=REPO).stdout.splitlines()  # fmt: skip
    os.unlink(f.name)
    return shlex.split(out[1])


def local_argv(rt: runtime.Runtime, argv: list[str], staging: Path, port: int, chunked: bool) -> list[str]:
    argv = list(argv)
    argv[0] = str(rt.bin / "vllm")
    argv[argv.index("serve") + 1] = str(rt.model_dir(runtime.SMOLLM2))
    argv[argv.index("--port") + 1] = str(port)
    argv[argv.index("--host") + 1] = "127.0.0.1"  # this bench talks to it on loopback only
    i = argv.index("--kv-transfer-config") + 1
    kv = json.loads(argv[i])
    kv["kv_connector_extra_config"]["shared_storage_path"] = str(staging)
    argv[i] = json.dumps(kv, separators=(",", ":"))
    if chunked:
        argv.remove("--no-enable-chunked-prefill")
        argv += ["--enable-chunked-prefill", "--max-num-batched-tokens", str(CHUNK)]
    return argv


def prompts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.choice([rng.randint(4, 30), rng.randint(31, 380)])))
            for _ in range(n)]  # fmt: skip


async def extract(url: str, texts: list[str]) -> list[dict[str, np.ndarray]]:
    sem = asyncio.Semaphore(8)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as s:

        async def one(text: str) -> dict[str, np.ndarray]:
            async with sem, s.post(f"{url}/v1/completions", json={"model": "hs", "prompt": text, "max_tokens": 1}) as r:
                doc = await r.json()
                assert r.status == 200, doc
            path = doc["kv_transfer_params"]["hidden_states_path"]
            # vLLM holds LOCK_EX on <file>.lock until the write ends (hidden-states-cpu.md §3): wait for it
            fd = await asyncio.to_thread(os.open, path + ".lock", os.O_RDONLY)
            try:
                await asyncio.to_thread(fcntl.flock, fd, fcntl.LOCK_SH)
            finally:
                os.close(fd)
            return load_file(path)

        return await asyncio.gather(*(one(t) for t in texts))


def run(rt: runtime.Runtime, argv: list[str], chunked: bool, texts: list[str], root: Path) -> tuple[list[dict], float]:
    port = _free_ports(1)[0]
    staging = root / ("chunked" if chunked else "off")
    cmd = local_argv(rt, argv, staging, port, chunked)
    env = {**os.environ, **rt.env(), "PYTHONPATH": str(CONNECTOR_SHIM)}
    log = (root / f"{staging.name}.log").open("wb")
    began = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}"

        def healthy() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"vLLM exited ({proc.returncode}); log {log.name}")
            try:
                import urllib.request

                with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                    return r.status == 200
            except OSError:
                return False

        wait_for(healthy, timeout=900, what=f"vLLM ({staging.name}) healthy")
        start = time.monotonic() - began
        print(f"{staging.name}: vLLM ready in {start:.0f} s; {' '.join(cmd[3:])[:160]}...")
        return asyncio.run(extract(url, texts)), start
    finally:
        stop_process(proc, 30)
        log.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prompts", type=int, default=48)
    p.add_argument("--seed", type=int, default=3)
    a = p.parse_args()
    began = time.monotonic()
    rt = runtime.find(install_missing=True)
    texts = prompts(a.prompts, a.seed)
    argv = rendered_argv()
    with tempfile.TemporaryDirectory(prefix="hs-chunked-") as tmp:
        off, _ = run(rt, argv, False, texts, Path(tmp))
        chunked, _ = run(rt, argv, True, texts, Path(tmp))
    worst_cos = {k: 1.0 for k in LAYERS}
    worst_abs, ids_equal, long = 0.0, True, 0
    for x, y in zip(off, chunked, strict=True):
        ids_equal &= bool(np.array_equal(x["token_ids"], y["token_ids"]))
        long += len(x["token_ids"]) > CHUNK
        a_, b_ = x["hidden_states"].astype(np.float64), y["hidden_states"].astype(np.float64)
        worst_abs = max(worst_abs, float(np.abs(a_ - b_).max()))
        for slot, k in enumerate(LAYERS):
            u, v = a_[:, slot], b_[:, slot]
            cos = (u * v).sum(-1) / (np.linalg.norm(u, axis=-1) * np.linalg.norm(v, axis=-1))
            worst_cos[k] = min(worst_cos[k], float(cos.min()))
    scale = max(float(np.abs(x["hidden_states"]).max()) for x in off)
    tokens = [len(x["token_ids"]) for x in off]
    print(f"\n{len(texts)} prompts of {min(tokens)}-{max(tokens)} tokens ({long} longer than the {CHUNK}-token chunk)")
    print(f"token ids identical: {ids_equal}")
    print(f"max abs difference {worst_abs:.3g} on activations up to {scale:.3g}")
    print("min cosine per layer id: " + ", ".join(f"{k}: {c:.7f}" for k, c in worst_cos.items()))
    print(f"wall {time.monotonic() - began:.0f} s")
    same = ids_equal and min(worst_cos.values()) >= 0.9999
    print("verdict:", "the same hidden states with chunked prefill" if same else "chunked prefill changes the hidden states")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
