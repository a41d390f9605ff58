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
