#!/usr/bin/env bash
# Issue 13, round 14: prefill and mixed steps of 1,025-4,096 packed tokens replay piecewise CUDA graphs (token buckets
# 1152, 1280, ..., 2048, 2560, ..., 4096; they ran eagerly before, round 13's eager_jitter finding), every window
# validated with a profile calibrated in the same device call. Validate each run on any CPU afterwards
# (python -m pagesim validate RESULTS/live/RUN).
#   bash bench/h200_round14.sh OUT     # the executor's GPU tests, bench/mixed_graphs.py (graphed vs eager steps and
#                                      # their GPU-only time), bf16 `calibrate`, then kshot, the preemption window,
#                                      # the host-tier bandwidth and the host-tier window (round 13's windows)
#   bash bench/h200_round14.sh OUT b   # the fp8 `calibrate` and the fp8 window; longdoc-b with its own
#                                      # `live --calibrate` of Llama-3.1-8B at 32k
#   bash bench/h200_round14.sh OUT c [TRACES [P]]  # the Azure paged/contiguous pair (`live --calibrate`, or with the
#                                      # profile P made on the same machine), then with that profile Azure conv and
#                                      # code 600-660 s and the swap window (TRACES: the Azure 2023 CSVs, never
#                                      # committed; .gpuwt/traces by default)
#   bash bench/h200_round14.sh OUT d   # the GPU's clocks and power (nvidia-smi, every 100 ms) beside a `calibrate` and
#                                      # two windows with its profile, each phase's start and end in phases.txt: is
#                                      # the windows' decode bias the GPU's clock under its power cap?
# OUT/results.tgz is rewritten after every step, so a call cut short still returns what was recorded.
set -uo pipefail
OUT=$1
D=2026-12-02
source "$(dirname "$0")/h200_lib.sh"
live_call
if [ "${2:-}" = b ]; then
  fp8_and_longdoc_b_windows r14
  runs_summary "$R"; pack
  exit 0
fi
if [ "${2:-}" = d ]; then
  clocks_start 100
  P="$R/profiles/h200-llama-3-8b-$D-r14d.json"
  mark calibrate start; BUDGET=140 run calibrate --model llama-3-8b --gpu h200 --out "$P"; mark calibrate end
  profile_summary "$P"; pack
  mark kshot start
  BUDGET=80 run live traces/kshot-shared-prefix-500.jsonl --limit 250 --enable-prefix-caching --num-gpu-blocks 900 \
      --watermark 0.01 --profile "$P" --out "$R/live/kshot-prefix-pressure-r14d"; mark kshot end; pack
  mark preempt start
  BUDGET=70 run live traces/sharegpt-bursty-1k.jsonl --limit 200 --watermark 0.01 --profile "$P" --num-gpu-blocks 400 \
      --out "$R/live/preempt-sharegpt-bursty-r14d"; mark preempt end
  clocks_stop
  runs_summary "$R"; pack
  exit 0
fi
if [ "${2:-}" = c ]; then
  T=${3:-.gpuwt/traces}
  C="$T/AzureLLMInferenceTrace_conv.csv --start-s 600 --limit 200 --time-scale 20 --num-gpu-blocks 4096 --watermark 0.01"
  P=${4:-}  # a profile from this machine (the default mode's), else the pair's own `live --calibrate`
  if [ -n "$P" ]; then
    BUDGET=90 run live $C --profile "$P" --out "$R/live/pair-conv-paged-r14"
  else
    BUDGET=170 run live $C --calibrate --out "$R/live/pair-conv-paged-r14"
    P="$R/live/pair-conv-paged-r14/profile.json"
    profile_summary "$P"
  fi
  pack
  BUDGET=80 run live $C --baseline max --profile "$P" --out "$R/live/pair-conv-contiguous-max-r14"; pack
  BUDGET=75 run live traces/sharegpt-bursty-1k.jsonl --limit 200 --watermark 0.01 --profile "$P" \
      --preemption-mode swap --num-gpu-blocks 500 --out "$R/live/swap-sharegpt-bursty-r14"; pack
  BUDGET=110 run live "$T/AzureLLMInferenceTrace_conv.csv" --start-s 600 --end-s 660 --watermark 0.01 --profile "$P" \
      --out "$R/live/azure-conv-600-660-r14"; pack
  BUDGET=110 run live "$T/AzureLLMInferenceTrace_code.csv" --start-s 600 --end-s 660 --watermark 0.01 --profile "$P" \
      --out "$R/live/azure-code-600-660-r14"
  runs_summary "$R"; pack
  exit 0
fi
{ timeout 100 python3 -m pytest -q -m gpu tests/gpu/test_executor_gpu.py -p no:cacheprovider 2>&1 | tail -3; } \
    | tee "$R/gpu-tests-r14.txt"
timeout 110 python3 -m bench.mixed_graphs --reps 10 --out "$R/mixed-graphs-r14.json" 2>&1 | grep -v -i warn | tail -29
pack
P="$R/profiles/h200-llama-3-8b-$D-r14.json"
BUDGET=140 run calibrate --model llama-3-8b --gpu h200 --out "$P"
profile_summary "$P"; pack
BUDGET=80 run live traces/kshot-shared-prefix-500.jsonl --limit 250 --enable-prefix-caching --num-gpu-blocks 900 \
    --watermark 0.01 --profile "$P" --out "$R/live/kshot-prefix-pressure-r14"; pack
BUDGET=70 run live traces/sharegpt-bursty-1k.jsonl --limit 200 --watermark 0.01 --profile "$P" --num-gpu-blocks 400 \
    --out "$R/live/preempt-sharegpt-bursty-r14"; pack
H="$R/profiles/h200-llama-3-8b-$D-r14-host-tier.json"
timeout 40 python3 -m bench.host_tier_bw --out "$R/host-tier-bw-r14.json" --profile "$P" --profile-out "$H" 2>&1 | tail -3
BUDGET=90 run live traces/kshot-shared-prefix-500.jsonl --limit 150 --enable-prefix-caching --num-gpu-blocks 600 \
    --watermark 0.01 --kv-offloading-size 4.7 --profile "$H" --out "$R/live/offload-kshot-r14"
runs_summary "$R"; pack
