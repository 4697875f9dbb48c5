#!/usr/bin/env bash
# Round 30: the e4m3 Gluon prefill (engine/kernels/prefill_gluon_fp8.py) on any sm_90 GPU.
#   bash bench/h200_round30.sh OUT_DIR p   # its GPU tests (OUT/gpu_tests.txt), `bench.fp8 --prefill-only --gluon
#                                          # ${GLUON:-...}` (OUT/fp8.json), Nsight Compute's full set on one
#                                          # launch of the e4m3 Gluon kernel at 4096 causal (OUT/ncu-fp8*: the
#                                          # report, its details, per-SASS-line stall samples), then the fp8
#                                          # cache's GPU tests (OUT/gpu_tests2.txt)
# Log: OUT/log.txt.
set -u
out=${1:?usage: h200_round30.sh OUT_DIR p}
MODE=${2:?usage: h200_round30.sh OUT_DIR p}
source "$(dirname "$0")/h200_lib.sh"
kernel_call "$out"
gpu_line >>"$log"
[ "$MODE" = p ] || { echo "h200_round30.sh: unknown mode $MODE (p)"; exit 2; }
step gpu tests of the e4m3 Gluon prefill
timeout ${TEST_BUDGET:-160} python3 -m pytest -q -s -p no:cacheprovider -m gpu tests/gpu/test_prefill_gluon_gpu.py \
    -k fp8 >"$out/gpu_tests.txt" 2>&1
echo "pytest rc $?" >>"$out/gpu_tests.txt"; grep -E "passed|failed|Error" "$out/gpu_tests.txt" | tail -8 >>"$log"
step fp8 bench
timeout ${BENCH_BUDGET:-200} python3 -m bench.fp8 --prefill-only --gluon "${GLUON:-3p,3ps2,2p,4p,3,3p@132}" \
    --out "$out/fp8.json" --force 2>&1 | grep -v "UserWarning\|return F.scaled" >>"$log"
echo "fp8 bench rc $?" >>"$log"
ncu_one() {  # NAME ARGS...: one launch (the third) of a Gluon prefill under ncu's full set
  local name=$1; shift
  step "ncu $name"
  timeout ${NCU_BUDGET:-90} ncu --clock-control none -k regex:_gluon --launch-skip 2 --launch-count 1 --set full \
      --import-source no -f -o "$out/ncu-$name" python3 -m bench.prefill_ncu "$@" >>"$log" 2>&1
  echo "ncu rc $?" >>"$log"
  ncu -i "$out/ncu-$name.ncu-rep" --page details >"$out/ncu-$name-details.txt" 2>&1
  ncu -i "$out/ncu-$name.ncu-rep" --page source --csv --print-source sass >"$out/ncu-$name-sass.csv" 2>&1
  gzip -f "$out/ncu-$name-sass.csv"
}
ncu_one fp8 --cache fp8
step gpu tests of the fp8 cache
timeout ${TEST_BUDGET2:-240} python3 -m pytest -q -s -p no:cacheprovider -m gpu tests/gpu/test_fp8_gpu.py \
    >"$out/gpu_tests2.txt" 2>&1
echo "pytest rc $?" >>"$out/gpu_tests2.txt"; grep -E "passed|failed|Error" "$out/gpu_tests2.txt" | tail -8 >>"$log"
step done
