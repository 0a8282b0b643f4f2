"""What the space check's default `minCosine` is chosen from: the float noise of one engine, and the drift of
changes the fingerprint does not cover, measured on real vLLM 0.32 (the CPU runtime of e2e/realvllm) with the
built-in canaries (vllm/space_check.py) and MiniLM as examples/minilm-embeddings.yaml renders it on this machine.

1. Noise: a float32 server, then a bfloat16 one, each answers the canaries arranged many ways (all in one
   request, one a request, in reverse, among other inputs, and --arrangements random orders and batch sizes from
   --seed): the least cosine of any canary to that server's first answer is what a second pod of the same engine
   can differ by.
2. Changes against the float32 server's answer: another --max-num-seqs and --max-num-batched-tokens (nothing
   numeric changes), --max-model-len 128 instead of 256 (inputs past 128 tokens are cut there instead of at 256),
   and dtype bfloat16.

Printed: each least cosine, as 1 - cosine, and the verdict of the default (api/space_check.DEFAULT_MIN_COSINE)
on each. Never part of the suite.

    .venv/bin/python bench/space_check_noise.py [--arrangements 40] [--seed 7]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.realvllm_calibration import rendered_argv, start_server  # noqa: E402
from e2e.harness.processes import stop_process  # noqa: E402
from e2e.realvllm import runtime  # noqa: E402
from pooling_operator.api.space_check import DEFAULT_MIN_COSINE  # noqa: E402
from pooling_operator.vllm import space_check as sc  # noqa: E402

FILLER = ["pods run on nodes", "a reranker orders documents", "vectors live in an index", "the cache is warm"]


def embed(url: str, texts: list[str]) -> list[list[float]]:
    body = json.dumps({"model": "minilm", "input": texts, "truncate_prompt_tokens": -1}).encode()
    req = urllib.request.Request(f"{url}/v1/embeddings", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        return [d["embedding"] for d in sorted(json.loads(r.read())["data"], key=lambda d: d["index"])]


def arranged(url: str, texts: list[str], rng: random.Random, how: str) -> list[list[float]]:
    """The canaries' vectors, sent as `how` says; in canary order."""
    n = len(texts)
    if how == "one request":
        return embed(url, texts)
    if how == "one a request":
        return [embed(url, [t])[0] for t in texts]
    if how == "reversed":
        return embed(url, texts[::-1])[::-1]
    if how == "among others":
        mixed = [x for t in texts for x in (t, rng.choice(FILLER))]
        return embed(url, mixed)[0::2]
    order = list(range(n))
    rng.shuffle(order)
    size = rng.randint(1, n)
    out: dict[int, list[float]] = {}
    for i in range(0, n, size):
        chunk = order[i : i + size]
        for j, v in zip(chunk, embed(url, [texts[k] for k in chunk]), strict=True):
            out[j] = v
    return [out[i] for i in range(n)]


def least(reference: list[list[float]], answers: list[list[float]], names: list[str]) -> tuple[float, str]:
    values = [(sc.cosine(a, b), name) for a, b, name in zip(reference, answers, names, strict=True)]
    return min(values)


def noise(rt: runtime.Runtime, argv: list[str], texts: list[str], names: list[str], rng: random.Random,
          arrangements: int, label: str) -> list[list[float]]:
    """Start a server of `argv`, measure its arrangement noise (printed), and return its first answer."""
    proc, url, seconds = start_server(rt, argv)
    try:
        first = embed(url, texts)
        found = [(*least(first, arranged(url, texts, rng, how), names), how)
                 for how in ["one request", "one a request", "reversed", "among others", *(["random"] * arrangements)]]
    finally:
        stop_process(proc, timeout=30)
    worst = min(found)
    print(f"1. noise of {label} (up in {seconds:.0f} s), {len(found)} arrangements: least cosine {worst[0]:.9f} "
          f"(1 - cos {1 - worst[0]:.1e}, canary {worst[1]}, {worst[2]}); median 1 - cos {1 - sorted(f[0] for f in found)[len(found) // 2]:.1e}")
    return first


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arrangements", type=int, default=40, help="random arrangements besides the fixed four")
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    rt = runtime.find(install_missing=True)
    canaries = list(sc.builtin(scoring=False))
    texts, names = [c.text or "" for c in canaries], [c.name for c in canaries]
    rng = random.Random(a.seed)
    base = rendered_argv("float32")
    print(f"{len(texts)} canaries; MiniLM as examples/minilm-embeddings.yaml renders it")
    reference = noise(rt, base, texts, names, rng, a.arrangements, "float32")
    noise(rt, rendered_argv("bfloat16"), texts, names, rng, a.arrangements, "bfloat16")
    results = {}
    for name, argv in (("batching limits (--max-num-seqs 32 --max-num-batched-tokens 4096)",
                        _with(base, {"--max-num-seqs": "32", "--max-num-batched-tokens": "4096"})),
                       ("--max-model-len 128", _with(base, {"--max-model-len": "128"})),
                       ("dtype bfloat16", rendered_argv("bfloat16"))):
        proc, url, seconds = start_server(rt, argv)
        try:
            value, canary = least(reference, embed(url, texts), names)
        finally:
            stop_process(proc, timeout=30)
        results[name] = value
        print(f"2. {name} against float32: up in {seconds:.0f} s; least cosine {value:.9f} (1 - cos {1 - value:.1e}, canary {canary})")
    threshold = float(DEFAULT_MIN_COSINE)
    print(f"default minCosine {DEFAULT_MIN_COSINE}: " + "; ".join(
        f"{k} {'passes' if v >= threshold else 'drifts'}" for k, v in results.items()))
    return 0


def _with(argv: list[str], flags: dict[str, str]) -> list[str]:
    out = list(argv)
    for flag, value in flags.items():
        if flag in out:
            out[out.index(flag) + 1] = value
        else:
            out += [flag, value]
    return out


if __name__ == "__main__":
    sys.exit(main())
