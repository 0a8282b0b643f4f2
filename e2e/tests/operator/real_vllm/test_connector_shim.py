"""The test-only connector shim (e2e/podrunner/connector_shim) is active where it is put, and bounded: with it,
vLLM's connector module is vLLM's own except ``_submit_async_write``, which wraps the original; without it
(or with VPO_CONNECTOR_SHIM=0) nothing changes. Runs in the runtime's interpreter, as vLLM does."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from e2e.podrunner.runner_process import CONNECTOR_SHIM
from e2e.realvllm import runtime

pytestmark = [pytest.mark.real_vllm, pytest.mark.timeout(300)]

PROBE = r"""
import inspect, json, sys
import vllm.distributed.kv_transfer.kv_connector.v1.example_hidden_states_connector as m
import safetensors.torch
cls = m.ExampleHiddenStatesConnector
def origin(f):
    return inspect.unwrap(f).__code__.co_filename if hasattr(inspect.unwrap(f), "__code__") else None
members = {k: (getattr(v, "__code__", None) and v.__code__.co_filename) for k, v in vars(cls).items() if callable(v)}
print(json.dumps({
    "module": m.__file__,
    "save_file": m.save_file is safetensors.torch.save_file and m.save_file.__code__.co_filename,
    "extract_from_kv_cache": m.extract_from_kv_cache.__code__.co_filename,
    "get_finished": cls.get_finished.__code__.co_filename,
    "submit": cls._submit_async_write.__code__.co_filename,
    "submit_wrapped": origin(cls._submit_async_write),
    "members": members,
}))
"""


def probe(rt: runtime.Runtime, **env: str) -> tuple[dict, str]:
    res = subprocess.run([str(rt.python), "-c", PROBE], capture_output=True, text=True, timeout=240,
                         env={**os.environ, **rt.env(), **env})  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1]), res.stderr


def test_the_shim_is_active_and_changes_only_the_async_write(vllm_runtime: runtime.Runtime) -> None:
    on, err_on = probe(vllm_runtime, PYTHONPATH=str(CONNECTOR_SHIM))
    off, err_off = probe(vllm_runtime)
    module = Path(on["module"])
    assert "site-packages" in module.parts and module.name == "example_hidden_states_connector.py"
    shim = str(CONNECTOR_SHIM / "sitecustomize.py")
    # vLLM's own: the writer, the extraction and the completion poll
    assert Path(on["save_file"]).parts[-2:] == ("safetensors", "torch.py")
    assert on["extract_from_kv_cache"] == on["get_finished"] == str(module)
    # the one change: the async write, a wrapper around vLLM's function
    assert on["submit"] == shim and on["submit_wrapped"] == str(module)
    assert {k: v for k, v in on["members"].items() if k != "_submit_async_write"} == {
        k: v for k, v in off["members"].items() if k != "_submit_async_write"
    }
    assert "[vpo-connector-shim]" in err_on and "patched" in err_on
    assert "[vpo-connector-shim]" not in err_off
    assert off["submit"] == str(module)
    # switched off, it installs nothing (no need to import vLLM to see that)
    hooks = "import sys; print(sum(type(f).__module__ == 'sitecustomize' for f in sys.meta_path))"
    for env, want in (({}, "1"), ({"VPO_CONNECTOR_SHIM": "0"}, "0")):
        res = subprocess.run([str(vllm_runtime.python), "-c", hooks], capture_output=True, text=True, check=True,
                             env={**os.environ, **vllm_runtime.env(), "PYTHONPATH": str(CONNECTOR_SHIM), **env})  # fmt: skip
        assert res.stdout.strip() == want
