#!/usr/bin/env bash
# Issue 13, round 26: every committed window recorded again on this round's code, each with a profile calibrated in
# the same call (round 25 recorded the Azure conv and code, k-shot, preemption and offload windows so; this round the
# rest), so where the live-mode targets stand is measured on one code base.
#   bash bench/h200_round26.sh OUT TRACES     # the call's `calibrate`, then swap, multiturn and the Azure conv pair
#                                             # (paged and the contiguous max baseline; TRACES: the folder with the
#                                             # Azure 2023 CSVs)
#   bash bench/h200_round26.sh OUT l          # longdoc-b with its own `live --calibrate` (Llama-3.1-8B at 32k), then
#                                             # longdoc-a with that profile
#   bash bench/h200_round26.sh OUT f          # the fp8 `calibrate` and the fp8 k-shot window
# Every live run samples the GPU's clocks (nvidia-smi, 50 ms) beside its phases. Then on any CPU:
# python -m pagesim validate RUN --ensemble 16 --force (each run's own profile.json).
set -uo pipefail
OUT=$1
MODE=${2:-}
D=$(date -u +%F)
S=${S:-r26}  # the runs' suffix (S=r31 bash ... for a later round's re-recording)
source "$(dirname "$0")/h200_lib.sh"
live_call
# The windows' --num-gpu-blocks and the multiturn window's memory are the H200's: refuse another card at once
gpu_line | grep -q H200 || { echo "not an H200: $(gpu_line); nothing recorded"; exit 3; }
clocks_start 50
if [ "$MODE" = l ]; then
  window_longdoc_b_calibrated "${S}l"
  window_longdoc_a "${S}l" "$R/live/longdoc-b-${S}l/profile.json"
elif [ "$MODE" = f ]; then
  PF="$R/profiles/h200-llama-3-8b-fp8-$D-${S}f.json"
  CAL_BUDGET=240 calibrate_fp8_marked "$PF"  # a fresh machine's first fp8 `calibrate` compiles its kernels
  window_fp8 "${S}f" "$PF"
else
  P="$R/profiles/h200-llama-3-8b-$D-$S.json"
  calibrate_marked "$P"
  window_swap "$S" "$P"
  mark multiturn start
  BUDGET=75 run live traces/multiturn-300.jsonl --limit 200 --enable-prefix-caching --profile "$P" \
      --out "$R/live/multiturn-200-$S"; mark multiturn end; pack
  C="$MODE/AzureLLMInferenceTrace_conv.csv --start-s 600 --limit 200 --time-scale 20 --num-gpu-blocks 4096 --watermark 0.01"
  mark pair start
  BUDGET=60 run live $C --profile "$P" --out "$R/live/pair-conv-paged-$S"; pack
  BUDGET=80 run live $C --baseline max --profile "$P" --out "$R/live/pair-conv-contiguous-max-$S"; mark pair end; pack
fi
clocks_stop
runs_summary "$R"; pack
