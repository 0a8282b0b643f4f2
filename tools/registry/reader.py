"""What vLLM makes of one class, read from its source: the registry, the small tables of config/model.py and
tasks.py, a class's ``_ModelInfo`` facts, the adapters of ``--convert``, and the pooler a class builds."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from .classes import Cls, StaticScope, member
from .interfaces import (
    static_is_vllm_model,
    static_supports_lora,
    static_supports_multimodal,
    static_supports_pp,
)
from .interp import Interp
from .tree import Tree
from .values import AnyOf, ClassV, Const, ExternalV, FuncV, Inst, Scope, Thunk, UnionV, Unknown, V, known

POOLER_LAYER = "model_executor/layers/pooler/"


class Reader:
    """The source reading shared by both modes: registry, class facts, pooler sites and tasks (the remote-code
    reading, remote_code.py, uses it too)."""

    def __init__(self, pkg: Path, sdist: Path | None):
        self.tree = Tree(pkg)
        self.interp = Interp(self.tree)
        self.sdist = sdist
        self.tasks_order = self.pooling_tasks()

    # ---------------------------------------------------------------- small tables from the source
    def pooling_tasks(self) -> tuple[str, ...]:
        v = self.interp.global_(self.tree.rel("tasks.py"), "POOLING_TASKS")
        assert isinstance(v, Const), v
        return tuple(v.value)

    def where_def(self, rel: str, name: str) -> str:
        """file:first-last line of a module-level definition."""
        for stmt in self.tree.rel(rel).ast.body:
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [getattr(stmt, "target", None)]
            if getattr(stmt, "name", None) == name or any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return f"{rel}:{stmt.lineno}-{stmt.end_lineno}"
        raise LookupError(f"{rel}: {name}")

    def suffix_defaults(self) -> list[tuple[str, str, str]]:
        node = self.tree.rel("config/model.py").names["_SUFFIX_TO_DEFAULTS"]
        return [(e.elts[0].value, e.elts[1].elts[0].value, e.elts[1].elts[1].value) for e in node.elts]  # type: ignore[attr-defined]

    def task_priority(self) -> tuple[list[str], str, str]:
        mod = self.tree.rel("config/model.py")
        cls = mod.names["ModelConfig"]
        fn = next(s for s in cls.body if isinstance(s, ast.FunctionDef) and s.name == "get_pooling_task")
        prio = next(s.value for s in ast.walk(fn) if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
                    and s.target.id == "priority")  # fmt: skip
        token = next(c.value for c in ast.walk(fn) if isinstance(c, ast.Constant) and isinstance(c.value, str)
                     and c.value.endswith("Classification"))  # fmt: skip
        return [e.value for e in prio.elts], token, f"config/model.py:{fn.lineno}-{fn.end_lineno}"  # type: ignore[attr-defined]

    # ---------------------------------------------------------------- the registry
    def registry(self) -> dict[str, dict[str, Any]]:
        """Every registered name: its module, class and the line that defines it (of the dict merged last into
        ``_VLLM_MODELS``; an entry copied by a ``**{... for ...}`` splat keeps the line it is copied from)."""
        mod = self.tree.rel("model_executor/models/registry.py")
        dicts: dict[str, dict[str, tuple[str, str, int]]] = {}
        order: list[str] = []
        for s in mod.ast.body:
            if isinstance(s, (ast.Assign, ast.AnnAssign)):
                target = s.targets[0] if isinstance(s, ast.Assign) else s.target
                if isinstance(target, ast.Name) and isinstance(s.value, ast.Dict) and target.id.endswith("_MODELS"):
                    if target.id == "_VLLM_MODELS":
                        order = [v.id for k, v in zip(s.value.keys, s.value.values, strict=True) if k is None
                                 and isinstance(v, ast.Name)]  # fmt: skip
                        continue
                    entries = self._registry_dict(s.value, dicts)
                    if entries is not None:
                        dicts[target.id] = entries
        out: dict[str, dict[str, Any]] = {}
        for name in order:
            for arch, (module, cls, line) in dicts[name].items():
                out[arch] = {"module": module, "cls": cls, "line": line}  # a later dict wins, as in _VLLM_MODELS
        return out

    def _registry_dict(self, d: ast.Dict, known_dicts: dict[str, dict[str, tuple[str, str, int]]]) -> dict[str, tuple[str, str, int]] | None:
        """One registry dict: arch -> (module, class, line). A ``**{k: v for k, v in D.items() if ...}`` splat
        is evaluated over D; its entries keep D's lines."""
        entries: dict[str, tuple[str, str, int]] = {}
        for k, v in zip(d.keys, d.values, strict=True):
            if k is None and isinstance(v, ast.Name):
                entries.update(known_dicts[v.id])
            elif k is None and isinstance(v, ast.DictComp):
                names = {n.id for n in ast.walk(v) if isinstance(n, ast.Name) and n.id in known_dicts}
                env = {n: {a: (m, c) for a, (m, c, _) in known_dicts[n].items()} for n in names}
                picked = eval(compile(ast.Expression(v), "<registry>", "eval"), {"__builtins__": {}}, env)
                lines = {a: line for n in names for a, (_, _, line) in known_dicts[n].items()}
                entries.update({a: (m, c, lines[a]) for a, (m, c) in picked.items()})
            elif isinstance(k, ast.Constant) and isinstance(v, ast.Tuple) and len(v.elts) == 2 and all(
                isinstance(x, ast.Constant) for x in v.elts
            ):
                m, c = (x.value for x in v.elts)  # type: ignore[attr-defined]
                entries[k.value] = (m, c, k.lineno)
            else:
                return None
        return entries

    @staticmethod
    def module_name(rel: str) -> str:
        return rel if rel.startswith("vllm.") else f"vllm.model_executor.models.{rel}"

    def static_class(self, module: str, name: str) -> Cls | None:
        m = self.tree.module(self.module_name(module))
        if m is None:
            return None
        v = self.interp.global_(m, name)
        return v.cls if isinstance(v, ClassV) else None

    def class_for_real(self, real: type) -> Cls | ExternalV:
        """The Cls of a real class: found by module and qualname, with the real MRO (runtime mode)."""
        mod = self.tree.module(real.__module__) if real.__module__.startswith("vllm") else None
        found = mod.classes().get(real.__qualname__) if mod else None
        if mod is None or found is None:
            return ExternalV(f"{real.__module__}.{real.__qualname__}")
        node, funcs = found
        env: Scope | None = None
        for fn in funcs:
            env = StaticScope(self.interp, mod, fn, env)
        c = self.interp.cls(mod, node, env, real.__qualname__)
        if c._mro is None:
            c._mro = [c] + [self.class_for_real(k) for k in real.__mro__[1:]]
        return c

    # ---------------------------------------------------------------- class facts (static)
    def facts(self, cls: Cls) -> dict[str, Any]:
        i, mro = self.interp, cls.mro
        vllm_model = static_is_vllm_model(mro)
        score_types = set()
        for c in mro:
            if isinstance(c, Cls):
                st = i.class_attr([c], "score_type", "bi-encoder")
                if st != "bi-encoder":
                    score_types.add(st)
        return {
            "generate": vllm_model and member(mro, "compute_logits") is not None,
            "pooling": vllm_model and i.class_attr(mro, "is_pooling_model", False) is True,
            "attn": i.class_attr(mro, "attn_type", "decoder"),
            "seq_pooling": i.class_attr(mro, "default_seq_pooling_type", "LAST"),
            "tok_pooling": i.class_attr(mro, "default_tok_pooling_type", "ALL"),
            "score": score_types.pop() if len(score_types) == 1 else "bi-encoder",
            "lora": static_supports_lora(i.class_attr, mro),
            "pp": static_supports_pp(i.class_attr, mro),
            "mm": static_supports_multimodal(i.class_attr, mro),
        }

    def adapted(self, cls_v: ClassV, convert: str) -> Cls | None:
        fn = {"embed": "as_embedding_model", "classify": "as_seq_cls_model"}[convert]
        f = self.interp.global_(self.tree.rel("model_executor/models/adapters.py"), fn)
        v = self.interp.call(f, [known(cls_v)], {})
        return v.cls if isinstance(v, ClassV) else None

    # ---------------------------------------------------------------- the pooler
    def pooler_site(self, cls: Cls) -> tuple[Thunk, Inst] | None:
        """Where the class's pooler comes from: the factory expression the last ``self.pooler = ...`` of its
        ``__init__`` leads to, following local names and ``self.<method>(...)`` calls."""
        me = self.interp.construct(
            cls, [], {"vllm_config": known(Unknown("vllm_config")), "prefix": known(Const(""))}, track=True
        )
        if not me.pooler_sites:
            return None
        t = me.pooler_sites[-1]
        for _ in range(20):
            nxt = self._follow(t, me)
            if nxt is None:
                break
            t = nxt
        return t, me

    def _follow(self, t: Thunk, me: Inst) -> Thunk | None:
        e, scope = t.expr, t.scope
        if e is None or scope is None:
            return None
        if isinstance(e, ast.Name):
            inner = scope.find(e.id)
            return inner if inner is not None and inner.expr is not None else None
        if isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and isinstance(e.func.value, ast.Name):
            if scope.get(e.func.value.id) is me:
                f = self.interp.attr(me, e.func.attr)
                if isinstance(f, FuncV) and not f.fn.mod.rel.startswith(POOLER_LAYER):
                    args = [Thunk(a, scope) for a in e.args]
                    kwargs = {k.arg: Thunk(k.value, scope) for k in e.keywords if k.arg}
                    _, rets, _ = self.interp.run(f, args, kwargs)
                    return rets[-1] if rets else None
        return None

    def static_tasks(self, site: Thunk) -> list[str] | None:
        v = site.value()
        ts = self.tasks_of(v)
        return None if ts is None else self.order(ts)

    def tasks_of(self, v: V) -> set[str] | None:
        if isinstance(v, UnionV):
            got = [self.tasks_of(o) for o in v.options]
            return got[0] if got and all(g == got[0] for g in got) else None
        if isinstance(v, (Inst, AnyOf)):
            r = self.interp.call(self.interp.attr(v, "get_supported_tasks"), [], {})
            if isinstance(r, Const) and isinstance(r.value, (frozenset, tuple)):
                return set(r.value)
        return None

    def order(self, tasks: set[str] | frozenset[str]) -> list[str]:
        extra = sorted(set(tasks) - set(self.tasks_order))
        return [t for t in self.tasks_order if t in tasks] + extra

    @staticmethod
    def where(t: Thunk) -> str:
        assert t.scope is not None and t.expr is not None
        return f"{t.scope.mod.rel}:{t.expr.lineno}"
