#!/usr/bin/env bash
# Issues 13 and 14, round 8: re-record with the current engine (mixed and prefill steps of <= 1024 tokens from
# piecewise CUDA graphs) the committed live runs that predate it, each against a profile calibrated in the same
# device call. Two calls; validate each run on any CPU afterwards (python -m pagesim validate RESULTS/live/RUN):
#   bash bench/h200_round8.sh A OUT [TRACES]   # long-document windows (llama-3.1-8b, 32k, live --calibrate), swap
#                                              # window, host-tier window (host-tier bandwidth measured first)
#   bash bench/h200_round8.sh B OUT [TRACES]   # fp8 calibration and fp8 window, the paged/contiguous pair, GPU tests
#   bash bench/h200_round8.sh C OUT            # calibration with the multi-* workloads, the kshot window with it,
#                                              # the GPU tests (after the fp8 prefill kernel's merge)
# The profiles and runs are left in OUT/results; the device call tars them after the script, so a call cut short
# still returns what was recorded.
set -uo pipefail
export PYTHONUNBUFFERED=1
PART=$1
OUT=$2
T=${3:-.live-traces}
R=$OUT/results
D=2026-12-01
mkdir -p "$R/live" "$R/profiles"
source "$(dirname "$0")/h200_lib.sh"
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader
K="traces/kshot-shared-prefix-500.jsonl --limit 150 --enable-prefix-caching --num-gpu-blocks 600 --watermark 0.01"
if [ "$PART" = A ]; then
  L="--model llama-3.1-8b --max-model-len 32768 --enable-prefix-caching --watermark 0.01"
  BUDGET=300 run live traces/longdoc-a.jsonl $L --calibrate --out "$R/live/longdoc-a-r8"
  P="$R/live/longdoc-a-r8/profile.json"
  profile_summary "$P"
  BUDGET=130 run live traces/longdoc-b.jsonl $L --profile "$P" --out "$R/live/longdoc-b-r8"
  BUDGET=110 run live traces/sharegpt-bursty-1k.jsonl --limit 200 --preemption-mode swap --num-gpu-blocks 500 \
      --watermark 0.01 --profile "$P" --out "$R/live/swap-sharegpt-bursty-r8"
  H="$R/profiles/h200-llama-3.1-8b-$D-r8-host-tier.json"
  timeout 60 python3 -m bench.host_tier_bw --out "$R/host-tier-bw-r8.json" --profile "$P" --profile-out "$H" \
      2>&1 | tail -3
  BUDGET=120 run live $K --kv-offloading-size 4.7 --profile "$H" --out "$R/live/offload-kshot-r8"
fi
if [ "$PART" = B ]; then
  P="$R/profiles/h200-llama-3-8b-fp8-$D-r8.json"
  BUDGET=190 run calibrate --model llama-3-8b --gpu h200 --kv-cache-dtype fp8 --out "$P"
  profile_summary "$P"
  BUDGET=110 run live $K --kv-cache-dtype fp8 --profile "$P" --out "$R/live/fp8-kshot-r8"
  C="$T/AzureLLMInferenceTrace_conv.csv --start-s 600 --limit 200 --time-scale 20 --num-gpu-blocks 4096 --watermark 0.01"
  BUDGET=150 run live $C --calibrate --out "$R/live/pair-conv-paged-r8"
  BUDGET=80 run live $C --baseline max --profile "$R/live/pair-conv-paged-r8/profile.json" \
      --out "$R/live/pair-conv-contiguous-max-r8"
  timeout 150 python3 -m pytest -q -m gpu tests/gpu/ -p no:cacheprovider 2>&1 | tee "$OUT/gpu-tests.txt" | tail -4
fi
if [ "$PART" = C ]; then  # the multi-* calibration workloads, one prefix-pressure window, the GPU tests
  P="$R/profiles/h200-llama-3-8b-$D-r8c.json"
  BUDGET=170 run calibrate --model llama-3-8b --gpu h200 --out "$P"
  profile_summary "$P"
  BUDGET=100 run live traces/kshot-shared-prefix-500.jsonl --limit 250 --enable-prefix-caching --num-gpu-blocks 900 \
      --watermark 0.01 --profile "$P" --out "$R/live/kshot-prefix-pressure-r8c"
  timeout 150 python3 -m pytest -q -m gpu tests/gpu/ -p no:cacheprovider 2>&1 | tee "$OUT/gpu-tests.txt" | tail -4
fi
runs_summary "$R"
