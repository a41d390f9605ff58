"""NaN and infinity refused wherever a caller gives a number: every comparison with NaN is
false, so a range check alone lets it through (`lease_s < 1` is False for NaN), and infinity
passes every lower bound and then fails as `int(inf)` deep inside a running service."""

from __future__ import annotations

import math

import msgspec

from scheduler.core.errors import ConfigError


def finite_number(value: object) -> bool:
    """An int or a float that is neither NaN nor infinite (a bool is not a number here)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def check_finite(config: msgspec.Struct) -> None:
    """ConfigError for the first float field of a component's config that is NaN or
    infinite; each config's __post_init__ calls it before its range checks."""
    for name in config.__struct_fields__:
        value = getattr(config, name)
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{name} must be a finite number, not {value}")


Bounds = dict[str, tuple[float, float]]
"""A config's fields and the range each may take, low and high included: the Struct checks
them (check_bounds) and the CLI gives its options the same ranges (cli/options.py, bounded)."""


def shown(number: float) -> str:
    """A bound for people: 31,536,000 rather than 3.1536e+07."""
    return f"{int(number):,}" if float(number).is_integer() else f"{number:g}"


def check_bounds(config: msgspec.Struct, bounds: Bounds) -> None:
    """ConfigError for the first field of `bounds` outside its range (None is not set)."""
    for name, (low, high) in bounds.items():
        value = getattr(config, name)
        if value is not None and not low <= value <= high:
            raise ConfigError(f"{name} must be from {shown(low)} to {shown(high)}, not "
                              f"{value!r}")
