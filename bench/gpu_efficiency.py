"""Per-GPU-family MFU, MBU and all-reduce defaults from measured vLLM kernels (AIConfigurator's tables).

The cost model's end-to-end efficiencies (MFU 0.55, MBU 0.80) come from A100 measurements
(``../shared/reference/performance-models.md``: its worked examples, Vidur's A100 GEMM and GEMV timings) and hold on
H100 SXM (the vLLM v0.15.1 runs of ``bench/fidelity_v1.py``). Any other GPU takes the H100's, scaled by how its BF16
GEMMs fare against the H100's on the same shapes in vLLM 0.14's kernels: MFU by the large-batch GEMMs (m = 1,024
to 8,192 tokens: compute-bound), MBU by the small-batch ones (m = 1 to 8: weight-streaming, as a decode step is).
The median over the shapes (n, k ≥ 4,096) of each shape's ratio is the factor; ``planner/catalog/gpus.py`` holds
the results (:data:`planner.catalog.gpus.FAMILY_EFFICIENCY`) and a test checks them against this script.

The all-reduce factor (:data:`planner.catalog.gpus.FAMILY_ALLREDUCE`) is the median, over TP 2, 4 and 8 and
decode-sized messages (32K to 2M elements: 8 to 512 tokens of a 4,096-8,192 hidden size), of each NVLink GPU's
graph-captured vLLM 0.14 custom all-reduce latency over the H100's (``comm/vllm/0.14.0/custom_allreduce_perf.parquet``,
backend ``vllm_graph``): how much slower one all-reduce inside vLLM V1's CUDA graphs is there.

Data: ai-dynamo/aiconfigurator (Apache-2.0) commit 095f58a5, ``aic-core/src/aiconfigurator_core/systems/data/
<gpu>/gemm/vllm/0.14.0/gemm_perf.parquet`` (latency in ms per (m, n, k), BF16 and FP8 rows; BF16 read). Read from
a clone, not copied: ``git clone https://github.com/ai-dynamo/aiconfigurator`` and pass it with ``--aiconfigurator``.
Usage: python bench/gpu_efficiency.py --aiconfigurator PATH
"""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
from pathlib import Path

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from planner.catalog.gpus import FAMILY_ALLREDUCE, FAMILY_EFFICIENCY, get_gpu  # noqa: E402

DATA_COMMIT = "095f58a51c4ca8e61b66ec108d86f223f8d559ce"
TABLE = "aic-core/src/aiconfigurator_core/systems/data/{}/gemm/vllm/0.14.0/gemm_perf.parquet"
ANCHOR = "h100_sxm"
# our catalog name -> AIConfigurator's system directory; a100_sxm is shown, not used (A100 keeps the reference's)
SYSTEMS = {"h100-sxm": "h100_sxm", "a100-80gb-sxm": "a100_sxm", "h200": "h200_sxm", "l40s": "l40s"}
COMPUTE_M = (1024, 2048, 4096, 8192)
STREAM_M = (1, 2, 4, 8)
ALLREDUCE_TABLE = "aic-core/src/aiconfigurator_core/systems/data/{}/comm/vllm/0.14.0/custom_allreduce_perf.parquet"
ALLREDUCE_SYSTEMS = {"a100-80gb-sxm": "a100_sxm", "h200": "h200_sxm"}     # NVLink GPUs the tables time
DECODE_ELEMENTS = (32 * 1024, 2 * 1024 * 1024)


def _read(repo: Path, path: str) -> pl.DataFrame:
    blob = subprocess.run(["git", "-C", str(repo), "show", f"{DATA_COMMIT}:{path}"], check=True,
                          capture_output=True).stdout
    return pl.read_parquet(io.BytesIO(blob))


def gemm_table(repo: Path, system: str, gpu_name: str) -> pl.DataFrame:
    """BF16 rows of one system's table with each shape's achieved fraction of the GPU's peak FLOP/s (``mfu``)
    and of its bandwidth (``mbu``: weights, input and output bytes once)."""
    gpu = get_gpu(gpu_name)
    seconds = pl.col("latency") * 1e-3
    m, n, k = pl.col("m"), pl.col("n"), pl.col("k")
    return (_read(repo, TABLE.format(system)).filter(pl.col("gemm_dtype") == "bfloat16")
            .filter((n >= 4096) & (k >= 4096))
            .group_by(["m", "n", "k"]).agg(pl.col("latency").min())
            .with_columns(mfu=2 * m * n * k / seconds / gpu.bf16_flops,
                          mbu=2 * (n * k + m * (n + k)) / seconds / gpu.hbm_bw_bytes_s))


def factors(repo: Path) -> dict[str, dict[str, float]]:
    """Per catalog GPU: the median MFU and MBU ratios to the H100's over the shapes both measured, the shape
    counts, and the GPU's own medians."""
    anchor = gemm_table(repo, ANCHOR, "h100-sxm")
    out = {}
    for name, system in SYSTEMS.items():
        table = anchor if system == ANCHOR else gemm_table(repo, system, name)
        both = table.join(anchor, on=["m", "n", "k"], suffix="_h100")
        compute, stream = both.filter(pl.col("m").is_in(COMPUTE_M)), both.filter(pl.col("m").is_in(STREAM_M))
        out[name] = {"mfu_ratio": float((compute["mfu"] / compute["mfu_h100"]).median()),
                     "mbu_ratio": float((stream["mbu"] / stream["mbu_h100"]).median()),
                     "gemm_mfu": float(compute["mfu"].median()), "gemv_mbu": float(stream["mbu"].median()),
                     "shapes": compute.height + stream.height}
    return out


def allreduce_table(repo: Path, system: str) -> pl.DataFrame:
    """One system's graph-captured custom all-reduce latencies (ms) at decode-sized messages, per TP and size."""
    low, high = DECODE_ELEMENTS
    return (_read(repo, ALLREDUCE_TABLE.format(system))
            .filter((pl.col("backend") == "vllm_graph") & pl.col("message_size").is_between(low, high))
            .group_by(["num_gpus", "message_size"]).agg(pl.col("latency").min()))


def allreduce_factors(repo: Path) -> dict[str, dict[str, float]]:
    """Per NVLink catalog GPU: the median ratio of its graph-captured all-reduce latency to the H100's over the
    (TP, message size) pairs both timed, the pair count, and its median latency in µs."""
    anchor = allreduce_table(repo, ANCHOR)
    out = {}
    for name, system in ALLREDUCE_SYSTEMS.items():
        both = allreduce_table(repo, system).join(anchor, on=["num_gpus", "message_size"], suffix="_h100")
        out[name] = {"allreduce_ratio": float((both["latency"] / both["latency_h100"]).median()),
                     "median_us": float(both["latency"].median() * 1e3), "pairs": both.height}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--aiconfigurator", default=os.environ.get("AICONFIGURATOR"),
                        help="a clone of github.com/ai-dynamo/aiconfigurator (or set AICONFIGURATOR)")
    args = parser.parse_args()
    if not args.aiconfigurator or not Path(args.aiconfigurator).exists():
        sys.exit("error: --aiconfigurator: expected a clone of https://github.com/ai-dynamo/aiconfigurator: "
                 "git clone https://github.com/ai-dynamo/aiconfigurator")
    rows = factors(Path(args.aiconfigurator))
    print(f"{'GPU':14s} {'GEMM MFU':>9s} {'GEMV MBU':>9s} {'MFU / H100':>11s} {'MBU / H100':>11s} {'shapes':>7s}  "
          "catalog factors")
    for name, r in rows.items():
        held = FAMILY_EFFICIENCY.get(name)
        print(f"{name:14s} {r['gemm_mfu']:9.3f} {r['gemv_mbu']:9.3f} {r['mfu_ratio']:11.3f} {r['mbu_ratio']:11.3f} "
              f"{r['shapes']:7d}  {'—' if held is None else f'{held[0]:.3f} / {held[1]:.3f}'}")
    print(f"\n{'GPU':14s} {'all-reduce / H100':>18s} {'median µs':>10s} {'pairs':>6s}  catalog factor "
          "(graph-captured, decode sizes, TP 2/4/8)")
    for name, r in allreduce_factors(Path(args.aiconfigurator)).items():
        held = FAMILY_ALLREDUCE.get(name)
        print(f"{name:14s} {r['allreduce_ratio']:18.3f} {r['median_us']:10.1f} {r['pairs']:6d}  "
              f"{'— (the H100 floor as it is)' if held is None else f'{held:.3f}'}")


if __name__ == "__main__":
    main()
