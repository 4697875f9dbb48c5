"""What an fp8 KV cache does to a random-weight model's logits, by itself (CPU or GPU, torch only, no kernels).

    python -m bench.fp8_emulation --layers 2 --dtype float32 [--tokens 160 --vocab 8192]

Llama-3-8B shapes with --layers layers and a --vocab-token vocabulary, random weights (LlamaModel.random);
one plain causal forward (engine.kv_scales.plain_forward) of --tokens random tokens with K and V as
computed, and again with K and V rounded through e4m3 as the store kernel does, for three scale choices:
1.0 (vLLM without checkpoint scales), amax / 448 and vLLM's calculate_kv_scales (amax / 200 for K,
amax / 100 for V), the amax taken over a separate calibration sequence. Prints the relative L2 error of
each position's logits (mean, max) and the top-1 agreement: the floor any fp8 engine shows on this model.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

import torch

from engine.kv_scales import kv_amax, plain_forward
from engine.model import LlamaModel
from pagesim.specs import get_model


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    p.add_argument("--tokens", type=int, default=160)
    p.add_argument("--vocab", type=int, default=8192)
    args = p.parse_args(argv)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    spec = dataclasses.replace(get_model("llama-3-8b"), num_layers=args.layers, vocab_size=args.vocab)
    model = LlamaModel.random(spec, dev, getattr(torch, args.dtype), seed=0)
    ids = torch.randint(0, args.vocab, (args.tokens,), generator=torch.Generator().manual_seed(1)).to(dev)
    calib = torch.randint(0, args.vocab, (args.tokens,), generator=torch.Generator().manual_seed(2)).to(dev)
    amax = kv_amax(model, calib)
    base = model.compute_logits(plain_forward(model, ids))
    ones = torch.ones(args.layers, device=dev)
    out = {"layers": args.layers, "dtype": args.dtype, "tokens": args.tokens, "vocab": args.vocab,
           "kv_amax_range": [amax.min().item(), amax.max().item()], "scales": {}}
    for name, (ks, vs) in {"1.0": (ones, ones), "amax/448": (amax[:, 0] / 448, amax[:, 1] / 448),
                           "vllm amax/200,/100": (amax[:, 0] / 200, amax[:, 1] / 100)}.items():
        got = model.compute_logits(plain_forward(model, ids, fp8_scales=(ks, vs)))
        rel = (got - base).norm(dim=-1) / base.norm(dim=-1)
        out["scales"][name] = {"mean_rel_l2": rel.mean().item(), "max_rel_l2": rel.max().item(),
                               "top1_agreement": (got.argmax(-1) == base.argmax(-1)).float().mean().item()}
        print(f"{args.layers} layers {args.dtype}, scales {name}: relative L2 mean {rel.mean().item():.4f} "
              f"max {rel.max().item():.4f}, top-1 {out['scales'][name]['top1_agreement']:.3f}", flush=True)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
