"""Host offload tier bandwidth (GPU): engine/host_tier.py's store (GPU -> pinned host) and load (host -> GPU) in GB/s at
Llama-3-8B block sizes (32 layers, 8 KV heads, head dim 128, block size 16: 2 MiB per block in bf16, 1 MiB in fp8),
for batches of 1 to 256 scattered blocks, beside the plain pinned-copy ceiling; then the swap path's figure as
calibration records it (measure_swap_bandwidth) on bf16 and fp8 caches of 100 GiB.

    python -m bench.host_tier_bw --out $OUT/host_tier_bw.json [--profile P --profile-out P2]
    python -m bench.host_tier_bw --out /tmp/h.json --smoke          # CPU check of the script (tiny blocks)

store: HostTier.store (gather on the device, copy to pinned memory on the side stream) then finish() (wait for the
copies): the whole path a block takes until it is loadable. load: HostTier.load both ways (engine.kernels.swap.swap_in:
one kernel reads the pinned host blocks into the GPU blocks; with by_copies, the copy engine into a staging buffer and
the kernel from there), synchronised; `load_gb_per_s` is the faster, the way an executor on this machine loads
(GPUExecutor.swap_in_by). Wall time
(time.perf_counter around a synchronised call), median of --repeats after one warm-up call. With --profile, a copy of
that profile cost model (results/profiles/*.json) is written to --profile-out with coefficients host_store_s_per_byte
and host_load_s_per_byte from the largest batch measured, which pagesim.cost.profile uses for the host tier instead of
the swap link's figure.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import sys
import time

import torch

from engine.host_tier import HostTier
from engine.kernels.swap import cpu_cache_shape, measure_swap_bandwidth, swap_in, swap_out
from pagesim.outputs import check_output_file

LAYERS, HKV, D, BS = 32, 8, 128, 16
BATCHES = (1, 8, 32, 128, 256)
DEV = "cuda" if torch.cuda.is_available() else "cpu"


def sync():
    if DEV == "cuda":
        torch.cuda.synchronize()


def wall(fn, repeats: int) -> float:
    fn()
    sync()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def pinned_copy_ceiling(nbytes: int, repeats: int) -> dict:
    """One contiguous pinned <-> device copy of nbytes: the link's ceiling for these sizes."""
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(nbytes, dtype=torch.uint8, device=DEV)
    d2h = wall(lambda: host.copy_(dev, non_blocking=True), repeats)
    h2d = wall(lambda: dev.copy_(host, non_blocking=True), repeats)
    return {"bytes": nbytes, "d2h_gb_per_s": nbytes / d2h / 1e9, "h2d_gb_per_s": nbytes / h2d / 1e9}


def measure(dtype: torch.dtype, layers: int, batches, repeats: int, gpu_blocks: int) -> dict:
    shape = (layers, 2, gpu_blocks, BS, HKV, D)
    kv = torch.empty(shape, dtype=dtype, device=DEV)
    kv.view(torch.uint8).random_(0, 256) if dtype == torch.float8_e4m3fn else kv.normal_()
    host = HostTier(kv, gpu_blocks)
    block_bytes = kv[:, :, 0].numel() * kv.element_size()
    g = torch.Generator().manual_seed(0)
    rows = []
    for n in batches:
        gpu_ids = torch.randperm(gpu_blocks, generator=g)[:n].tolist()
        host_ids = torch.randperm(gpu_blocks, generator=g)[:n].tolist()
        stores = list(zip(gpu_ids, host_ids))
        loads = list(zip(host_ids, gpu_ids))

        def store():
            host.store(kv, stores)
            host.finish()

        t_store = wall(store, repeats)
        t_load = {}
        for by in ("kernel", "copies"):
            host.by_copies = by == "copies"
            t_load[by] = wall(lambda: host.load(kv, loads), repeats)
        host.by_copies = False
        nbytes = n * block_bytes
        rows.append({"blocks": n, "bytes": nbytes, "store_s": t_store, "load_s": min(t_load.values()),
                     "store_gb_per_s": nbytes / t_store / 1e9, "load_gb_per_s": nbytes / min(t_load.values()) / 1e9,
                     **{f"load_{by}_gb_per_s": nbytes / t / 1e9 for by, t in t_load.items()}})
        print(f"{str(dtype)[6:]:14s} {n:4d} blocks ({nbytes / 2**20:6.1f} MiB): store {rows[-1]['store_gb_per_s']:6.2f} GB/s"
              f"  load {rows[-1]['load_kernel_gb_per_s']:6.2f} GB/s by the kernel, "
              f"{rows[-1]['load_copies_gb_per_s']:6.2f} by copies", flush=True)
    # round trip check: the bytes that went out come back (bit-exact), on the last batch's blocks
    before = kv.view(torch.uint8)[:, :, gpu_ids].clone()
    exact = []
    for by_copies in (False, True):
        host.by_copies = by_copies
        host.store(kv, stores)
        host.finish()
        kv.view(torch.uint8)[:, :, gpu_ids] = 0
        host.load(kv, loads)
        sync()
        exact.append(torch.equal(kv.view(torch.uint8)[:, :, gpu_ids], before))
    return {"dtype": str(dtype), "block_bytes": block_bytes, "rows": rows, "round_trip_bit_exact": all(exact)}


def swap_figures(dtype: torch.dtype, budget_bytes: int) -> dict:
    """The calibration's swap measurement (engine.kernels.swap.measure_swap_bandwidth, 64 scattered blocks) on a
    Llama-3-8B cache of budget_bytes, and a round trip of its first, middle and last blocks (offsets past 2**31
    words)."""
    block_bytes = LAYERS * 2 * BS * HKV * D * torch.tensor([], dtype=dtype).element_size()
    blocks = budget_bytes // block_bytes
    kv = torch.empty((LAYERS, 2, blocks, BS, HKV, D), dtype=dtype, device=DEV)
    out = measure_swap_bandwidth(kv)
    raw, ids = kv.view(torch.uint8), torch.tensor([0, blocks // 2, blocks - 1])
    raw[:, :, ids.to(DEV)] = torch.randint(0, 256, raw[:, :, :3].shape, dtype=torch.uint8, device=DEV)
    before = raw[:, :, ids.to(DEV)].clone()
    cpu = torch.empty(cpu_cache_shape(tuple(kv.shape), 4), dtype=dtype, pin_memory=True)
    slots = torch.tensor([3, 0, 2])
    swap_out(kv, cpu, torch.stack([ids, slots], 1))
    raw[:, :, ids.to(DEV)] = 0
    swap_in(cpu, kv, torch.stack([slots, ids], 1))
    out.update(dtype=str(dtype), cache_blocks=blocks,
               far_blocks_round_trip_bit_exact=torch.equal(raw[:, :, ids.to(DEV)], before))
    del kv, raw
    torch.cuda.empty_cache()
    print(f"swap {str(dtype)[6:]:14s} (measure_swap_bandwidth, {out['num_blocks']} of {blocks} blocks): out "
          f"{out['swap_out_bytes_per_s'] / 1e9:.2f} GB/s  in {out['swap_in_kernel_bytes_per_s'] / 1e9:.2f} GB/s by the "
          f"kernel, {out['swap_in_copies_bytes_per_s'] / 1e9:.2f} by copies; "
          f"round trip of far blocks bit-exact: {out['far_blocks_round_trip_bit_exact']}", flush=True)
    return out


def update_profile(path: str, out: str, result: dict) -> None:
    """A copy of the profile with the measured host-tier figures (largest bf16 batch) as its coefficients."""
    profile = json.loads(open(path).read())
    big = max(result["caches"][0]["rows"], key=lambda r: r["bytes"])
    profile["coefficients"]["host_store_s_per_byte"] = 1 / (big["store_gb_per_s"] * 1e9)
    profile["coefficients"]["host_load_s_per_byte"] = 1 / (big["load_gb_per_s"] * 1e9)
    profile["host_tier_bandwidth"] = {"store_bytes_per_s": big["store_gb_per_s"] * 1e9,
                                      "load_bytes_per_s": big["load_gb_per_s"] * 1e9, "blocks": big["blocks"],
                                      "block_bytes": result["caches"][0]["block_bytes"], "created": result["created"],
                                      "command": "python -m bench.host_tier_bw"}
    with open(out, "w") as f:
        f.write(json.dumps(profile, indent=2) + "\n")
    print(f"wrote {out} (host_store/load_s_per_byte from {big['blocks']} blocks)")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="JSON file to write")
    p.add_argument("--force", action="store_true", help="replace --out (and --profile-out) if it exists")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--profile", help="a profile cost model JSON to copy with the measured host-tier coefficients")
    p.add_argument("--profile-out", help="where that copy goes (required with --profile)")
    p.add_argument("--smoke", action="store_true", help="tiny blocks, two batch sizes (runs on the CPU)")
    args = p.parse_args(argv)
    check_output_file(p, args.out, args.force)
    if bool(args.profile) != bool(args.profile_out):
        p.error("--profile and --profile-out go together")
    if args.profile_out:
        check_output_file(p, args.profile_out, args.force)
    if DEV != "cuda" and not args.smoke:
        print("error: bench.host_tier_bw needs a CUDA GPU (or --smoke for a CPU check of the script)", file=sys.stderr)
        return 2
    layers, batches, gpu_blocks = (2, (1, 4), 8) if args.smoke else (LAYERS, BATCHES, 512)
    result = {"created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "device": torch.cuda.get_device_name() if DEV == "cuda" else "cpu", "torch": torch.__version__,
              "python": platform.python_version(), "smoke": args.smoke, "layers": layers, "block_size": BS,
              "num_kv_heads": HKV, "head_dim": D, "repeats": args.repeats, "caches": []}
    if DEV == "cuda":
        result["pinned_copy_ceiling"] = pinned_copy_ceiling(256 << 20, args.repeats)
        c = result["pinned_copy_ceiling"]
        print(f"pinned copy 256 MiB: d2h {c['d2h_gb_per_s']:.2f} GB/s  h2d {c['h2d_gb_per_s']:.2f} GB/s", flush=True)
    for dtype in (torch.bfloat16, torch.float8_e4m3fn):
        result["caches"].append(measure(dtype, layers, batches, args.repeats, gpu_blocks))
        torch.cuda.empty_cache() if DEV == "cuda" else None
    if DEV == "cuda":  # the swap path on caches of the H200's KV budget (Config: 111.4 GiB for Llama-3-8B), or of
        # 85% of a smaller card's free memory (an H100's 80 GB; the far blocks still lie past 2**31 words)
        budget = min(100 << 30, int(torch.cuda.mem_get_info()[0] * 0.85))
        result["swap"] = [swap_figures(dtype, budget) for dtype in (torch.bfloat16, torch.float8_e4m3fn)]
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"wrote {args.out}; round trips bit-exact: {[c['round_trip_bit_exact'] for c in result['caches']]}")
    if args.profile:
        update_profile(args.profile, args.profile_out, result)
    exact = [c["round_trip_bit_exact"] for c in result["caches"]]
    exact += [s["far_blocks_round_trip_bit_exact"] for s in result.get("swap", [])]
    return 0 if all(exact) else 1


if __name__ == "__main__":
    sys.exit(main())
