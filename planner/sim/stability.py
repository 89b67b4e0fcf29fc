"""Whether a replay's queue stays bounded: the verdict every simulation carries.

inference-sim's detectors and Vidur's search judge completed requests only, so a replay of a finite trace whose
queue grew for minutes still reads stable once the tail drains (``../shared/reference/prefix-cache-and-routing.md``
§4). This rule looks at the arrival window alone and counts the requests still waiting in it:

* ``waiting(τ)`` = requests arrived before τ that have not been scheduled before τ (never started, or stopped by
  a search's abort), sampled at :data:`SAMPLES` equal steps over the arrival window, from its first arrival to its
  last; the drain after the last arrival is ignored. A request arriving at τ itself has had no time to wait: with
  timestamps in whole seconds the last sample falls on a burst, and counting it called a queue that drained every
  second backlogged (60 requests/s, 100 s; jittered within each second, the same load was stable);
* the noise floor ``h = K · max(√(n / SAMPLES), 1)``: K Poisson standard deviations of the arrivals in one sampling
  step, and at least K requests (K = 3, inference-sim's backlog-drift factor, which it calls "not empirically
  calibrated"; so is ours);
* **overloaded**: at the last arrival more than ``h`` requests wait and the waiting count rose by more than
  ``h`` over the second half of the window (OLS slope × half-window): the queue still grows when load stops;
* **backlogged**: not overloaded, but at some sample more than ``h`` requests waited (a surge that queued and
  drained, or a queue that plateaued);
* **stable**: the waiting count never exceeded the noise floor.

A trace whose requests all arrive at one instant has no window: **overloaded** if some are never scheduled,
**backlogged** if more than K wait for a later step (the burst queues and drains), **stable** otherwise.

Rejected requests (prompts past ``max_model_len``, or larger than the KV pool) never queue and are left out.
Requests re-queued by preemption had started, so they do not count as waiting: the rule reads admission.
"""

from __future__ import annotations

import math

import numpy as np

SAMPLES = 20
K_NOISE = 3.0
VERDICTS = ("stable", "backlogged", "overloaded")


def waiting_counts(arrival_s: np.ndarray, first_scheduled_s: np.ndarray,
                   samples: int = SAMPLES) -> tuple[np.ndarray, np.ndarray]:
    """Sample times over the arrival window and the requests waiting at each (arrived before it and not yet
    scheduled; every request scheduled before a sample arrived before it)."""
    if arrival_s.size == 0:
        return np.empty(0), np.empty(0)
    lo, hi = float(arrival_s.min()), float(arrival_s.max())
    times = lo + (hi - lo) * np.arange(1, samples + 1) / samples
    arrived = np.searchsorted(np.sort(arrival_s), times, side="left")
    started = np.sort(np.where(np.isfinite(first_scheduled_s), first_scheduled_s, np.inf))
    return times, arrived - np.searchsorted(started, times, side="left")


def verdict(arrival_s: np.ndarray, first_scheduled_s: np.ndarray, rejected: np.ndarray) -> str:
    """``stable``, ``backlogged`` or ``overloaded`` by the module's rule."""
    keep = ~rejected
    arrival, started = arrival_s[keep], first_scheduled_s[keep]
    if not np.isfinite(started).all() and arrival.size < 2:
        return "overloaded"
    if arrival.size < 2 or np.ptp(arrival) <= 0:
        if not np.isfinite(started).all():
            return "overloaded"
        waited = int(np.sum(started > arrival))
        return "backlogged" if waited > K_NOISE else "stable"
    _, waiting = waiting_counts(arrival, started)
    floor = K_NOISE * max(math.sqrt(arrival.size / SAMPLES), 1.0)
    second = np.arange(SAMPLES // 2 - 1, SAMPLES)           # samples from mid-window to the last arrival
    slope = np.polyfit(second.astype(float), waiting[second].astype(float), 1)[0]
    if waiting[-1] > floor and slope * (second.size - 1) > floor:
        return "overloaded"
    return "backlogged" if waiting.max() > floor else "stable"


def saturated(arrival_s: np.ndarray, first_scheduled_s: np.ndarray, rejected: np.ndarray) -> bool:
    """Whether the server ran out of capacity for the offered load: the verdict is ``overloaded``, or every request
    arrived at one instant (an infinite offered rate, ``vllm bench --request-rate inf``) and more than K of them had
    to wait for a later step. A burst that queues drains, so its verdict is ``backlogged``; but the server was
    saturated by it."""
    outcome = verdict(arrival_s, first_scheduled_s, rejected)
    if outcome == "overloaded":
        return True
    keep = ~rejected
    arrival = arrival_s[keep]
    return outcome == "backlogged" and (arrival.size < 2 or float(np.ptp(arrival)) <= 0)


def window_note(arrival_s: np.ndarray, rejected: np.ndarray, e2e_s: np.ndarray, outcome: str) -> str | None:
    """Why a verdict short of ``overloaded`` may not hold for the rate, or None: the requests arrive over less time
    than their median latency (``e2e_s``, NaN for those not completed), so the replay ends before the server
    reaches a steady state. 600 requests of 64 → 512 tokens at 90 req/s on one H100 arrive in 7.1 s and read
    stable (none waits: the batch never fills), while a longer run at that rate overloads: :func:`verdict` reads
    the arrival window only."""
    arrival = arrival_s[~rejected]
    done = e2e_s[np.isfinite(e2e_s)]
    if outcome == "overloaded" or arrival.size < 2 or not done.size:
        return None
    window_s, median_s = float(np.ptp(arrival)), float(np.median(done))
    if not 0 < window_s < median_s:     # a burst at one instant is judged as a burst (:func:`saturated`)
        return None
    return (f"The {arrival.size:,} requests arrive over {window_s:,.1f} s, less than their median latency "
            f"({median_s:,.1f} s): the replay ends before the server reaches a steady state, so the verdict "
            f"\"{outcome}\" describes this burst, not its rate sustained. To judge the rate, replay more requests "
            "at it (a longer trace, or draws from the trace's fits).")
