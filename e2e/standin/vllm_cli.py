"""TEST SUPPORT ONLY: a ``vllm`` command that runs the hidden-state stand-in (e2e/standin/server.py) instead.

The pod runner (e2e/podrunner/kubelet.py) maps the image ``runner_process.STANDIN_IMAGE`` to a bin folder whose
``vllm`` (written by ``write_bin``) runs ``main`` here: the operator's rendered HiddenStateJob sidecar,
``vllm serve MODEL --served-model-name N --host H --port P ... --speculative-config {...} --kv-transfer-config
{...}``, becomes ``python -m e2e.standin --port P --storage-path <shared_storage_path> --layers <count>
--hidden-size <N> --dtype <D> --model N --max-model-len L``. Nothing of vLLM runs: the files it writes are the
stand-in's deterministic activations in the connector's format, for tests where the Job's plumbing, not the
numbers, is the point (Kueue admission, scheduling). Never in the product, the chart or an image.

What it reads, and from where:
- the layer count from ``--speculative-config`` (``method`` must be ``extract_hidden_states``: the stand-in
  imitates nothing else) and the storage folder from ``--kv-transfer-config``'s ``shared_storage_path``;
- the hidden size from ``VPO_STANDIN_HIDDEN_SIZE``, else ``hidden_size`` in the model folder's
  ``config.json`` (as vLLM reads it), else ``DEFAULT_HIDDEN_SIZE``;
- ``--dtype`` as vLLM names it (``auto`` is taken as bfloat16, what most checkpoints hold);
- the mean extra latency of each request from ``VPO_STANDIN_DELAY_MS`` (the container's env, e.g. a job's
  ``engine.env``), none by default.

It listens on 127.0.0.1 whatever ``--host`` says (a test's traffic stays on loopback). Flags it does not use
are listed on stderr and otherwise ignored; a command it cannot honour exits with ``USAGE_EXIT_CODE``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import stat
import sys
from pathlib import Path

DEFAULT_HIDDEN_SIZE = 64
HIDDEN_SIZE_ENV = "VPO_STANDIN_HIDDEN_SIZE"
DELAY_ENV = "VPO_STANDIN_DELAY_MS"  # the stand-in's --delay-ms: a job slow enough to be preempted mid-shard
USAGE_EXIT_CODE = 2
REPO_ROOT = Path(__file__).resolve().parents[2]
# vLLM's --dtype names -> the stand-in's
DTYPES = {"auto": "bfloat16", "bfloat16": "bfloat16", "float16": "float16", "half": "float16",
          "float32": "float32", "float": "float32"}  # fmt: skip


class Unsupported(ValueError):
    """The command asks for something the stand-in does not imitate."""


def _hidden_size(model: str, env: dict[str, str]) -> int:
    if env.get(HIDDEN_SIZE_ENV):
        return int(env[HIDDEN_SIZE_ENV])
    config = Path(model) / "config.json"
    if config.is_file():
        size = json.loads(config.read_text()).get("hidden_size")
        if isinstance(size, int) and size > 0:
            return size
    return DEFAULT_HIDDEN_SIZE


def translate(argv: list[str], env: dict[str, str]) -> tuple[list[str], list[str]]:
    """``vllm`` argv (without the program) -> (the stand-in's argv, the flags it ignores)."""
    if not argv or argv[0] != "serve":
        raise Unsupported(f"only `vllm serve` is imitated, not {shlex.join(['vllm', *argv])}")
    p = argparse.ArgumentParser(prog="vllm serve", add_help=False, allow_abbrev=False)
    p.add_argument("model", nargs="?")
    p.add_argument("--model", dest="model_flag")
    p.add_argument("--served-model-name", nargs="+")
    p.add_argument("--host")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--dtype", default="auto")
    p.add_argument("--max-model-len", type=int)
    p.add_argument("--speculative-config")
    p.add_argument("--kv-transfer-config")
    a, ignored = p.parse_known_args(argv[1:])
    model = a.model or a.model_flag
    if not model:
        raise Unsupported("no model: `vllm serve MODEL` or --model")
    speculative = json.loads(a.speculative_config or "{}")
    if speculative.get("method") != "extract_hidden_states":
        raise Unsupported(f"--speculative-config method {speculative.get('method')!r}: only extract_hidden_states is imitated")
    layers = speculative.get("draft_model_config", {}).get("hf_config", {}).get("eagle_aux_hidden_state_layer_ids")
    if not isinstance(layers, list) or not layers:
        raise Unsupported("--speculative-config names no eagle_aux_hidden_state_layer_ids")
    transfer = json.loads(a.kv_transfer_config or "{}")
    storage = (transfer.get("kv_connector_extra_config") or {}).get("shared_storage_path")
    if not storage:
        raise Unsupported("--kv-transfer-config has no kv_connector_extra_config.shared_storage_path")
    if a.dtype not in DTYPES:
        raise Unsupported(f"--dtype {a.dtype}: the stand-in writes one of {sorted(DTYPES)}")
    out = [
        "--host", "127.0.0.1",
        "--port", str(a.port),
        "--storage-path", storage,
        "--layers", str(len(layers)),
        "--hidden-size", str(_hidden_size(model, env)),
        "--dtype", DTYPES[a.dtype],
        "--model", (a.served_model_name or [model])[0],
    ]  # fmt: skip
    if a.max_model_len:
        out += ["--max-model-len", str(a.max_model_len)]
    if env.get(DELAY_ENV):
        out += ["--delay-ms", str(float(env[DELAY_ENV]))]
    return out, ignored


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    try:
        standin, ignored = translate(args, dict(os.environ))
    except (Unsupported, ValueError) as e:
        print(f"vllm (test stand-in): {e}", file=sys.stderr, flush=True)
        return USAGE_EXIT_CODE
    print(f"vllm (test stand-in): python -m e2e.standin {shlex.join(standin)}", file=sys.stderr, flush=True)
    if ignored:
        print(f"vllm (test stand-in): ignored {shlex.join(ignored)}", file=sys.stderr, flush=True)
    # imported here: numpy, aiohttp and safetensors load only in the process that serves, not in write_bin's callers
    from e2e.standin import server

    return server.main(standin)


def write_bin(folder: Path, python: str = sys.executable) -> Path:
    """A bin folder whose executable ``vllm`` runs ``main`` in ``python`` with this repository importable;
    returns the folder. ``PYTHONPATH`` is set, not extended: the runner's per-program env gives every ``vllm``
    the connector shim (for real vLLM), which has nothing to patch here."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "vllm"
    script.write_text(
        "#!/bin/sh\n"
        "# TEST SUPPORT ONLY: the vLLM hidden-state stand-in (e2e/standin/vllm_cli.py), never real vLLM.\n"
        f"export PYTHONPATH={shlex.quote(str(REPO_ROOT))}\n"
        f"exec {shlex.quote(python)} -m e2e.standin.vllm_cli \"$@\"\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return folder


if __name__ == "__main__":
    raise SystemExit(main())
