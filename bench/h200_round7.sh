#!/usr/bin/env bash
# Issue 13, round 7: the GPU tests (TESTS=1), one H200 calibration with the eager-* and prefix-* workloads, then
# four live windows no calibration saw, recorded with that profile (mixed and prefill steps of <= 1024 tokens from
# piecewise CUDA graphs), all in one device call; validate each run on any CPU afterwards:
#   [TESTS=1] bash bench/h200_round7.sh OUT [TRACES] [TAG]      then   python -m pagesim validate RESULTS/live/RUN
# The profile and the runs are left in OUT/results (TRACES: the Azure 2023 CSVs, never committed; TAG names the
# runs, r7 by default); the device call tars them after the script, so a call cut short still returns what was
# recorded.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=$1
T=${2:-.live-traces}
TAG=${3:-r7}
R=$OUT/results
P="$R/profiles/h200-llama-3-8b-2026-12-01-$TAG.json"
mkdir -p "$R/live" "$R/profiles"
source "$(dirname "$0")/h200_lib.sh"
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader
if [ "${TESTS:-0}" = 1 ]; then
  echo "== $(date +%T) GPU tests"
  timeout 150 python3 -m pytest -q -m gpu tests/gpu/ -p no:cacheprovider 2>&1 | tee "$OUT/gpu-tests.txt" | tail -4
fi
BUDGET=170 run calibrate --model llama-3-8b --gpu h200 --out "$P"
profile_summary "$P"
BUDGET=110 run live "$T/AzureLLMInferenceTrace_conv.csv" --start-s 600 --end-s 660 --watermark 0.01 --profile "$P" \
    --out "$R/live/azure-conv-600-660-$TAG"
BUDGET=110 run live traces/kshot-shared-prefix-500.jsonl --limit 250 --enable-prefix-caching --num-gpu-blocks 900 \
    --watermark 0.01 --profile "$P" --out "$R/live/kshot-prefix-pressure-$TAG"
BUDGET=110 run live "$T/AzureLLMInferenceTrace_code.csv" --start-s 600 --end-s 660 --watermark 0.01 --profile "$P" \
    --out "$R/live/azure-code-600-660-$TAG"
BUDGET=100 run live traces/sharegpt-bursty-1k.jsonl --limit 200 --num-gpu-blocks 400 --watermark 0.01 \
    --profile "$P" --out "$R/live/preempt-sharegpt-bursty-$TAG"
runs_summary "$R"
