"""The code's shape, kept: no import cycle inside the library, and each layer importing only
what it may (an engineer reads a module's imports to learn what it may depend on). A module is
one idea, split by role when it holds two, never to meet a line count. One module sends every
round trip to Redis, and one imports redis-py's private modules."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parents[1]
def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, name: str) -> set[str]:
    """The scheduler modules `path` imports, at any level (lazy imports in functions too)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            target = (f"{base}.{node.module}" if node.module else base) if node.level \
                else (node.module or "")
            out.add(target)
            out.update(f"{target}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def test_no_import_cycle_in_the_library() -> None:
    paths = {_module(p): p for p in ROOT.glob("scheduler/**/*.py")}
    graph = {m: {d for d in _imports(p, m) if d in paths and d != m} for m, p in paths.items()}
    # A package's __init__ re-exporting its own modules is not a cycle through them.
    graph = {m: {d for d in deps if not (m.startswith(d + ".") and paths[d].name == "__init__.py")}
             for m, deps in graph.items()}
    cycles: list[list[str]] = []

    def visit(m: str, path: list[str], done: set[str]) -> None:
        for d in sorted(graph[m]):
            if d in path:
                cycles.append(path[path.index(d):] + [d])
            elif d not in done:
                visit(d, path + [d], done)
        done.add(m)

    done: set[str] = set()
    for m in sorted(graph):
        if m not in done:
            visit(m, [m], done)
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles[:5])


# The layers, bottom first: a subpackage of `scheduler` is a layer, and a module imports only
# from its own layer and the layers below it (docs/internals/architecture.md walks them).
LAYERS = ["core", "redis", "scripts", "observe", "history", "sdk", "outbox", "worker", "node",
          "web", "testing", "dev", "cli"]


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "scheduler" else None


def test_every_module_sits_in_a_layer() -> None:
    loose = sorted(p.name for p in (ROOT / "scheduler").glob("*.py") if p.name != "__init__.py")
    assert not loose, f"modules directly under scheduler/: {loose}; put each in its layer"
    packages = sorted(p.name for p in (ROOT / "scheduler").iterdir()
                      if (p / "__init__.py").exists())
    assert packages == sorted(LAYERS), f"subpackages {packages} are not the layers {LAYERS}"


def test_each_layer_imports_only_what_it_may() -> None:
    paths = {_module(p): p for p in ROOT.glob("scheduler/**/*.py")}
    rank = {layer: i for i, layer in enumerate(LAYERS)}
    wrong = []
    for module, path in paths.items():
        layer = _layer(module)
        if layer is None:
            continue
        for dep in _imports(path, module):
            other = _layer(dep)
            if other is not None and other in rank and rank[other] > rank[layer]:
                wrong.append(f"{module} ({layer}) imports {dep} ({other})")
    assert not wrong, wrong


# One transport: every round trip to Redis leaves from scheduler/redis/transport.py. Outside
# it no module sends: no pipeline is made or executed, no script is called or loaded, no
# connection is written to or read; a command is only queued on a pipeline being filled
# (`pipe.execute_command(...)`, never awaited) and sent by `transport.send`; a command on its
# own goes by `transport.call(client, "hmget", ...)`. What the check sees is names: a method
# of redis-py's client called on a receiver named as our Redis clients are (`self.redis`,
# `client`, `node`...), and the sending methods (`pipeline`, `execute`, ...) on any receiver.
TRANSPORT = "scheduler/redis/transport.py"
INTERNALS = "scheduler/redis/redispy_internals.py"
_SENDS = frozenset({"pipeline", "execute", "evalsha", "evalsha_ro", "eval", "eval_ro",
                    "script_load", "send_packed_command", "read_response", "execute_command"})
# What is not a Redis client: the history stores' and the outbox's DB-API cursors and
# connections execute SQL; the testing mode's Lua runtime (lupa) evaluates Lua.
_NOT_REDIS = {("scheduler/history/store/postgres.py", "execute"),
              ("scheduler/history/store/sqlite.py", "execute"),
              ("scheduler/outbox/relay.py", "execute"),
              ("scheduler/outbox/rows.py", "execute"),
              ("scheduler/outbox/writer.py", "execute"),
              ("scheduler/testing/fakeserver.py", "eval")}


_COMMANDS = frozenset(n for n in dir(redis.Redis) if not n.startswith("_")) - {
    "from_url", "from_pool", "close", "aclose", "get_encoder", "get_connection_kwargs",
    "connection_pool", "response_callbacks", "set_response_callback", "get_retry",
    "set_retry", "lock", "pubsub", "monitor", "register_script", "load_external_module"}
_CLIENT = re.compile(r"(^|\.)(redis|client|probe|node|r)$|^self\._nodes\[")


def round_trips_outside_the_transport(files: dict[str, str]) -> list[str]:
    """file:line of each call that sends, in files (path -> source) outside the transport."""
    found = []
    for rel, text in files.items():
        if rel in (TRANSPORT, INTERNALS):
            continue
        tree = ast.parse(text, rel)
        awaited = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Await)}
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            name, receiver = node.func.attr, node.func.value
            if isinstance(receiver, ast.Name) and receiver.id == "transport":
                continue
            if name not in _SENDS:
                if name in _COMMANDS and _CLIENT.search(ast.unparse(receiver)):
                    found.append(f"{rel}:{node.lineno}: .{name}(")
                continue
            if (rel, name) in _NOT_REDIS:
                continue
            if (name == "execute_command" and isinstance(receiver, ast.Name)
                    and receiver.id == "pipe" and id(node) not in awaited):
                continue  # queued on a pipeline the transport sends
            found.append(f"{rel}:{node.lineno}: .{name}(")
    return sorted(found)


def test_only_the_transport_sends_round_trips() -> None:
    files = {p.relative_to(ROOT).as_posix(): p.read_text()
             for p in sorted(ROOT.glob("scheduler/**/*.py"))}
    found = round_trips_outside_the_transport(files)
    assert not found, "send these through scheduler.redis.transport:\n" + "\n".join(found)


def test_the_round_trip_check_sees_each_way_to_send() -> None:
    planted = ("async def f(client, pipe, conn):\n"
               "    await pipe.execute_command('GET', 'k')\n"  # awaited: sent, not queued
               "    client.pipeline(transaction=False)\n"
               "    pipe.execute()\n"
               "    client.evalsha('0' * 40, 0)\n"
               "    conn.send_packed_command(b'')\n"
               "    pipe.execute_command('GET', 'k')\n"  # queued: allowed
               "    await transport.send(pipe)\n"  # allowed
               "    await self.redis.hmget('k', 'f')\n"
               "    await transport.call(self.redis, 'hmget', 'k', 'f')\n")  # allowed
    found = round_trips_outside_the_transport({"scheduler/node/planted.py": planted})
    assert found == ["scheduler/node/planted.py:2: .execute_command(",
                     "scheduler/node/planted.py:3: .pipeline(",
                     "scheduler/node/planted.py:4: .execute(",
                     "scheduler/node/planted.py:5: .evalsha(",
                     "scheduler/node/planted.py:6: .send_packed_command(",
                     "scheduler/node/planted.py:9: .hmget("]
    assert round_trips_outside_the_transport({TRANSPORT: planted}) == []


def test_private_redis_py_imports_live_in_one_adapter() -> None:
    found = []
    for path in sorted(ROOT.glob("scheduler/**/*.py")):
        rel = path.relative_to(ROOT).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), rel)):
            names = ([node.module or ""] if isinstance(node, ast.ImportFrom)
                     else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            if any(n.startswith("redis._") for n in names) and rel != INTERNALS:
                found.append(f"{rel}:{node.lineno}")
    assert not found, f"redis-py's private modules are imported only in {INTERNALS}: {found}"
