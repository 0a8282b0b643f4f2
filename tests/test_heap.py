"""runtime/heap.py: the collector is held while the caches fill and resumes once they have, with what was
alive then frozen out of its walks; a start that never fills them gives it back."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from pooling_operator.runtime.heap import Heap


@pytest.fixture(autouse=True)
def collector() -> Iterator[None]:
    was = gc.isenabled()
    gc.unfreeze()  # whatever another test in this process froze: the counts below start from nothing
    gc.enable()
    yield
    gc.unfreeze()
    gc.enable() if was else gc.disable()


def test_held_while_the_caches_fill_then_frozen_and_resumed() -> None:
    heap = Heap()
    heap.hold()
    assert not gc.isenabled()
    stored = [{"metadata": {"name": f"svc-{i}"}} for i in range(1000)]
    heap.settle()
    assert gc.isenabled()
    assert gc.get_freeze_count() >= len(stored)  # the stored objects are out of the collector's walks
    assert all(not any(o is s for o in gc.get_objects()) for s in stored[:3])


def test_a_cycle_made_while_held_is_freed_before_the_freeze() -> None:
    class Node:
        other: object = None

    heap = Heap()
    heap.hold()
    a, b = Node(), Node()
    a.other, b.other = b, a
    del a, b
    heap.settle()
    gc.unfreeze()  # what was frozen goes back to the oldest generation, where get_objects sees it
    assert not any(type(o) is Node for o in gc.get_objects())  # collected, not frozen


def test_stopped_before_the_caches_filled_gives_the_collector_back() -> None:
    heap = Heap()
    heap.hold()
    heap.release()
    assert gc.isenabled()
    assert gc.get_freeze_count() == 0
    heap.settle()  # nothing held: no collection, no freeze
    assert gc.get_freeze_count() == 0


def test_a_collector_someone_else_disabled_stays_disabled() -> None:
    gc.disable()
    heap = Heap()
    heap.hold()
    heap.settle()
    assert not gc.isenabled()
    assert gc.get_freeze_count() == 0
