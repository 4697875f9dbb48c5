#!/usr/bin/env bash
# Issue 13, round 11: the GPU tests of the merged round, then the preemption window recorded twice back to back on
# one machine with round 10's committed profile (the same code, inputs and profile): how far two live recordings of
# one window lie apart, against the accuracy targets a simulation is held to. Validate each on any CPU afterwards
# (python -m pagesim validate RESULTS/live/RUN) and compare their summaries.
#   bash bench/h200_round11.sh OUT
# OUT/results.tgz is rewritten after every step, so a call cut short still returns what was recorded.
set -uo pipefail
OUT=$1
source "$(dirname "$0")/h200_lib.sh"
live_call
timeout 200 python3 -m pytest -q -m gpu tests/gpu/ -p no:cacheprovider 2>&1 | tee "$R/gpu-tests.txt" | tail -4; pack
P=results/profiles/h200-llama-3-8b-2026-12-02-r10.json
S="traces/sharegpt-bursty-1k.jsonl --limit 200 --watermark 0.01 --profile $P --num-gpu-blocks 400"
BUDGET=90 run live $S --out "$R/live/preempt-sharegpt-bursty-r11a"; pack
BUDGET=90 run live $S --out "$R/live/preempt-sharegpt-bursty-r11b"; pack
runs_summary "$R"; pack
