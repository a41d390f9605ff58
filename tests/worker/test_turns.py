"""The turn of a queue's unkeyed jobs among its keys (scheduler/worker/turns.py), as the rule
counts it: the shares of a worker's slots between its plain claims and its keyed takes."""

from __future__ import annotations

from typing import Any

from scheduler.core.keys import Keys, lane
from scheduler.worker.reader import Reader
from scheduler.worker.slots import Slots
from scheduler.worker.turns import Turns


def _turns(concurrency: int, plain_entries: int, queue: str = "q") -> Turns:
    reader = Reader(None, Keys("ns"), "w", 100, 1000)  # type: ignore[arg-type]
    name = lane(queue, 3)
    reader.backlog.know(name, 3)
    for i in range(plain_entries):
        reader.backlog.lane(name).append((0, name, b"%d-0" % i, f"s{i}"))
    return Turns(Slots(concurrency), reader)


def _hold(turns: Turns, plain: int, keyed: int, queue: str = "q") -> None:
    """Runs in flight: `plain` unkeyed and `keyed` keyed ones of the queue."""
    for i in range(plain + keyed):
        run: Any = type("R", (), {"on_end": None, "lane": lane(queue, 3) if i < plain
                                  else queue})()
        turns.slots.running[f"r{i}"] = run
    turns.plain[queue] += plain
    turns.keyed[queue] += keyed


def test_the_unkeyed_jobs_share_is_one_keys() -> None:
    """12 slots, 3 keys: the unkeyed jobs hold 3 of the queue's runs, the keys 9."""
    turns = _turns(12, 50)
    turns.keys_wait("q", 3)
    assert turns.share("q") == 3
    _hold(turns, plain=1, keyed=9)
    assert turns.plain_room("q") == 2
    assert turns.keyed_room("q", 2) == 0  # the 2 free slots are the unkeyed jobs' turn
    taken, counted, held = turns.take(5)
    assert (len(taken), counted["q"], held) == (2, 2, True)
    assert turns.yielded.is_set()


def test_the_keys_take_what_the_unkeyed_share_does_not_need() -> None:
    turns = _turns(12, 50)
    turns.keys_wait("q", 3)
    _hold(turns, plain=3, keyed=5)
    assert turns.keyed_room("q", 4) == 4
    assert turns.take(4)[0] == []


def test_either_side_with_nothing_that_can_start_leaves_every_slot_to_the_other() -> None:
    turns = _turns(12, 50)
    assert turns.plain_room("q") == -1  # no key waits: no bound
    turns.keys_wait("q", 3)
    _hold(turns, plain=3, keyed=0)
    assert len(turns.take(9)[0]) == 0
    turns.keys_done("q")  # a take got less than it asked: the keys can start nothing more
    assert turns.slots.capacity.is_set()
    assert len(turns.take(9)[0]) == 9
    empty = _turns(12, 0)
    empty.keys_wait("q", 3)
    assert empty.keyed_room("q", 12) == 12  # no unkeyed entry in hand


def test_a_plain_run_of_a_waiting_queue_is_counted_until_it_ends() -> None:
    turns = _turns(12, 5)
    _hold(turns, plain=0, keyed=0)
    run: Any = type("R", (), {"on_end": None, "lane": lane("q", 3)})()
    turns.slots.running["before"] = run
    turns.keys_wait("q", 1)  # the runs already going count from now
    assert turns.plain["q"] == 1
    run.on_end(run)
    assert turns.plain["q"] == 0
