"""``--source DIR``: the table of an unpacked vLLM sdist, read with ``ast`` only (no vLLM imported)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from .common import PROG, REGISTRY_DIR, say
from .reader import Reader
from .remote_code import remote_code_table
from .sdist import sdist_transformers_pin
from .table import Table, default_runner
from .values import ClassV


def build_source(root: Path, tf_json: Path | None) -> dict[str, Any]:
    reader = Reader(root / "vllm", root)
    version = re.search(r"^Version: (\S+)", (root / "PKG-INFO").read_text(), re.MULTILINE).group(1)  # type: ignore[union-attr]
    tf_version = sdist_transformers_pin(root) or "?"
    tf_json = tf_json or REGISTRY_DIR / f"transformers-{tf_version}.json"
    tf = json.loads(tf_json.read_text())
    tf_names = set(tf["configs"]) | set(tf["architectures"]["compatible"]) | set(tf["architectures"]["incompatible"])
    say(f"vLLM {version} source at {root}; transformers {tf_version} from {tf_json.name}")
    registry = reader.registry()
    table = Table(reader, ".".join(version.split(".")[:2]), tf_version,
                  f"read from the vllm-{version} sdist by {PROG} --source (ast)")  # fmt: skip
    archs: dict[str, Any] = {}
    for n, (arch, reg) in enumerate(sorted(registry.items()), 1):
        if n % 100 == 0:
            say(f"{n}/{len(registry)} architectures")
        archs[arch] = static_entry(table, reader, arch, reg)
    remote = remote_code_table(reader, archs, registry, lambda name: name in tf_names, tf_version)
    return table.document(archs, remote, static_convert(reader))


def static_entry(table: Table, reader: Reader, arch: str, reg: dict[str, Any], read: str = "source") -> dict[str, Any]:
    cls = reader.static_class(reg["module"], reg["cls"])
    if cls is None:
        raise SystemExit(f"{arch}: class {reg['module']}.{reg['cls']} not found in the source")
    facts = reader.facts(cls)
    runner, convert = default_runner(facts, arch, table.suffixes)
    pooler: tuple[list[str] | None, str | None] = (None, None)
    if runner == "pooling":
        target = cls if facts["pooling"] else reader.adapted(ClassV(cls), convert)
        site = reader.pooler_site(target) if target else None
        if site is not None:
            pooler = (reader.static_tasks(site[0]), reader.where(site[0]))
    return table.entry(arch, reg, facts, pooler, read)


def static_convert(reader: Reader) -> dict[str, Any]:
    """What --convert embed|classify makes of a generative class (LlamaForCausalLM as the example)."""
    base = reader.static_class("llama", "LlamaForCausalLM")
    assert base is not None
    out = {}
    for conv in ("embed", "classify"):
        target = reader.adapted(ClassV(base), conv)
        assert target is not None
        site = reader.pooler_site(target)
        assert site is not None
        out[conv] = {"tasks": reader.static_tasks(site[0]), "pooler": reader.where(site[0])}
    return out
