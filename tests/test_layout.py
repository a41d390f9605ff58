"""The code's shape, kept: no import cycle inside the library, and each layer importing only
what it may (an engineer reads a module's imports to learn what it may depend on). A module is
one idea, split by role when it holds two, never to meet a line count."""

from __future__ import annotations

import ast
from pathlib import Path

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


# The layers README "How it works" names, and what each may import (besides itself and the
# layers below it in this list).
LAYERS = {
    "contracts": {"errors", "states", "keys", "events", "replies", "clock", "cronspec",
                  "masking", "finite",
                  "schedule", "models", "namespace", "connection", "packing", "cluster", "scripts", "direct", "hash_read", "sources",
                  "sqlfiles", "limits"},
    "store": {"store", "store.interface", "store.rows", "store.postgres", "store.sqlite"},
    "services": {"loops", "registry", "inflight", "reader", "backlog", "execution", "committer",
                 "heartbeat", "worker", "claiming", "worker_config", "limiter", "leases", "promoter", "materializer",
                 "reclaimer", "queue_cleaner", "sweeper", "node", "snapshot_intake", "snapshotter", "retention",
                 "recovery", "status", "status_records", "capacity", "autoscale", "fastmetrics",
                 "metrics", "exporter", "embedded", "tracing"},
    "sdk": {"jobspec", "sdk_core", "submit_batch", "script_stream", "operations", "schedules",
            "results", "queues", "browse", "client"},
    "web": {"web", "web.app", "web.guard", "web.middleware", "web.pages", "web.ratelimit",
            "web.series"},
    "testing": {"testing", "testing.fakeserver", "testing.harness"},
}
MAY_IMPORT = {"contracts": {"contracts"}, "store": {"contracts", "store"},
              "services": {"contracts", "store", "services"},
              "sdk": {"contracts", "store", "sdk", "services:status", "services:tracing"},
              "web": {"contracts", "sdk", "web", "services:status", "services:loops"},
              "testing": {"contracts", "store", "services", "sdk", "testing"}}


def test_each_layer_imports_only_what_it_may() -> None:
    paths = {_module(p): p for p in ROOT.glob("scheduler/**/*.py")
             if "examples" not in p.parts}
    layer_of = {f"scheduler.{m}": layer for layer, ms in LAYERS.items() for m in ms}
    unplaced = set(paths) - set(layer_of) - {"scheduler"}
    assert not unplaced, f"place these modules in a layer: {sorted(unplaced)}"
    wrong = []
    for module, path in paths.items():
        layer = layer_of.get(module)
        if layer is None:
            continue
        for dep in _imports(path, module) & set(layer_of):
            other = layer_of[dep]
            allowed = MAY_IMPORT[layer]
            if other not in allowed and f"{other}:{dep.removeprefix('scheduler.')}" not in allowed:
                wrong.append(f"{module} ({layer}) imports {dep} ({other})")
    assert not wrong, wrong
