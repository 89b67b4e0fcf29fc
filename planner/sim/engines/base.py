"""What every engine module provides: its name, defaults and a ``run`` over a workload."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np


@dataclass(frozen=True)
class EngineSettings:
    """Scheduler knobs an engine reads (vLLM names; other engines map theirs onto them)."""

    max_num_seqs: int
    max_num_batched_tokens: int
    chunked_prefill: bool
    block_size: int
    num_blocks: int
    max_model_len: int
    max_new_tokens: int | None = None
    long_prefill_token_threshold: int = 0
    preemption: str = "recompute"
    swap_s_per_block: float = 0.0     # seconds to move one block (all layers) between GPU and host
    reserve_quantile: float | None = None   # vllm-v1 remedy: reserve this quantile of a predicted output length
    priority: str = "fcfs"            # or "shortest-predicted" (vllm-v1 remedy)
    abort_wait_s: float = float("inf")  # vllm-v1: stop once a request has waited this long (search pruning)


@dataclass(frozen=True)
class RawRun:
    """Per-request outcome arrays and the sampled timeline, as an engine's loop leaves them."""

    first_token: np.ndarray
    finish: np.ndarray
    first_scheduled: np.ndarray
    preemptions: np.ndarray
    rejected: np.ndarray
    steps: int
    timeline: np.ndarray        # rows: time_s, running, waiting, blocks_used, step_s, bound
    generated: np.ndarray       # output tokens each request produced
    free_blocks_at_end: int


@dataclass(frozen=True)
class Engine:
    """A scheduler: ``run(arrival, prompt, output, settings, coeffs, log_every) -> RawRun``."""

    name: str
    label: str
    help: str
    run: Callable[..., RawRun]
    reserves_max_new: bool = False     # needs a max_new_tokens (defaults to max_model_len - prompt)
    chunks_prefill: bool = True        # honours chunked prefill and a token budget below max_model_len
    preemption_modes: tuple[str, ...] = ("recompute",)   # what a recommendation may choose between
    launcher: str | None = None        # the server's command, ``{model}`` for the model id; None: research only
    launch_args: Callable[[dict, int, int], str] | None = None   # (config, tp, max_model_len) -> its flags

    def command(self, config: dict, model_id: str, tp: int, max_model_len: int) -> str:
        """The command line that starts this engine with ``config`` (a recommendation's settings)."""
        if self.launcher is None or self.launch_args is None:
            return f"# {self.label} is a research scheduler with no production launcher"
        return f"{self.launcher.format(model=model_id)} {self.launch_args(config, tp, max_model_len)}"


def reservation_limit(prompt: np.ndarray, settings: EngineSettings) -> np.ndarray:
    """Per-request max_new_tokens an engine reserves for: the setting, else what max_model_len leaves."""
    room = np.maximum(settings.max_model_len - prompt, 1)
    return np.minimum(room, settings.max_new_tokens) if settings.max_new_tokens else room
