"""How much of a spec may travel into vLLM's command line and environment (issue 42.5). Pure; read by the chains
of vllm/rules.py.

Free-form fields (``model.hfOverrides``, ``engine.extraArgs``, ``engine.env`` values) pass the CRD schema at any
size, but what they carry is written at least three times: the resource's own spec, the Deployment's (or Job's)
pod template, and ``status.effective``, which repeats the argv. The API server stores at most 1.5 MiB an object
(etcd's request limit), so a 1 MiB ``hfOverrides`` made a Deployment that was created and a status that could
never be written. Beyond ``MAX_CARRIED_BYTES`` in all the largest field is refused, named with its size.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

from pooling_operator.api.problems import Problem
from pooling_operator.vllm.workload import Workload

MAX_CARRIED_BYTES = 128 << 10  # the sum of the fields below; a quarter of the 256 KiB annotations allow, with room


def carried(w: Workload) -> list[tuple[str, int]]:
    """(field path, bytes it puts into argv or env) for each free-form field that is set."""
    out: list[tuple[str, int]] = []
    if w.model.hf_overrides:
        out.append(("spec.model.hfOverrides", len(json.dumps(w.model.hf_overrides, separators=(",", ":")).encode())))
    out += [(f"spec.engine.extraArgs[{i}]", len(a.encode())) for i, a in enumerate(w.engine.extra_args)]
    out += [(f"spec.engine.env[{i}].value", len(e.value.encode())) for i, e in enumerate(w.engine.env) if e.value]
    return out


def carried_size_problems(w: Workload) -> Iterator[Problem]:
    fields = carried(w)
    total = sum(n for _, n in fields)
    if total <= MAX_CARRIED_BYTES:
        return
    path, size = max(fields, key=lambda f: f[1])
    yield Problem(path, f"{size:,} bytes; what a spec carries into vLLM's command line and environment is at most "
                        f"{MAX_CARRIED_BYTES:,} bytes in all ({total:,} here), because the pod template and "
                        "status.effective both repeat it and the API server stores at most 1.5 MiB an object; "
                        "put large settings in the model's files instead")
