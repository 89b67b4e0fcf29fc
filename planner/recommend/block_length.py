"""How long a bootstrap block must be to keep a trace's bursts: Politis and White's automatic block length.

A block bootstrap resamples a trace in blocks so that what lies within a block (a burst, a surge) survives whole.
Blocks shorter than the trace's surges cut them up, and the resamples are then easier to serve than the trace:
fewer replicas look "90% sure" than the trace itself needs. Politis & White (2004), "Automatic block-length
selection for the dependent bootstrap", Econometric Reviews 23(1), with the correction of Patton, Politis & White
(2009), Econometric Reviews 28(4), estimate from a series' autocovariances the block length that minimises the mean
squared error of the circular block bootstrap's variance estimate. The steps follow the ``arch`` package's
``optimal_block_length`` (K. Sheppard), which implements that correction.
"""

from __future__ import annotations

import math

import numpy as np


def _flat_top(t: float) -> float:
    """Politis and Romano's flat-top lag window: 1 up to half the bandwidth, falling linearly to 0 at it."""
    return 1.0 if t <= 0.5 else 2.0 * (1.0 - t)


def circular_block_length(series: np.ndarray) -> float:
    """The circular block bootstrap's optimal block length, in samples of ``series`` (at least 1, at most
    ``min(3√n, n/3)``); 1 for a series too short or flat to say more (fewer than 8 values, or constant).

    Examples
    --------
    An AR(1) series with coefficient φ has the length ``(1.5 (2φ / (1 − φ²))²)^⅓ n^⅓``: 13.9 for φ = 0.5 and
    n = 1,000; independent values have about 1.
    """
    x = np.asarray(series, dtype=float)
    n = x.size
    if n < 8 or not np.ptp(x) > 0:
        return 1.0
    eps = x - x.mean()
    b_max = math.ceil(min(3 * math.sqrt(n), n / 3))
    k_n = max(5, int(math.log10(n)))
    m_max = min(math.ceil(math.sqrt(n)) + k_n, n - 2)
    critical = 2 * math.sqrt(math.log10(n) / n)
    acv = np.empty(m_max + 1)
    abs_acorr = np.empty(m_max + 1)
    opt_m = None
    for lag in range(m_max + 1):
        acv[lag] = eps[lag:] @ eps[:n - lag] / n
        tail, head = eps[lag + 1:], eps[:n - lag - 1]
        scale = math.sqrt(float(tail @ tail) * float(head @ head))
        # a stretch at the mean throughout (a trace flat for a while) correlates with nothing
        abs_acorr[lag] = abs(float(eps[lag:] @ eps[:n - lag])) / scale if scale > 0 else 0.0
        # the first run of k_n autocorrelations in a row that do not differ from 0 ends the dependence
        if opt_m is None and lag >= k_n and np.all(abs_acorr[lag - k_n:lag] < critical):
            opt_m = lag - k_n
    bandwidth = min(2 * max(opt_m, 1), m_max) if opt_m is not None else m_max
    g = sum(2 * _flat_top(k / bandwidth) * k * acv[k] for k in range(1, bandwidth + 1))
    long_run = acv[0] + sum(2 * _flat_top(k / bandwidth) * acv[k] for k in range(1, bandwidth + 1))
    d_cb = 4 / 3 * long_run ** 2
    if d_cb <= 0:
        return 1.0
    return float(min(max((2 * g ** 2 / d_cb) ** (1 / 3) * n ** (1 / 3), 1.0), b_max))
