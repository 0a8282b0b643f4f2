"""TEST SUPPORT ONLY - a stand-in for vLLM's hidden-state extraction, for testing the Job driver.

Real vLLM cannot write hidden states on a CPU (ExampleHiddenStatesConnector pins memory through CUDA;
see the shared reference capture vllm-captures/hidden-states-cpu.txt), so the driver is tested against this
server instead. It speaks the part of vLLM's HTTP API the driver uses (/health, /tokenize,
/v1/completions) and writes its files the way the connector does: the same tensor names, dtypes and
shapes, serialized by the same safetensors library; random request-id file names in its storage path;
a ``<file>.lock`` created and exclusively flocked before the answer, the file written after the answer,
the lock released when the write is done. Switches inject faults: slow answers, 500s, truncated files,
a crash (process exit) mid-write. Never ship it, never point it at real data.

Run: ``python -m e2e.standin --port P --storage-path DIR --layers 4 --hidden-size 64 [faults]``.

The package's modules: ``server`` (this stand-in's HTTP server) and ``vllm_cli`` (a ``vllm`` command that runs
it in the pod runner); ``exporter`` and ``exporters`` (vLLM's ``/metrics`` from the simulator's service model,
one pod or a Deployment's pods); ``hub`` (the Hugging Face Hub's file API, for a ModelCache's fill).
"""

from __future__ import annotations

import zlib

BOS = 1
VOCAB = 32000


def tokenize(prompt: str) -> list[int]:
    """The stand-in's tokenizer: a BOS token, then one token per whitespace-separated word.

    Deterministic, so tests can compute the token ids the driver must find in each file.
    """
    return [BOS, *(3 + zlib.crc32(word.encode("utf-8")) % (VOCAB - 3) for word in prompt.split())]
