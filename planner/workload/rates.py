"""The one definition of a request rate, used by every statistic, replay, search and page."""

from __future__ import annotations

import numpy as np


def request_rate_rps(count: int, span_s: float) -> float | None:
    """Mean request rate of ``count`` arrivals from the first to the last, ``span_s`` seconds apart.

    ``(count − 1) / span``: the inverse of the mean inter-arrival gap (``count`` arrivals have ``count − 1``
    gaps). It is what ``--qps`` sets, what a replay time-scaled ``×x`` multiplies by ``x``, and the unit of every
    recommended ``max_qps_per_replica``. None with fewer than two arrivals or no time between them.
    """
    if count < 2 or not span_s > 0:
        return None
    return (count - 1) / float(span_s)


def arrival_rate_rps(arrival_s: np.ndarray) -> float | None:
    """:func:`request_rate_rps` of an array of arrival times (any order)."""
    arrival_s = np.asarray(arrival_s, dtype=float)
    return request_rate_rps(arrival_s.size, float(np.ptp(arrival_s)) if arrival_s.size else 0.0)
