"""The parts of `sched worker --processes N` that need no process: the children's command
line, the merge of their metrics, and the option's refusals. (The supervisor with real
processes: tests/faults/test_supervisor.py, tests/e2e/test_processes.py.)"""

from __future__ import annotations

import sys

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from scheduler.cli.main import main
from scheduler.core.bounds import MAX_PROCESS_POOL, MAX_PROCESSES, MAX_WORKER_CONCURRENCY
from scheduler.core.errors import ConfigError
from scheduler.observe.children import Merger
from scheduler.worker.config import SupervisorRef, WorkerConfig
from scheduler.worker.supervisor import Supervisor, child_argv, cores


def test_a_child_runs_the_same_command_without_the_supervisors_options() -> None:
    argv = ["--namespace", "shop", "worker", "--app", "a:r", "--processes", "4",
            "--metrics-port=9100", "--queues", "mail", "--processes=auto", "--metrics-port",
            "0", "--redis-url", "redis://h/0"]
    assert child_argv(argv) == [sys.executable, "-m", "scheduler.cli", "--namespace", "shop",
                                "worker", "--app", "a:r", "--queues", "mail", "--redis-url",
                                "redis://h/0"]


def child(runs: float, created: float, rss: float) -> str:
    return (
        "# HELP sched_runs_total Attempts.\n# TYPE sched_runs_total counter\n"
        f'sched_runs_total{{queue="q",outcome="succeeded"}} {runs}\n'
        f'sched_runs_created{{queue="q",outcome="succeeded"}} {created}\n'
        "# HELP d Durations.\n# TYPE d histogram\n"
        f'd_bucket{{le="1.0"}} {runs}\nd_bucket{{le="+Inf"}} {runs}\nd_count {runs}\n'
        f"d_sum {runs / 2}\n"
        "# HELP rss Memory.\n# TYPE rss gauge\n"
        f"rss {rss}\n")


def exposed(families: list) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:  # type: ignore[type-arg]
    """The merged families as a scrape would read them: through the text format."""
    class Fixed(Collector):
        def collect(self):  # type: ignore[no-untyped-def]
            return families

    registry = CollectorRegistry()
    registry.register(Fixed())
    text = generate_latest(registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


def test_counters_and_histograms_are_summed_and_gauges_kept_per_child() -> None:
    merger = Merger()
    seen = exposed(merger.merge({"101": child(3, 1.0, 10), "102": child(4, 2.0, 20)}))
    runs = ("sched_runs_total", (("outcome", "succeeded"), ("queue", "q")))
    assert seen[runs] == 7
    assert seen[("d_bucket", (("le", "1.0"),))] == 7 and seen[("d_sum", ())] == 3.5
    assert seen[("rss", (("process", "101"),))] == 10
    assert seen[("rss", (("process", "102"),))] == 20
    assert not [k for k in seen if k[0].endswith("_created")]  # a sum has no creation time

    # 102 did not answer: its last counts stand in. Then 102 is gone and 103 replaced it:
    # the sum never goes down (Prometheus would read a drop as a counter reset).
    assert exposed(merger.merge({"101": child(5, 1.0, 10), "102": None}))[runs] == 9
    seen = exposed(merger.merge({"101": child(6, 1.0, 10), "103": child(1, 3.0, 30)}))
    assert seen[runs] == 6 + 4 + 1
    assert ("rss", (("process", "102"),)) not in seen


@pytest.mark.parametrize("value", ["0", "-2", "many", "1.5"])
def test_a_bad_process_count_is_one_line(capsys: pytest.CaptureFixture[str],
                                         value: str) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["worker", "--app", "a:r", "--processes", value])
    assert exit_.value.code == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "--processes" in line and "nor 'auto'" in line


def test_auto_is_a_count_of_cores() -> None:
    assert cores() >= 1


@pytest.mark.parametrize("args, problem", [
    (["--processes", "99999999999999999999999"], "is more than 1,024 worker processes"),
    (["--processes", str(MAX_PROCESSES + 1)], "is more than 1,024 worker processes"),
    (["--process-pool", str(MAX_PROCESS_POOL + 1)], "is not in the range 1<=x<=1024"),
    (["--concurrency", str(MAX_WORKER_CONCURRENCY + 1)], "is not in the range 1<=x<=100000"),
    (["--autoscale", f"1:{MAX_WORKER_CONCURRENCY + 1}"], "max_concurrency must be from 1 to 100,000"),
])
def test_worker_sizes_past_their_maximum_are_one_line(capsys: pytest.CaptureFixture[str],
                                                      args: list[str], problem: str) -> None:
    """Refused before anything starts: no child forked, no Redis touched."""
    with pytest.raises(SystemExit) as exit_:
        main(["worker", "--app", "a:r", *args])
    assert exit_.value.code == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert problem in line, line


def test_the_config_structs_refuse_sizes_past_their_maximum() -> None:
    with pytest.raises(ConfigError, match="concurrency must be from 1 to 100,000"):
        WorkerConfig(concurrency=MAX_WORKER_CONCURRENCY + 1)
    with pytest.raises(ConfigError, match="process_pool must be from 1 to 1,024"):
        WorkerConfig(process_pool=MAX_PROCESS_POOL + 1)
    with pytest.raises(ConfigError, match="processes must be 1 to 1,024"):
        Supervisor(["true"], MAX_PROCESSES + 1, 1.0)
    with pytest.raises(ConfigError, match="processes 1 to 1,024"):
        SupervisorRef(id="s", pid=1, host="h", index=0, processes=MAX_PROCESSES + 1,
                      restarts=0)
    assert WorkerConfig(concurrency=MAX_WORKER_CONCURRENCY, process_pool=MAX_PROCESS_POOL)
