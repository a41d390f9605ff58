"""A fakeredis server that runs the project's Lua as Redis 7 does: what fakeredis lacks is
added here, at the edge, and the scripts themselves run unchanged (none of their transitions
is written again in Python).

fakeredis (2.41) runs scripts in lupa's Lua 5.1 and gives them `redis.*` and `cjson`, but no
`cmsgpack`, which the hot-path scripts unpack their arguments with (calls.pack). That
module is registered into the server's Lua runtime here, built on msgspec as scripts/calls.py
packs with it. Streams inside scripts (XADD MAXLEN ~, XTRIM MINID ~, XINFO GROUPS, XPENDING with
IDLE, XCLAIM JUSTID, XAUTOCLAIM) and `redis.error_reply` work in fakeredis as they are.

fakeredis reads its own time from the machine (stream entry ids, pending entries' idle time,
key expiry, TIME); while a testing mode is open, `ServerTime` makes that its fake clock, so
Redis and the services see one clock (none reads a clock of its own) and every id is reproducible.
"""

from __future__ import annotations

import importlib
import time
from typing import Any

import msgspec

from scheduler.core.errors import ConfigError
from scheduler.redis.clock import Clock

try:
    import fakeredis
    from fakeredis.commands_mixins.scripting_mixin import LUA_MODULE as LUA
except ImportError as exc:  # the `testing` extra
    raise ConfigError("the testing mode needs fakeredis with Lua: "
                      "pip install 'redis-sched[testing]'") from exc

REDIS_VERSION = (7, 2)  # what the project supports; fakeredis answers as this version
_decoder = msgspec.msgpack.Decoder()
_encoder = msgspec.msgpack.Encoder()


def _to_lua(runtime: Any, value: Any) -> Any:
    """A decoded msgpack value as Redis's cmsgpack hands it to Lua: strings as Lua strings
    (bytes here: the runtime has no encoding), arrays and maps as tables, nil as nil."""
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, list):
        return runtime.table_from([_to_lua(runtime, v) for v in value])
    if isinstance(value, dict):
        return runtime.table_from({_to_lua(runtime, k): _to_lua(runtime, v)
                                   for k, v in value.items()})
    return value


def _from_lua(value: Any) -> Any:
    """A Lua value as cmsgpack.pack encodes it: a table whose keys are 1..n is an array."""
    if LUA.lua_type(value) != "table":
        return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else value
    keys = list(value.keys())
    if all(isinstance(k, int) for k in keys) and sorted(keys) == list(range(1, len(keys) + 1)):
        return [_from_lua(value[i]) for i in range(1, len(keys) + 1)]
    return {_from_lua(k): _from_lua(v) for k, v in value.items()}


class _CompiledOnce:
    """The server's Lua runtime, compiling each script text once: fakeredis compiles a
    script on every call, a good part of what a transition costs it. A script's chunk keeps
    no state between calls (its variables are locals), so calling it again is running it."""

    def __init__(self, runtime: Any) -> None:
        self._runtime = runtime
        self._chunks: dict[Any, Any] = {}

    def execute(self, source: Any, *args: Any) -> Any:
        chunk = self._chunks.get(source)
        if chunk is None:
            chunk = self._chunks[source] = self._runtime.compile(source)
        return chunk(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._runtime, name)


def _install_cmsgpack(server: Any) -> None:
    runtime = server._lua_runtime

    def unpack(data: bytes) -> Any:
        try:
            return _to_lua(runtime, _decoder.decode(data))
        except msgspec.DecodeError as exc:  # as Redis: the script fails, with a reason
            raise LUA.LuaError(f"cmsgpack.unpack: {exc}") from None

    def pack(*values: Any) -> bytes:
        return b"".join(_encoder.encode(_from_lua(v)) for v in values)

    runtime.eval("function(unpack, pack) cmsgpack = {unpack = unpack, pack = pack} end")(
        unpack, pack)
    # fakeredis refuses a script that leaves a global it did not set up itself.
    server._lua_expected_globals.add(b"cmsgpack")


class ServerTime:
    """What fakeredis's modules know as `time` (and `current_time`): the clock of the testing
    mode opened last while one is open, the machine's otherwise. fakeredis keeps time in
    module globals, not per server, so one testing mode at a time sets it."""

    # (module, name): where fakeredis 2.41 reads the time.
    PLACES = (("fakeredis._socket._base", "time"), ("fakeredis.model._stream", "time"),
              ("fakeredis.commands_mixins.server_mixin", "time"),
              ("fakeredis.model._stream", "current_time"),
              ("fakeredis.commands_mixins.streams_mixin", "current_time"),
              ("fakeredis.commands_mixins.hash_mixin", "current_time"),
              ("fakeredis.model._hash", "current_time"),
              ("fakeredis.model._expiring_members_set", "current_time"))

    def __init__(self) -> None:
        self.clocks: list[Clock] = []

    def time(self) -> float:
        return self.clocks[-1].now_ms() / 1000 if self.clocks else time.time()

    def current_time(self) -> int:
        return self.clocks[-1].now_ms() if self.clocks else int(time.time() * 1000)

    def __getattr__(self, name: str) -> Any:  # the rest of the time module
        return getattr(time, name)

    def install(self) -> None:
        for module_name, name in self.PLACES:
            module = importlib.import_module(module_name)
            if not hasattr(module, name):
                raise ConfigError(f"fakeredis {fakeredis.__version__} reads its time elsewhere "
                                  f"({module_name}.{name} is gone): the testing mode knows 2.41")
            setattr(module, name, self if name == "time" else self.current_time)

    def push(self, clock: Clock) -> None:
        self.clocks.append(clock)

    def pop(self, clock: Clock) -> None:
        if clock in self.clocks:
            self.clocks.remove(clock)


SERVER_TIME = ServerTime()


def server() -> fakeredis.FakeServer:
    """A new, empty fake Redis whose scripts have cmsgpack."""
    SERVER_TIME.install()  # idempotent; changes nothing until a clock is pushed
    fake = fakeredis.FakeServer(version=REDIS_VERSION)
    probe = fakeredis.FakeRedis(server=fake)
    probe.eval("return 1", 0)  # fakeredis makes the server's Lua runtime on the first script
    probe.close()
    if not hasattr(fake, "_lua_runtime") or not hasattr(fake, "_lua_expected_globals"):
        raise ConfigError(f"fakeredis {fakeredis.__version__} keeps its Lua runtime "
                          f"elsewhere: the testing mode knows 2.41")
    _install_cmsgpack(fake)
    fake._lua_runtime = _CompiledOnce(fake._lua_runtime)
    return fake


def sync_client(fake: fakeredis.FakeServer) -> fakeredis.FakeRedis:
    return fakeredis.FakeRedis(server=fake)


def async_client(fake: fakeredis.FakeServer) -> fakeredis.FakeAsyncRedis:
    return fakeredis.FakeAsyncRedis(server=fake)
