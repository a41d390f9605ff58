"""What may be shown of a Redis URL or a Postgres DSN: `masked`, the one function every error
message, log line and page passes such text through, and `unencoded`, which refuses a URL
whose password its parser would split (and then print a piece of in its own error).

Two layers. Patterns catch a secret in any text (a log line, a library's error): a URL's
user:password@ (everything between `://` and the last `@` of the URL is taken for it, so a
password holding an unencoded `@`, `/` or `:`, or white space, is masked whole) and any
`...password=` option or DSN field, quoted or not. And when the caller knows the URL or DSN
the text came from, its passwords are masked wherever they appear, and so are their pieces
(a parser that split a password at an `@` prints the rest as a host name).
"""

from __future__ import annotations

import functools
import re
import urllib.parse

MASK = "***"

# scheme:// (any scheme, a misspelt one too; `:/` as a path library writes it), then the
# rest of the URL up to its last `@`: the user information. A URL ends at white space, but
# a password may hold some (`redis://:pa ss@h`): when no `@` ends the first word, a `user:`
# and what follows it on the line up to its last `@` before a `/` is taken for the user
# information too (at worst a URL with a port and no path, then an e-mail address on its
# line, loses the port: more is masked, never less).
_URL = re.compile(r"(?P<scheme>\b[a-z][a-z0-9+.\-]*:/+)"
                  r"(?P<userinfo>\S*|[^\s/@]*:[^\n/]*)@", re.I)
# A password option or DSN field (password=, ssl_password=, sentinel_password=, sslpassword=,
# passwd=): its value up to white space, or quoted (to the last quote of the line: a quote
# inside the value may be escaped).
_OPTION = re.compile(r"(?P<key>\b\w*pass(?:word|wd)\s*=\s*)"
                     r"(?P<value>\\?'[^\n]*'|\\?\"[^\n]*\"|\S+)", re.I)
_SPLIT = re.compile(r"[@/:?#&\s'\"\\]+")
_SHORTEST_PIECE = 3  # pieces of a split password shorter than this are not searched for


def _userinfo(userinfo: str) -> str:
    """A URL's user information as shown: the user name kept when one plainly comes first."""
    user, colon, _ = userinfo.partition(":")
    if colon and not re.search(r"[@/\s]", user):
        return f"{user}:{MASK}"
    if not colon and "@" not in userinfo and "/" not in userinfo:
        return userinfo  # a user name alone: redis://app@host
    return MASK


def _patterns(text: str) -> str:
    text = _URL.sub(lambda m: f"{m['scheme']}{_userinfo(m['userinfo'])}@", text)
    return _OPTION.sub(lambda m: f"{m['key']}{MASK}", text)


@functools.lru_cache(maxsize=64)  # a process masks its log lines with the same few sources
def passwords(source: str) -> tuple[str, ...]:
    """Every password `source` (a URL or DSN) holds, as written and percent-decoded, and the
    pieces a parser may split one into; longest first."""
    found: set[str] = set()
    for m in _URL.finditer(source):
        userinfo = m["userinfo"]
        user, colon, password = userinfo.partition(":")
        if colon:
            found.add(password)
        elif "@" in userinfo or "/" in userinfo:
            found.add(userinfo)
    for m in _OPTION.finditer(source):
        found.add(m["value"].strip("\\'\""))
    pieces = set()
    for secret in list(found):
        for variant in (secret, urllib.parse.unquote(secret)):
            pieces.add(variant)
            pieces.update(p for p in _SPLIT.split(variant) if len(p) >= _SHORTEST_PIECE)
    return tuple(sorted((p for p in pieces if p), key=len, reverse=True))


def masked(text: str, *sources: str) -> str:
    """`text` with every password in it shown as ***: what may be printed, logged or put on a
    page of a URL, a DSN or a message about one. `sources`: the URLs or DSNs the text may
    quote (a library's error about them), whose passwords are masked wherever they appear."""
    text = _patterns(text)
    for source in sources:
        for secret in passwords(source):
            text = text.replace(secret, MASK)
    return text


def unencoded(url: str) -> str | None:
    """Why a URL's password cannot be read as written (None when it can): a parser ends the
    user information at the first `/`, `?` or `#` (libpq at the first `@` too), so a password
    holding one is cut, and the rest taken for a port, a path or a host that its error
    prints. An `@` after one of them is taken for such a password."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return None
    cut = re.search(r"[/?#]", rest)
    head, tail = (rest[:cut.start()], rest[cut.start():]) if cut else (rest, "")
    if "@" in tail or (scheme.lower().startswith("postgres") and head.count("@") > 1):
        return ("its user name or password holds an unencoded @ / ? or #: percent-encode "
                "them (@ as %40, / as %2F, ? as %3F, # as %23)")
    return None
