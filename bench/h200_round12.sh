#!/usr/bin/env bash
# Issue 13, round 12: graphed mixed steps no longer bound by Python launches (engine/kernels/launch.py). The GPU tests
# of the change (tests/gpu and the kernel tests compiled), the mixed-step graphs against their GPU-only time
# (bench/mixed_graphs.py, target wall <= 1.3x) and the host time per part of a mixed step (bench/mixed_graph_gaps.py).
#   bash bench/h200_round12.sh OUT
set -uo pipefail
OUT=$1
source "$(dirname "$0")/h200_lib.sh"
kernel_call "$OUT"
gpu_line | tee -a "$OUT/log.txt"; cat "$OUT/log.txt"
{ timeout 250 python3 -m pytest -q -m gpu tests/gpu/ -p no:cacheprovider 2>&1 | tail -3
  timeout 100 python3 -m pytest -q tests/test_kernels.py -p no:cacheprovider 2>&1 | tail -2; } | tee "$OUT/gpu-tests.txt"
timeout 200 python3 -m bench.mixed_graphs --out "$OUT/mixed-graphs.json" 2>&1 | grep -v -i warn | tail -19
timeout 90 python3 -m bench.mixed_graph_gaps --out "$OUT/gaps.json" 2>&1 | grep -v -i warn | tail -6
