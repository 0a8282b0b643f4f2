"""The vLLM source tree, parsed with ``ast`` on demand: its modules and their bindings by name, with vLLM's
``current_platform`` branches read as on CUDA."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any


def is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


# The platform the tables describe: the operator runs vLLM on CUDA GPUs. ``current_platform.is_<x>()`` is read
# as on CUDA wherever the source branches on it (the hardware-isolated ``vllm/models/<name>/`` packages).
CUDA_PLATFORM = {"is_cuda": True, "is_cuda_alike": True}


def platform_test(test: ast.expr) -> bool | None:
    """The value of a test made only of ``current_platform.is_<x>()`` calls, on CUDA; None for other tests."""
    if isinstance(test, ast.Call) and isinstance(test.func, ast.Attribute) and not test.args:
        base = test.func.value
        if isinstance(base, ast.Name) and base.id == "current_platform" and test.func.attr.startswith("is_"):
            return CUDA_PLATFORM.get(test.func.attr, False)
        return None
    if is_type_checking(test):  # False at runtime, inside a test on the platform
        return False
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        v = platform_test(test.operand)
        return None if v is None else not v
    if isinstance(test, ast.BoolOp):
        vals = [platform_test(v) for v in test.values]
        if None in vals:
            return None
        return all(vals) if isinstance(test.op, ast.And) else any(vals)
    return None


def collect(stmts: list[ast.stmt], out: dict[str, Any], type_checking: dict[str, Any] | None = None) -> None:
    """Module- or function-level bindings by name, in order (a later one wins); of platform branches the CUDA
    one. The bodies of ``if TYPE_CHECKING`` go to ``type_checking`` (for packages that export through a
    module ``__getattr__``)."""
    for s in stmts:
        if isinstance(s, ast.If) and not is_type_checking(s.test) and (plat := platform_test(s.test)) is not None:
            collect(s.body if plat else s.orelse, out, type_checking)
        elif isinstance(s, ast.If):
            if is_type_checking(s.test):
                if type_checking is not None:
                    collect(s.body, type_checking)
                collect(s.orelse, out, type_checking)
            else:
                collect(s.body, out)
                collect(s.orelse, out)
        elif isinstance(s, ast.Try):
            collect(s.body, out)
            collect(s.orelse, out)
            collect(s.finalbody, out)
        elif isinstance(s, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            out[s.name] = s
        elif isinstance(s, ast.ImportFrom):
            for a in s.names:
                if a.name == "*":
                    out.setdefault("*", []).append(s)
                else:
                    out[a.asname or a.name] = ("from", s, a.name)
        elif isinstance(s, ast.Import):
            for a in s.names:
                if a.asname:
                    out[a.asname] = ("import", a.name)
                else:
                    out[a.name.split(".")[0]] = ("import", a.name.split(".")[0])
        elif isinstance(s, ast.Assign):
            for t in s.targets:
                if isinstance(t, ast.Name):
                    out[t.id] = s.value
        elif isinstance(s, ast.AnnAssign) and s.value is not None and isinstance(s.target, ast.Name):
            out[s.target.id] = s.value


class Mod:
    def __init__(self, tree: Tree, name: str, path: Path):
        self.tree, self.name, self.path = tree, name, path
        self.rel = path.relative_to(tree.pkg).as_posix()
        self.text = path.read_text()
        self.ast = ast.parse(self.text)
        self.is_pkg = path.name == "__init__.py"
        self.names: dict[str, Any] = {}
        type_checking: dict[str, Any] = {}
        collect(self.ast.body, self.names, type_checking)
        if "__getattr__" in self.names:  # a lazy package: its names are those of the TYPE_CHECKING imports
            self.names = {**type_checking, **self.names}
        self._classes: dict[str, tuple[ast.ClassDef, list[ast.FunctionDef]]] | None = None

    def resolve_from(self, node: ast.ImportFrom) -> str:
        if not node.level:
            return node.module or ""
        base = self.name if self.is_pkg else self.name.rsplit(".", 1)[0]
        for _ in range(node.level - 1):
            base = base.rsplit(".", 1)[0]
        return f"{base}.{node.module}" if node.module else base

    def classes(self) -> dict[str, tuple[ast.ClassDef, list[ast.FunctionDef]]]:
        """Every class by qualname (``f.<locals>.C`` for one defined in a function), with its enclosing functions."""
        if self._classes is None:
            found: dict[str, tuple[ast.ClassDef, list[ast.FunctionDef]]] = {}

            def walk(body: list[ast.stmt], prefix: str, funcs: list[ast.FunctionDef]) -> None:
                for s in body:
                    if isinstance(s, ast.ClassDef):
                        found[prefix + s.name] = (s, funcs)
                        walk(s.body, f"{prefix}{s.name}.", funcs)
                    elif isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        walk(s.body, f"{prefix}{s.name}.<locals>.", [*funcs, s])  # type: ignore[list-item]
                    elif isinstance(s, (ast.If, ast.Try, ast.With)):
                        for field in ("body", "orelse", "finalbody"):
                            walk(getattr(s, field, []) or [], prefix, funcs)

            walk(self.ast.body, "", [])
            self._classes = found
        return self._classes


class Tree:
    """The ``vllm`` package source, parsed on demand."""

    def __init__(self, pkg: Path):
        self.pkg = pkg  # .../vllm
        self._mods: dict[str, Mod | None] = {}

    def path_of(self, name: str) -> Path | None:
        if name != "vllm" and not name.startswith("vllm."):
            return None
        base = self.pkg.parent / name.replace(".", "/")
        for p in (base.with_suffix(".py"), base / "__init__.py"):
            if p.is_file():
                return p
        return None

    def module(self, name: str) -> Mod | None:
        if name not in self._mods:
            p = self.path_of(name)
            self._mods[name] = Mod(self, name, p) if p else None
        return self._mods[name]

    def rel(self, rel: str) -> Mod:
        m = self.module("vllm." + rel.removesuffix(".py").replace("/", "."))
        assert m is not None, rel
        return m
