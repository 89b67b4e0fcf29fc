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

``bench/data/h200_gemm/gemm_bf16.csv`` holds GEMMs this project timed on an H200 (``bench/gemm_ramp.py``); the
H200 row is checked against them too, with no clone needed.

The roofline's knee (:data:`planner.catalog.gpus.FAMILY_ROOFLINE_P`): for each p of :data:`KNEES`, the median over
the GEMMs (n, k ≥ 4,096, m of 16 to 512 tokens) of log(model ramp / measured ramp), where a ramp is a shape's time at
m tokens over its time at one token and the model is ``(compute^p + memory^p)^(1/p)`` at the family's default MFU and
MBU. The catalog takes the p nearest zero for a family whose p = 2 misses by more than :data:`KNEE_TOLERANCE`.
``--vidur PATH`` (a clone of microsoft/vidur, MIT, commit 7d475133) also prints the A100's biases over Vidur's own
A100 linear-layer timings (``data/profiling/compute/a100/<model>/mlp.csv`` of four models at TP 1-8).

Data: ai-dynamo/aiconfigurator (Apache-2.0) commit 095f58a5, ``aic-core/src/aiconfigurator_core/systems/data/
<gpu>/gemm/vllm/0.14.0/gemm_perf.parquet`` (latency in ms per (m, n, k), BF16 and FP8 rows; BF16 read). Read from
a clone, not copied: ``git clone https://github.com/ai-dynamo/aiconfigurator`` and pass it with ``--aiconfigurator``.
Usage: python bench/gpu_efficiency.py --aiconfigurator PATH [--vidur PATH]
"""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from planner.catalog.gpus import FAMILY_ALLREDUCE, FAMILY_EFFICIENCY, get_gpu  # noqa: E402
from planner.sim.cost_model import _busy  # noqa: E402

DATA_COMMIT = "095f58a51c4ca8e61b66ec108d86f223f8d559ce"
TABLE = "aic-core/src/aiconfigurator_core/systems/data/{}/gemm/vllm/0.14.0/gemm_perf.parquet"
ANCHOR = "h100_sxm"
# our catalog name -> AIConfigurator's system directory
SYSTEMS = {"h100-sxm": "h100_sxm", "a100-80gb-sxm": "a100_sxm", "h200": "h200_sxm", "l40s": "l40s"}
COMPUTE_M = (1024, 2048, 4096, 8192)
STREAM_M = (1, 2, 4, 8)
ALLREDUCE_TABLE = "aic-core/src/aiconfigurator_core/systems/data/{}/comm/vllm/0.14.0/custom_allreduce_perf.parquet"
ALLREDUCE_SYSTEMS = {"a100-80gb-sxm": "a100_sxm", "h200": "h200_sxm"}     # NVLink GPUs the tables time
DECODE_ELEMENTS = (32 * 1024, 2 * 1024 * 1024)
# GEMMs this project timed itself on a real H200 (bench/gemm_ramp.py, 2026-12-04): a second source for its row
H200_TIMED = Path(__file__).resolve().parent / "data" / "h200_gemm" / "gemm_bf16.csv"
KNEES = (1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 16.0, 64.0)     # 64: the cost model's ideal max
KNEE_M = (16, 512)
KNEE_TOLERANCE = 0.05
# Vidur's A100 operator timings (microsoft/vidur, MIT): a second source for the A100's knee
VIDUR_COMMIT = "7d47513363ec447a741ac5e47241580b47724fbf"
VIDUR_MODELS = ("internlm/internlm-20b", "meta-llama/Llama-2-70b-hf", "codellama/CodeLlama-34b-Instruct-hf",
                "meta-llama/Meta-Llama-3-8B")


def _show(repo: Path, commit: str, path: str) -> bytes:
    return subprocess.run(["git", "-C", str(repo), "show", f"{commit}:{path}"], check=True,
                          capture_output=True).stdout


def _read(repo: Path, path: str) -> pl.DataFrame:
    return pl.read_parquet(io.BytesIO(_show(repo, DATA_COMMIT, path)))


def rated(table: pl.DataFrame, gpu_name: str) -> pl.DataFrame:
    """GEMM timings (m, n, k, latency in ms) with each shape's achieved fraction of the GPU's peak FLOP/s (``mfu``)
    and of its bandwidth (``mbu``: weights, input and output bytes once)."""
    gpu = get_gpu(gpu_name)
    seconds = pl.col("latency") * 1e-3
    m, n, k = pl.col("m"), pl.col("n"), pl.col("k")
    return table.with_columns(mfu=2 * m * n * k / seconds / gpu.bf16_flops,
                              mbu=2 * (n * k + m * (n + k)) / seconds / gpu.hbm_bw_bytes_s)


def gemm_table(repo: Path, system: str, gpu_name: str) -> pl.DataFrame:
    """BF16 rows of one system's table (n, k ≥ 4,096), :func:`rated`."""
    return rated(_read(repo, TABLE.format(system)).filter(pl.col("gemm_dtype") == "bfloat16")
                 .filter((pl.col("n") >= 4096) & (pl.col("k") >= 4096))
                 .group_by(["m", "n", "k"]).agg(pl.col("latency").min()), gpu_name)


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


def knee_biases(repo: Path, system: str, gpu_name: str) -> dict[float, float]:
    """Per p of :data:`KNEES`: the median log ratio of the model's ramp to the measured one over the system's GEMMs
    (positive: the model turns compute-bound too early), at the catalog GPU's default MFU and MBU."""
    return ramp_biases(gemm_table(repo, system, gpu_name), gpu_name)


def ramp_biases(table: pl.DataFrame, gpu_name: str) -> dict[float, float]:
    """:func:`knee_biases` of any GEMM timings (columns m, n, k, latency in ms, one row per shape)."""
    gpu = get_gpu(gpu_name)
    low, high = KNEE_M
    table = table.filter((pl.col("n") >= 4096) & (pl.col("k") >= 4096) & (pl.col("m") <= high))
    one = table.filter(pl.col("m") == 1).select("n", "k", pl.col("latency").alias("latency_1"))
    rows = table.filter(pl.col("m") >= low).join(one, on=["n", "k"])
    m, n, k = (rows[c].to_numpy().astype(float) for c in ("m", "n", "k"))
    measured = rows["latency"].to_numpy() / rows["latency_1"].to_numpy()
    knee_of = np.vectorize(_busy.py_func)       # the cost model's own smoothed roofline, shape by shape

    def busy(tokens: np.ndarray, p: float) -> np.ndarray:
        memory = 2 * (n * k + tokens * (n + k)) / (gpu.mbu * gpu.hbm_bw_bytes_s)
        return knee_of(2 * tokens * n * k / (gpu.mfu * gpu.bf16_flops), memory, p)

    return {p: float(np.median(np.log(busy(m, p) / busy(np.ones_like(m), p) / measured))) for p in KNEES}


def measured_here(path: Path, gpu_name: str) -> dict:
    """A GEMM table timed by ``bench/gemm_ramp.py`` on a real GPU (CSV: m, n, k, latency_ms): its GEMV MBU (m ≤ 8)
    and GEMM MFU (m ≥ 1,024) medians, as :func:`gemm_table` computes them, and its :func:`ramp_biases`."""
    table = pl.read_csv(path).rename({"latency_ms": "latency"})
    shapes = rated(table, gpu_name)
    return {"gemv_mbu": float(shapes.filter(pl.col("m").is_in(STREAM_M))["mbu"].median()),
            "gemm_mfu": float(shapes.filter(pl.col("m").is_in(COMPUTE_M))["mfu"].median()),
            "biases": ramp_biases(table, gpu_name), "shapes": table.height}


def vidur_gemms(repo: Path) -> pl.DataFrame:
    """Vidur's A100 linear layers (``data/profiling/compute/a100/<model>/mlp.csv`` of :data:`VIDUR_MODELS`, every TP)
    as GEMMs (m tokens, n outputs, k inputs per GPU; median latency in ms per shape): QKV (n = (heads + 2 KV heads)
    × head_dim / TP), attention out (k = hidden / TP), MLP up (n = intermediate, twice that gated, / TP), MLP down."""
    rows = []
    for model in VIDUR_MODELS:
        table = pl.read_csv(io.BytesIO(_show(repo, VIDUR_COMMIT, f"data/profiling/compute/a100/{model}/mlp.csv")))
        for r in table.iter_rows(named=True):
            tp, hidden, inner = r["num_tensor_parallel_workers"], r["n_embd"], r["n_expanded_embd"]
            head_dim = hidden // r["n_head"]
            shapes = {"attn_pre_proj": ((r["n_head"] + 2 * r["n_kv_head"]) * head_dim // tp, hidden),
                      "attn_post_proj": (hidden, hidden // tp),
                      "mlp_up_proj": ((2 if r["use_gated_mlp"] else 1) * inner // tp, hidden),
                      "mlp_down_proj": (hidden, inner // tp)}
            rows += [{"m": r["num_tokens"], "n": n, "k": k, "latency": r[f"time_stats.{op}.median"]}
                     for op, (n, k) in shapes.items()]
    return pl.DataFrame(rows).group_by("m", "n", "k").agg(pl.col("latency").median())


def knee(biases: dict[float, float]) -> float | None:
    """The p a family takes: the one whose bias is nearest zero, where p = 2 misses by more than the tolerance;
    None: p = 2 stands."""
    if abs(biases[2.0]) <= KNEE_TOLERANCE:
        return None
    return min(biases, key=lambda p: abs(biases[p]))


def print_h200_timed() -> None:
    """The H200 row as this project's own timings give it, beside the catalog's."""
    here = measured_here(H200_TIMED, "h200")
    h200 = get_gpu("h200")
    print(f"H200 timed here (bench/gemm_ramp.py, {here['shapes']} shapes): GEMV MBU {here['gemv_mbu']:.3f}, GEMM MFU "
          f"{here['gemm_mfu']:.3f}; ramp bias " + " ".join(f"p={p:g} {b:+.3f}" for p, b in here["biases"].items()) +
          f"; knee {knee(here['biases']) or 2:g} (catalog: MFU {h200.mfu}, MBU {h200.mbu}, knee {h200.roofline_p:g})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--aiconfigurator", default=os.environ.get("AICONFIGURATOR"),
                        help="a clone of github.com/ai-dynamo/aiconfigurator (or set AICONFIGURATOR)")
    parser.add_argument("--vidur", default=os.environ.get("VIDUR"),
                        help="also the A100's knee from a clone of github.com/microsoft/vidur (or set VIDUR)")
    args = parser.parse_args()
    print_h200_timed()
    if args.vidur:
        biases = ramp_biases(vidur_gemms(Path(args.vidur)), "a100-80gb-sxm")
        print("A100 from Vidur's GEMMs: ramp bias " + " ".join(f"p={p:g} {b:+.3f}" for p, b in biases.items()) +
              f"; knee {knee(biases) or 2:g} (catalog: {get_gpu('a100-80gb-sxm').roofline_p:g})")
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
    print(f"\n{'GPU':14s} " + " ".join(f"{'p=' + format(p, 'g'):>7s}" for p in KNEES) + "  knee  catalog p"
          "   (median log error of the model's 1-to-m ramp, m 16-512)")
    for name, system in SYSTEMS.items():
        biases = knee_biases(Path(args.aiconfigurator), system, name)
        chosen = knee(biases)
        print(f"{name:14s} " + " ".join(f"{biases[p]:+7.3f}" for p in KNEES) +
              f"  {'2 (within 5%)' if chosen is None else format(chosen, 'g'):>4s}  "
              f"{format(get_gpu(name).roofline_p, 'g')}")


if __name__ == "__main__":
    main()
