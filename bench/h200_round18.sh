#!/usr/bin/env bash
# Issue 13, round 18: every committed window not yet run with the clock-aware fit (round 17: steps record their SM
# clock, the profile prices steps at the calibration's top clock, decode steps right after a prefill left out of the
# fit), each with a profile calibrated in the same call, on the engine of the round-17 windows.
#   bash bench/h200_round18.sh OUT TRACES   # bf16 `calibrate`, the swap window, the host-tier bandwidth and the
#                                           # host-tier window, the Azure paged/contiguous pair, Azure conv and code
#                                           # 600-660 s (TRACES: the folder with the Azure 2023 CSVs, never committed)
#   bash bench/h200_round18.sh OUT b        # fp8 `calibrate` and the fp8 window; longdoc-b with its own `live
#                                           # --calibrate` of Llama-3.1-8B at 32k, longdoc-a with that profile; then
#                                           # the executor's GPU tests
#   bash bench/h200_round18.sh OUT c TRACES # the fit with after-prefill factors (at 1620c62+) on windows it never saw:
#                                           # `calibrate`, then the preemption, k-shot, multi-turn and Azure conv
#                                           # windows with its profile, straight out of the call
# Every call samples the GPU's clocks (nvidia-smi, 50 ms) beside its phases. Then on any CPU:
# python -m pagesim validate RUN (each run's own profile.json).
# OUT/results.tgz is rewritten after every step, so a call cut short still returns what was recorded.
set -uo pipefail
OUT=$1
MODE=${2:-}
D=$(date -u +%F)
S=r18
source "$(dirname "$0")/h200_lib.sh"
live_call
clocks_start 50
if [ "$MODE" = b ]; then
  mark fp8 start; fp8_and_longdoc_b_windows $S; mark fp8-and-longdoc-b end; pack
  mark longdoc-a start
  BUDGET=90 run live traces/longdoc-a.jsonl --model llama-3.1-8b --max-model-len 32768 --enable-prefix-caching \
      --watermark 0.01 --profile "$R/live/longdoc-b-$S/profile.json" --out "$R/live/longdoc-a-$S"; mark longdoc-a end
  clocks_stop; pack
  { timeout 100 python3 -m pytest -q -m gpu tests/gpu -x -p no:cacheprovider 2>&1 | tail -3; } | tee "$R/gpu-tests-$S.txt"
  runs_summary "$R"; pack
  exit 0
fi
if [ "$MODE" = c ]; then
  T=${3:-../traces}
  P="$R/profiles/h200-llama-3-8b-$D-${S}c.json"
  mark calibrate start; BUDGET=150 run calibrate --model llama-3-8b --gpu h200 --out "$P"; mark calibrate end
  profile_summary "$P"; pack
  mark preempt start
  BUDGET=70 run live traces/sharegpt-bursty-1k.jsonl --limit 200 --watermark 0.01 --profile "$P" --num-gpu-blocks 400 \
      --out "$R/live/preempt-sharegpt-bursty-${S}c"; mark preempt end; pack
  mark kshot start
  BUDGET=75 run live traces/kshot-shared-prefix-500.jsonl --limit 250 --enable-prefix-caching --num-gpu-blocks 900 \
      --watermark 0.01 --profile "$P" --out "$R/live/kshot-prefix-pressure-${S}c"; mark kshot end; pack
  mark multiturn start
  BUDGET=65 run live traces/multiturn-300.jsonl --limit 200 --enable-prefix-caching --profile "$P" \
      --out "$R/live/multiturn-200-${S}c"; mark multiturn end; pack
  mark azure-conv start
  BUDGET=85 run live "$T/AzureLLMInferenceTrace_conv.csv" --start-s 600 --end-s 660 --watermark 0.01 --profile "$P" \
      --out "$R/live/azure-conv-600-660-${S}c"; mark azure-conv end
  clocks_stop
  runs_summary "$R"; pack
  exit 0
fi
T=${MODE:-../traces}
P="$R/profiles/h200-llama-3-8b-$D-$S.json"
mark calibrate start; BUDGET=150 run calibrate --model llama-3-8b --gpu h200 --out "$P"; mark calibrate end
profile_summary "$P"; pack
mark swap start
BUDGET=75 run live traces/sharegpt-bursty-1k.jsonl --limit 200 --watermark 0.01 --profile "$P" \
    --preemption-mode swap --num-gpu-blocks 500 --out "$R/live/swap-sharegpt-bursty-$S"; mark swap end; pack
H="$R/profiles/h200-llama-3-8b-$D-$S-host-tier.json"
timeout 40 python3 -m bench.host_tier_bw --out "$R/host-tier-bw-$S.json" --profile "$P" --profile-out "$H" 2>&1 | tail -3
mark offload start
BUDGET=90 run live traces/kshot-shared-prefix-500.jsonl --limit 150 --enable-prefix-caching --num-gpu-blocks 600 \
    --watermark 0.01 --kv-offloading-size 4.7 --profile "$H" --out "$R/live/offload-kshot-$S"; mark offload end; pack
C="$T/AzureLLMInferenceTrace_conv.csv --start-s 600 --limit 200 --time-scale 20 --num-gpu-blocks 4096 --watermark 0.01"
mark pair start
BUDGET=60 run live $C --profile "$P" --out "$R/live/pair-conv-paged-$S"; pack
BUDGET=80 run live $C --baseline max --profile "$P" --out "$R/live/pair-conv-contiguous-max-$S"; mark pair end; pack
mark azure-conv start
BUDGET=100 run live "$T/AzureLLMInferenceTrace_conv.csv" --start-s 600 --end-s 660 --watermark 0.01 --profile "$P" \
    --out "$R/live/azure-conv-600-660-$S"; mark azure-conv end; pack
mark azure-code start
BUDGET=90 run live "$T/AzureLLMInferenceTrace_code.csv" --start-s 600 --end-s 660 --watermark 0.01 --profile "$P" \
    --out "$R/live/azure-code-600-660-$S"; mark azure-code end
clocks_stop
runs_summary "$R"; pack
