"""One /metrics for a supervisor and its worker children (`sched worker --processes N`).

Each child serves its own process registry on a loopback port; at each scrape the
supervisor's collector reads every live child (a short timeout; a child that does not answer
is left out of that scrape) and merges what they said: counters and histograms summed over the
children, every other family (gauges, info) kept per child under a `process` label. The hot
path pays nothing: a child's counters are the same single-writer objects as in a lone worker,
read only when a scrape asks.
"""

from __future__ import annotations

import logging
import threading
import urllib.request
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor

from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

log = logging.getLogger("scheduler.observe.children")

# A scrape waits this long for a child; Prometheus's own scrape timeout is 10 s by default.
CHILD_SCRAPE_TIMEOUT_S = 2.0
SUMMED = ("counter", "histogram", "summary")
PROCESS_LABEL = "process"


def scrape_child(port: int, timeout_s: float = CHILD_SCRAPE_TIMEOUT_S) -> str | None:
    """The text a child at 127.0.0.1:port serves on /metrics, or None when it does not
    answer (it died, or is too busy to)."""
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:  # nosec B310 # loopback
            return resp.read().decode("utf-8", errors="replace")  # type: ignore[no-any-return]
    except OSError:
        return None


Key = tuple[str, str, tuple[tuple[str, str], ...]]  # family, sample, labels


class Merger:
    """Merges what the children said at each scrape. A summed figure must never go down
    (Prometheus would take the drop for a counter reset), so the counts of a child that is
    gone, or that did not answer this scrape, are the last it said."""

    def __init__(self) -> None:
        self.meta: dict[str, tuple[str, str]] = {}  # family -> (help, type)
        self.last: dict[str, dict[Key, float]] = {}  # child -> its summed samples
        self.gone: dict[Key, float] = {}  # the last counts of children that are gone

    def merge(self, texts: dict[str, str | None]) -> list[Metric]:
        """Families from {process label: exposition text, None when it did not answer} of
        the live children: counters, histograms and summaries summed sample by sample, the
        rest labelled with the child that said them (`_created` samples are left out: a sum
        has no creation time)."""
        for label in [c for c in self.last if c not in texts]:
            for key, value in self.last.pop(label).items():
                self.gone[key] = self.gone.get(key, 0.0) + value
        out: dict[str, Metric] = {}
        for label, text in texts.items():
            if text is not None:
                self.last[label] = self._read(label, text, out)
        totals = dict(self.gone)
        for summed in self.last.values():
            for key, value in summed.items():
                totals[key] = totals.get(key, 0.0) + value
        for (name, sample, labels), value in totals.items():
            into = out.get(name)
            if into is None:
                doc, typ = self.meta[name]
                into = out[name] = Metric(name, doc, typ)
            into.add_sample(sample, dict(labels), value)
        return list(out.values())

    def _read(self, label: str, text: str, out: dict[str, Metric]) -> dict[Key, float]:
        """One child's text: its per-child families labelled into `out`; its summed ones
        returned."""
        summed: dict[Key, float] = {}
        for family in text_string_to_metric_families(text):
            if family.name.endswith("_created"):
                continue
            self.meta.setdefault(family.name, (family.documentation, family.type))
            if family.type in SUMMED:
                for s in family.samples:
                    if not s.name.endswith("_created"):
                        key = (family.name, s.name, tuple(sorted(s.labels.items())))
                        summed[key] = summed.get(key, 0.0) + s.value
                continue
            into = out.get(family.name)
            if into is None:
                into = out[family.name] = Metric(family.name, family.documentation, family.type)
            for s in family.samples:
                into.add_sample(s.name, {**s.labels, PROCESS_LABEL: label}, s.value)
        return summed


class ChildrenCollector(Collector):
    """Scrapes, at collect time, the children `targets()` names ((process label, port)
    pairs) in parallel, and yields their merged families."""

    def __init__(self, targets: Callable[[], list[tuple[str, int]]],
                 timeout_s: float = CHILD_SCRAPE_TIMEOUT_S) -> None:
        self.targets = targets
        self.timeout_s = timeout_s
        self.merger = Merger()
        self.lock = threading.Lock()  # two scrapes at once must not fold a child twice

    def collect(self) -> Iterable[Metric]:
        targets = self.targets()
        texts: list[str | None] = []
        if targets:
            with ThreadPoolExecutor(max_workers=min(len(targets), 16),
                                    thread_name_prefix="scrape-child") as pool:
                texts = list(pool.map(lambda t: scrape_child(t[1], self.timeout_s), targets))
        with self.lock:
            try:
                return self.merger.merge({label: text for (label, _), text
                                          in zip(targets, texts, strict=True)})
            except ValueError as exc:  # a child's text did not parse: that scrape shows none
                log.warning("cannot merge the children's metrics: %s", exc)
                return []
