"""Operator shards: each replica set owns a disjoint set of namespaces, so a platform too big for one process
splits it (``pooling-operator run --shard I/N``) without a second code path. Pure.

A namespace belongs to shard ``sha256(name) mod N`` (the first 8 bytes, big-endian): stable across restarts,
releases and machines, and spread evenly whatever the names look like. Each shard reconciles, watches into its
cache, publishes series for and autoscales only the resources of its namespaces, and holds a Lease of its own
(``<lease-name>-shard-<I>-of-<N>``), so its replicas fail over among themselves and a shard that is down
leaves every other shard's resources alone. Cluster-scoped AutoscalingPolicies are read by every shard (each
judges its own services against them); shard 0 alone writes their status, counting the services of every
namespace from a slim record of the ones it does not own (their namespace, name and spec.autoscaling).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass


def shard_of(namespace: str, count: int) -> int:
    """The shard that owns ``namespace`` among ``count``."""
    return int.from_bytes(hashlib.sha256(namespace.encode("utf-8")).digest()[:8], "big") % count


@dataclass(frozen=True)
class Sharding:
    index: int = 0
    count: int = 1

    def __post_init__(self) -> None:
        if self.count < 1 or not 0 <= self.index < self.count:
            raise ValueError(f"shard {self.index}/{self.count}: the index must be at least 0 and below the count (at least 1)")

    @property
    def sharded(self) -> bool:
        return self.count > 1

    def owns(self, namespace: str | None) -> bool:
        """Whether this shard owns a resource in ``namespace`` (a cluster-scoped one, None: every shard reads it)."""
        return namespace is None or self.count == 1 or shard_of(namespace, self.count) == self.index

    @property
    def writes_policy_status(self) -> bool:
        return self.index == 0

    def lease_name(self, base: str) -> str:
        return base if self.count == 1 else f"{base}-shard-{self.index}-of-{self.count}"

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse(text: str) -> Sharding:
    """``I/N`` -> Sharding(I, N); raises ValueError naming what is accepted."""
    index, slash, count = text.partition("/")
    if not slash or not index.strip().isdigit() or not count.strip().isdigit():
        raise ValueError(f"expected I/N, this shard's index and the number of shards (e.g. 0/2), not {text!r}")
    return Sharding(int(index), int(count))
