"""Does the physical placement of a decode batch's blocks change the paged decode kernel's time? (GPU)

Calibration runs each workload on a fresh pool, so a batch's blocks are low block ids, each sequence's
mostly consecutive; a live run's tables are scattered over the whole pool. This times one layer of the
engine's decode kernel (Llama-3-8B attention shapes, bf16, block 16, a cache of the H200 live runs' size,
56,147 blocks) over the same batches with four placements, as CUDA-graph replays (do_bench, L2 cleared):
contiguous low ids, prefill-then-interleaved low ids, a random permutation of the low ids, and blocks
drawn at random from the whole pool. Padded rows (context 0) as the engine's graphs have them.

    python3 -m bench.block_layout --out $OUT/block-layout.json
"""

from __future__ import annotations

import argparse
import json
import platform

import torch
import triton
from triton.testing import do_bench

import engine.kernels as K
from pagesim.outputs import check_output_file
from bench.kernels import BF16, BS, D, DEV, HKV, HQ  # Llama-3-8B attention shapes, as every kernel bench
NUM_BLOCKS = 56147  # the H200 live runs' cache (results/live/*/summary.json)
TABLE_WIDTH = 2048  # blocks: tables 32,768 tokens wide
# (rows, context, padded graph size)
SHAPES = [(1, 8192, 1), (4, 2048, 4), (8, 2048, 8), (12, 2048, 16), (16, 2048, 16), (24, 1536, 32),
          (8, 8192, 8), (12, 10000, 16), (4, 16000, 4), (64, 1024, 64)]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--force", action="store_true", help="replace an existing --out file")
    args = p.parse_args()
    check_output_file(p, args.out, args.force)
    dev = DEV
    k_cache = torch.randn((NUM_BLOCKS, BS, HKV, D), device=dev, dtype=BF16)
    v_cache = torch.randn((NUM_BLOCKS, BS, HKV, D), device=dev, dtype=BF16)
    g = torch.Generator(device=dev).manual_seed(0)
    rows = []
    for batch, ctx, padded in SHAPES:
        pages = triton.cdiv(ctx, BS)
        lens = torch.zeros((padded,), dtype=torch.int32, device=dev)
        lens[:batch] = ctx
        q = torch.randn((padded, HQ, D), device=dev, dtype=BF16)
        layouts = {
            "contiguous_low": torch.arange(batch * pages, device=dev).view(batch, pages),
            "interleaved_low": torch.arange(batch * pages, device=dev).view(pages, batch).t().contiguous(),
            "random_low": torch.randperm(batch * pages, generator=g, device=dev).view(batch, pages),
            "random_pool": torch.randperm(NUM_BLOCKS, generator=g, device=dev)[: batch * pages].view(batch, pages),
        }
        row = {"batch": batch, "context": ctx, "padded": padded, "us": {}}
        for name, table in layouts.items():
            tables = torch.zeros((padded, TABLE_WIDTH), dtype=torch.int32, device=dev)
            tables[:batch, :pages] = table.to(torch.int32)
            splits = K.default_num_splits(padded, HKV, TABLE_WIDTH * BS, q.device)

            def fn(tables=tables, splits=splits):
                return K.paged_decode_attention(q, k_cache, v_cache, tables, lens, D**-0.5, num_splits=splits)

            fn()
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                fn()
            row["us"][name] = do_bench(graph.replay, warmup=50, rep=300) * 1e3
            row["splits"] = splits
        row["max_over_min"] = max(row["us"].values()) / min(row["us"].values())
        print(json.dumps(row), flush=True)
        rows.append(row)
    result = {"bench": "block_layout", "device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "triton": triton.__version__, "python": platform.python_version(), "rows": rows}
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
