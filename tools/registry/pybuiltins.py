"""The Python builtins the abstract interpreter knows (``set``, ``getattr``, ``isinstance``, ...), over thunks."""

from __future__ import annotations

from .classes import key, member
from .values import (
    AnyOf,
    BuiltinV,
    ClassV,
    Const,
    DictV,
    ExternalV,
    FuncV,
    Inst,
    Thunk,
    UnionV,
    Unknown,
    V,
    known,
    union,
)

_MISSING = object()


class Builtins:
    """Mixed into ``Interp``: its ``builtins`` are these ``_b_<name>`` methods; ``getattr`` reads through the
    interpreter's ``attr``, which the class mixed into must define."""

    def attr(self, obj: V, name: str) -> V:
        raise NotImplementedError

    def _b_set(self, x: Thunk | None = None) -> V:
        if x is None:
            return Const(frozenset())
        v = x.value()
        if isinstance(v, DictV):
            keys = [k.value() for k, _ in v.items]
            if all(isinstance(k, Const) for k in keys):
                return Const(frozenset(k.value for k in keys))  # type: ignore[attr-defined]
            return Unknown("set(dict)")
        if isinstance(v, Const) and isinstance(v.value, (tuple, frozenset)):
            return Const(frozenset(v.value))
        if isinstance(v, UnionV):
            return union([self._b_set(known(o)) for o in v.options])
        return Unknown("set()")

    _b_frozenset = _b_set

    def _b_getattr(self, obj: Thunk, name: Thunk, default: Thunk | None = None) -> V:
        n = name.value()
        if not isinstance(n, Const):
            return Unknown("getattr")
        o = obj.value()
        if isinstance(o, Inst) and n.value not in o.attrs and member(o.cls.mro, n.value) is None:
            return default.value() if default else Unknown("getattr")
        if isinstance(o, ClassV) and member(o.cls.mro, n.value) is None:
            return default.value() if default else Unknown("getattr")
        return self.attr(o, n.value)

    def _b_hasattr(self, obj: Thunk, name: Thunk) -> V:
        v = self._b_getattr(obj, name, known(Const(_MISSING)))
        if isinstance(v, Const):
            return Const(v.value is not _MISSING)
        return Unknown("hasattr")

    def _b_isinstance(self, obj: Thunk, cls: Thunk) -> V:
        return self.isinstance(obj.value(), cls.value())

    def isinstance(self, o: V, c: V) -> V:
        if isinstance(o, UnionV):
            return union([self.isinstance(x, c) for x in o.options])
        if isinstance(c, Const) and isinstance(c.value, tuple):
            return Unknown("isinstance tuple")
        if isinstance(o, Const):
            return Const(False) if isinstance(c, (ClassV, ExternalV)) else Unknown("isinstance")
        if isinstance(o, (Inst, AnyOf)):
            if isinstance(c, ClassV):
                return Const(any(key(x) == key(c.cls) for x in o.cls.mro))
            if isinstance(c, ExternalV):
                return Const(any(isinstance(x, ExternalV) and x.dotted == c.dotted for x in o.cls.mro))
        if isinstance(o, (ClassV, FuncV, DictV)):
            return Const(False) if isinstance(c, ClassV) else Unknown("isinstance")
        return Unknown("isinstance")

    def _b_super(self, *args: Thunk) -> V:
        return Unknown("super")

    def _b_len(self, x: Thunk) -> V:
        v = x.value()
        return Const(len(v.value)) if isinstance(v, Const) and hasattr(v.value, "__len__") else Unknown("len")

    def _b_callable(self, x: Thunk) -> V:
        v = x.value()
        return Const(True) if isinstance(v, (FuncV, ClassV, BuiltinV)) else Unknown("callable")

    def _b_get_args(self, x: Thunk) -> V:
        v = x.value()
        if isinstance(v, Const) and isinstance(v.value, tuple) and v.value[:1] == ("Literal",):
            return Const(v.value[1])
        return Unknown("get_args")
