#!/usr/bin/env bash
# Issue 14's live runs, re-recorded with same-call profiles that price shared reads (decode_shared_tokens):
# an fp8-cache calibration, then the fp8 window; the host-tier window with its own `live --calibrate`.
#   bash bench/h200_tiers.sh RESULTS
# Validate each run on any CPU afterwards: python -m pagesim validate RESULTS/live/RUN
set -uo pipefail
export PYTHONUNBUFFERED=1
R=${1:-results}
P="$R/profiles/h200-llama-3-8b-fp8-$(date -u +%F).json"
mkdir -p "$R/live" "$R/profiles"
source "$(dirname "$0")/h200_lib.sh"
FORCE=1
K="traces/kshot-shared-prefix-500.jsonl --limit 150 --enable-prefix-caching --num-gpu-blocks 600 --watermark 0.01"
run calibrate --model llama-3-8b --gpu h200 --kv-cache-dtype fp8 --out "$P"
run live $K --kv-cache-dtype fp8 --profile "$P" --out "$R/live/fp8-kshot"
BUDGET=300 run live $K --kv-offloading-size 4.7 --calibrate --out "$R/live/offload-kshot"
profile_summary "$P"
runs_summary "$R"
