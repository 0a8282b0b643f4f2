"""Which architectures need ``--trust-remote-code``, and why: the config-class checks of
model_executor/models/config.py, the model modules' own checks and loads from the repository, and vLLM's test
cases marked ``trust_remote_code=True`` (tests/models/registry.py of the sdist)."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .reader import Reader
    from .tree import Mod


def config_checks(reader: Reader) -> dict[str, list[tuple[str, str, str | None]]]:
    """model_executor/models/config.py: per architecture (MODELS_CONFIG_MAP), the config-class names its
    VerifyAndUpdateConfig asserts: (class name, file:line, condition or None)."""
    mod = reader.tree.rel("model_executor/models/config.py")
    checks: dict[str, list[tuple[str, str, str | None, str]]] = {}
    for node in mod.ast.body:
        if isinstance(node, ast.ClassDef):
            checks[node.name] = [(name, f"{mod.rel}:{line}", cond, meth) for name, line, cond, meth in _name_checks(node)]
    out: dict[str, list[tuple[str, str, str | None]]] = {}
    cmap = mod.names["MODELS_CONFIG_MAP"]
    for k, v in zip(cmap.keys, cmap.values, strict=True):
        cfg = v.elts[0] if isinstance(v, ast.Tuple) else v
        if not isinstance(k, ast.Constant) or not isinstance(cfg, ast.Name):
            continue
        found: list[tuple[str, str, str | None]] = []
        seen_methods: set[str] = set()
        for c in _config_mro(mod, cfg.id):
            node = mod.names[c]
            methods = {s.name for s in node.body if isinstance(s, ast.FunctionDef)}
            found += [(n, w, cond) for n, w, cond, m in checks.get(c, []) if m not in seen_methods]
            seen_methods |= methods
        if found:
            out[k.value] = found
    return out


def _config_mro(mod: Mod, name: str) -> Iterator[str]:
    while name in mod.names and isinstance(mod.names[name], ast.ClassDef):
        yield name
        bases = [b.id for b in mod.names[name].bases if isinstance(b, ast.Name)]
        if not bases:
            return
        name = bases[0]


def _name_checks(node: ast.AST) -> Iterator[tuple[str, int, str | None, str]]:
    """``x.__class__.__name__ == "C"`` / ``type(x).__name__ != "C"`` anywhere in ``node``."""

    def walk(n: ast.AST, cond: str | None, meth: str) -> Iterator[tuple[str, int, str | None, str]]:
        if isinstance(n, ast.FunctionDef):
            meth = n.name
        if isinstance(n, ast.Compare) and len(n.ops) == 1 and isinstance(n.ops[0], (ast.Eq, ast.NotEq)):
            left, right = n.left, n.comparators[0]
            if isinstance(left, ast.Attribute) and left.attr == "__name__" and isinstance(right, ast.Constant):
                v = left.value
                if (isinstance(v, ast.Attribute) and v.attr == "__class__") or (
                    isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id == "type"
                ):
                    yield right.value, n.lineno, cond, meth
        for field, child in ast.iter_fields(n):
            kids = child if isinstance(child, list) else [child]
            for k in kids:
                if isinstance(k, ast.AST):
                    c = cond
                    if isinstance(n, ast.If) and field in ("body", "orelse"):
                        c = ast.unparse(n.test) if field == "body" else f"not ({ast.unparse(n.test)})"
                    yield from walk(k, c, meth)

    yield from walk(node, None, "")


def vllm_config_classes(reader: Reader) -> set[str]:
    names: set[str] = set()
    for p in (reader.tree.pkg / "transformers_utils" / "configs").rglob("*.py"):
        names |= {s.name for s in ast.walk(ast.parse(p.read_text())) if isinstance(s, ast.ClassDef)}
    return names


def module_remote_code(reader: Reader, module: str) -> list[tuple[str, str, str | None]]:
    """A model module's own needs for the repository's code: config-class name checks (name, where,
    condition) and loads of classes from the repository (``get_class_from_dynamic_module``)."""
    path = reader.tree.path_of(reader.module_name(module))
    if path is None or not re.search(r"__name__|get_class_from_dynamic_module", path.read_text()):
        return []
    m = reader.tree.module(reader.module_name(module))
    assert m is not None
    out = [(n, f"{m.rel}:{line}", cond) for n, line, cond, _ in _name_checks(m.ast)]
    for n in ast.walk(m.ast):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "get_class_from_dynamic_module":
            out.append(("", f"{m.rel}:{n.lineno}", None))
    return out


def test_cases(reader: Reader) -> dict[str, tuple[str, str]]:
    """tests/models/registry.py: architectures whose example model is marked trust_remote_code=True."""
    if reader.sdist is None:
        return {}
    path = reader.sdist / "tests" / "models" / "registry.py"
    out: dict[str, tuple[str, str]] = {}
    for s in ast.parse(path.read_text()).body:
        if not (isinstance(s, (ast.Assign, ast.AnnAssign)) and isinstance(s.value, ast.Dict)):
            continue
        for k, v in zip(s.value.keys, s.value.values, strict=True):
            if not (isinstance(k, ast.Constant) and isinstance(v, ast.Call)):
                continue
            for kw in v.keywords:
                if kw.arg == "trust_remote_code" and isinstance(kw.value, ast.Constant) and kw.value.value is True:
                    model = v.args[0].value if v.args and isinstance(v.args[0], ast.Constant) else "?"
                    out.setdefault(k.value, (f"tests/models/registry.py:{kw.lineno}", model))
    return out


def remote_code_table(reader: Reader, archs: dict[str, Any], registry: dict[str, dict[str, Any]],
                      in_transformers: Callable[[str], bool], tf_version: str) -> dict[str, list[dict[str, str]]]:  # fmt: skip
    vllm_cfgs = vllm_config_classes(reader)
    out: dict[str, list[dict[str, str]]] = {}

    def add(arch: str, item: dict[str, str]) -> None:
        if item not in out.setdefault(arch, []):
            out[arch].append(item)

    def foreign(name: str) -> bool:
        return name not in vllm_cfgs and not in_transformers(name)

    for arch, checks in config_checks(reader).items():
        for name, where, cond in checks:
            if foreign(name):
                item = {"kind": "config-check", "where": where,
                        "why": f"the config check asserts the config class is {name}, which neither transformers "
                               f"{tf_version} nor vLLM provides: it comes from the model's repository"}  # fmt: skip
                if cond:
                    item["condition"] = cond
                add(arch, item)
    for arch in archs:
        for name, where, cond in module_remote_code(reader, registry[arch]["module"]):
            if name and not foreign(name):
                continue
            why = (f"the model code checks the config class is {name}, which neither transformers {tf_version} "
                   "nor vLLM provides" if name else
                   "the model code loads a class from the model's repository (get_class_from_dynamic_module)")  # fmt: skip
            item = {"kind": "model-code", "where": where, "why": why}
            if cond:
                item["condition"] = cond
            add(arch, item)
    for arch, (where, model) in test_cases(reader).items():
        add(arch, {"kind": "test-case", "where": where,
                   "why": f"vLLM's test case {model} is marked trust_remote_code=True"})  # fmt: skip
    return {a: sorted(v, key=lambda i: (i["kind"], i["where"])) for a, v in sorted(out.items())}
