"""vLLM releases, grouped into the ranges the planner models differently: how each sizes the KV cache (its memory
profiling) and the two defaults of its V1 runtime that change step timing. ``--vllm-version`` picks one by key;
"current" is what ``vllm serve`` does today.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.catalog.gpus import GiB
from planner.errors import PlannerError


@dataclass(frozen=True)
class VllmRelease:
    """One range of vLLM releases.

    Memory: its profiling run's activation peak, the non-torch memory it counts, and whether CUDA graphs come out
    of the budget, read from vLLM's source of each release (``determine_num_available_blocks`` /
    ``determine_available_memory``, ``profile_run``, ``_dummy_sampler_run``) and fitted to published startup logs
    (BENCHMARKS.md, "Memory"). The profiling run's sampler holds ``min(max_num_seqs, max_num_batched_tokens)`` rows
    of full-vocabulary fp32 logits on every rank (the vocabulary is gathered before sampling, so tensor parallelism
    does not divide it): top-k/top-p by sorting keeps about 9.5 copies at the peak (eleven logs: 9.2-9.8), the
    FlashInfer and Triton kernels about 3.5 (3.5-3.6).

    Runtime (vLLM V1): ``async_scheduling``, whether ``vllm serve`` fixes a step's batch while the step before it
    runs by default (from 0.14, vllm PR #27614; earlier releases had it as the opt-in ``--async-scheduling``);
    ``full_decode_graphs``, whether a decode-only batch replays one full CUDA graph (``FULL_AND_PIECEWISE``, the
    default from 0.11, vllm PR #25444), where earlier V1 releases split every batch's graph around attention
    (piecewise), so decode steps paid the per-layer cost mixed steps pay. ``chunking_optional``: whether V1 honours
    ``--no-enable-chunked-prefill`` (through 0.11.0 ``EngineArgs._set_default_args`` turned chunked prefill back on,
    silently: vllm#18547, #20914 on 0.9.2; it keeps the user's value from 0.11.1, PR #28665); ``async_flag``:
    whether ``--async-scheduling`` exists (vllm PR #19970, opened after 0.9.0); ``max_block_size``: the largest
    ``--block-size`` its parser takes (``BlockSize``, ``Literal[1, 8, 16, 32, 64, 128]`` through 0.11.0; 256 from
    0.11.1, PR #26883). Limits left out (``EngineArgs``): V1 cuts a default ``max_num_seqs`` to the budget
    (``seqs_to_budget``), and from 0.11 a default budget to ``max_num_seqs × max_model_len`` first
    (``budget_to_seqs``, ``_set_default_max_num_seqs_and_batched_tokens_args``); V0 cuts neither and refuses a budget
    below its 256 sequences.
    """

    label: str
    sampler_copies: float          # fp32 logits copies at the sampler's peak
    forward_bytes_per_token_hidden: int   # activation bytes per batched token per hidden unit
    floor_bytes: int
    non_torch_single_bytes: int    # one GPU
    non_torch_nvlink_bytes: int    # TP over NVLink (NCCL, custom or symmetric-memory all-reduce buffers)
    non_torch_pcie_bytes: int      # TP without peer-to-peer (custom all-reduce off)
    cudagraphs_counted: bool
    async_scheduling: bool = True
    full_decode_graphs: bool = True
    engine: str = "vllm-v1"
    chunking_optional: bool = True
    async_flag: bool = True
    max_block_size: int = 256
    seqs_to_budget: bool = True
    budget_to_seqs: bool = True

    def refusal(self, engine: str, chunked_prefill: bool, async_scheduling: bool | None,
                block_size: int = 16) -> str | None:
        """What this release would not do of a vLLM scenario's settings (None: nothing)."""
        if self.engine != engine:
            return None
        if block_size > self.max_block_size:
            return (f"--block-size {block_size}: {self.label} takes at most {self.max_block_size} (256 came with "
                    "0.11.1, vllm PR #26883); expected a smaller block, or --vllm-version 0.13 or later")
        if engine != "vllm-v1":
            return None
        if not chunked_prefill and not self.chunking_optional:
            return (f"--no-chunked-prefill: {self.label} chunks every prompt whatever --no-enable-chunked-prefill "
                    "says through 0.11.0 (vllm#18547, fixed in 0.11.1 by PR #28665); expected chunked prefill on, "
                    "or --vllm-version 0.13 or later")
        if async_scheduling and not self.async_flag:
            return (f"--async-scheduling: {self.label} has no such flag (it came after 0.9.0, vllm PR #19970); "
                    "expected it left out, or --vllm-version 0.10 or later")
        return None


def _gib(x: float) -> int:
    return int(x * GiB)


# the memory rules two neighbouring ranges share, which differ only in their runtime defaults
_FLASHINFER_SAMPLER = (3.5, 4, _gib(0.05), _gib(0.1), _gib(0.55), _gib(0.1), False)
_SORTING_SAMPLER = (9.5, 4, _gib(0.05), _gib(0.1), _gib(0.55), _gib(0.1), False)
# key -> release range; "current" is what `vllm serve` does today
VLLM_VERSIONS = {
    "0.6": VllmRelease("V0 0.6.5-0.10 (VLLM_USE_V1=0)", 9.5, 2, 0, _gib(0.1), _gib(0.9), _gib(0.2), False,
                       async_scheduling=False, full_decode_graphs=False, engine="vllm-v0", max_block_size=128,
                       seqs_to_budget=False, budget_to_seqs=False),
    "0.8": VllmRelease("V1 0.7-0.9.0 (counts the CUDA context; piecewise CUDA graphs)", 9.5, 4, _gib(0.05),
                       _gib(0.5), _gib(1.0), _gib(0.6), False, async_scheduling=False, full_decode_graphs=False,
                       chunking_optional=False, async_flag=False, max_block_size=128, budget_to_seqs=False),
    "0.10": VllmRelease("V1 0.9.1-0.10 (FlashInfer sampler, as in the vllm-openai images; piecewise CUDA graphs)",
                        *_FLASHINFER_SAMPLER, async_scheduling=False, full_decode_graphs=False,
                        chunking_optional=False, max_block_size=128, budget_to_seqs=False),
    # 0.11.0's rules: 0.11.1 took 256-token blocks and honours --no-enable-chunked-prefill, as 0.12 does
    "0.11": VllmRelease("V1 0.11 (FlashInfer sampler; full CUDA graphs for decode)", *_FLASHINFER_SAMPLER,
                        async_scheduling=False, chunking_optional=False, max_block_size=128),
    "0.13": VllmRelease("V1 0.12-0.13 (sorting sampler; synchronous scheduling)", *_SORTING_SAMPLER,
                        async_scheduling=False),
    "0.15": VllmRelease("V1 0.14-0.16 (sorting sampler; async scheduling)", *_SORTING_SAMPLER),
    "0.19": VllmRelease("V1 0.17-0.19 (Triton sampler; graphs estimated, not subtracted)", 3.5, 4, _gib(0.15),
                        _gib(0.25), _gib(2.1), _gib(0.2), False),
    "current": VllmRelease("V1 0.20 and later (CUDA graphs subtracted)", 3.5, 4, _gib(0.15), _gib(0.25),
                           _gib(2.1), _gib(0.2), True),
}


# the engines whose memory these releases profile; others (TGI, TensorRT-LLM, …) are sized by the release given
VLLM_ENGINES = frozenset(release.engine for release in VLLM_VERSIONS.values())


def vllm_release(version: str) -> VllmRelease:
    """The release range ``--vllm-version`` names (a key of :data:`VLLM_VERSIONS`)."""
    if version not in VLLM_VERSIONS:
        raise PlannerError(f"--vllm-version {version!r}: expected one of {', '.join(VLLM_VERSIONS)}")
    return VLLM_VERSIONS[version]


def engine_versions(engine: str) -> list[str]:
    """The ``--vllm-version`` keys that serve ``engine``, oldest first (every key for an engine that is not vLLM's)."""
    return [key for key, release in VLLM_VERSIONS.items() if engine not in VLLM_ENGINES or release.engine == engine]


def default_version(engine: str) -> str:
    """What ``--vllm-version`` is when left out: the newest release that serves ``engine`` ("current", but V0's
    last profiling, "0.6", for vLLM V0)."""
    return engine_versions(engine)[-1]
