"""Static batching's padding: real tokens over the slots of batches padded to their longest member."""

from __future__ import annotations

import numpy as np


def useful_fraction(lengths: np.ndarray) -> float:
    """Static batching: real tokens over the slots of a batch padded to its longest member."""
    lengths = np.asarray(lengths, dtype=float)
    return float(lengths.sum() / (lengths.size * lengths.max()))


def expected_useful_fraction(lengths: np.ndarray, batch_size: int, draws: int = 2000, seed: int = 0) -> dict:
    """Mean and spread of the useful fraction for batches of ``batch_size`` drawn from the trace (seeded)."""
    lengths = np.asarray(lengths, dtype=float)
    rng = np.random.default_rng(seed)
    batches = lengths[rng.integers(0, lengths.size, size=(draws, batch_size))]
    fractions = batches.sum(axis=1) / (batch_size * batches.max(axis=1))
    return {"batch_size": batch_size, "mean": float(fractions.mean()), "p10": float(np.percentile(fractions, 10)),
            "p90": float(np.percentile(fractions, 90))}

