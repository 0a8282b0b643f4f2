"""The classes and functions of the vLLM tree as the interpreter models them: a class's members, the class
attributes its decorators set, its C3 MRO over the resolved bases, and a name's lookup along an MRO; the static
scope of a function the interpreter did not run. What a class evaluates (its bases, its decorators) it asks of
the interpreter it is given (``values.Interpreter``)."""

from __future__ import annotations

import ast
from typing import Any

from .tree import Mod, collect
from .values import ClassV, ExternalV, FuncV, Inst, Interpreter, Scope, Thunk, known


class Func:
    def __init__(self, mod: Mod, node: ast.FunctionDef, parent: Scope | None, owner: Cls | None):
        self.mod, self.node, self.parent, self.owner = mod, node, parent, owner

    def decorators(self) -> set[str]:
        return {ast.unparse(d).split("(")[0].rsplit(".", 1)[-1] for d in self.node.decorator_list}


class Cls:
    """A class of the vLLM tree. ``env`` is the scope of the function it is defined in (the adapters'
    classes inside ``as_embedding_model`` & co.); ``mro`` may be handed in from a real class (runtime)."""

    def __init__(self, interp: Interpreter, mod: Mod, node: ast.ClassDef, env: Scope | None, qualname: str):
        self.interp, self.mod, self.node, self.env, self.qualname = interp, mod, node, env, qualname
        self._mro: list[Cls | ExternalV] | None = None
        self._deco_attrs: dict[str, Thunk] | None = None
        self.members: dict[str, ast.stmt] = {}
        for s in node.body:
            if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.members[s.name] = s
            elif isinstance(s, ast.Assign):
                for t in s.targets:
                    if isinstance(t, ast.Name):
                        self.members[t.id] = s
            elif isinstance(s, ast.AnnAssign) and s.value is not None and isinstance(s.target, ast.Name):
                self.members[s.target.id] = s

    def __repr__(self) -> str:
        return f"Cls({self.qualname})"

    def scope(self) -> Scope:
        return self.env or self.interp.module_scope(self.mod)

    @property
    def mro(self) -> list[Cls | ExternalV]:
        if self._mro is None:
            self._mro = [self]  # guards recursion
            bases: list[list[Cls | ExternalV]] = []
            for b in self.node.bases:
                expr = b.value if isinstance(b, ast.Subscript) else b
                v = self.interp.eval(expr, self.scope())
                if isinstance(v, ClassV):
                    bases.append(v.cls.mro)
                elif isinstance(v, ExternalV):
                    bases.append([v])
            self._mro = [self, *c3(bases)]
        return self._mro

    def deco_attrs(self) -> dict[str, Thunk]:
        """Class attributes set by decorators of vLLM's interfaces (``@default_pooling_type``, ``@attn_type``)."""
        if self._deco_attrs is None:
            self._deco_attrs = {}
            for d in self.node.decorator_list:
                if not (isinstance(d, ast.Call) and isinstance(d.func, ast.Name)):
                    continue
                f = self.interp.eval(d.func, self.scope())
                if not isinstance(f, FuncV) or not f.fn.mod.rel.startswith("model_executor/models/interfaces"):
                    continue
                inner = self.interp.call(f, [Thunk(a, self.scope()) for a in d.args],
                                         {k.arg: Thunk(k.value, self.scope()) for k in d.keywords if k.arg})  # fmt: skip
                sink = Inst(self)
                if isinstance(inner, FuncV):
                    self.interp.call(inner, [known(sink)], {})
                self._deco_attrs.update(sink.attrs)
        return self._deco_attrs


def key(x: Cls | ExternalV) -> object:
    return x.dotted if isinstance(x, ExternalV) else x


def c3(seqs: list[list[Cls | ExternalV]]) -> list[Cls | ExternalV]:
    seqs = [list(s) for s in seqs if s] + [[s[0] for s in seqs if s]]
    out: list[Cls | ExternalV] = []
    while True:
        seqs = [s for s in seqs if s]
        if not seqs:
            return out
        for s in seqs:
            head = s[0]
            if not any(key(head) in [key(x) for x in t[1:]] for t in seqs):
                break
        else:  # inconsistent: depth-first, first seen
            seen = {key(x) for x in out}
            for s in seqs:
                for x in s:
                    if key(x) not in seen:
                        out.append(x)
                        seen.add(key(x))
            return out
        out.append(head)
        seqs = [t[1:] if key(t[0]) == key(head) else t for t in seqs]


NN_MODULE = {"torch.nn.Module", "torch.nn.modules.module.Module"}


def member(mro: list[Cls | ExternalV], name: str, start: int = 0) -> tuple[Cls | ExternalV, Any] | None:
    """Where ``name`` is found along ``mro`` from ``start``: the class and its member (a statement, or a
    decorator's thunk); ``nn.Module`` has ``__init__`` and ``forward``."""
    for c in mro[start:]:
        if isinstance(c, ExternalV):
            if c.dotted in NN_MODULE and name in ("__init__", "forward"):
                return c, name
            continue
        if name in c.deco_attrs():
            return c, c.deco_attrs()[name]
        if name in c.members:
            return c, c.members[name]
    return None


class StaticScope(Scope):
    """The names of a function the interpreter did not run (a class's enclosing function, for runtime MROs)."""

    def __init__(self, interp: Interpreter, mod: Mod, fn: ast.FunctionDef, parent: Scope | None):
        super().__init__(interp, mod, parent)
        names: dict[str, Any] = {}
        collect(fn.body, names)
        for name, b in names.items():
            self.vars[name] = interp.binding_thunk(mod, b, self)
