"""GPU catalog: the memory CUDA reports, bandwidths, peak FLOPs, interconnects, power and an editable price.

``memory_bytes`` is what ``torch.cuda.mem_get_info`` / vLLM's "total_gpu_memory" report, not the marketing figure:
vLLM's ``gpu_memory_utilization`` multiplies this number. Figures are dense (no sparsity); sources are in
``../shared/reference/performance-models.md`` §1.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from planner.errors import PlannerError

GiB = 1024**3
GB = 10**9
TB = 10**12

# The cost model's end-to-end efficiencies on the GPUs they come from: A100 (reference/performance-models.md, its
# worked examples and Vidur's A100 GEMM and GEMV timings) and H100 SXM (checked on vLLM v0.15.1, bench/fidelity_v1.py)
DEFAULT_MFU = 0.55
DEFAULT_MBU = 0.80
# how sharply a step turns from memory- to compute-bound (CostParams.roofline_p) on a GPU whose GEMMs were not
# measured: 2, the smoothest knee a measured family shows (the L40S's; FAMILY_ROOFLINE_P), so such a GPU errs slow
# near the ridge, not fast
DEFAULT_ROOFLINE_P = 2.0


@dataclass(frozen=True)
class GPU:
    """One accelerator SKU."""

    name: str                      # CLI preset name, as ../shared/CONTRACT.md spells it
    label: str
    memory_bytes: int              # total memory as CUDA reports it (vLLM's total_gpu_memory)
    nominal_memory_gb: float       # the marketing figure, for labels only
    hbm_bw_bytes_s: float          # peak memory bandwidth
    bf16_flops: float              # dense BF16/FP16 tensor FLOP/s
    int8_ops: float                # dense INT8 tensor ops/s (= dense FP8 FLOP/s where the GPU has FP8 tensor cores)
    gpu_link_bytes_s: float        # GPU-to-GPU bandwidth per direction (NVLink/xGMI, else PCIe)
    pcie_bytes_s: float            # host link per direction (swap / offload)
    power_w: float | None
    price_per_hour: float          # USD per GPU-hour, editable
    vllm_large_defaults: bool      # vLLM serve picks 8192 batched tokens / 1024 seqs (>= 70 GiB and not A100)
    help: str = ""
    # one small all-reduce between two ranks inside a model's step where the engine calls NCCL eagerly: 20-50 µs
    # over NVLink (reference/performance-models.md §2), 20-60 µs over PCIe. Hopper's too: vLLM 0.14's eager calls
    # on H100 SXM take 20-26 µs at TP 2-4 (AIConfigurator's comm tables, commit 095f58a5)
    allreduce_latency_s: float = 25e-6
    # the same floor where vLLM V1 captures its custom all-reduce in CUDA graphs (FAMILY_ALLREDUCE); None: as above
    v1_allreduce_latency_s: float | None = None
    # the cost model's MFU and MBU on this GPU where a calibration does not set them (CostParams' None):
    # DEFAULT_MFU / DEFAULT_MBU, scaled by FAMILY_EFFICIENCY for the GPUs it names
    mfu: float = DEFAULT_MFU
    mbu: float = DEFAULT_MBU
    roofline_p: float = DEFAULT_ROOFLINE_P
    # FP8 tensor cores (Hopper, Ada, CDNA3); Ampere has none, so vLLM runs FP8 checkpoints there weight-only
    fp8_tensor_cores: bool = True
    # FlashAttention 3 (Hopper), vLLM V1's attention backend there: with an FP8 (e4m3) KV cache it computes
    # attention itself in FP8, the queries quantized too (vLLM docs, "Quantized KV Cache"); other backends
    # dequantize and compute in 16 bits
    fp8_attention: bool = False
    # the KV block vLLM forces for an MLA model (DeepSeek V2/V3/R1): FlashMLA, its default MLA backend on Hopper,
    # takes multiples of 64 tokens, and vLLM raises any other --block-size to 64 ("Forcing kv cache block size to 64
    # for FlashMLA backend", vllm/platforms/cuda.py); Ampere and Ada run Triton MLA, as ROCm does, on vLLM's 16
    mla_block_size: int = 16
    # a fully connected mesh of direct links, one to each peer (MI300X: 7 Infinity Fabric links of 64 GB/s per
    # direction, AMD's MI300X data sheet), where NVLink's switch gives any group the whole gpu_link_bytes_s: a TP
    # group of d GPUs reaches d - 1 links; None: switched
    mesh_link_bytes_s: float | None = None
    # the GPUs reach each other over PCIe only (no NVLink or xGMI): vLLM disables its custom all-reduce there
    pcie_peers: bool = False

    @property
    def link_efficiency(self) -> float:
        """What an all-reduce achieves of :attr:`gpu_link_bytes_s` (the cost model's ``link_efficiency`` where a
        calibration does not set it): :data:`PCIE_LINK_EFFICIENCY` over PCIe, :data:`LINK_EFFICIENCY` otherwise."""
        return PCIE_LINK_EFFICIENCY if self.pcie_peers else LINK_EFFICIENCY

    @property
    def memory_gib(self) -> float:
        return self.memory_bytes / GiB

    def allreduce_floor_s(self, graph_captured: bool) -> float:
        """One small all-reduce's floor: vLLM V1's graph-captured custom all-reduce where this family has its own
        (``graph_captured``), else :attr:`allreduce_latency_s`."""
        if graph_captured and self.v1_allreduce_latency_s is not None:
            return self.v1_allreduce_latency_s
        return self.allreduce_latency_s

    def peak_flops(self, weight_dtype: str) -> float:
        """The dense tensor peak (FLOP/s) vLLM's linear layers reach with weights in ``weight_dtype``: FP8
        checkpoints run W8A8 at the 8-bit peak where the GPU has FP8 tensor cores, else weight-only (FP8 Marlin,
        W8A16) at the 16-bit peak; INT8 checkpoints run W8A8 (compressed-tensors, SmoothQuant) at the INT8 peak;
        INT4 (AWQ/GPTQ Marlin, W4A16) and 16-bit weights at the 16-bit peak."""
        if weight_dtype == "int8" or (weight_dtype == "fp8" and self.fp8_tensor_cores):
            return self.int8_ops
        return self.bf16_flops

    def attention_peak_flops(self, kv_cache_dtype: str) -> float:
        """The dense tensor peak (FLOP/s) attention reaches: the 8-bit one with an FP8 (e4m3) KV cache where
        :attr:`fp8_attention`, else the 16-bit one. FP8 and INT8 checkpoints quantize the linear layers, not the
        attention between queries and keys, nor the output head."""
        if self.fp8_attention and kv_cache_dtype in ("fp8", "fp8_e4m3"):
            return self.int8_ops
        return self.bf16_flops

    def link_bytes_s(self, tp: int) -> float:
        """GPU-to-GPU bandwidth per direction each rank of a ``tp``-GPU group reaches its peers with: the switch's
        whole :attr:`gpu_link_bytes_s`, or on a mesh the ``tp - 1`` direct links a group uses, at most all."""
        if self.mesh_link_bytes_s is None or tp < 2:
            return self.gpu_link_bytes_s
        return min((tp - 1) * self.mesh_link_bytes_s, self.gpu_link_bytes_s)

    def with_price(self, price_per_hour: float) -> GPU:
        """The same GPU at another hourly price."""
        return replace(self, price_per_hour=float(price_per_hour))


def _gib(value: float) -> int:
    return int(round(value * GiB))


# PCIe x16 per direction, nominal: Gen4 32 GB/s, Gen5 64 GB/s. A GPU-to-GPU link is given nominal, as NVLink's
# are: the cost model's link_efficiency (effective over nominal) turns it into what an all-reduce achieves. The host
# link, which swap copies use as it is, is given as a copy achieves it, ~80% (25.6 GB/s on Gen4).
_PCIE4, _PCIE5 = 32 * GB, 64 * GB
_PCIE4_HOST, _PCIE5_HOST = 0.8 * _PCIE4, 0.8 * _PCIE5
# An all-reduce's bandwidth over nominal (GPU.link_efficiency). NVLink: 0.4, Vidur's A100 NVLink medians (0.3 at
# 8 MB to 0.6 at 64 MB; xGMI has no source and takes NVLink's). PCIe: 0.7, from Vidur's 4 x A100 PCIe at TP 4
# (a100_pairwise_nvlink, whose ring crosses PCIe twice): 8 MB in 0.58 ms and 64 MB in 4.3 ms, 0.74 and 0.73 of
# Gen4's 32 GB/s past the 50 µs floor (reference/performance-models.md §3)
LINK_EFFICIENCY, PCIE_LINK_EFFICIENCY = 0.4, 0.7
# vLLM's custom all-reduce over H100 NVLink: 6.5-10 µs per decode-sized message at TP 2-4 (vllm PRs #24111, #24532)
HOPPER_NVLINK_ALLREDUCE_S = 10e-6

# (MFU, MBU) as fractions of the H100's for other GPUs: the median ratio of their vLLM 0.14 BF16 GEMMs to the
# H100's on the same shapes, large batches for MFU, 1-8 tokens (weight streaming) for MBU (AIConfigurator's kernel
# tables, commit 095f58a5; bench/gpu_efficiency.py recomputes them). A GPU those tables lack (L4, A10G, MI300X, the
# PCIe parts) takes the defaults unscaled: no source.
FAMILY_EFFICIENCY: dict[str, tuple[float, float]] = {"h200": (0.938, 0.880), "l40s": (0.885, 0.943)}
# vLLM V1's all-reduce floor on other NVLink GPUs, as a multiple of the H100's (HOPPER_NVLINK_ALLREDUCE_S, set on
# its V1 runs): the median ratio of that GPU's graph-captured vLLM 0.14 custom all-reduce to the H100's at
# decode-sized messages (32K-2M elements, TP 2/4/8; AIConfigurator's comm tables, commit 095f58a5;
# bench/gpu_efficiency.py recomputes it). The A100 SXM's 1.281 is for its NVLink3 (measured on the 80 GB part; the
# 40 GB part has the same links). Engines that call NCCL eagerly (the early-2024 V0 of bench/calibrate_points.py:
# the same tables time an eager A100 call at ~44 µs, a captured one at ~5 µs) keep allreduce_latency_s.
FAMILY_ALLREDUCE: dict[str, float] = {"a100-80gb-sxm": 1.281, "a100-40gb-sxm": 1.281}
# The roofline's knee per family: the p (of 1.5, 2, 3, 4, 6, 8, 16, 64) whose ramp from 1 to m tokens (16-512)
# matches that GPU's measured vLLM 0.14 BF16 GEMMs best at its default MFU and MBU (median log error over the shapes
# with n, k >= 4,096; AIConfigurator's kernel tables, commit 095f58a5; bench/gpu_efficiency.py recomputes it), where
# p = 2 misses it by more than 5%: the H100's GEMMs stay memory-bound further (p = 2: +10.6%, 4: +0.5%), the A100's
# too (2: +15.9%, 8: +0.0%), the H200's further still (2: +17.4%, 64, the ideal max: +1.4%); the L40S's (2: -3.2%)
# keeps 2. Vidur's A100 GEMMs (33 shapes of four models at TP 1-8; bench/gpu_efficiency.py --vidur) agree: 2 makes
# them +15.1% slow, 8 +5.7%. (Until 2026-12-06 the A100 kept 2, read off Vidur's Llama-3-8B mlp_up_proj at the
# GEMM's own 75% MFU, not at the 55% the cost model applies.) The A100's other parts run the same GA100 GEMM
# kernels; their bandwidth, which moves the ridge, is the roofline's memory side.
FAMILY_ROOFLINE_P: dict[str, float] = {"h100-sxm": 4.0, "h200": 64.0, "a100-80gb-sxm": 8.0, "a100-40gb-sxm": 8.0,
                                       "a100-80gb-pcie": 8.0, "a100-40gb-pcie": 8.0}


def _family(gpu: GPU) -> GPU:
    mfu_ratio, mbu_ratio = FAMILY_EFFICIENCY.get(gpu.name, (1.0, 1.0))
    graph_floor = gpu.v1_allreduce_latency_s
    if gpu.name in FAMILY_ALLREDUCE:
        graph_floor = round(HOPPER_NVLINK_ALLREDUCE_S * FAMILY_ALLREDUCE[gpu.name], 9)
    return replace(gpu, mfu=round(DEFAULT_MFU * mfu_ratio, 3), mbu=round(DEFAULT_MBU * mbu_ratio, 3),
                   v1_allreduce_latency_s=graph_floor, roofline_p=FAMILY_ROOFLINE_P.get(gpu.name, gpu.roofline_p))


GPUS: dict[str, GPU] = {g.name: _family(g) for g in (
    GPU("a100-80gb-sxm", "A100 80GB SXM4", _gib(79.15), 80, 2039 * GB, 312 * TB, 624 * TB, 300 * GB, _PCIE4_HOST, 400,
        1.9, False, "Ampere, HBM2e 2,039 GB/s, NVLink3 600 GB/s total; CUDA reports ≈ 79.14-79.15 GiB",
        fp8_tensor_cores=False),
    GPU("a100-40gb-sxm", "A100 40GB SXM4", _gib(39.50), 40, 1555 * GB, 312 * TB, 624 * TB, 300 * GB, _PCIE4_HOST, 400,
        1.3, False, "Ampere, HBM2 1,555 GB/s, NVLink3; CUDA reports ≈ 39.50 GiB (vllm#12330)",
        fp8_tensor_cores=False),
    GPU("a100-80gb-pcie", "A100 80GB PCIe", _gib(79.15), 80, 1935 * GB, 312 * TB, 624 * TB, _PCIE4, _PCIE4_HOST, 300,
        1.7, False, "Ampere, HBM2e 1,935 GB/s, PCIe Gen4 (optional 2-GPU NVLink bridge); ≈ 79.15 GiB",
        fp8_tensor_cores=False, pcie_peers=True),
    GPU("a100-40gb-pcie", "A100 40GB PCIe", _gib(39.42), 40, 1555 * GB, 312 * TB, 624 * TB, _PCIE4, _PCIE4_HOST, 250,
        1.1, False, "Ampere, HBM2 1,555 GB/s, PCIe Gen4; ≈ 39.4 GiB",
        fp8_tensor_cores=False, pcie_peers=True),
    GPU("h100-sxm", "H100 80GB SXM5", _gib(79.19), 80, 3350 * GB, 989 * TB, 1979 * TB, 450 * GB, _PCIE5_HOST, 700,
        2.9, True, "Hopper, HBM3 3,350 GB/s, NVLink4 900 GB/s total; CUDA reports 79.19 GiB (vLLM v0.19 logs)",
        v1_allreduce_latency_s=HOPPER_NVLINK_ALLREDUCE_S, fp8_attention=True, mla_block_size=64),
    GPU("h100-pcie", "H100 80GB PCIe", _gib(79.19), 80, 2000 * GB, 756 * TB, 1513 * TB, _PCIE5, _PCIE5_HOST, 350,
        2.4, True, "Hopper, HBM2e 2,000 GB/s, PCIe Gen5",
        fp8_attention=True, mla_block_size=64, pcie_peers=True),
    GPU("h200", "H200 141GB SXM", _gib(139.81), 141, 4800 * GB, 989 * TB, 1979 * TB, 450 * GB, _PCIE5_HOST, 700,
        3.7, True, "Hopper, HBM3e 4,800 GB/s, 141 GB",
        v1_allreduce_latency_s=HOPPER_NVLINK_ALLREDUCE_S, fp8_attention=True, mla_block_size=64),
    GPU("l40s", "L40S 48GB", _gib(44.42), 48, 864 * GB, 362 * TB, 733 * TB, _PCIE4, _PCIE4_HOST, 350,
        1.0, False, "Ada, GDDR6 864 GB/s, PCIe Gen4, no NVLink; 44.42 GiB in vLLM logs (other figures unverified)",
        pcie_peers=True),
    GPU("l4", "L4 24GB", _gib(22.05), 24, 300 * GB, 121 * TB, 242 * TB, _PCIE4, _PCIE4_HOST, 72,
        0.5, False, "Ada, GDDR6 300 GB/s, 72 W (datasheet figures, unverified)", pcie_peers=True),
    GPU("a10g", "A10G 24GB", _gib(22.07), 24, 600 * GB, 70 * TB, 140 * TB, _PCIE4, _PCIE4_HOST, 300,
        0.75, False, "Ampere (AWS g5), GDDR6 600 GB/s",
        fp8_tensor_cores=False, pcie_peers=True),
    GPU("mi300x", "MI300X 192GB", _gib(191.98), 192, 5300 * GB, 1307 * TB, 2615 * TB, 7 * 64 * GB, _PCIE5_HOST, 750,
        3.5, True, "CDNA3, HBM3 5,300 GB/s, Infinity Fabric: 7 direct links of 64 GB/s per direction, one to each "
                   "peer of an 8-GPU node", mesh_link_bytes_s=64 * GB),
)}


def get_gpu(name: str) -> GPU:
    """A catalog GPU by preset name (case-insensitive)."""
    key = name.strip().lower()
    if key not in GPUS:
        raise PlannerError(f"unknown GPU {name!r}: expected one of {', '.join(GPUS)}")
    return GPUS[key]
