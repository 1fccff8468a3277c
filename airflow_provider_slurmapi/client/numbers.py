"""The one check of a numeric argument or setting: its type and its range, named in the error."""

from __future__ import annotations

import math

from airflow_provider_slurmapi.client.errors import InvalidRequestError


def checked_number(
    field: str,
    value: object,
    *,
    low: float,
    high: float | None = None,
    whole: bool = False,
    above_low: bool = False,
    from_text: bool = False,
    unit: str = "seconds",
) -> float:
    """``value`` if it is a number from ``low`` to ``high`` (above ``low`` when ``above_low``),
    else ``InvalidRequestError`` naming ``field``. ``whole``: an integer; ``from_text``: text of
    one is read too (a connection's fields are text); ``unit``: what the number counts."""
    number = _read(value, whole=whole, from_text=from_text)
    if number is None or number < low or (above_low and number == low) or (high is not None and number > high):
        kind = "an integer" if whole else f"a number of {unit}"
        bounds = f"greater than {_shown(low)}" if above_low else f"from {_shown(low)}"
        if high is not None:
            bounds += f" to {_shown(high)}"
        raise InvalidRequestError(field, f"must be {kind} {bounds}, got {value!r}")
    return number


def _read(value: object, *, whole: bool, from_text: bool) -> float | None:
    number = _parse(value, whole=whole, from_text=from_text)
    # NaN passes no comparison and infinity passes a missing bound: neither is a setting
    return number if number is not None and math.isfinite(number) else None


def _parse(value: object, *, whole: bool, from_text: bool) -> float | None:
    if isinstance(value, bool):
        return None
    if from_text and isinstance(value, str):
        try:
            return int(value) if whole else float(value)
        except ValueError:
            return None
    if isinstance(value, int) or (not whole and isinstance(value, float)):
        return value
    return None


def _shown(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() else str(bound)
