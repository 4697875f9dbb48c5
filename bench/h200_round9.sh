#!/usr/bin/env bash
# Issue 13, round 9: the calibration with context-building steps advanced (engine.calibration.ContextBuilding) and the
# k-shot-like shared workloads, timed on the H200, then the windows whose misses they address, each against the
# profile calibrated in the same call: kshot (bf16 calibrate), fp8-kshot (fp8 calibrate), longdoc-a (live --calibrate
# of Llama-3.1-8B at 32k). Validate each run on any CPU afterwards (python -m pagesim validate RESULTS/live/RUN).
#   bash bench/h200_round9.sh OUT      # the windows (the call of bb0f1c4)
#   bash bench/h200_round9.sh OUT ab   # the same calibration twice in one call, with the context-building steps
#                                      # advanced and timed (ADVANCE_TOKENS out of reach): the kept rows side by side
# OUT/results.tgz is rewritten after every step, so a call cut short still returns what was recorded.
set -uo pipefail
OUT=$1
D=2026-12-02
source "$(dirname "$0")/h200_lib.sh"
live_call
if [ "${2:-}" = ab ]; then
  BUDGET=160 run calibrate --model llama-3-8b --gpu h200 --out "$R/profiles/ab-advanced.json"; pack
  timeout 200 python3 -c "import sys, engine.calibration as calibration; from pagesim.cli import main
calibration.ADVANCE_TOKENS = 10**9  # every step timed, as before round 9
sys.exit(main(sys.argv[1:]))" calibrate --model llama-3-8b --gpu h200 --out "$R/profiles/ab-timed.json" 2>&1 | tail -3
  for f in ab-advanced ab-timed; do profile_summary "$R/profiles/$f.json"; done; pack
  exit 0
fi
K="traces/kshot-shared-prefix-500.jsonl --enable-prefix-caching --watermark 0.01"
P="$R/profiles/h200-llama-3-8b-$D-r9.json"
BUDGET=160 run calibrate --model llama-3-8b --gpu h200 --out "$P"
profile_summary "$P"; pack
BUDGET=100 run live $K --limit 250 --num-gpu-blocks 900 --profile "$P" --out "$R/live/kshot-prefix-pressure-r9"; pack
PF="$R/profiles/h200-llama-3-8b-fp8-$D-r9.json"
BUDGET=160 run calibrate --model llama-3-8b --gpu h200 --kv-cache-dtype fp8 --out "$PF"
profile_summary "$PF"; pack
BUDGET=100 run live $K --limit 150 --num-gpu-blocks 600 --kv-cache-dtype fp8 --profile "$PF" --out "$R/live/fp8-kshot-r9"
pack
L="--model llama-3.1-8b --max-model-len 32768 --enable-prefix-caching --watermark 0.01"
BUDGET=200 run live traces/longdoc-a.jsonl $L --calibrate --out "$R/live/longdoc-a-r9"
profile_summary "$R/live/longdoc-a-r9/profile.json"
runs_summary "$R"; pack
