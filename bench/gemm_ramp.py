"""Times BF16 GEMMs on a real CUDA GPU, as vLLM's unquantized linear layers run them (``torch.matmul`` -> cuBLAS).

Shapes: m tokens (1 to 8,192) times a k × n weight (n, k from 4,096 to 28,672), each timed inside a CUDA graph (as
vLLM replays its decode steps: no launch overhead) over enough weight copies to stream past the L2 cache; the
best of three replays. Writes ``m,n,k,latency_ms`` to ``$OUT/gemm_h200.csv`` (``bench/data/h200_gemm/`` holds the
H200's, 2026-12-04: torch 2.11, CUDA 13.0). Needs PyTorch and a GPU, which the planner itself does not:
``bench/gpu_efficiency.py`` reads the result. Usage: OUT=DIR python bench/gemm_ramp.py
"""

import itertools
import os
import time

import torch

torch.backends.cuda.matmul.allow_tf32 = False
DEV = "cuda"
NS = (4096, 5120, 8192, 14336, 28672)
KS = (4096, 5120, 8192, 14336)
MS = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256, 384, 512, 1024, 2048, 4096, 8192)


def time_shape(m: int, weights: list, reps: int) -> float:
    """Milliseconds per GEMM of m tokens through the weights in turn, captured in a CUDA graph (as vLLM replays its
    decode steps: no launch overhead in the timing); the best of three replays."""
    x = torch.randn(m, weights[0].shape[0], device=DEV, dtype=torch.bfloat16)
    for w in weights[:3]:
        torch.matmul(x, w)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for w in weights[:2]:
            torch.matmul(x, w)
    torch.cuda.current_stream().wait_stream(stream)
    with torch.cuda.graph(graph):
        outs = [torch.matmul(x, weights[i % len(weights)]) for i in range(reps)]
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best = float("inf")
    for _ in range(3):
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        best = min(best, start.elapsed_time(end) / reps)
    del graph, outs
    return best


def main() -> None:
    print(torch.cuda.get_device_name(0), torch.__version__, torch.version.cuda)
    rows = []
    t0 = time.time()
    for n, k in itertools.product(NS, KS):
        copies = max(2, int(-(-400e6 // (n * k * 2))))        # >= 400 MB of weights in rotation (L2: 60 MB)
        weights = [torch.randn(k, n, device=DEV, dtype=torch.bfloat16) for _ in range(copies)]
        for m in MS:
            rows.append((m, n, k, time_shape(m, weights, max(copies, 4) if m >= 1024 else max(copies, 20))))
        del weights
        torch.cuda.empty_cache()
    with open(os.path.join(os.environ.get("OUT", "."), "gemm_h200.csv"), "w") as f:
        f.write("m,n,k,latency_ms\n")
        for m, n, k, ms in rows:
            f.write(f"{m},{n},{k},{ms:.6f}\n")
    print(len(rows), "shapes in", round(time.time() - t0, 1), "s")


if __name__ == "__main__":
    main()
