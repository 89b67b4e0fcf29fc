"""A stand-in for an output-length predictor (seed 002's log-t model), for the reservation and priority remedies.

The paper it cites predicts each request's log-t location with R² = 0.82; we draw predictions with exactly that
skill around the true log length (seeded), and a residual scale that makes the predictive quantiles calibrated.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

PREDICTOR_R2 = 0.82
LOG_T_DF = 5.0


def predicted_lengths(output: np.ndarray, quantile: float, r2: float = PREDICTOR_R2, seed: int = 0):
    """Per request: the predicted median output and the predicted ``quantile`` (tokens, ≥ 1).

    ``log ŷ = log y + ε`` with ``var ε = (1 − R²) var log y``; the predictive distribution is a log-t around
    ``log ŷ`` with that residual scale.
    """
    log_y = np.log(np.maximum(np.asarray(output, dtype=float), 1.0))
    # a Student t has variance df / (df - 2) times its scale squared
    spread = float(np.sqrt(max(1.0 - r2, 0.0) * log_y.var() * (LOG_T_DF - 2) / LOG_T_DF)) if log_y.size > 1 else 0.0
    noise = stats.t.rvs(LOG_T_DF, size=log_y.size, random_state=np.random.default_rng(seed)) * spread
    center = log_y + noise
    median = np.maximum(np.rint(np.exp(center)), 1).astype(np.int64)
    upper = np.maximum(np.ceil(np.exp(center + spread * stats.t.ppf(quantile, LOG_T_DF))), 1).astype(np.int64)
    return median, upper
