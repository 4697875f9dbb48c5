#!/usr/bin/env bash
# Issue 13, decode steps that read shared blocks (StepFeatures.decode_shared_tokens): one device call that
# calibrates on this GPU with the shared-prefix workloads, then re-records the prefix-heavy windows with
# that profile (longdoc with its own long-context `live --calibrate`), and one window without sharing:
#   bash bench/h200_sharing.sh RESULTS [TRACES]
# Validate each run on any CPU afterwards: python -m pagesim validate RESULTS/live/RUN
set -uo pipefail
export PYTHONUNBUFFERED=1
R=${1:-results}
T=${2:-.live-traces}
P="$R/profiles/h200-llama-3-8b-$(date -u +%F).json"
mkdir -p "$R/live" "$R/profiles"
source "$(dirname "$0")/h200_lib.sh"
FORCE=1
run calibrate --model llama-3-8b --gpu h200 --out "$P"
run live traces/kshot-shared-prefix-500.jsonl --limit 250 --enable-prefix-caching --num-gpu-blocks 900 \
    --watermark 0.01 --profile "$P" --out "$R/live/kshot-prefix-pressure"
LONG="--model llama-3.1-8b --max-model-len 32768 --enable-prefix-caching --watermark 0.01"
BUDGET=300 run live traces/longdoc-a.jsonl $LONG --calibrate --out "$R/live/longdoc-a"
run live traces/longdoc-b.jsonl $LONG --profile "$R/live/longdoc-a/profile.json" --out "$R/live/longdoc-b"
if [ -f "$T/AzureLLMInferenceTrace_conv.csv" ]; then
  run live "$T/AzureLLMInferenceTrace_conv.csv" --start-s 600 --end-s 660 --watermark 0.01 --profile "$P" \
      --out "$R/live/azure-conv-600-660"
fi
profile_summary "$P"
runs_summary "$R"
