"""Each Lua reply is decoded in one place (scheduler/scripts/replies.py), and a reply of the wrong
shape or a code the script does not answer is a ScriptError naming it, not an IndexError
somewhere in a loop or a code taken for another."""

from __future__ import annotations

import pytest

from scheduler.core.errors import ScriptError
from scheduler.scripts import replies
from scheduler.scripts.replies import Code


def test_replies_decode_by_name() -> None:
    assert replies.Promoted.decode([3, 1700, 1]) == replies.Promoted(3, 1700, 1)
    r = replies.Reclaimed.decode([1, 2, 3, 4, b"10-0", "-"])
    assert r.counts() == {"reclaimed": 1, "lost": 2, "dead": 3, "redispatched": 4}
    assert r.cursors == ["10-0", "-"]
    m = replies.MaterializeReply.decode([Code.OK, 5])
    assert not m.moved and m.created == 5
    assert replies.MaterializeReply.decode([Code.MOVED, 0]).moved
    assert replies.Restored.decode([1, 2, 3, 4, 5]).slots_ended == 5
    assert replies.Retired.decode([7, 1, -1]) == replies.Retired(7, 1, -1)
    assert replies.Lease.decode([Code.OK, 4]) == replies.Lease(True, 4, "")
    assert replies.Lease.decode([Code.HELD, b"5:node-b"]) == replies.Lease(False, 0, "5:node-b")


_ENTRIES = [("q", b"1-0", "a:1700"), ("q", b"2-0", "b:5"), ("q", b"3-0", "c:6"),
            ("q", b"4-0", "d:7"), ("q", b"5-0", "e:9")]


def test_a_claim_reply_gives_grants_in_entry_order() -> None:
    reply = [Code.OK, 2, b"emails.send", b'{"to":1}', 5000, b"at_most_once",
             Code.STALE, Code.HELD, Code.EARLY, b"40", Code.OK, 1, b"t", b"", None, None]
    assert replies.claimed(reply, _ENTRIES) == [
        replies.Grant(2, "emails.send", b'{"to":1}', 5000, "at_most_once", 1700), None, None,
        40, replies.Grant(1, "t", b"", 0, "at_least_once", 9)]
    assert replies.claim_items(reply)[3] == [Code.EARLY, b"40"]


def test_a_traced_claim_reply_carries_trace_context() -> None:
    reply = [Code.OK, 2, b"t", b"", None, None, b"00-ab-cd-01", b"cron", b"a:1700",
             Code.STALE, Code.OK, 1, b"t", b"", None, None, None, None, b"c:6"]
    entries = [_ENTRIES[0], _ENTRIES[1], _ENTRIES[2]]
    assert replies.claimed(reply, entries, traced=True) == [
        replies.Grant(2, "t", b"", 0, "at_least_once", 1700), None,
        replies.Grant(1, "t", b"", 0, "at_least_once", 6)]
    assert replies.traces(reply) == {"a:1700": ("00-ab-cd-01", True), "c:6": (None, False)}


@pytest.mark.parametrize("reply", [[Code.OK, 1, b"t"], [Code.STALE, Code.STALE],
                                   [Code.OK, 1, b"t", b"", None, None, Code.STALE]])
def test_a_claim_reply_that_does_not_fit_its_entries_is_a_script_error(reply: list[object]
                                                                       ) -> None:
    with pytest.raises(ScriptError, match="claim.lua"):
        replies.claimed(reply, _ENTRIES[:1])


@pytest.mark.parametrize("decode", [replies.Promoted.decode, replies.Reclaimed.decode,
                                    replies.Restored.decode, replies.Retired.decode,
                                    replies.Lease.decode])
def test_a_short_reply_is_a_script_error(decode: object) -> None:
    with pytest.raises(ScriptError, match="expected|unexpected"):
        decode([1])  # type: ignore[operator]


def test_an_unknown_code_is_a_script_error() -> None:
    with pytest.raises(ScriptError, match="materialize.lua"):
        replies.MaterializeReply.decode([70, 0])
    with pytest.raises(ScriptError, match="claim.lua"):
        replies.claimed([0], _ENTRIES[:1])  # the old "stale" code is no code at all now


def test_a_code_of_another_script_is_refused() -> None:
    """RETRY is a code, but complete never answers it: decoding must not take it for one."""
    assert replies.codes([Code.OK, Code.REPEAT, Code.STALE], "complete") == [
        Code.OK, Code.REPEAT, Code.STALE]
    with pytest.raises(ScriptError, match=r"complete\.lua.*REPEAT"):
        replies.codes([Code.RETRY], "complete")
    assert replies.code(b"11", "once") is Code.DONE_BEFORE
