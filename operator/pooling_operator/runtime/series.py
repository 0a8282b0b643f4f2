"""The status series of every watched resource (status/series.py computes them), set from the watch: an owner's
event (the reconcile's status write and the autoscaler's alike) sets them, its deletion drops them. The one holder
of which label values each object has, so that a value no longer in its status, and a gone object, leave no
stale series behind."""

from __future__ import annotations

from typing import Any

from pooling_operator.k8s.cache import OwnerKey
from pooling_operator.status.exposition import Gauges
from pooling_operator.status.series import FAMILIES, OBJECT_LABELS, series

# plain numbers per object, not one prometheus_client child each (status/exposition.py: the memory at 10,000 services)
GAUGES = {f.name: Gauges(f.name, f.help, [*OBJECT_LABELS, f.label]) for f in FAMILIES}


class Series:
    def __init__(self) -> None:
        self._set: dict[OwnerKey, dict[str, set[str]]] = {}  # what is set now, per object and family

    def publish(self, key: OwnerKey, body: dict[str, Any]) -> None:
        new = series(body)
        old = self._set.pop(key, {})
        for family, values in old.items():
            for value in values - set(new.get(family, {})):
                GAUGES[family].remove((*key, value))
        for family, numbers in new.items():
            for value, number in numbers.items():
                GAUGES[family].set((*key, value), number)
        if new:
            self._set[key] = {family: set(values) for family, values in new.items()}

    def drop(self, key: OwnerKey) -> None:
        for family, values in self._set.pop(key, {}).items():
            for value in values:
                GAUGES[family].remove((*key, value))

    def __len__(self) -> int:
        return len(self._set)
