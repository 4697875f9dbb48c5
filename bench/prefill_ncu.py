"""One paged prefill kernel launched a few times at one of bench.fp8's shapes, for Nsight Compute to capture (it
times nothing itself):

    ncu --clock-control none -k regex:_gluon --launch-skip 2 --launch-count 1 --set full -o OUT/fp8 \
        python3 -m bench.prefill_ncu --cache fp8 --gluon 3p

The shapes, cache contents and scales are bench.fp8's (Llama-3-8B attention, block size 16); --cache bf16 runs the
bf16 cache's default kernel (the Gluon kernel on sm_90), --cache fp8 the e4m3 Gluon kernel with the --gluon launch
(bench.fp8.gluon_fp8_config's form; the default launch when not given).
"""

from __future__ import annotations

import argparse

import torch
import triton

import engine.kernels as K
from bench.fp8 import gluon_fp8_config, quantised
from bench.kernels import BF16, BS, D, DEV, HKV, HQ


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cache", choices=("bf16", "fp8"), required=True)
    p.add_argument("--gluon", default="", help="the e4m3 Gluon launch (--cache fp8), e.g. 3p, 3ps2")
    p.add_argument("--q-len", type=int, default=4096)
    p.add_argument("--context", type=int, default=4096)
    p.add_argument("--launches", type=int, default=4)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("bench.prefill_ncu: needs a CUDA GPU")
    if args.context < args.q_len:
        raise SystemExit(f"--context {args.context}: must be at least --q-len {args.q_len}")
    g = torch.Generator(device=DEV).manual_seed(0)
    num_blocks = triton.cdiv(args.context, BS)
    k_cache = torch.randn((num_blocks, BS, HKV, D), generator=g, device=DEV, dtype=BF16)
    v_cache = torch.randn((num_blocks, BS, HKV, D), generator=g, device=DEV, dtype=BF16)
    tables = torch.randperm(num_blocks, generator=g, device=DEV).view(1, num_blocks).to(torch.int32)
    cu = torch.tensor([0, args.q_len], dtype=torch.int32, device=DEV)
    lens = torch.tensor([args.context], dtype=torch.int32, device=DEV)
    q = torch.randn((args.q_len, HQ, D), generator=g, device=DEV, dtype=BF16)
    out = torch.empty_like(q)
    if args.cache == "bf16":
        def launch():
            K.paged_prefill_attention(q, k_cache, v_cache, cu, lens, tables, D**-0.5, max_seqlen_q=args.q_len, out=out)
    else:
        from engine.kernels.prefill_gluon_fp8 import gluon_fp8_paged_prefill

        (k8, ks), (v8, vs) = quantised(k_cache, v=False), quantised(v_cache, v=True)
        cfg = gluon_fp8_config(args.gluon) if args.gluon else None

        def launch():
            gluon_fp8_paged_prefill(q, k8, v8, cu, lens, tables, D**-0.5, ks, vs, max_seqlen_q=args.q_len, out=out,
                                    config=cfg)
    for _ in range(args.launches):
        launch()
    torch.cuda.synchronize()
    print(f"bench.prefill_ncu: {args.launches} launches, {args.cache} cache, q {args.q_len}, context {args.context}")


if __name__ == "__main__":
    main()
