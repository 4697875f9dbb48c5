#!/usr/bin/env bash
# Issues 13 and 14, round 25: what the offload windows' graph mixed steps pay for their host-tier loads. Round 19's
# offload recordings ran the steps that load blocks from the host tier at 0.92-0.93 of their prediction; since round
# 22 a live run records the device time of each step's block moves apart (`move_gpu_time_s`), which tells a load
# hidden under the step's host-side preparation (move time about the priced load, wall time about unchanged) from a
# forward overpriced after a host hit. The call's own `calibrate` and host-tier bandwidth, then the offload window
# twice (each the other's replicate).
#   bash bench/h200_round25.sh OUT
#   bash bench/h200_round25.sh OUT w TRACES   # the call's `calibrate`, then the Azure conv and code windows (TRACES: the
#                                             # folder with the Azure 2023 CSVs), k-shot and preemption: where the
#                                             # round-18 Azure recordings missed step MAPE <= 3%, on a new instance
#   bash bench/h200_round25.sh OUT g          # on a fresh machine: longdoc-b with its own `live --calibrate` (calibration
#                                             # time, the whole command), then the GPU test suite (tests/gpu)
#   bash bench/h200_round25.sh OUT t          # the GPU test suite alone
# Then on any CPU: python -m pagesim validate RUN --replicate OTHER --ensemble 16 --force
set -uo pipefail
OUT=$1
MODE=${2:-}
D=$(date -u +%F)
S=r25
source "$(dirname "$0")/h200_lib.sh"
live_call
clocks_start 50
if [ "$MODE" = g ] || [ "$MODE" = t ]; then
  [ "$MODE" = g ] && window_longdoc_b_calibrated "${S}g"
  { timeout 300 python3 -m pytest -q -m gpu tests/gpu -p no:cacheprovider -rf 2>&1 | tail -15; } | tee "$R/gpu-tests-$S.txt"
  clocks_stop
  runs_summary "$R"; pack
  exit 0
fi
P="$R/profiles/h200-llama-3-8b-$D-$S$MODE.json"
calibrate_marked "$P"
if [ "$MODE" = w ]; then
  window_azure_conv "${S}w" "$P" "$3"; window_azure_code "${S}w" "$P" "$3"
  window_kshot "${S}w" "$P"; window_preempt "${S}w" "$P"
  clocks_stop
  runs_summary "$R"; pack
  exit 0
fi
H="$R/profiles/h200-llama-3-8b-$D-$S-host-tier.json"
timeout 40 python3 -m bench.host_tier_bw --out "$R/host-tier-bw-$S.json" --profile "$P" --profile-out "$H" 2>&1 | tail -3
window_offload "${S}a" "$H"; window_offload "${S}b" "$H"
clocks_stop
runs_summary "$R"; pack
