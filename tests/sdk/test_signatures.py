"""Every public method of `Client` and `AsyncClient` shows its real signature at runtime
(help(), Jupyter's `?`, anything that reads `inspect.signature`): named, annotated
parameters, a return annotation and a docstring. Each method's parameters are those of its
operation (the I/O-free generator of the same name it drives), and AsyncClient's coroutine
has the same parameters as Client's method, so the three cannot drift apart."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import pytest

import scheduler.sdk.browse as browse
import scheduler.sdk.catalog as catalog
import scheduler.sdk.declared as declared
import scheduler.sdk.fires as fires
import scheduler.sdk.history as history
import scheduler.sdk.jobs as jobs
import scheduler.sdk.queues as queues
import scheduler.sdk.results as results
import scheduler.sdk.schedules as schedules
import scheduler.sdk.state as state
import scheduler.sdk.status as status
from scheduler import AsyncClient, Client
from scheduler.history.store import HistoryStore

TOPICS: list[ModuleType] = [state, jobs, history, status, schedules, results, queues, browse,
                            catalog, declared, fires]
# Steps every operation starts with (and the unknown-task step of a submit), not operations
# of their own.
NOT_METHODS = {"ready", "ensure_namespace", "check_tasks"}
# The one pair whose names differ: closing is a coroutine in AsyncClient.
RENAMED = {"close": "aclose"}


def operations() -> dict[str, Callable[..., Any]]:
    """Every public operation of the SDK, by name (a name is in one topic only)."""
    out: dict[str, Callable[..., Any]] = {}
    for module in TOPICS:
        for name, f in vars(module).items():
            if (inspect.isgeneratorfunction(f) and f.__module__ == module.__name__
                    and not name.startswith("_") and name not in NOT_METHODS):
                assert name not in out, f"{name} is an operation of two topics"
                out[name] = f
    return out


def public(cls: type) -> dict[str, Any]:
    """The public methods and properties of a client class (and its constructor), as
    defined (a property, not its value)."""
    out = {}
    for name in dir(cls):
        if name.startswith("_") and name != "__init__":
            continue
        member = inspect.getattr_static(cls, name)
        if isinstance(member, property) or inspect.isfunction(member):
            out[name] = member
    return out


def methods(cls: type) -> Iterator[tuple[str, Callable[..., Any]]]:
    for name, member in sorted(public(cls).items()):
        if inspect.isfunction(member):
            yield name, member


def shape(f: Callable[..., Any], loose: bool = False) -> list[tuple[str, Any, Any, Any]]:
    """The parameters past the first (self, or an operation's state), as compared. `loose`:
    a keyword-only parameter compares equal to one that may also be positional (an
    operation may take positionally what its methods take by keyword only)."""
    params = list(inspect.signature(f).parameters.values())[1:]
    def kind(p: inspect.Parameter) -> Any:
        return p.POSITIONAL_OR_KEYWORD if loose and p.kind is p.KEYWORD_ONLY else p.kind
    return [(p.name, kind(p), p.default, p.annotation) for p in params]


@pytest.mark.parametrize("cls", [Client, AsyncClient], ids=lambda c: c.__name__)
def test_every_public_method_states_its_parameters(cls: type) -> None:
    checked = 0
    for name, f in methods(cls):
        sig = inspect.signature(f)
        params = list(sig.parameters.values())
        where = f"{cls.__name__}.{name}{sig}"
        assert params and params[0].name == "self", where
        rest = params[1:]
        assert not any(p.kind is p.VAR_POSITIONAL for p in rest), f"{where}: *args"
        if any(p.kind is p.VAR_KEYWORD for p in rest):
            assert any(p.kind is not p.VAR_KEYWORD for p in rest), f"{where}: **kwargs only"
        for p in rest:
            assert p.annotation is not p.empty, f"{where}: {p.name} has no annotation"
        assert sig.return_annotation is not sig.empty, f"{where}: no return annotation"
        assert inspect.getdoc(f), f"{where}: no docstring"
        # The annotations name real types (what get_type_hints, and so the tools, resolve).
        typing.get_type_hints(f, localns={"HistoryStore": HistoryStore})
        checked += 1
    assert checked >= 30
    for name, member in public(cls).items():
        if isinstance(member, property):
            assert inspect.getdoc(member), f"{cls.__name__}.{name}: no docstring"


def test_the_async_client_has_the_clients_methods_as_coroutines() -> None:
    sync, coro = public(Client), public(AsyncClient)
    assert {RENAMED.get(n, n) for n in sync} == set(coro), \
        "Client and AsyncClient have different public methods"
    for name, f in sync.items():
        g = coro[RENAMED.get(name, name)]
        where = f"AsyncClient.{RENAMED.get(name, name)}"
        if name == "__init__":
            assert g is f  # the one constructor both share
            continue
        if isinstance(f, property):  # Client.shards: a coroutine method in AsyncClient
            assert isinstance(g, property) or inspect.iscoroutinefunction(g), where
            getter = f.fget
            if inspect.isfunction(g):
                assert shape(g) == [], where
                assert inspect.signature(g).return_annotation == \
                    inspect.signature(getter).return_annotation, where
            continue
        assert inspect.iscoroutinefunction(g), f"{where} is not a coroutine function"
        assert shape(g) == shape(f), \
            f"{where}{inspect.signature(g)} is not Client.{name}{inspect.signature(f)}"
        assert inspect.signature(g).return_annotation == \
            inspect.signature(f).return_annotation, where
        assert inspect.getdoc(g) == inspect.getdoc(f) or name in RENAMED, where


def test_each_method_takes_its_operations_parameters_and_docstring() -> None:
    ops = operations()
    assert len(ops) >= 30
    sync = public(Client)
    driven = {n for n, m in sync.items() if n not in RENAMED and n != "__init__"
              and (inspect.isfunction(m) or n == "shards")}
    assert driven == set(ops), (f"methods without an operation: {driven - set(ops)}; "
                                f"operations without a method: {set(ops) - driven}")
    for name, op in ops.items():
        ret = inspect.signature(op).return_annotation
        assert ret.startswith("Op[") and ret.endswith("]"), f"{name}: returns {ret}"
        for cls in (Client, AsyncClient):
            member = inspect.getattr_static(cls, name)
            f = member.fget if isinstance(member, property) else member
            where = f"{cls.__name__}.{name}{inspect.signature(f)}"
            assert shape(f, loose=True) == shape(op, loose=True), \
                f"{where} is not {op.__module__}.{name}"
            assert inspect.signature(f).return_annotation == ret[3:-1], where
            assert f.__doc__ == op.__doc__, f"{where}: not its operation's docstring"


class _Captured(Exception):
    """Stops a method at its operation, which it was handed."""


@pytest.mark.parametrize("cls", [Client, AsyncClient], ids=lambda c: c.__name__)
def test_each_method_hands_every_argument_to_its_operations_parameter_of_that_name(
        cls: type) -> None:
    """A method passes its arguments on by name or in order (submit's, for speed): each
    must arrive as the operation's parameter of the same name. Each argument is a distinct
    object; the operation's frame, made but not started, shows where each one landed."""
    ops = operations()
    client = cls.__new__(cls)
    client._core = core = object()
    got: list[Any] = []

    def drive(op: Any) -> Any:
        got.append(op)
        raise _Captured

    async def adrive(op: Any) -> Any:
        drive(op)

    client._drive = adrive if cls is AsyncClient else drive
    for name in ops:
        member = inspect.getattr_static(cls, name)
        f = member.fget if isinstance(member, property) else member
        args: list[Any] = []
        kwargs: dict[str, Any] = {}
        sent: dict[str, Any] = {}
        for p in list(inspect.signature(f).parameters.values())[1:]:
            sent[p.name] = value = object()
            if p.kind is p.VAR_KEYWORD:
                sent[p.name] = {"extra": value}
                kwargs["extra"] = value
            elif p.kind is p.KEYWORD_ONLY:
                kwargs[p.name] = value
            else:
                args.append(value)
        got.clear()
        with pytest.raises(_Captured):
            result = f(client, *args, **kwargs)
            if inspect.iscoroutine(result):
                result.send(None)
        [op] = got
        where = f"{cls.__name__}.{name}"
        assert op.gi_code is ops[name].__code__, f"{where} drives another operation"
        landed = op.gi_frame.f_locals
        first = next(iter(inspect.signature(ops[name]).parameters))
        assert landed[first] is core, where
        for param, value in sent.items():
            assert landed[param] is value or landed[param] == value, \
                f"{where}: its {param} did not arrive as the operation's {param}"
        op.close()
