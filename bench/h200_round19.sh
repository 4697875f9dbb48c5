#!/usr/bin/env bash
# Issue 13, round 19: does a window's level move within one machine's call? Rounds 17-18 left each window's graph
# decode steps at a level of their own, flat over the window and its steps since a prefill (measured / predicted
# 0.98-0.99 in the k-shot, preemption and multi-turn windows, 1.00-1.03 in the Azure ones), and the same Azure
# window at 1.02 in one call and 1.00 in another. Here the same two windows run twice in one call, in the order
# A B A B right after the call's own `calibrate`: a level that moves between the first and second recording of a
# window is the machine's drift within the call, not the model's; the two recordings are also each other's
# replicate (`validate --replicate`).
#   bash bench/h200_round19.sh OUT TRACES   # `calibrate`, Azure conv 600-660 s, k-shot, Azure conv, k-shot
#   bash bench/h200_round19.sh OUT t        # the whole GPU test suite (tests/gpu), no time cut but the call's
#   bash bench/h200_round19.sh OUT p        # `calibrate`, then the preemption, swap and host-tier windows twice
#                                           # each (A A B B C C), each pair the other's replicate
# Every live call samples the GPU's clocks (nvidia-smi, 50 ms) beside its phases. Then on any CPU:
# python -m pagesim validate RUN (each run's own profile.json).
set -uo pipefail
OUT=$1
MODE=${2:-}
D=$(date -u +%F)
S=r19
source "$(dirname "$0")/h200_lib.sh"
live_call
if [ "$MODE" = t ]; then
  { timeout 540 python3 -m pytest -q -m gpu tests/gpu -p no:cacheprovider -rf 2>&1 | tail -15; } | tee "$R/gpu-tests-$S.txt"
  pack
  exit 0
fi
if [ "$MODE" = p ]; then
  clocks_start 50
  P="$R/profiles/h200-llama-3-8b-$D-${S}p.json"
  calibrate_marked "$P"
  window_preempt "${S}pa" "$P"; window_preempt "${S}pb" "$P"
  window_swap "${S}pa" "$P"; window_swap "${S}pb" "$P"
  H="$R/profiles/h200-llama-3-8b-$D-${S}p-host-tier.json"
  timeout 40 python3 -m bench.host_tier_bw --out "$R/host-tier-bw-${S}p.json" --profile "$P" --profile-out "$H" 2>&1 | tail -3
  window_offload "${S}pa" "$H"; window_offload "${S}pb" "$H"
  clocks_stop
  runs_summary "$R"; pack
  exit 0
fi
T=${MODE:-../traces}
clocks_start 50
P="$R/profiles/h200-llama-3-8b-$D-$S.json"
calibrate_marked "$P"
window_azure_conv "${S}a" "$P" "$T"
window_kshot "${S}a" "$P"
window_azure_conv "${S}b" "$P" "$T"
window_kshot "${S}b" "$P"
clocks_stop
runs_summary "$R"; pack
