"""A griffe extension (mkdocs.yml registers it) that gives the API reference the docstrings of
the SDK's methods.

A `Client` or `AsyncClient` method decorated with `@_drives(op)` takes its operation's
docstring when the module is imported (`help()`, IDEs); mkdocstrings reads the source without
importing it, so it would see no docstring and leave the method out of the reference. This
extension does statically what `_drives` does at import: it finds the operation named in the
decorator and copies its docstring onto the method (or the property).
"""

from __future__ import annotations

import ast
from typing import Any

import griffe

DECORATOR = "_drives"


def _driven_op(node: ast.AST) -> ast.expr | None:
    """The `op` of a `@_drives(op)` decorator on this function, if it has one."""
    if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return None
    for decorator in node.decorator_list:
        if (isinstance(decorator, ast.Call) and isinstance(decorator.func, ast.Name)
                and decorator.func.id == DECORATOR and len(decorator.args) == 1):
            return decorator.args[0]
    return None


class DrivenDocstrings(griffe.Extension):
    """Copies each driven method's operation docstring onto it, once the package is loaded
    (the operation may live in a module visited after the client's)."""

    def __init__(self) -> None:
        super().__init__()
        self._pending: list[tuple[griffe.Object, griffe.Expr | str]] = []

    def on_instance(self, *, node: ast.AST | griffe.ObjectNode, obj: griffe.Object,
                    agent: griffe.Visitor | griffe.Inspector, **kwargs: Any) -> None:
        if not isinstance(node, ast.AST):
            return
        op = _driven_op(node)
        if op is None or obj.parent is None:
            return
        expr = griffe.safe_get_expression(op, parent=obj.parent, parse_strings=False)
        if expr is not None:
            self._pending.append((obj, expr))

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader,
                   **kwargs: Any) -> None:
        still: list[tuple[griffe.Object, griffe.Expr | str]] = []
        for obj, expr in self._pending:
            if obj.package is not pkg:
                still.append((obj, expr))
                continue
            path = expr if isinstance(expr, str) else expr.canonical_path
            try:
                op = loader.modules_collection.get_member(path)
            except (KeyError, ValueError, griffe.AliasResolutionError):
                raise griffe.GriffeError(f"{obj.path}: @_drives({path}) names nothing "
                                         f"griffe can find") from None
            if op.docstring is None:
                raise griffe.GriffeError(f"{obj.path}: {path} has no docstring to take")
            obj.docstring = griffe.Docstring(op.docstring.value, lineno=op.docstring.lineno,
                                             endlineno=op.docstring.endlineno, parent=obj)
        self._pending = still
