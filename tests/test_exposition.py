"""status/exposition.py: per-object families held as plain numbers scrape exactly as prometheus_client's own
Gauge and Histogram children would, and cost a fraction of their memory."""

from __future__ import annotations

import gc
import re
import tracemalloc

from prometheus_client import CollectorRegistry, Gauge, Histogram, generate_latest

from pooling_operator.status.exposition import Gauges, Histograms

LABELS = ["kind", "namespace", "name", "phase"]
BUCKETS = (1, 2, 5, 10, 20, 30, 45, 60, 90, 120, 180, 240, 300, 450, 600, 900, 1200)
CREATED = re.compile(r"^(\S+_created\{[^}]*\}) \S+$", re.M)  # when a child was made: the same line, another clock reading


def scrape(registry: CollectorRegistry) -> str:
    return CREATED.sub(r"\1 T", generate_latest(registry).decode())


def test_gauges_scrape_as_prometheus_client_gauges() -> None:
    theirs, ours = CollectorRegistry(), CollectorRegistry()
    native = Gauge("x_condition", "A condition.", ["kind", "namespace", "name", "type"], registry=theirs)
    mine = Gauges("x_condition", "A condition.", ["kind", "namespace", "name", "type"], registry=ours)
    for i in range(5):
        for kind, value in (("Ready", 1), ("Degraded", 0.0)):
            native.labels("PoolingService", "ns", f"s{i}", kind).set(value)
            mine.set(("PoolingService", "ns", f"s{i}", kind), value)
    native.remove("PoolingService", "ns", "s3", "Ready")
    mine.remove(("PoolingService", "ns", "s3", "Ready"))
    mine.remove(("PoolingService", "ns", "gone", "Ready"))  # absent: nothing to do
    assert scrape(ours) == scrape(theirs) and len(mine) == 9
    filtered = generate_latest(ours.restricted_registry(["x_condition"])).decode()  # the bench's poll of one family
    assert filtered == generate_latest(ours).decode()


def test_histograms_scrape_as_prometheus_client_histograms() -> None:
    theirs, ours = CollectorRegistry(), CollectorRegistry()
    native = Histogram("x_startup_seconds", "Start-up.", LABELS, buckets=BUCKETS, registry=theirs)
    mine = Histograms("x_startup_seconds", "Start-up.", LABELS, buckets=BUCKETS, registry=ours)
    for i, seconds in enumerate([0.4, 1.0, 1.0001, 37.5, 1200, 1201, 5000, 0.0, float("nan")]):
        for phase in ("scheduled", "ready"):
            native.labels("ScoringService", "ns", f"s{i % 3}", phase).observe(seconds)
            mine.observe(("ScoringService", "ns", f"s{i % 3}", phase), seconds)
    native.remove("ScoringService", "ns", "s1", "ready")
    mine.remove(("ScoringService", "ns", "s1", "ready"))
    assert scrape(ours) == scrape(theirs) and len(mine) == 5
    assert 'x_startup_seconds_bucket{kind="ScoringService",le="1.0",name="s0",namespace="ns",phase="ready"} 1.0' in scrape(ours)
    assert 'x_startup_seconds_count{kind="ScoringService",name="s0",namespace="ns",phase="ready"} 3.0' in scrape(ours)


def test_a_label_set_costs_a_fraction_of_a_prometheus_client_child() -> None:
    def held(make: object) -> float:
        gc.collect()
        tracemalloc.start()
        make()  # type: ignore[operator]
        gc.collect()
        size = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        return size / 500

    keep: list[object] = []

    def native() -> None:
        h = Histogram("y_seconds", "h", LABELS, buckets=BUCKETS, registry=CollectorRegistry())
        keep.append(h)
        for i in range(500):
            h.labels("PoolingService", "ns", f"s{i}", "ready").observe(3.0)

    def mine() -> None:
        h = Histograms("y_seconds", "h", LABELS, buckets=BUCKETS, registry=CollectorRegistry())
        keep.append(h)
        for i in range(500):
            h.observe(("PoolingService", "ns", f"s{i}", "ready"), 3.0)

    assert held(mine) < held(native) / 5


def test_a_gone_objects_series_go_whatever_their_last_label() -> None:
    mine = Histograms("z_startup_seconds", "Start-up.", LABELS, buckets=BUCKETS, registry=CollectorRegistry())
    for name in ("gone", "kept"):
        for phase in ("scheduled", "initialized", "started", "ready"):
            mine.observe(("PoolingService", "ns", name, phase), 3.0)
    mine.remove_prefix(("PoolingService", "ns", "gone"))
    mine.remove_prefix(("PoolingService", "ns", "never"))  # nothing of it: nothing to do
    assert len(mine) == 4 and 'name="gone"' not in generate_latest(mine).decode()  # type: ignore[arg-type]
