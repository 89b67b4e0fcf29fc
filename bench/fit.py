"""Fit benchmark: every length family on a 10M-request trace stored in DuckDB, and the inter-arrival fits.

The product path: ``GROUP BY`` counts from the store, then censored MLE of all families on the distinct values
(quantiles stay exact); inter-arrival gaps (10M distinct values) go through the seeded subsample. Baseline in the
same run: scipy's own ``.fit`` of the five scipy families on the raw 10M output lengths. Goal: all families,
one field, <= 5 s on the 2-core project machine. Usage:
    python bench/fit.py [--rows 10000000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from planner.traces import store  # noqa: E402
from planner.traces.ingest import ingest_file  # noqa: E402
from planner.traces.queries import length_counts
from planner.workload.fits import fit_interarrival, fit_length_field
from planner.workload.fitting.families import FAMILIES  # noqa: E402


def write_trace(path: Path, rows: int) -> np.ndarray:
    """Inputs: lognormal body + Pareto tail cut at a 32k context; outputs lognormal capped at 2,048 max_tokens;
    bursty gamma arrivals (CV 2) at 300 req/s."""
    rng = np.random.default_rng(20261201)
    body = rng.lognormal(6.4, 1.0, rows)
    tail = 1800.0 * (1.0 - rng.random(rows)) ** (-1 / 1.4)
    inputs = np.minimum(np.rint(np.where(rng.random(rows) < 0.08, tail, body)), 32_768).clip(1).astype(np.int64)
    outputs = np.minimum(np.rint(rng.lognormal(5.0, 0.95, rows)), 2048).clip(1).astype(np.int64)
    arrivals = np.cumsum(rng.gamma(0.25, 1 / (300 * 0.25), rows))
    pl.DataFrame({"arrival_s": arrivals, "input_tokens": inputs, "output_tokens": outputs}).write_parquet(path)
    return outputs


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.parquet"
        outputs = write_trace(path, args.rows)
        con = store.open_store(Path(tmp) / "bench.duckdb")
        result, ingest_s = timed(lambda: ingest_file(con, path, overrides={"arrival": "arrival_s"},
                                                     unit_overrides={"arrival": "s"}))
        print(f"rows {result.rows:,}  (ingest {ingest_s:.1f} s, not part of the fit)")
        tid = result.trace_id
        for field in ("input_tokens", "output_tokens"):
            (x, _), count_s = timed(lambda f=field: length_counts(con, tid, f))
            fit, fit_s = timed(lambda f=field: fit_length_field(con, tid, f))
            print(f"{field}: {len(x):,} distinct values; GROUP BY + all {len(FAMILIES)} families "
                  f"{fit_s:.2f} s (counts alone {count_s:.2f} s); best {fit.best}, cap {fit.censored_at:g} "
                  f"({fit.censored_fraction:.2%} censored)")
            for c in fit.candidates:
                if c.aic is not None:
                    print(f"    {c.family:18s} ΔAIC {c.aic - fit.candidates[0].aic:12.1f}  KS {c.ks:.4f}  "
                          + ", ".join(f"{k}={v:.4g}" for k, v in c.params.items()))
        arrivals, gaps_s = timed(lambda: fit_interarrival(con, store.get_trace(con, tid)))
        print(f"interarrival: {args.rows - 1:,} gaps; fetch + subsample + 4 families {gaps_s:.2f} s; "
              f"best {arrivals.fit.best}, CV {arrivals.cv:.3f}, Poisson-consistent {arrivals.poisson.consistent}")
        con.close()
        raw = outputs.astype(float)
        scipy_families = (stats.lognorm, stats.gamma, stats.weibull_min, stats.expon, stats.lomax)
        _, scipy_s = timed(lambda: [family.fit(raw, floc=0) for family in scipy_families])
        print(f"baseline: scipy .fit of the {len(scipy_families)} scipy families (uncensored, no log-t or mixture) "
              f"on the {raw.size:,} raw output lengths {scipy_s:.2f} s")
        print(f"ratio: output_tokens, all {len(FAMILIES)} families censored from the store / scipy baseline = "
              f"{fit_s / scipy_s:.3f}")

if __name__ == "__main__":
    main()
