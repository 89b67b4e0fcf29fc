"""Types of the CLI's numeric flags: argparse checks a value as it reads it, so a bad one is one ``error:`` line
(exit 2) naming the flag and what it expects, before any work starts.

Range checks that belong to the scenario (``--tp`` against the model's heads, ``--gpu-mem-util`` in (0, 1]) stay
in :class:`planner.scenario.Scenario`, which the app shares; these types refuse what no layer can use: text,
NaN, infinities, fractions where a count is meant, and magnitudes past what the compiled simulator's integers
hold.
"""

from __future__ import annotations

import argparse
import math

from planner.limits import MAX_COUNT


def real(what: str, *, above: float | None = None, low: float | None = None, high: float | None = None):
    """An argparse type for a finite number; ``above`` is an exclusive lower bound, ``low``/``high`` inclusive
    ones. ``what`` words the expectation in the error (``"a positive number of seconds"``)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: expected {what}") from None
        if (not math.isfinite(value) or (above is not None and not value > above)
                or (low is not None and value < low) or (high is not None and value > high)):
            raise argparse.ArgumentTypeError(f"{text!r}: expected {what}")
        return value

    return parse


def whole(what: str, *, low: int | None = None, high: int = MAX_COUNT):
    """An argparse type for a whole number from ``low`` (``None``: any sign, the scenario checks it) to
    ``high``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: expected {what}") from None
        if (low is not None and value < low) or abs(value) > high:
            raise argparse.ArgumentTypeError(f"{text!r}: expected {what}")
        return value

    return parse


FINITE = real("a finite number")
SCENARIO_INT = whole(f"a whole number (at most {MAX_COUNT:,})")
POSITIVE_MS = real("a positive number of milliseconds", above=0)
NON_NEGATIVE_GIB = real("a non-negative number of GiB", low=0, high=1e6)
