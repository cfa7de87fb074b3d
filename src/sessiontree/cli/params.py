"""Option types shared by the commands: durations and counts a user types, checked when
they are parsed (click's ``FloatRange`` lets nan through, and every comparison with nan
is false; a number past what the arithmetic behind an option holds overflows later,
far from the typo that caused it).

Contract: ``Seconds(minimum)`` (and ``SECONDS``, minimum 0) is a click type for a
finite number of seconds up to ``MAX_SECONDS``; ``check_seconds`` says why a number is
not one; ``Duration`` takes a unit too (``15m``, ``1h``, ``2d``); ``MAX_COUNT`` bounds
counts (bytes, results); ``Dollars`` is a finite amount above 0; ``parse_price`` reads
``--price MODEL=INPUT,OUTPUT[,CACHE_WRITE,CACHE_READ]`` (``usage``, ``compare``, ``html``,
``run --max-cost``), and ``PRICE_HELP`` is that option's help.
"""

from __future__ import annotations

import math

import click

from ..names import shown

MAX_SECONDS = 36_525 * 86_400
"""The longest duration an option takes: 100 years (any longer is a typo, and overflows
the time arithmetic behind it)."""


def check_seconds(seconds: float, minimum: float = 0.0) -> str | None:
    """Why ``seconds`` is not a duration an option takes (finite, ``minimum`` to
    ``MAX_SECONDS``), or None."""
    if not math.isfinite(seconds):
        return "not a finite duration"
    if seconds < minimum:
        return f"shorter than {minimum:g} s" if minimum else "negative"
    if seconds > MAX_SECONDS:
        return "longer than 100 years"
    return None


class Seconds(click.ParamType):
    """A number of seconds: finite, at least ``minimum``, at most 100 years. (click's
    FloatRange lets nan through, and every comparison with nan is false.)"""

    name = "seconds"

    def __init__(self, minimum: float = 0.0) -> None:
        self.minimum = minimum

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> float:
        try:
            seconds = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            self.fail(f"{shown(str(value))} is not a number of seconds", param, ctx)
        problem = check_seconds(seconds, self.minimum)
        if problem:
            self.fail(f"{shown(str(value))} seconds is {problem}", param, ctx)
        return seconds


SECONDS = Seconds()

MAX_COUNT = 2**53
"""The largest count (bytes, results) an option takes: a float holds it exactly, and a
database integer does too."""


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400}


class Duration(Seconds):
    """Seconds, or a number with a unit: ``90``, ``90s``, ``15m``, ``1h``, ``2d``."""

    name = "duration"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> float:
        text = str(value).strip().lower()
        unit = _UNITS.get(text[-1:], 1)
        try:
            number = float(text[:-1] if text[-1:] in _UNITS else text)
        except ValueError:
            self.fail(f"{shown(str(value))} is not a duration (e.g. 90, 90s, 15m, 1h, 2d)", param, ctx)
        return super().convert(number * unit, param, ctx)


class Dollars(click.ParamType):
    """An amount of dollars: a finite number above 0 (``--max-cost``)."""

    name = "dollars"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> float:
        try:
            amount = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            self.fail(f"{shown(str(value))} is not a number of dollars", param, ctx)
        if not math.isfinite(amount) or amount <= 0:
            self.fail(f"{shown(str(value))}: a cost budget is a finite number of dollars above 0", param, ctx)
        return amount


PRICE_FORM = "MODEL=INPUT,OUTPUT[,CACHE_WRITE,CACHE_READ]"
PRICE_HELP = (
    f"{PRICE_FORM} in dollars per million tokens (repeatable); cache writes and reads "
    "default to 1.25x and 0.1x INPUT (Anthropic's 5-minute cache)."
)
_PRICE_KEYS = ("input", "output", "cache_write", "cache_read")


def parse_price(spec: str) -> tuple[str, dict[str, float]]:
    """``MODEL=INPUT,OUTPUT`` or ``MODEL=INPUT,OUTPUT,CACHE_WRITE,CACHE_READ``: finite numbers
    >= 0, dollars per million tokens (``Usage.cost``'s keys; cache prices left out take its
    defaults)."""
    model, sep, numbers = spec.rpartition("=")
    try:
        values = [float(x) for x in numbers.split(",")]
    except ValueError:
        values = []
    if len(values) not in (2, 4):
        raise click.BadParameter(
            f"{shown(spec)}: expected {PRICE_FORM} (dollars per million tokens)", param_hint="--price"
        )
    if not sep or not model:
        raise click.BadParameter(f"{shown(spec)}: expected {PRICE_FORM}", param_hint="--price")
    if not all(math.isfinite(x) and x >= 0 for x in values):
        raise click.BadParameter(
            f"{shown(spec)}: prices are finite numbers >= 0 (dollars per million tokens)",
            param_hint="--price",
        )
    return model, dict(zip(_PRICE_KEYS, values, strict=False))
