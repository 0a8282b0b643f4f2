"""Metric families labelled per object (kind, namespace, name), held as plain numbers and rendered when scraped.

prometheus_client keeps one child object per label set: a Gauge child with its value and lock, about 750 bytes; a
Histogram child with a locked value per bucket, about 5 KiB at 17 buckets. The operator labels these families by
object, so at 3,000 services the children held 29 KiB per service, more than a quarter of the process after the
creation burst (bench/README.md, issue 48). Here a label set costs its tuple and its numbers, and the exposition is
the same, made by prometheus_client's own custom-collector API (`collect`) from a copy taken under the GIL (the
metrics server scrapes from its own thread).
"""

from __future__ import annotations

import bisect
import itertools
import math
import time
from collections.abc import Sequence

from prometheus_client import metrics as _metrics
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import REGISTRY, Collector, CollectorRegistry
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

Labels = tuple[str, ...]  # the label values, in the family's label order


class Gauges(Collector):
    """A labelled gauge family: `set` and `remove` by label values."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str], registry: CollectorRegistry | None = REGISTRY) -> None:
        self.name, self.documentation, self.labelnames = name, documentation, list(labelnames)
        self._values: dict[Labels, float] = {}
        if registry is not None:
            registry.register(self)

    def set(self, labels: Labels, value: float) -> None:
        self._values[labels] = float(value)

    def remove(self, labels: Labels) -> None:
        self._values.pop(labels, None)

    def __len__(self) -> int:
        return len(self._values)

    def describe(self) -> list[Metric]:
        return [GaugeMetricFamily(self.name, self.documentation, labels=self.labelnames)]

    def collect(self) -> list[Metric]:
        family = GaugeMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for labels, value in self._values.copy().items():
            family.add_metric(labels, value)
        return [family]


class Histograms(Collector):
    """A labelled histogram family: `observe` and `remove` by label values. Per label set: the count of each bucket
    (not cumulative), the sum, and when it was created (the `_created` sample prometheus_client's own writes)."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str], buckets: Sequence[float],
                 registry: CollectorRegistry | None = REGISTRY) -> None:  # fmt: skip
        self.name, self.documentation, self.labelnames = name, documentation, list(labelnames)
        self._upper = (*sorted(float(b) for b in buckets), math.inf)
        self._le = tuple(floatToGoString(b) for b in self._upper)
        self._values: dict[Labels, list[float]] = {}  # buckets..., sum, created
        if registry is not None:
            registry.register(self)

    def observe(self, labels: Labels, amount: float) -> None:
        held = self._values.get(labels)
        if held is None:
            held = self._values[labels] = [0.0] * len(self._upper) + [0.0, time.time()]
        if not math.isnan(amount):  # as prometheus_client: NaN lands in no bucket
            held[bisect.bisect_left(self._upper, amount)] += 1  # the first bound >= amount (le is inclusive)
        held[len(self._upper)] += amount

    def remove(self, labels: Labels) -> None:
        self._values.pop(labels, None)

    def remove_prefix(self, prefix: Labels) -> None:
        """Every label set that starts with these values (a gone object's series, whatever its last label)."""
        for labels in [k for k in self._values if k[: len(prefix)] == prefix]:
            del self._values[labels]

    def __len__(self) -> int:
        return len(self._values)

    def describe(self) -> list[Metric]:
        return [HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)]

    def collect(self) -> list[Metric]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        n = len(self._upper)
        # prometheus_client's switch (PROMETHEUS_DISABLE_CREATED_SERIES; set by its disable_created_metrics()): it has no
        # public reader, so the attribute is read where it is, and a version without it keeps the samples.
        created = getattr(_metrics, "_use_created", True)
        for labels, held in self._values.copy().items():
            family.add_metric(labels, list(zip(self._le, itertools.accumulate(held[:n]), strict=True)), held[n])
            if created:
                family.samples.append(Sample(self.name + "_created", dict(zip(self.labelnames, labels, strict=True)), held[n + 1]))
        return [family]
