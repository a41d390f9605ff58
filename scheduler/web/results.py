"""What an action says it did, on the page it redirects back to: the redirect names a result
code and its counts (`?done=replay&replayed=1&of=1`), and the page shows the fixed sentence
of that code with those numbers. A code this module does not know, a count it does not
expect or one that is not a small number shows nothing: a link anyone can send puts no
sentence of its own on the console's pages (they are the console's own address).

Why an action failed is not carried in a link: the action answers with a page saying it
(app.py), as its own reply to the operator's own form.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlencode

from scheduler.scripts.replies import Code
from scheduler.sdk.jobs import CANCEL_RESULTS

MAX_DIGITS = 9  # a count is a number of selected items: far fewer

# code -> (the counts it carries, in order; how they are said)
RESULTS: dict[str, tuple[tuple[str, ...], str]] = {
    "cancel": (("cancelled", "requested", "finished", "missing"), "cancel: {parts}"),
    "replay": (("replayed", "of"), "replayed {replayed} of {of} slot(s)"),
    "purge": (("purged", "of"), "purged {purged} of {of} slot(s)"),
    "delete": (("deleted", "cancelled"),
               "deleted {deleted} schedule(s); {cancelled} waiting slot(s) cancelled"),
    "trigger": (("triggered",), "triggered {triggered} run(s)"),
}
# What client.cancel says of each slot, by the count that tallies it.
CANCEL_COUNTS = {"cancelled": CANCEL_RESULTS[Code.CANCELLED],
                 "requested": CANCEL_RESULTS[Code.CANCEL_REQUESTED],
                 "finished": CANCEL_RESULTS[Code.TERMINAL],
                 "missing": CANCEL_RESULTS[Code.MISSING]}


def query(code: str, **counts: int) -> str:
    """The query string of a redirect that reports `code` with `counts` (all of its own)."""
    names, _ = RESULTS[code]
    assert set(counts) == set(names), (code, counts)
    return urlencode({"done": code, **{name: counts[name] for name in names}})


def message(params: Mapping[str, str]) -> str | None:
    """The sentence a page shows for its query's `done`, or None (no code, an unknown one,
    or counts that are not its own small numbers)."""
    code = params.get("done")
    if code not in RESULTS:
        return None
    names, sentence = RESULTS[code]
    counts: dict[str, int] = {}
    for name in names:
        value = params.get(name, "")
        if not (value.isascii() and value.isdigit() and len(value) <= MAX_DIGITS):
            return None
        counts[name] = int(value)
    if code == "cancel":
        parts = [f"{counts[name]} {CANCEL_COUNTS[name]}" for name in names if counts[name]]
        return sentence.format(parts=", ".join(parts) or "nothing to cancel")
    return sentence.format(**counts)
