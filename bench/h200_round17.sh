#!/usr/bin/env bash
# Issue 13, round 17: the decode bias against the SM clock read in-process. Round 16 left ~2% of the windows' graph
# decode bias unexplained after host time, the profile's process and the KV pool were ruled out, and nvidia-smi's
# 50 ms samples could place only about a point of it on the clock. Now every step records the SM clock NVML reports
# while it runs (sm_clock_mhz, engine/sm_clock.py), in the calibration's rows and the windows' steps alike: a
# `calibrate`, then the preemption and k-shot windows with its profile (nvidia-smi sampling beside, as before).
# Then on any CPU: python -m pagesim validate RUN; python bench/decode_bias.py --profile P --run RUN ... --out F.
#   bash bench/h200_round17.sh OUT
# OUT/results.tgz is rewritten after every step, so a call cut short still returns what was recorded.
set -uo pipefail
OUT=$1
D=$(date -u +%F)
source "$(dirname "$0")/h200_lib.sh"
live_call
python3 -c "import pynvml; print('nvidia-ml-py', pynvml.__file__)"
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active \
    --format=csv -lms 50 >"$R/clocks.csv" 2>&1 &
SMI=$!
mark() { echo "$(date -u '+%Y/%m/%d %H:%M:%S.%3N') $*" >>"$R/phases.txt"; }
P="$R/profiles/h200-llama-3-8b-$D-r17.json"
mark calibrate start; BUDGET=140 run calibrate --model llama-3-8b --gpu h200 --out "$P"; mark calibrate end
profile_summary "$P"; pack
mark preempt start
BUDGET=75 run live traces/sharegpt-bursty-1k.jsonl --limit 200 --watermark 0.01 --profile "$P" --num-gpu-blocks 400 \
    --out "$R/live/preempt-sharegpt-bursty-r17"; mark preempt end; pack
mark kshot start
BUDGET=80 run live traces/kshot-shared-prefix-500.jsonl --limit 250 --enable-prefix-caching --num-gpu-blocks 900 \
    --watermark 0.01 --profile "$P" --out "$R/live/kshot-prefix-pressure-r17"; mark kshot end
kill $SMI; gzip -f "$R/clocks.csv"
runs_summary "$R"; pack
python3 -c "import pandas as pd, sys; r = pd.read_csv(sys.argv[1])
print('calibration rows with a clock', r['sm_clock_mhz'].notna().mean(), 'median', r['sm_clock_mhz'].median())" \
    "${P%.json}.steps.csv.gz"
