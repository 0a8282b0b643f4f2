"""The abstract interpreter: evaluates expressions of the vLLM source to values, runs functions and
``__init__``s abstractly (assignments become thunks, evaluated only when read), and follows names through
imports, ``from x import *`` and lazy packages. Enough Python to follow ``self.pooler = ...`` into a pooler
factory and to evaluate its ``get_supported_tasks()``. The top of the interpreter's modules: the values, the
class model, the builtins and vLLM's intercepted helpers below it are handed this interpreter, none imports it."""

from __future__ import annotations

import ast
from typing import Any

from .classes import Cls, Func, key, member
from .interfaces import INTERCEPTS
from .pybuiltins import Builtins
from .tree import Mod, Tree, collect, platform_test
from .values import (
    AnyOf,
    BuiltinV,
    ClassV,
    Const,
    DictV,
    Exec,
    ExternalV,
    FuncV,
    Inst,
    LazyThunk,
    ModuleV,
    Scope,
    SuperV,
    Thunk,
    UnionV,
    Unknown,
    V,
    binop,
    compare,
    known,
    scope_owner,
    scope_self,
    truth,
    union,
)

MAX_DEPTH = 80


class Interp(Builtins):
    def __init__(self, tree: Tree):
        self.tree = tree
        self._globals: dict[tuple[str, str], V] = {}
        self._busy: set[tuple[str, str]] = set()
        self._cls: dict[tuple[int, int], Cls] = {}
        self._mscopes: dict[str, Scope] = {}
        self.depth = 0
        self.builtins: dict[str, V] = {
            n: BuiltinV(n, getattr(self, f"_b_{n}"))
            for n in ("set", "frozenset", "getattr", "hasattr", "isinstance", "super", "len", "callable", "get_args")
        }

    # ---------------------------------------------------------------- names
    def module_scope(self, mod: Mod) -> Scope:
        if mod.name not in self._mscopes:
            self._mscopes[mod.name] = Scope(self, mod)
        return self._mscopes[mod.name]

    def cls(self, mod: Mod, node: ast.ClassDef, env: Scope | None, qualname: str | None = None) -> Cls:
        k = (id(node), id(env))
        if k not in self._cls:
            self._cls[k] = Cls(self, mod, node, env, qualname or node.name)
        return self._cls[k]

    def binding_thunk(self, mod: Mod, b: Any, scope: Scope) -> Thunk:
        if isinstance(b, ast.ClassDef):
            return known(ClassV(self.cls(mod, b, scope)))
        if isinstance(b, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return known(FuncV(Func(mod, b, scope, None)))  # type: ignore[arg-type]
        if isinstance(b, tuple):
            return known(self.import_value(mod, b))
        return Thunk(b, scope)

    def import_value(self, mod: Mod, b: tuple[Any, ...]) -> V:
        if b[0] == "import":
            m = self.tree.module(b[1])
            return ModuleV(m) if m else ExternalV(b[1])
        _, node, orig = b
        full = mod.resolve_from(node)
        target = self.tree.module(full)
        if target is None:
            return ExternalV(f"{full}.{orig}")
        if orig not in target.names and (sub := self.tree.module(f"{full}.{orig}")):
            return ModuleV(sub)
        return self.global_(target, orig)

    def global_(self, mod: Mod, name: str) -> V:
        k = (mod.name, name)
        if k in self._globals:
            return self._globals[k]
        if k in self._busy:
            return Unknown(f"cycle {name}")
        b = mod.names.get(name)
        if b is None:
            for star in mod.names.get("*", []):  # from .x import *
                target = self.tree.module(mod.resolve_from(star))
                if target is not None and (name in target.names or "*" in target.names):
                    v = self.global_(target, name)
                    if not (isinstance(v, ExternalV) and v.dotted.startswith("builtins.")):
                        return v
            if name == "TYPE_CHECKING":
                return Const(False)
            if name in ("True", "False", "None"):
                return Const({"True": True, "False": False, "None": None}[name])
            if mod.is_pkg and (sub := self.tree.module(f"{mod.name}.{name}")):
                return ModuleV(sub)
            return self.builtins.get(name) or ExternalV(f"builtins.{name}")
        self._busy.add(k)
        try:
            if isinstance(b, ast.ClassDef):
                v: V = ClassV(self.cls(mod, b, None))
            elif isinstance(b, (ast.FunctionDef, ast.AsyncFunctionDef)):
                v = FuncV(Func(mod, b, None, None))  # type: ignore[arg-type]
            elif isinstance(b, tuple):
                v = self.import_value(mod, b)
            else:
                v = self.eval(b, self.module_scope(mod))
        finally:
            self._busy.discard(k)
        self._globals[k] = v
        return v

    # ---------------------------------------------------------------- class members
    def class_attr(self, mro: list[Cls | ExternalV], name: str, default: Any) -> Any:
        found = member(mro, name)
        if found is None:
            return default
        c, m = found
        v = self.member_value(c, m, None)
        return v.value if isinstance(v, Const) else default

    def member_value(self, c: Cls | ExternalV, m: Any, obj: V | None) -> V:
        if isinstance(c, ExternalV):
            return ExternalV(f"{c.dotted}.{m}")
        if isinstance(m, Thunk):
            return m.value()
        if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)):
            fn = Func(c.mod, m, c.env, c)  # type: ignore[arg-type]
            decos = fn.decorators()
            if "staticmethod" in decos:
                return FuncV(fn)
            if "classmethod" in decos:
                cv = obj if isinstance(obj, ClassV) else ClassV(obj.cls) if isinstance(obj, (Inst, AnyOf)) else ClassV(c)
                return FuncV(fn, cv)
            if "property" in decos or "cached_property" in decos:
                return self.call(FuncV(fn, obj), [], {}) if isinstance(obj, (Inst, AnyOf)) else Unknown("property")
            return FuncV(fn, obj if isinstance(obj, (Inst, AnyOf)) else None)
        value = m.value if isinstance(m, (ast.Assign, ast.AnnAssign)) else None
        return self.eval(value, c.scope()) if value is not None else Unknown("member")

    def attr(self, obj: V, name: str) -> V:
        if isinstance(obj, UnionV):
            return union([self.attr(o, name) for o in obj.options])
        if isinstance(obj, (Inst, AnyOf)):
            if isinstance(obj, Inst) and name in obj.attrs:
                return obj.attrs[name].value()
            found = member(obj.cls.mro, name)
            return self.member_value(*found, obj) if found else Unknown(f".{name}")
        if isinstance(obj, ClassV):
            if name == "__name__":
                return Const(obj.cls.node.name)
            found = member(obj.cls.mro, name)
            return self.member_value(*found, obj) if found else Unknown(f".{name}")
        if isinstance(obj, SuperV):
            mro = obj.obj.cls.mro if isinstance(obj.obj, (Inst, AnyOf)) else obj.owner.mro
            idx = next((i for i, c in enumerate(mro) if key(c) == key(obj.owner)), 0)
            found = member(mro, name, idx + 1)
            return self.member_value(*found, obj.obj) if found else Unknown(f"super().{name}")
        if isinstance(obj, ModuleV):
            return self.global_(obj.mod, name)
        if isinstance(obj, ExternalV):
            return ExternalV(f"{obj.dotted}.{name}")
        if isinstance(obj, DictV) and name == "items":
            return BuiltinV("items", lambda: obj)
        return Unknown(f".{name}")

    # ---------------------------------------------------------------- expressions
    def eval(self, e: ast.expr, scope: Scope) -> V:
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                return Unknown("depth")
            return self._eval(e, scope)
        except RecursionError:
            return Unknown("recursion")
        finally:
            self.depth -= 1

    def _eval(self, e: ast.expr, scope: Scope) -> V:
        if isinstance(e, ast.Constant):
            return Const(e.value)
        if isinstance(e, ast.Name):
            return scope.get(e.id)
        if isinstance(e, ast.Attribute):
            return self.attr(self.eval(e.value, scope), e.attr)
        if isinstance(e, ast.Call):
            if (plat := platform_test(e)) is not None:
                return Const(plat)
            f = self.eval(e.func, scope)
            args = [Thunk(a, scope) for a in e.args if not isinstance(a, ast.Starred)]
            kwargs = {k.arg: Thunk(k.value, scope) for k in e.keywords if k.arg}
            if isinstance(f, BuiltinV) and f.name == "super":
                if len(e.args) == 2:  # super(Cls, self): the MRO after Cls
                    owner = self.eval(e.args[0], scope)
                    if isinstance(owner, ClassV):
                        return SuperV(owner.cls, self.eval(e.args[1], scope))
                try:
                    return SuperV(scope_owner(scope), scope_self(scope))
                except LookupError:
                    return Unknown("super()")
            return self.call(f, args, kwargs)
        if isinstance(e, (ast.Set, ast.Tuple, ast.List)):
            vals = [self.eval(x, scope) for x in e.elts]
            if all(isinstance(v, Const) for v in vals):
                items = [v.value for v in vals]  # type: ignore[attr-defined]
                return Const(frozenset(items) if isinstance(e, ast.Set) else tuple(items))
            return Unknown("container")
        if isinstance(e, ast.Dict):
            return DictV([(Thunk(k, scope), Thunk(v, scope)) for k, v in zip(e.keys, e.values, strict=True) if k])
        if isinstance(e, ast.Subscript):
            base = self.eval(e.value, scope)
            if isinstance(base, ExternalV) and base.dotted.rsplit(".", 1)[-1] == "Literal":
                sl = e.slice.elts if isinstance(e.slice, ast.Tuple) else [e.slice]
                return Const(("Literal", tuple(x.value for x in sl if isinstance(x, ast.Constant))))
            return Unknown("subscript")
        if isinstance(e, ast.Compare) and len(e.ops) == 1:
            a, b = self.eval(e.left, scope), self.eval(e.comparators[0], scope)
            return compare(e.ops[0], a, b)
        if isinstance(e, ast.BoolOp):
            vals = [truth(self.eval(x, scope)) for x in e.values]
            if isinstance(e.op, ast.And):
                return Const(False) if False in vals else Const(True) if all(v is True for v in vals) else Unknown("and")
            return Const(True) if True in vals else Const(False) if all(v is False for v in vals) else Unknown("or")
        if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Not):
            t = truth(self.eval(e.operand, scope))
            return Unknown("not") if t is None else Const(not t)
        if isinstance(e, ast.BinOp):
            return binop(e.op, self.eval(e.left, scope), self.eval(e.right, scope))
        if isinstance(e, ast.IfExp):
            t = truth(self.eval(e.test, scope))
            if t is None:
                return union([self.eval(e.body, scope), self.eval(e.orelse, scope)])
            return self.eval(e.body if t else e.orelse, scope)
        return Unknown(type(e).__name__)

    # ---------------------------------------------------------------- calls
    def call(self, f: V, args: list[Thunk], kwargs: dict[str, Thunk]) -> V:
        if isinstance(f, UnionV):
            return union([self.call(o, args, kwargs) for o in f.options])
        if isinstance(f, BuiltinV):
            try:
                return f.impl(*args, **kwargs)
            except TypeError:
                return Unknown(f"builtin {f.name}")
        if isinstance(f, ClassV):
            return self.construct(f.cls, args, kwargs)
        if isinstance(f, FuncV):
            hook = INTERCEPTS.get((f.fn.mod.rel, f.fn.node.name))
            if hook is not None:
                return hook([a.value() for a in args])
            return self.run(f, args, kwargs)[0]
        if isinstance(f, ExternalV) and f.dotted.rsplit(".", 1)[-1] == "get_args":
            return self._b_get_args(*args)
        return Unknown("call")

    def construct(self, cls: Cls, args: list[Thunk], kwargs: dict[str, Thunk], track: bool = False) -> Inst:
        inst = Inst(cls, track)
        found = member(cls.mro, "__init__")
        if found and isinstance(found[1], (ast.FunctionDef, ast.AsyncFunctionDef)) and isinstance(found[0], Cls):
            self.run(FuncV(Func(found[0].mod, found[1], found[0].env, found[0]), inst), args, kwargs)  # type: ignore[arg-type]
        return inst

    def bind(self, f: FuncV, args: list[Thunk], kwargs: dict[str, Thunk]) -> Scope:
        fn = f.fn
        scope = Scope(self, fn.mod, fn.parent, fn.owner)
        a = fn.node.args
        params = [p.arg for p in a.posonlyargs + a.args]
        defaults = dict(zip(params[len(params) - len(a.defaults):], a.defaults, strict=True))
        defaults.update({p.arg: d for p, d in zip(a.kwonlyargs, a.kw_defaults, strict=True) if d is not None})
        positional = list(args)
        if f.bound is not None and params:
            positional.insert(0, known(f.bound))
        for p, t in zip(params, positional, strict=False):
            scope.vars[p] = t
        for k, t in kwargs.items():
            scope.vars[k] = t
        for p in params + [p.arg for p in a.kwonlyargs]:
            if p not in scope.vars:
                scope.vars[p] = Thunk(defaults[p], fn.parent or self.module_scope(fn.mod)) if p in defaults else known(
                    Unknown(f"param {p}")
                )
        for va in (a.vararg, a.kwarg):
            if va is not None:
                scope.vars[va.arg] = known(Unknown("varargs"))
        return scope

    def run(self, f: FuncV, args: list[Thunk], kwargs: dict[str, Thunk]) -> tuple[V, list[Thunk], Scope]:
        """Run a function; returns (its value, the thunks of its return statements, its scope)."""
        self.depth += 1
        try:
            scope = self.bind(f, args, kwargs)
            if self.depth > MAX_DEPTH:
                return Unknown("depth"), [], scope
            state = Exec()
            self.exec_block(f.fn.node.body, scope, state, certain=True)
            rets = state.returns
            if not rets:
                value: V = Const(None)
            else:
                value = union([t.value() for t in rets])
            if isinstance(value, (Unknown, UnionV)) and f.fn.node.returns is not None:
                ann = self.eval(f.fn.node.returns, f.fn.parent or self.module_scope(f.fn.mod))
                if isinstance(ann, ClassV):
                    value = AnyOf(ann.cls)
            return value, rets, scope
        except RecursionError:
            return Unknown("recursion"), [], Scope(self, f.fn.mod)
        finally:
            self.depth -= 1

    # ---------------------------------------------------------------- statements
    def exec_block(self, stmts: list[ast.stmt], scope: Scope, st: Exec, certain: bool) -> bool:
        """Execute abstractly: assignments are recorded as thunks (evaluated only when read); ``super().__init__``
        and calls handing ``self`` to a function run at once (they may assign ``self.pooler``). Returns False
        when the block surely ended (return/raise)."""
        for s in stmts:
            if isinstance(s, (ast.Assign, ast.AnnAssign)):
                if s.value is None:
                    continue
                t = Thunk(s.value, scope)
                for target in s.targets if isinstance(s, ast.Assign) else [s.target]:
                    self.assign(target, t, scope, s)
            elif isinstance(s, ast.AugAssign) and isinstance(s.target, ast.Name):
                old = scope.find(s.target.id)
                rhs = Thunk(s.value, scope)
                op = s.op
                scope.vars[s.target.id] = LazyThunk(lambda old=old, rhs=rhs, op=op: binop(
                    op, old.value() if old else Unknown("augassign"), rhs.value()))  # fmt: skip
            elif isinstance(s, ast.Expr) and isinstance(s.value, ast.Call):
                self.maybe_run_call(s.value, scope)
            elif isinstance(s, ast.If):
                t = truth(self.eval(s.test, scope))
                if t is True:
                    if not self.exec_block(s.body, scope, st, certain):
                        return False
                elif t is False:
                    if not self.exec_block(s.orelse, scope, st, certain):
                        return False
                else:
                    a = self.exec_block(s.body, scope, st, False)
                    b = self.exec_block(s.orelse, scope, st, False)
                    if certain and not a and not b:
                        return False
            elif isinstance(s, ast.With):
                if not self.exec_block(s.body, scope, st, certain):
                    return False
            elif isinstance(s, (ast.For, ast.While)):  # zero or more times: its returns are only candidates
                if isinstance(s, ast.For):
                    for n in ast.walk(s.target):
                        if isinstance(n, ast.Name):
                            scope.vars[n.id] = known(Unknown("loop variable"))
                self.exec_block(s.body, scope, st, False)
                self.exec_block(s.orelse, scope, st, False)
            elif isinstance(s, ast.Try):
                if not self.exec_block(s.body, scope, st, certain):
                    return False
                self.exec_block(s.finalbody, scope, st, certain)
            elif isinstance(s, ast.Return):
                st.returns.append(Thunk(s.value, scope) if s.value is not None else known(Const(None)))
                return False
            elif isinstance(s, ast.Raise):
                return False
            elif isinstance(s, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef, ast.Import, ast.ImportFrom)):
                names: dict[str, Any] = {}
                collect([s], names)
                for name, b in names.items():
                    scope.vars[name] = self.binding_thunk(scope.mod, b, scope)
        return True

    def assign(self, target: ast.expr, t: Thunk, scope: Scope, stmt: ast.stmt) -> None:
        if isinstance(target, ast.Name):
            scope.vars[target.id] = t
        elif isinstance(target, ast.Attribute):
            obj = self.eval(target.value, scope)
            if isinstance(obj, Inst):
                obj.attrs[target.attr] = t
                if obj.track and target.attr == "pooler":
                    obj.pooler_sites.append(t)

    def maybe_run_call(self, call: ast.Call, scope: Scope) -> None:
        f = call.func
        if isinstance(f, ast.Attribute) and f.attr == "__init__":
            self.eval(call, scope)  # super().__init__(...) / Base.__init__(self, ...)
            return
        me = scope_self(scope)
        if not isinstance(me, Inst) or not me.track:
            return
        if any(isinstance(a, ast.Name) and scope.get(a.id) is me for a in call.args):
            callee = self.eval(f, scope)
            if isinstance(callee, FuncV) and callee.bound is None:
                self.eval(call, scope)
