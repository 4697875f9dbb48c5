#!/usr/bin/env bash
# Issue 14's live runs, re-recorded with same-call profiles that price shared reads (decode_shared_tokens):
# an fp8-cache calibration, then the fp8 window; the host-tier window with its own `live --calibrate`.
#   bash bench/h200_tiers.sh RESULTS
# Validate each run on any CPU afterwards: python -m pagesim validate RESULTS/live/RUN
set -uo pipefail
export PYTHONUNBUFFERED=1
R=${1:-results}
P="$R/profiles/h200-llama-3-8b-fp8-$(date -u +%F).json"
mkdir -p "$R/live" "$R/profiles"
run() { echo "== $(date +%T) $*"; timeout "${BUDGET:-200}" python3 -m pagesim "$@" --force 2>&1 | grep -v "req/s\]\|it/s\]\|workload/s\]"; }
K="traces/kshot-shared-prefix-500.jsonl --limit 150 --enable-prefix-caching --num-gpu-blocks 600 --watermark 0.01"
run calibrate --model llama-3-8b --gpu h200 --kv-cache-dtype fp8 --out "$P"
run live $K --kv-cache-dtype fp8 --profile "$P" --out "$R/live/fp8-kshot"
BUDGET=300 run live $K --kv-offloading-size 4.7 --calibrate --out "$R/live/offload-kshot"
python3 -c "import json; p=json.load(open('$P')); print('calibration_s', p.get('calibration_s'), 'fit', p['report']['mape'], p['report']['by_kind'])"
for d in "$R"/live/*/; do
  [ -f "$d/summary.json" ] && python3 -c "
import json; s=json.load(open('$d/summary.json')); r=s['runs']['live']
print('$d', 'wall', round(r.get('wall_s', 0), 1), 'warmup_s', r.get('warmup_s'), 'compilations_during_run',
      r.get('compilations_during_run'), 'graph_captures_during_run', r.get('graph_captures_during_run'), 'profile', s.get('profile'))"
done
