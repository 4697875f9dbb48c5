"""One paged prefill kernel launched a few times at one of bench.fp8's shapes, for Nsight Compute to capture (it
times nothing itself):

    ncu --clock-control none -k regex:_gluon --launch-skip 2 --launch-count 1 --set full -o OUT/fp8 \
        python3 -m bench.prefill_ncu --cache fp8 --gluon 3p

The inputs are bench.fp8's for the shape (bench.fp8.prefill_inputs: Llama-3-8B attention, block size 16); --cache
bf16 runs the bf16 cache's default kernel (the Gluon kernel on sm_90), --cache fp8 the e4m3 Gluon kernel with the
--gluon launch (bench.fp8.gluon_fp8_config's form; the default launch when not given).
"""

from __future__ import annotations

import argparse

import torch

import engine.kernels as K
from bench.fp8 import gluon_fp8_config, prefill_inputs, prefill_shape
from bench.kernels import D


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cache", choices=("bf16", "fp8"), required=True)
    p.add_argument("--gluon", default="", help="the e4m3 Gluon launch (--cache fp8), e.g. 3p, 3ps2")
    p.add_argument("--shape", default="4096:4096", metavar="Q:CONTEXT", help="query tokens : context tokens")
    p.add_argument("--launches", type=int, default=4)
    args = p.parse_args(argv)
    q_len, ctx = prefill_shape(p, args.shape)
    try:  # a bad spec is refused before any work
        cfg = gluon_fp8_config(args.gluon) if args.gluon else None
    except ValueError as e:
        p.error(f"--gluon: {e}")
    if not torch.cuda.is_available():
        raise SystemExit("bench.prefill_ncu: needs a CUDA GPU")
    q, k_cache, v_cache, k8, ks, v8, vs, cu, lens, tables = prefill_inputs(q_len, ctx)
    out = torch.empty_like(q)
    if args.cache == "bf16":
        def launch():
            K.paged_prefill_attention(q, k_cache, v_cache, cu, lens, tables, D**-0.5, max_seqlen_q=q_len, out=out)
    else:
        from engine.kernels.prefill_gluon_fp8 import gluon_fp8_paged_prefill

        def launch():
            gluon_fp8_paged_prefill(q, k8, v8, cu, lens, tables, D**-0.5, ks, vs, max_seqlen_q=q_len, out=out,
                                    config=cfg)
    for _ in range(args.launches):
        launch()
    torch.cuda.synchronize()
    print(f"bench.prefill_ncu: {args.launches} launches, {args.cache} cache, q {q_len}, context {ctx}")


if __name__ == "__main__":
    main()
