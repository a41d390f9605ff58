"""Single-writer metric families for the worker's hot path (declared in scheduler/observe/metrics.py):
an increment or an observation is a plain attribute update, no lock. Only the event loop
thread writes them; a scrape thread reads a consistent-enough copy. prometheus_client's
Counter and Histogram take a lock per update, which at tens of thousands of jobs a second is
a measurable share of a worker's time (bench metrics_cost)."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector


class CounterChild:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0

    def inc(self, amount: int = 1) -> None:
        self.value += amount


class HistogramChild:
    """Observations in integer milliseconds (the unit the scheduler's clock has)."""

    __slots__ = ("bounds_ms", "counts", "sum_ms")

    def __init__(self, bounds_ms: list[float]) -> None:
        self.bounds_ms = bounds_ms
        self.counts = [0] * (len(bounds_ms) + 1)  # per bucket, not cumulative; last is +Inf
        self.sum_ms = 0

    def observe_ms(self, value_ms: int) -> None:
        self.counts[bisect_left(self.bounds_ms, value_ms)] += 1
        self.sum_ms += value_ms


class _Family(Collector):
    def __init__(self, name: str, documentation: str, labelnames: tuple[str, ...],
                 registry: CollectorRegistry | None) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = labelnames
        self.children: dict[tuple[str, ...], Any] = {}
        if registry is not None:
            registry.register(self)

    def describe(self) -> Iterable[Metric]:
        return list(self._families({}))

    def collect(self) -> Iterable[Metric]:
        return list(self._families(dict(self.children)))

    def _families(self, children: dict[tuple[str, ...], Any]) -> Iterator[Metric]:
        raise NotImplementedError


class FastCounter(_Family):
    def labels(self, *values: str) -> CounterChild:
        child = self.children.get(values)
        if child is None:
            child = self.children[values] = CounterChild()
        return child

    def _families(self, children: dict[tuple[str, ...], Any]) -> Iterator[Metric]:
        family = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for values, child in children.items():
            family.add_metric(list(values), child.value)
        yield family


class FastHistogram(_Family):
    def __init__(self, name: str, documentation: str, labelnames: tuple[str, ...],
                 buckets_s: tuple[float, ...], registry: CollectorRegistry | None) -> None:
        self.buckets_s = buckets_s
        self.bounds_ms = [b * 1000 for b in buckets_s]
        super().__init__(name, documentation, labelnames, registry)

    def labels(self, *values: str) -> HistogramChild:
        child = self.children.get(values)
        if child is None:
            child = self.children[values] = HistogramChild(self.bounds_ms)
        return child

    def _families(self, children: dict[tuple[str, ...], Any]) -> Iterator[Metric]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for values, child in children.items():
            counts, total_ms = list(child.counts), child.sum_ms
            cumulative, buckets = 0, []
            for bound, n in zip([*self.buckets_s, float("inf")], counts, strict=True):
                cumulative += n
                buckets.append((_le(bound), cumulative))
            family.add_metric(list(values), buckets, total_ms / 1000)
        yield family


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(float(bound))
