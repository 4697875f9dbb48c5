#!/usr/bin/env bash
# Every committed live window of issue 13 (and the fp8 / offload windows of issue 14) recorded again on one H200 (or
# an H100: profiles, runs and labels then say h100), part by part in device calls on one warm machine (two parts to a
# 10-minute call; a part that finds no bf16 profile from an earlier part on the machine calibrates its own, named for
# the part: -SUFFIX-tiers, -SUFFIX-short). Run from the repository root with the Azure 2023 CSVs in TRACES (never committed):
#   bash bench/h200_windows.sh OUT SUFFIX longdoc       # longdoc-b with its own `live --calibrate`, longdoc-a with
#                                                       # that profile
#   bash bench/h200_windows.sh OUT SUFFIX kshot         # the bf16 `calibrate`; k-shot, preemption
#   bash bench/h200_windows.sh OUT SUFFIX short TRACES  # swap, Azure conv and code, multiturn, the conv pair
#   bash bench/h200_windows.sh OUT SUFFIX tiers         # host-tier bandwidth and the offload window; the fp8
#                                                       # `calibrate` and the fp8 window
#   bash bench/h200_windows.sh OUT SUFFIX tests         # the GPU test suite (tests/gpu) into OUT/results
# On a card other than an H200 or H100 it records nothing (exit 3). Profiles are kept in /tmp/prof on the machine
# between calls and copied under OUT. Then on any CPU: python -m pagesim validate RUN --ensemble 16 --force
set -uo pipefail
OUT=$1 S=$2 PART=$3 TRACES=${4:-.gpuwt/traces}
D=$(date -u +%F)
source "$(dirname "$0")/h200_lib.sh"
live_call
case $(gpu_line) in *H200*) GPU=h200 ;; *H100*) GPU=h100 ;; *) echo "not an H200 or H100: $(gpu_line)"; exit 3 ;; esac
mkdir -p /tmp/prof
P=/tmp/prof/$GPU-llama-3-8b-$D-$S.json
bf16_profile() {
  # A part other than kshot that finds no profile of this suffix here is on a fresh machine: the kshot part's profile,
  # made on another machine, has the plain name, so this one is named for its part (round 48 got two profiles of one
  # name from two machines).
  if [ ! -f "$P" ] && [ "$PART" != kshot ]; then P=/tmp/prof/$GPU-llama-3-8b-$D-$S-$PART.json; fi
  [ -f "$P" ] || calibrate_marked "$P"
  cp "$P" "$R/profiles/"
  # its calibration rows too, so that a later formula can be refitted on them without a GPU (calibrate --refit)
  [ -f "${P%.json}.steps.csv.gz" ] && cp "${P%.json}.steps.csv.gz" "$R/profiles/"
}
clocks_start 50
case $PART in
  longdoc)
    window_longdoc_b_calibrated "$S"
    window_longdoc_a "$S" "$R/live/longdoc-b-$S/profile.json" ;;
  kshot)
    bf16_profile; window_kshot "$S" "$P"; window_preempt "$S" "$P" ;;
  short)
    bf16_profile; window_swap "$S" "$P"
    window_azure_conv "$S" "$P" "$TRACES"; window_azure_code "$S" "$P" "$TRACES"
    window_multiturn "$S" "$P"; window_pair "$S" "$P" "$TRACES" ;;
  tiers)
    bf16_profile
    H=$R/profiles/$(basename "${P%.json}")-host-tier.json  # named for the profile it extends
    timeout 60 python3 -m bench.host_tier_bw --out "$R/host-tier-bw-$GPU-$D-$S.json" --profile "$P" --profile-out "$H" 2>&1 | tail -3
    window_offload "$S" "$H"
    PF=$R/profiles/$GPU-llama-3-8b-fp8-$D-$S.json
    calibrate_fp8_marked "$PF"; window_fp8 "$S" "$PF" ;;
  tests)
    { timeout 400 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu -rf 2>&1 | tail -15; echo "pytest rc $?"; } \
        | tee "$R/gpu-tests-$GPU-$D-$S.txt"; pack ;;
  *) echo "part: longdoc, kshot, short, tiers or tests"; exit 2 ;;
esac
clocks_stop
runs_summary "$R"; pack
