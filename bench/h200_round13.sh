#!/usr/bin/env bash
# Issue 13, round 13: the windows whose misses round 11 traced to eager mixed steps or to tails, re-recorded with the
# round-12 engine (launches re-issued from kept arguments: eager and graphed mixed steps spend half the host time),
# each against a profile calibrated in the same device call. Validate each on any CPU afterwards
# (python -m pagesim validate RESULTS/live/RUN).
#   bash bench/h200_round13.sh OUT     # bf16 `calibrate`, kshot, the preemption window, the host-tier bandwidth and
#                                      # the host-tier window
#   bash bench/h200_round13.sh OUT b   # the fp8 `calibrate` and the fp8 window, then longdoc-b with its own
#                                      # `live --calibrate` of Llama-3.1-8B at 32k
#   bash bench/h200_round13.sh OUT c   # eager steps of one shape repeated (bench/eager_jitter.py): as calibrated, with
#                                      # the device synchronised before each, with expandable allocator segments;
#                                      # nvidia-smi logs SM clock, power and temperature every 50 ms beside them
#   bash bench/h200_round13.sh OUT c sweep  # instead: the two workloads once, then 24 new prompt lengths twice each
#   bash bench/h200_round13.sh OUT c sweep trace  # the same, the sweep's kernels profiled (eager_jitter --trace)
#   bash bench/h200_round13.sh OUT c sweep tracecpu  # the same with the host's activity, without nvidia-smi polling
#   bash bench/h200_round13.sh OUT d   # CUDA module loading EAGER against LAZY (first CUDA use, eager_jitter), then
#                                      # `calibrate`, kshot, the host-tier bandwidth and window, all EAGER
# OUT/results.tgz is rewritten after every step, so a call cut short still returns what was recorded.
set -uo pipefail
OUT=$1
D=2026-12-02
source "$(dirname "$0")/h200_lib.sh"
if [ "${2:-}" = c ]; then
  kernel_call "$OUT"
  if [ "${4:-}" = tracecpu ]; then  # no nvidia-smi polling beside it (its queries can hold up a launch)
    timeout 170 python3 -m bench.eager_jitter --repeats 1 --sweep 24 --trace "$OUT" --trace-cpu \
        --out "$OUT/eager-jitter-sweep-cpu.json" 2>&1 | grep -v -i warn | tail -26
    exit 0
  fi
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv -lms 50 >"$OUT/clocks.csv" &
  SMI=$!
  nvidia-smi --query-gpu=timestamp,clocks_event_reasons.active --format=csv -lms 200 >"$OUT/clock-reasons.csv" 2>&1 &
  SMI2=$!
  J="timeout 170 python3 -m bench.eager_jitter --repeats 3"
  [ "${3:-}" = sweep ] || $J --out "$OUT/eager-jitter.json" 2>&1 | grep -v -i warn | tail -40
  [ "${3:-}" = sweep ] || $J --sync --out "$OUT/eager-jitter-sync.json" 2>&1 | grep -v -i warn | tail -40
  [ "${3:-}" = sweep ] || PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True $J --out "$OUT/eager-jitter-expandable.json" 2>&1 | grep -v -i warn | tail -40
  [ "${3:-}" = sweep ] && $J --repeats 1 --sweep 24 ${4:+--trace "$OUT"} --out "$OUT/eager-jitter-sweep.json" 2>&1 \
      | grep -v -i warn | tail -47
  kill $SMI $SMI2
  gzip -f "$OUT/clocks.csv" "$OUT/clock-reasons.csv"
  exit 0
fi
live_call
# bf16 `calibrate`, then kshot, the host-tier bandwidth and the host-tier window with its profile; $1: the suffix
calibrated_kshot_windows() {
  P="$R/profiles/h200-llama-3-8b-$D-$1.json"
  BUDGET=140 run calibrate --model llama-3-8b --gpu h200 --out "$P"
  profile_summary "$P"; pack
  BUDGET=90 run live traces/kshot-shared-prefix-500.jsonl --limit 250 --enable-prefix-caching --num-gpu-blocks 900 \
      --watermark 0.01 --profile "$P" --out "$R/live/kshot-prefix-pressure-$1"; pack
  H="$R/profiles/h200-llama-3-8b-$D-$1-host-tier.json"
  timeout 60 python3 -m bench.host_tier_bw --out "$R/host-tier-bw-$1.json" --profile "$P" --profile-out "$H" 2>&1 | tail -3
  BUDGET=100 run live traces/kshot-shared-prefix-500.jsonl --limit 150 --enable-prefix-caching --num-gpu-blocks 600 \
      --watermark 0.01 --kv-offloading-size 4.7 --profile "$H" --out "$R/live/offload-kshot-$1"; pack
}
if [ "${2:-}" = d ]; then
  # CUDA module loading EAGER against LAZY (PyTorch's default): first CUDA use, the eager steps repeated, then a
  # calibration and the k-shot and host-tier windows recorded with EAGER (at 3a5266d the engine package set EAGER;
  # it no longer does: it did not remove the first-time cost, README round 13)
  export CUDA_MODULE_LOADING=EAGER
  for m in LAZY EAGER; do CUDA_MODULE_LOADING=$m python3 -c "import time; t = time.perf_counter(); import torch
x = torch.randn(64, 64, device='cuda'); (x @ x).sum().item(); free, total = torch.cuda.mem_get_info()
print('$m: first matmul after', round(time.perf_counter() - t, 2), 's; device memory in use', (total - free) >> 20, 'MiB')"; done
  J="timeout 170 python3 -m bench.eager_jitter --repeats 3"
  CUDA_MODULE_LOADING=LAZY $J --out "$R/eager-jitter-lazy.json" 2>&1 | grep -v -i warn | tail -21
  $J --out "$R/eager-jitter-eager.json" 2>&1 | grep -v -i warn | tail -21; pack
  calibrated_kshot_windows r13c
  runs_summary "$R"; pack
  exit 0
fi
if [ "${2:-}" = b ]; then
  fp8_and_longdoc_b_windows r13
  runs_summary "$R"; pack
  exit 0
fi
calibrated_kshot_windows r13
BUDGET=80 run live traces/sharegpt-bursty-1k.jsonl --limit 200 --watermark 0.01 --profile "$P" --num-gpu-blocks 400 \
    --out "$R/live/preempt-sharegpt-bursty-r13"
runs_summary "$R"; pack
