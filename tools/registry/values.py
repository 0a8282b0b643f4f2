"""The values of the abstract interpreter: what an expression evaluates to (``V`` and its kinds), thunks (an
expression and its scope, evaluated at most once, on demand), the scopes names are bound in, and the operators
on values (truth, comparison, arithmetic on constants).

The bottom of the interpreter's modules (values <- classes <- pybuiltins, interfaces <- interp): what a value
or a scope needs of the interpreter and of the class model above it is said here, as protocols, and handed in.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import Any, Protocol

from .tree import Mod


class Interpreter(Protocol):
    """What the values and the class model ask of the interpreter (``interp.Interp``); each ``Scope`` holds it."""

    def eval(self, e: ast.expr, scope: Scope) -> V: ...

    def global_(self, mod: Mod, name: str) -> V: ...

    def call(self, f: V, args: list[Thunk], kwargs: dict[str, Thunk]) -> V: ...

    def module_scope(self, mod: Mod) -> Scope: ...

    def binding_thunk(self, mod: Mod, b: Any, scope: Scope) -> Thunk: ...


class ClassModel(Protocol):
    """A class of the vLLM tree as values hold it (``classes.Cls``): here only its name is read."""

    qualname: str


class FuncModel(Protocol):
    """A function of the vLLM tree as values hold it (``classes.Func``): here only its node is read."""

    node: ast.FunctionDef


class V:
    """A value the interpreter computed."""


class Unknown(V):
    def __init__(self, why: str = ""):
        self.why = why

    def __repr__(self) -> str:
        return f"Unknown({self.why})"


class Const(V):
    def __init__(self, value: Any):
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Const) and type(other.value) is type(self.value) and other.value == self.value

    def __hash__(self) -> int:
        return hash(repr(self.value))

    def __repr__(self) -> str:
        return f"Const({self.value!r})"


class ExternalV(V):
    """Something outside the vLLM source tree (torch, transformers, typing...), by dotted name."""

    def __init__(self, dotted: str):
        self.dotted = dotted

    def __repr__(self) -> str:
        return f"External({self.dotted})"


class ModuleV(V):
    def __init__(self, mod: Mod):
        self.mod = mod


class ClassV(V):
    def __init__(self, cls: ClassModel):
        self.cls = cls

    def __repr__(self) -> str:
        return f"Class({self.cls.qualname})"


class FuncV(V):
    def __init__(self, fn: FuncModel, bound: V | None = None):
        self.fn, self.bound = fn, bound

    def __repr__(self) -> str:
        return f"Func({self.fn.node.name})"


class BuiltinV(V):
    def __init__(self, name: str, impl: Callable[..., V]):
        self.name, self.impl = name, impl


class Inst(V):
    """An instance of a vLLM class; ``attrs`` are what its ``__init__`` assigned (thunks, evaluated lazily)."""

    def __init__(self, cls: ClassModel, track: bool = False):
        self.cls, self.attrs = cls, {}
        self.track = track  # the model under study: its pooler assignments are recorded
        self.pooler_sites: list[Thunk] = []

    def __repr__(self) -> str:
        return f"Inst({self.cls.qualname})"


class AnyOf(V):
    """An instance of ``cls`` or a subclass, known only by a return annotation."""

    def __init__(self, cls: ClassModel):
        self.cls = cls


class DictV(V):
    def __init__(self, items: list[tuple[Thunk, Thunk]]):
        self.items = items


class SuperV(V):
    def __init__(self, owner: ClassModel, obj: V):
        self.owner, self.obj = owner, obj


class UnionV(V):
    def __init__(self, options: list[V]):
        self.options = options


def union(options: list[V]) -> V:
    flat: list[V] = []
    for o in options:
        flat.extend(o.options if isinstance(o, UnionV) else [o])
    if not flat:
        return Unknown("empty union")
    if all(isinstance(o, Const) for o in flat) and len(set(flat)) == 1:
        return flat[0]
    if len(flat) == 1:
        return flat[0]
    return UnionV(flat)


class Thunk:
    """An expression and its scope, evaluated at most once, on demand."""

    def __init__(self, expr: ast.expr | None, scope: Scope | None, value: V | None = None):
        self.expr, self.scope = expr, scope
        self._value, self._busy = value, False

    def value(self) -> V:
        if self._value is None:
            if self._busy or self.expr is None or self.scope is None:
                return Unknown("recursive")
            self._busy = True
            try:
                self._value = self.scope.interp.eval(self.expr, self.scope)
            finally:
                self._busy = False
        return self._value


def known(v: V) -> Thunk:
    return Thunk(None, None, v)


class LazyThunk(Thunk):
    def __init__(self, fn: Callable[[], V]):
        super().__init__(None, None)
        self.fn = fn

    def value(self) -> V:
        if self._value is None:
            self._value = self.fn()
        return self._value


class Exec:
    def __init__(self) -> None:
        self.returns: list[Thunk] = []


class Scope:
    def __init__(self, interp: Interpreter, mod: Mod, parent: Scope | None = None, owner: ClassModel | None = None):
        self.interp, self.mod, self.parent, self.owner = interp, mod, parent, owner
        self.vars: dict[str, Thunk] = {}

    def find(self, name: str) -> Thunk | None:
        s: Scope | None = self
        while s is not None:
            if name in s.vars:
                return s.vars[name]
            s = s.parent
        return None

    def get(self, name: str) -> V:
        t = self.find(name)
        return t.value() if t is not None else self.interp.global_(self.mod, name)


def scope_self(scope: Scope) -> V:
    fn_scope: Scope | None = scope
    while fn_scope is not None:
        if fn_scope.owner is not None:
            t = fn_scope.vars.get("self")
            return t.value() if t else Unknown("self")
        fn_scope = fn_scope.parent
    return Unknown("self")


def scope_owner(scope: Scope) -> ClassModel:
    s: Scope | None = scope
    while s is not None:
        if s.owner is not None:
            return s.owner
        s = s.parent
    raise LookupError("super() outside a method")


def truth(v: V) -> bool | None:
    if isinstance(v, Const):
        return bool(v.value)
    if isinstance(v, (Inst, AnyOf, ClassV, FuncV)):
        return True
    if isinstance(v, UnionV):
        ts = {truth(o) for o in v.options}
        return ts.pop() if len(ts) == 1 else None
    return None


def compare(op: ast.cmpop, a: V, b: V) -> V:
    if isinstance(op, (ast.Is, ast.IsNot)) and isinstance(b, Const) and b.value is None:
        if isinstance(a, Const):
            r = a.value is None
        elif isinstance(a, (Inst, AnyOf, ClassV, FuncV, DictV)):
            r = False
        else:
            return Unknown("is")
        return Const(r if isinstance(op, ast.Is) else not r)
    if isinstance(a, Const) and isinstance(b, Const):
        try:
            r = {ast.Eq: lambda: a.value == b.value, ast.NotEq: lambda: a.value != b.value,
                 ast.In: lambda: a.value in b.value, ast.NotIn: lambda: a.value not in b.value}[type(op)]()  # fmt: skip
        except (KeyError, TypeError):
            return Unknown("compare")
        return Const(r)
    return Unknown("compare")


def binop(op: ast.operator, a: V, b: V) -> V:
    if isinstance(a, UnionV):
        return union([binop(op, x, b) for x in a.options])
    if isinstance(b, UnionV):
        return union([binop(op, a, x) for x in b.options])
    if isinstance(a, Const) and isinstance(b, Const):
        try:
            if isinstance(op, ast.BitAnd):
                return Const(frozenset(a.value) & frozenset(b.value))
            if isinstance(op, ast.BitOr):
                return Const(frozenset(a.value) | frozenset(b.value))
            if isinstance(op, ast.Sub):
                return Const(a.value - b.value)
            if isinstance(op, ast.Add):
                return Const(a.value + b.value)
            if isinstance(op, ast.FloorDiv):
                return Const(a.value // b.value)
        except TypeError:
            pass
    return Unknown("binop")
