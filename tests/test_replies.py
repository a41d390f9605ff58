"""Each Lua reply is decoded in one place (scheduler/replies.py), and a reply of the wrong
shape is a ScriptError naming it, not an IndexError somewhere in a loop."""

from __future__ import annotations

import pytest

from scheduler import scripts
from scheduler.errors import ScriptError


def test_replies_decode_by_name() -> None:
    assert scripts.Promoted.decode([3, 1700, 1]) == scripts.Promoted(3, 1700, 1)
    r = scripts.Reclaimed.decode([1, 2, 3, 4, b"10-0", "-"])
    assert r.counts() == {"reclaimed": 1, "lost": 2, "dead": 3, "redispatched": 4}
    assert r.cursors == ["10-0", "-"]
    m = scripts.MaterializeReply.decode([1, 5])
    assert m.code is scripts.Materialized.OK and m.created == 5
    assert scripts.Restored.decode([1, 2, 3, 4, 5]).slots_ended == 5
    assert scripts.Expired.decode([7, 1, -1]) == scripts.Expired(7, 1, -1)


@pytest.mark.parametrize("decode", [scripts.Promoted.decode, scripts.Reclaimed.decode,
                                    scripts.Restored.decode, scripts.Expired.decode])
def test_a_short_reply_is_a_script_error(decode: object) -> None:
    with pytest.raises(ScriptError, match="values expected"):
        decode([1])  # type: ignore[operator]


def test_an_unknown_code_is_a_script_error() -> None:
    with pytest.raises(ScriptError, match="Materialized"):
        scripts.MaterializeReply.decode([7, 0])
