#!/usr/bin/env bash
# The committed H200 results of live mode II (issue 13), in two device calls:
#   bash bench/h200_live_suite.sh a  RESULTS TRACES   # GPU tests, same-machine calibration, re-runs, swap/preemption windows
#   bash bench/h200_live_suite.sh b  RESULTS TRACES   # long-context windows (live --calibrate)
#   bash bench/h200_live_suite.sh c  RESULTS TRACES   # the other re-runs, with part a's profile (copy it in first)
# From a copy of the code inside another checkout, export PAGESIM_GIT_COMMIT=<the code's commit> first.
# TRACES holds the Azure 2023 CSVs (from ../shared/traces/azure2023; never committed). Each live run records
# its profile (DIR/profile.json); validate them on any CPU with `python -m pagesim validate DIR`.
set -uo pipefail
export PYTHONUNBUFFERED=1
PART=${1:-a}
R=${2:-results}
T=${3:-.live-traces}
P="$R/profiles/h200-llama-3-8b-2026-11-30.json"
mkdir -p "$R/live" "$R/profiles"
source "$(dirname "$0")/h200_lib.sh"
BUDGET=${BUDGET:-300}
CONV="$T/AzureLLMInferenceTrace_conv.csv"

if [ "$PART" = a ]; then
  echo "== $(date +%T) GPU tests"
  timeout 150 python3 -m pytest -q -p no:cacheprovider tests/gpu tests/test_model.py -k "not safetensors_package" 2>&1 | tail -5
  run calibrate --model llama-3-8b --gpu h200 --out "$P"
  profile_summary "$P"
  run live "$CONV" --start-s 600 --end-s 660 --profile "$P" --out "$R/live/azure-conv-600-660"
  run live traces/kshot-shared-prefix-500.jsonl --limit 250 --enable-prefix-caching --num-gpu-blocks 900 \
      --profile "$P" --out "$R/live/kshot-prefix-pressure"
  run live traces/sharegpt-bursty-1k.jsonl --limit 200 --preemption-mode swap --num-gpu-blocks 500 \
      --profile "$P" --out "$R/live/swap-sharegpt-bursty"
  run live traces/sharegpt-bursty-1k.jsonl --limit 200 --num-gpu-blocks 400 \
      --profile "$P" --out "$R/live/preempt-sharegpt-bursty"
fi
if [ "$PART" = b ]; then
  LONG="--model llama-3.1-8b --max-model-len 32768 --enable-prefix-caching"
  BUDGET=330 run live traces/longdoc-a.jsonl $LONG --calibrate --out "$R/live/longdoc-a"
  run live traces/longdoc-b.jsonl $LONG --profile "$R/live/longdoc-a/profile.json" --out "$R/live/longdoc-b"
fi
if [ "$PART" = c ]; then
  run live "$T/AzureLLMInferenceTrace_code.csv" --start-s 600 --end-s 660 --profile "$P" \
      --out "$R/live/azure-code-600-660"
  # The paper's claim: same window, same KV memory (4096 blocks = 65,536 token slots), arrivals compressed 20x.
  run live "$CONV" --start-s 600 --limit 200 --time-scale 20 --num-gpu-blocks 4096 --profile "$P" \
      --out "$R/live/pair-conv-paged"
  run live "$CONV" --start-s 600 --limit 200 --time-scale 20 --num-gpu-blocks 4096 --baseline max --profile "$P" \
      --out "$R/live/pair-conv-contiguous-max"
fi
runs_summary "$R"
