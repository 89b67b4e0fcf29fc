"""Generate the bundled sample trace ``traces/sample_chat.csv.gz`` (seeded, byte-for-byte reproducible).

A 90-minute chat workload on two models: heavy-tailed inputs (lognormal body plus a Pareto tail, truncated at
an 8k context), lognormal outputs capped at ``max_tokens`` = 1024, bursty arrivals (a gamma renewal process with
CV 2 on top of a slowly varying rate with two surges), a few failed requests (HTTP 5xx, no output) and
plausible TTFT/TPOT/E2E latencies that grow with load and input length.

Run ``python traces/generate_sample.py`` to rewrite the file.
"""

from __future__ import annotations

import gzip
import io
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np

SEED = 20261130
DURATION_S = 5400
MEAN_RATE_RPS = 1.5
ARRIVAL_CV = 2.0
CONTEXT_CAP = 7936
MAX_TOKENS = 1024
FAILURE_RATE = 0.006
START = datetime(2026, 3, 2, 14, 0, 0, tzinfo=timezone.utc)
OUT = Path(__file__).with_name("sample_chat.csv.gz")


def rate_profile(t_s: np.ndarray) -> np.ndarray:
    """Requests per second over the trace: a slow swell plus two surges (at 25 and 62 minutes)."""
    base = 1.0 + 0.35 * np.sin(2 * np.pi * t_s / DURATION_S)
    surges = 2.2 * np.exp(-0.5 * ((t_s - 1500) / 120) ** 2) + 1.6 * np.exp(-0.5 * ((t_s - 3720) / 200) ** 2)
    profile = base + surges
    return MEAN_RATE_RPS * profile / profile.mean()


def arrivals(rng: np.random.Generator) -> np.ndarray:
    """Gamma renewal points in operational time, mapped to wall time through the cumulative rate."""
    grid = np.arange(DURATION_S + 1, dtype=float)
    cumulative = np.concatenate([[0.0], np.cumsum(rate_profile(grid[:-1] + 0.5))])
    shape = 1.0 / ARRIVAL_CV**2
    gaps = rng.gamma(shape, 1.0 / shape, size=int(cumulative[-1] * 1.5) + 100)
    points = np.cumsum(gaps)
    points = points[points < cumulative[-1]]
    return np.interp(points, cumulative, grid)


def lengths(rng: np.random.Generator, n: int, model_is_large: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    body = rng.lognormal(mean=6.4, sigma=1.0, size=n)
    tail = 1800.0 * (1.0 + rng.pareto(1.4, size=n))
    inputs = np.where(rng.random(n) < 0.08, tail, body)
    inputs = np.clip(np.rint(inputs), 1, CONTEXT_CAP).astype(np.int64)
    outputs = rng.lognormal(mean=np.where(model_is_large, 5.3, 4.9), sigma=0.95, size=n)
    outputs = np.clip(np.rint(outputs), 1, MAX_TOKENS).astype(np.int64)
    return inputs, outputs


def latencies(rng: np.random.Generator, t_s: np.ndarray, inputs: np.ndarray, outputs: np.ndarray,
              model_is_large: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    load = rate_profile(t_s) / MEAN_RATE_RPS
    size = np.where(model_is_large, 3.5, 1.0)
    queue_ms = rng.exponential(25.0 * load**3, size=t_s.size)
    ttft = 18.0 + 0.06 * size * inputs + queue_ms + rng.gamma(4.0, 3.0, size=t_s.size)
    tpot = (9.0 + 6.0 * load) * np.sqrt(size) * rng.lognormal(0.0, 0.12, size=t_s.size)
    e2e = ttft + tpot * np.maximum(outputs - 1, 0)
    return np.round(ttft, 1), np.round(tpot, 2), np.round(e2e, 1)


def generate(seed: int = SEED) -> bytes:
    """Return the gzip-compressed CSV bytes of the sample (identical for identical seeds)."""
    rng = np.random.default_rng(seed)
    t_s = arrivals(rng)
    n = t_s.size
    model_is_large = rng.random(n) < 0.3
    inputs, outputs = lengths(rng, n, model_is_large)
    ttft, tpot, e2e = latencies(rng, t_s, inputs, outputs, model_is_large)
    failed = rng.random(n) < FAILURE_RATE
    sessions = rng.integers(1, max(n // 3, 2), size=n)

    buf = io.StringIO()
    buf.write("timestamp,model,session_id,input_tokens,output_tokens,ttft_ms,tpot_ms,e2e_ms,status\n")
    for i in range(n):
        stamp = (START + timedelta(microseconds=int(round(t_s[i] * 1e6)))).isoformat(timespec="milliseconds")
        model = "llama-3-70b" if model_is_large[i] else "llama-3-8b"
        if failed[i]:
            status = "503" if i % 2 else "500"
            buf.write(f"{stamp},{model},s{sessions[i]:05d},{inputs[i]},0,,,,{status}\n")
        else:
            buf.write(f"{stamp},{model},s{sessions[i]:05d},{inputs[i]},{outputs[i]},"
                      f"{ttft[i]},{tpot[i]},{e2e[i]},200\n")
    return gzip.compress(buf.getvalue().encode(), compresslevel=9, mtime=0)


if __name__ == "__main__":
    data = generate()
    OUT.write_bytes(data)
    print(f"wrote {OUT} ({len(data)} bytes)")
