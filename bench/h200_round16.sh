#!/usr/bin/env bash
# Issue 13, round 16: where does the windows' graph decode bias come from? Round 15 refuted the power state: a
# calibration rested to 1,920 MHz predicted the windows' decode steps 5% high, worse than the plain one (3.7%), and at
# the same SM clock the windows' decode steps still ran ~4% faster than the calibration's. Left: the process (a
# profile measured in its own process against a window in another; `live --calibrate` windows, profile and run in one
# process, were within 1%) and the KV pool's size (the windows ran with 400-900 blocks, the calibration with the whole
# memory). A 2 x 2 in one call, every step with its device time (gpu_time_s, now in calibration rows too):
#   profile S: `calibrate` in its own process (whole memory)
#   run A: the preemption window, 400 blocks, its own process, profile S
#   run B: the same trace with the whole memory and `live --calibrate` (profile I, measured in run B's process)
#   run C: run A again (another process: the process-to-process spread)
# Then on any CPU: validate A, B and C against S and I (python -m pagesim validate RUN --cost-model P --out DIR).
#   bash bench/h200_round16.sh OUT
# OUT/results.tgz is rewritten after every step, so a call cut short still returns what was recorded.
set -uo pipefail
OUT=$1
D=$(date -u +%F)
source "$(dirname "$0")/h200_lib.sh"
live_call
clocks_start 50
PS="$R/profiles/h200-llama-3-8b-$D-r16.json"
T=traces/sharegpt-bursty-1k.jsonl
mark calibrate start; BUDGET=140 run calibrate --model llama-3-8b --gpu h200 --out "$PS"; mark calibrate end
profile_summary "$PS"; pack
mark a start
BUDGET=75 run live $T --limit 200 --watermark 0.01 --profile "$PS" --num-gpu-blocks 400 \
    --out "$R/live/preempt-sharegpt-bursty-r16a"; mark a end; pack
mark b start
BUDGET=200 run live $T --limit 200 --watermark 0.01 --calibrate --out "$R/live/sharegpt-bursty-whole-r16b"
mark b end; profile_summary "$R/live/sharegpt-bursty-whole-r16b/profile.json"; pack
mark c start
BUDGET=75 run live $T --limit 200 --watermark 0.01 --profile "$PS" --num-gpu-blocks 400 \
    --out "$R/live/preempt-sharegpt-bursty-r16c"; mark c end
clocks_stop
runs_summary "$R"; pack
