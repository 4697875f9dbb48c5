#!/usr/bin/env bash
# Issue 13, round 17: the decode bias against the SM clock read in-process. Round 16 left ~2% of the windows' graph
# decode bias unexplained after host time, the profile's process and the KV pool were ruled out, and nvidia-smi's
# 50 ms samples could place only about a point of it on the clock. Now every step records the SM clock NVML reports
# while it runs (sm_clock_mhz, engine/sm_clock.py), in the calibration's rows and the windows' steps alike.
#   bash bench/h200_round17.sh OUT     # `calibrate`, then the preemption and k-shot windows with its profile
#   bash bench/h200_round17.sh OUT c   # the same with the clock-aware fit (profile priced at the top clock, at
#                                      # e8107e6) on a fresh machine, plus a multi-turn window no round has run
# (nvidia-smi sampling beside). Then on any CPU: python -m pagesim validate RUN;
# python bench/decode_bias.py --profile P --run RUN ... --out F.
# OUT/results.tgz is rewritten after every step, so a call cut short still returns what was recorded.
set -uo pipefail
OUT=$1
MODE=${2:-}
D=$(date -u +%F)
S=r17${MODE}
source "$(dirname "$0")/h200_lib.sh"
live_call
python3 -c "import pynvml; print('nvidia-ml-py', pynvml.__file__)"
clocks_start 50
P="$R/profiles/h200-llama-3-8b-$D-$S.json"
mark calibrate start; BUDGET=140 run calibrate --model llama-3-8b --gpu h200 --out "$P"; mark calibrate end
profile_summary "$P"; pack
mark preempt start
BUDGET=75 run live traces/sharegpt-bursty-1k.jsonl --limit 200 --watermark 0.01 --profile "$P" --num-gpu-blocks 400 \
    --out "$R/live/preempt-sharegpt-bursty-$S"; mark preempt end; pack
mark kshot start
BUDGET=80 run live traces/kshot-shared-prefix-500.jsonl --limit 250 --enable-prefix-caching --num-gpu-blocks 900 \
    --watermark 0.01 --profile "$P" --out "$R/live/kshot-prefix-pressure-$S"; mark kshot end; pack
if [ "$MODE" = c ]; then
  mark multiturn start
  BUDGET=75 run live traces/multiturn-300.jsonl --limit 200 --enable-prefix-caching --profile "$P" \
      --out "$R/live/multiturn-200-$S"; mark multiturn end
fi
clocks_stop
runs_summary "$R"; pack
python3 -c "import json, pandas as pd, sys; r = pd.read_csv(sys.argv[1]); p = json.load(open(sys.argv[2]))
print('calibration rows with a clock', r['sm_clock_mhz'].notna().mean(), 'median', r['sm_clock_mhz'].median(),
      'sm_clock fit', p['report'].get('sm_clock'), 'calibration_s', p.get('calibration_s'))" "${P%.json}.steps.csv.gz" "$P"
