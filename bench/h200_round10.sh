#!/usr/bin/env bash
# Issue 13, round 10: the windows not recorded since round 8 (or 7) re-recorded with the round-9 calibration
# (context-building steps advanced, k-shot-like shared workloads) and the garbage collector paused through every
# measured run and calibration workload, each against a profile calibrated in the same device call:
# bf16 `calibrate`, then kshot, the preemption window, the swap window, the host-tier bandwidth and the host-tier
# window; then longdoc-b with its own `live --calibrate` of Llama-3.1-8B at 32k. Validate each run on any CPU
# afterwards (python -m pagesim validate RESULTS/live/RUN).
#   bash bench/h200_round10.sh OUT     # the call of 22ff9da
#   bash bench/h200_round10.sh OUT b   # after the swap kernel's warm-up fix (96ae8cb): calibrate, the swap and
#                                      # host-tier windows again (the first call compiled the swap kernel in them),
#                                      # then the GPU tests
#   bash bench/h200_round10.sh OUT c   # the GPU tests of the merged round, then the fp8 calibration and fp8 window
# OUT/results.tgz is rewritten after every step, so a call cut short still returns what was recorded.
set -uo pipefail
OUT=$1
D=2026-12-02
source "$(dirname "$0")/h200_lib.sh"
live_call
if [ "${2:-}" = b ]; then
  P="$R/profiles/h200-llama-3-8b-$D-r10b.json"
  BUDGET=140 run calibrate --model llama-3-8b --gpu h200 --out "$P"
  profile_summary "$P"; pack
  BUDGET=75 run live traces/sharegpt-bursty-1k.jsonl --limit 200 --watermark 0.01 --profile "$P" \
      --preemption-mode swap --num-gpu-blocks 500 --out "$R/live/swap-sharegpt-bursty-r10b"; pack
  H="$R/profiles/h200-llama-3-8b-$D-r10b-host-tier.json"
  timeout 60 python3 -m bench.host_tier_bw --out "$R/host-tier-bw-r10b.json" --profile "$P" --profile-out "$H" 2>&1 | tail -3
  BUDGET=100 run live traces/kshot-shared-prefix-500.jsonl --limit 150 --enable-prefix-caching --num-gpu-blocks 600 \
      --watermark 0.01 --kv-offloading-size 4.7 --profile "$H" --out "$R/live/offload-kshot-r10b"
  runs_summary "$R"; pack
  timeout 200 python3 -m pytest -q -m gpu tests/gpu/ -p no:cacheprovider 2>&1 | tee "$R/gpu-tests.txt" | tail -4; pack
  exit 0
fi
if [ "${2:-}" = c ]; then
  timeout 200 python3 -m pytest -q -m gpu tests/gpu/ -p no:cacheprovider 2>&1 | tee "$R/gpu-tests.txt" | tail -4; pack
  PF="$R/profiles/h200-llama-3-8b-fp8-$D-r10.json"
  BUDGET=140 run calibrate --model llama-3-8b --gpu h200 --kv-cache-dtype fp8 --out "$PF"
  profile_summary "$PF"; pack
  BUDGET=90 run live traces/kshot-shared-prefix-500.jsonl --enable-prefix-caching --watermark 0.01 --limit 150 \
      --num-gpu-blocks 600 --kv-cache-dtype fp8 --profile "$PF" --out "$R/live/fp8-kshot-r10"
  runs_summary "$R"; pack
  exit 0
fi
P="$R/profiles/h200-llama-3-8b-$D-r10.json"
BUDGET=140 run calibrate --model llama-3-8b --gpu h200 --out "$P"
profile_summary "$P"; pack
BUDGET=90 run live traces/kshot-shared-prefix-500.jsonl --limit 250 --enable-prefix-caching --num-gpu-blocks 900 \
    --watermark 0.01 --profile "$P" --out "$R/live/kshot-prefix-pressure-r10"; pack
S="traces/sharegpt-bursty-1k.jsonl --limit 200 --watermark 0.01 --profile $P"
BUDGET=80 run live $S --num-gpu-blocks 400 --out "$R/live/preempt-sharegpt-bursty-r10"; pack
BUDGET=75 run live $S --preemption-mode swap --num-gpu-blocks 500 --out "$R/live/swap-sharegpt-bursty-r10"; pack
H="$R/profiles/h200-llama-3-8b-$D-r10-host-tier.json"
timeout 60 python3 -m bench.host_tier_bw --out "$R/host-tier-bw-r10.json" --profile "$P" --profile-out "$H" 2>&1 | tail -3
BUDGET=100 run live traces/kshot-shared-prefix-500.jsonl --limit 150 --enable-prefix-caching --num-gpu-blocks 600 \
    --watermark 0.01 --kv-offloading-size 4.7 --profile "$H" --out "$R/live/offload-kshot-r10"; pack
L="--model llama-3.1-8b --max-model-len 32768 --enable-prefix-caching --watermark 0.01"
BUDGET=170 run live traces/longdoc-b.jsonl $L --calibrate --out "$R/live/longdoc-b-r10"
profile_summary "$R/live/longdoc-b-r10/profile.json"
runs_summary "$R"; pack
