"""One watched kind's objects as the cache reads them: by a key (an owner's, a namespace's name, a Job's), each
object once, by its uid.

A `Store` is what the cache's indexes are (`Mapping[key, Collection[object]]`), fed by the informers
(`k8s/informer.py`): `put` places an object under its key, moving it when its key changed (a child whose
owner label changed), `remove` drops it by uid. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Mapping
from typing import Any


class Store(Mapping[Hashable, list[dict[str, Any]]]):
    def __init__(self) -> None:
        self._by_key: dict[Hashable, dict[str, dict[str, Any]]] = {}
        self._key_of: dict[str, Hashable] = {}  # uid -> key

    def put(self, uid: str, key: Hashable | None, value: dict[str, Any]) -> None:
        """Keep `value` under `key` (None: the object belongs to nothing we keep; dropped if it was kept)."""
        old = self._key_of.get(uid)
        if old is not None and old != key:
            self.remove(uid)
        if key is None:
            return
        self._by_key.setdefault(key, {})[uid] = value
        self._key_of[uid] = key

    def remove(self, uid: str) -> dict[str, Any] | None:
        key = self._key_of.pop(uid, None)
        if key is None:
            return None
        bucket = self._by_key[key]
        value = bucket.pop(uid, None)
        if not bucket:
            del self._by_key[key]
        return value

    def objects(self) -> int:
        return len(self._key_of)

    def __getitem__(self, key: Hashable) -> list[dict[str, Any]]:
        return list(self._by_key[key].values())

    def __iter__(self) -> Iterator[Hashable]:
        return iter(list(self._by_key))

    def __len__(self) -> int:
        return len(self._by_key)

    def __contains__(self, key: object) -> bool:
        return key in self._by_key
