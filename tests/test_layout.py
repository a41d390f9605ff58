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


# The layers, bottom first: a subpackage of `scheduler` is a layer, and a module imports only
# from its own layer and the layers below it (docs/internals/architecture.md walks them).
LAYERS = ["core", "redis", "scripts", "observe", "history", "sdk", "worker", "node", "web",
          "testing", "dev", "cli"]


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
