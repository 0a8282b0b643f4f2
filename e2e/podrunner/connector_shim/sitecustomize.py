"""Test-only: lets vLLM 0.32's own ExampleHiddenStatesConnector write its files on a CPU.

Never in the product, the chart or the image: the pod runner puts this folder on ``PYTHONPATH`` of ``vllm``
processes only (``--program-env``), and Python imports ``sitecustomize`` at start-up in every process,
vLLM's spawned EngineCore and workers included. Why it is needed and why nothing more:
the workplace reference hidden-states-cpu.md (beside the repository; no test reads it). In vLLM 0.32 the connector's ``_submit_async_write`` asks
``torch.empty_like(..., pin_memory=True)`` (no CPU build of torch allows it) and stores a copy event for
``get_finished`` to ``query()``, which the CPU worker's event placeholder lacks.

This wraps ``ExampleHiddenStatesConnector._submit_async_write`` once the module is imported, and only while
the hidden-state cache is on the CPU (on a GPU the original runs untouched): for the call, ``empty_like``
ignores ``pin_memory`` (pageable memory, as the CPU worker already makes ``Tensor.pin_memory`` an identity),
and the stored copy event answers ``query()`` with True (on a CPU the copy is synchronous). Everything that
decides the file (``extract_from_kv_cache``, the tensors, ``save_file``, the path, the lock) stays vLLM's.
It prints one line per patched process to stderr; ``VPO_CONNECTOR_SHIM=0`` turns it off.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import os
import sys
from typing import Any

TARGET = "vllm.distributed.kv_transfer.kv_connector.v1.example_hidden_states_connector"
MARK = "[vpo-connector-shim]"


class _Done:
    """The copy event, with the ``query()`` the CPU placeholder lacks (the copy already happened)."""

    def __init__(self, event: Any) -> None:
        self._event = event

    def query(self) -> bool:
        return True

    def __getattr__(self, name: str) -> Any:
        return getattr(self._event, name)


def _patch(module: Any) -> None:
    cls = module.ExampleHiddenStatesConnector
    original = cls._submit_async_write

    @functools.wraps(original)
    def _submit_async_write(self: Any, pending: Any) -> None:
        cache = getattr(self, "_kv_cache", None)
        if cache is None or cache.device.type != "cpu":
            return original(self, pending)
        torch = module.torch
        empty_like = torch.empty_like

        def pageable_empty_like(*args: Any, **kwargs: Any) -> Any:
            kwargs.pop("pin_memory", None)
            return empty_like(*args, **kwargs)

        torch.empty_like = pageable_empty_like
        try:
            original(self, pending)
        finally:
            torch.empty_like = empty_like
        event = self._req_copy_events.get(pending.req_id)
        if event is not None and not hasattr(event, "query"):
            self._req_copy_events[pending.req_id] = _Done(event)

    cls._submit_async_write = _submit_async_write
    print(f"{MARK} pid {os.getpid()}: patched {TARGET}.ExampleHiddenStatesConnector._submit_async_write", file=sys.stderr)


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader) -> None:
        self.inner = inner

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        return self.inner.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self.inner.exec_module(module)
        _patch(module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name != TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _Loader(spec.loader)
        return spec


if os.environ.get("VPO_CONNECTOR_SHIM", "1") != "0":
    sys.meta_path.insert(0, _Finder())
