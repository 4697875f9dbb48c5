#!/usr/bin/env bash
# Issue 13 item 2 (mixed and prefill steps from piecewise CUDA graphs), on the H200 in two device calls:
#   bash bench/h200_mixed_graphs.sh bench OUT   # bench/mixed_graphs.py, then the GPU tests
#   bash bench/h200_mixed_graphs.sh live OUT    # live --calibrate of Azure conv 600-660 s, then validate it
# The live run directory comes back as OUT/azure-conv-600-660-r7.tar.gz.
set -uo pipefail
export PYTHONUNBUFFERED=1
MODE=$1
OUT=$2
source "$(dirname "$0")/h200_lib.sh"
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader
if [ "$MODE" = bench ]; then
  timeout 150 python3 -m bench.mixed_graphs --out "$OUT/mixed-graphs.json" 2>&1 | tee "$OUT/bench.log"
  timeout 200 python3 -m pytest -q -m gpu tests/gpu/ -x -p no:cacheprovider 2>&1 | tee "$OUT/gpu-tests.txt" | tail -5
else
  D=$OUT/live/azure-conv-600-660-r7
  BUDGET=330 run live ../../.live-traces/AzureLLMInferenceTrace_conv.csv --start-s 600 --end-s 660 --watermark 0.01 \
      --calibrate --out "$D"
  profile_summary "$D/profile.json"
  runs_summary "$OUT"
  BUDGET=150 run validate "$D" | tee "$OUT/validate.txt"
  tar -C "$OUT/live" -czf "$OUT/azure-conv-600-660-r7.tar.gz" azure-conv-600-660-r7 && rm -rf "$OUT/live"
fi
