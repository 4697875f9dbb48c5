#!/usr/bin/env bash
# Issue 13, round 15: is the windows' decode bias the calibration's power state? Round 14 (mode d) found the
# `calibrate` run at its power cap in 96% of busy samples (median SM clock 1,665 MHz, 623 W) and the windows at
# 1,980 MHz (541-553 W), their graph decode steps 4.3% under that profile's prediction. Here, in one call and with
# nvidia-smi sampling clocks and power every 50 ms: `calibrate` as before, `calibrate --rest 0.5` (the GPU idles half
# of each timed step's time after it, untimed), then two windows with the rested profile. Validate each window on any
# CPU against both profiles (python -m pagesim validate RESULTS/live/RUN --cost-model P --out DIR).
#   bash bench/h200_round15.sh OUT      # the experiment above
#   bash bench/h200_round15.sh OUT k    # prefill kernel: the default against the persistent-grid variants
# OUT/results.tgz is rewritten after every step, so a call cut short still returns what was recorded.
set -uo pipefail
OUT=$1
D=$(date -u +%F)  # the run's date in the profile names
source "$(dirname "$0")/h200_lib.sh"
if [ "${2:-}" = k ]; then
  kernel_call "$OUT"
  step kernels
  timeout 300 python3 -m bench.kernels --prefill-only --prefill-configs persistent --out "$OUT/prefill-persistent.json" \
      >>"$log" 2>&1
  tail -30 "$log"
  exit 0
fi
live_call
nvidia-smi -q -d POWER,CLOCK >"$R/power-and-clocks.txt" 2>&1
clocks_start 50
P0="$R/profiles/h200-llama-3-8b-$D-r15.json"
P1="$R/profiles/h200-llama-3-8b-$D-r15-rest.json"
mark calibrate start; BUDGET=140 run calibrate --model llama-3-8b --gpu h200 --out "$P0"; mark calibrate end
profile_summary "$P0"; pack
mark calibrate-rest start; BUDGET=170 run calibrate --model llama-3-8b --gpu h200 --rest 0.5 --out "$P1"
mark calibrate-rest end; profile_summary "$P1"; pack
mark kshot start
BUDGET=80 run live traces/kshot-shared-prefix-500.jsonl --limit 250 --enable-prefix-caching --num-gpu-blocks 900 \
    --watermark 0.01 --profile "$P1" --out "$R/live/kshot-prefix-pressure-r15"; mark kshot end; pack
mark preempt start
BUDGET=70 run live traces/sharegpt-bursty-1k.jsonl --limit 200 --watermark 0.01 --profile "$P1" --num-gpu-blocks 400 \
    --out "$R/live/preempt-sharegpt-bursty-r15"; mark preempt end
clocks_stop
runs_summary "$R"; pack
