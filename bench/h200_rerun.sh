#!/usr/bin/env bash
# Re-record the committed H200 live runs with the current scheduler rules (after the vLLM v1 parity changes:
# null block, free-queue order, caching at allocation, whole-sequence admission), using the committed profile,
# so that their lockstep replays compare like with like. Two device calls:
#   bash bench/h200_rerun.sh 1 RESULTS TRACES   # runs under memory pressure (preemption, swap, prefix pressure, the pair)
#   bash bench/h200_rerun.sh 2 RESULTS TRACES   # runs without memory pressure
# TRACES holds the Azure 2023 CSVs (from ../shared/traces/azure2023; never committed).
set -uo pipefail
export PYTHONUNBUFFERED=1
PART=${1:-1}
R=${2:-results}
T=${3:-.live-traces}
P=results/profiles/h200-llama-3-8b-2026-11-30.json
CONV="$T/AzureLLMInferenceTrace_conv.csv"
mkdir -p "$R/live"
source "$(dirname "$0")/h200_lib.sh"
FORCE=1
if [ "$PART" = 1 ]; then
  run live "$CONV" --start-s 600 --limit 200 --time-scale 20 --num-gpu-blocks 4096 --watermark 0.01 --profile "$P" \
      --out "$R/live/pair-conv-paged"
  run live traces/kshot-shared-prefix-500.jsonl --limit 250 --enable-prefix-caching --num-gpu-blocks 900 \
      --watermark 0.01 --profile "$P" --out "$R/live/kshot-prefix-pressure"
  run live traces/sharegpt-bursty-1k.jsonl --limit 200 --preemption-mode swap --num-gpu-blocks 500 \
      --watermark 0.01 --profile "$P" --out "$R/live/swap-sharegpt-bursty"
  run live traces/sharegpt-bursty-1k.jsonl --limit 200 --num-gpu-blocks 400 --watermark 0.01 \
      --profile "$P" --out "$R/live/preempt-sharegpt-bursty"
fi
if [ "$PART" = 2 ]; then
  run live "$CONV" --start-s 600 --end-s 660 --watermark 0.01 --profile "$P" --out "$R/live/azure-conv-600-660"
  run live "$T/AzureLLMInferenceTrace_code.csv" --start-s 600 --end-s 660 --watermark 0.01 --profile "$P" \
      --out "$R/live/azure-code-600-660"
  run live traces/longdoc-b.jsonl --model llama-3.1-8b --max-model-len 32768 --enable-prefix-caching \
      --watermark 0.01 --profile results/live/longdoc-a/profile.json --out "$R/live/longdoc-b"
fi
