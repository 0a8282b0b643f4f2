"""Whose an existing object is, when the operator is about to write a child of the same kind and name.

The operator writes a child only when it is the child's controller, or when nobody else is: a name held by an
object another controller owns, or by one with no controller at all (a Service or Deployment someone created by
hand, a leftover of `kubectl delete --cascade=orphan`), is never changed, adopted or deleted. The one object it
takes over is its own predecessor's: a child controlled by a resource of the same kind and name with another uid,
the earlier incarnation of a resource deleted and created again (only one such resource exists at a time, so the
other is gone, and the garbage collector would delete the child anyway).

Pure: the reconcile (reconcile/writes.py) asks, with the object as the API server returned it.
"""

from __future__ import annotations

from typing import Any


def controller_of(obj: dict[str, Any]) -> dict[str, Any] | None:
    """The object's controller reference, if it has one."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return next((r for r in refs if isinstance(r, dict) and r.get("controller")), None)


def held_by(found: dict[str, Any], owner: dict[str, Any]) -> str | None:
    """None when `owner` may write `found` (it or its predecessor controls it); otherwise who holds the name, as
    a phrase for a condition ("controlled by PoolingService payments", "with no controller, written by kubectl")."""
    meta = owner["metadata"]
    ref = controller_of(found)
    if ref is not None:
        if ref.get("uid") == meta.get("uid"):
            return None
        if ref.get("kind") == owner.get("kind") and ref.get("name") == meta.get("name") \
                and str(ref.get("apiVersion", "")).split("/")[0] == str(owner.get("apiVersion", "")).split("/")[0]:
            return None  # the predecessor's: the same kind and name, deleted and created again
        return f"controlled by {ref.get('kind', '?')} {ref.get('name', '?')}"
    managers = sorted({str(m.get("manager")) for m in (found.get("metadata") or {}).get("managedFields") or []
                       if isinstance(m, dict) and m.get("manager")})  # fmt: skip
    return "with no controller" + (f", written by {', '.join(managers)}" if managers else "")
