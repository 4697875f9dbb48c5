#!/usr/bin/env bash
# Round 48 (issue #13): is the calibration's slow host a state of the process or of the machine? The calibrations'
# rows show a graph decode step's host queueing flip between ~0.07 and ~0.2 ms within one workload (decode-c512's
# 1-row steps), more often in `calibrate` than in live windows. This times the same calibration workloads (some twice)
# in fresh processes: as they are, with one intra-op thread (OMP_NUM_THREADS=1), while sampling every core's clock
# (cpu-mhz.txt, 0.2 s), and tags each step with its time and the core its thread ran on (bench/host_phases.py).
#   bash bench/host_modes.sh OUT
set -u
OUT=${1:?OUT}
W=decode-c512,decode-c1024,skew-b127-s1024-l2048,served-b6,steady-b12,decode-c512,steady-b12
mkdir -p "$OUT"
nproc > "$OUT/machine.txt"; lscpu >> "$OUT/machine.txt" 2>&1; uptime >> "$OUT/machine.txt"
( while true; do echo "$(date +%s.%N) $(awk '/MHz/ {printf "%d ", $4}' /proc/cpuinfo) | $(head -1 /proc/stat)"; sleep 0.2; done ) \
    > "$OUT/cpu-mhz.txt" &
SAMPLER=$!
for setting in default omp1; do
  if [ "$setting" = omp1 ]; then export OMP_NUM_THREADS=1; fi
  top -bn1 | head -20 > "$OUT/top-$setting.txt"
  timeout 240 python3 -m bench.host_phases --workloads "$W" --out "$OUT/host-modes-$setting.json" 2>&1 | tail -12
done
unset OMP_NUM_THREADS
kill "$SAMPLER"
