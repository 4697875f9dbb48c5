#!/usr/bin/env bash
# Round 9 (issue #14): fp8 prefill / decode launches and the zero-copy swap kernel on the H200, in one call.
#   bash bench/h200_round9_kernel.sh OUT_DIR first|final   (from the repository root or a copy of it)
# first: the swap kernel against the per-block copies it replaces (bench.swap_compare), the GPU swap / host-tier tests,
#        bench.fp8 (prefill variants side by side), the r9 decode launch grid (bench.fp8_launch), the host tier bench.
# final: bench.fp8, the host tier bench, the calibration's swap measurement, then
#        pytest -m gpu -k "fp8 or prefill or swap or host_tier" tests/gpu/.
set -u
out=${1:?usage: h200_round9_kernel.sh OUT_DIR first|final}
whl=../whl; [ -d "$whl" ] || whl=.gpuwt/whl  # the carried wheels (simpy ...): from .gpuwt/<copy> or the repo root
python3 -m pip install -q --no-index --no-deps --target /tmp/site "$whl"/*.whl
export PYTHONPATH=/tmp/site:$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1
log=$out/log.txt
step() { echo "== $(date +%T) $*" >>"$log"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv >"$log" 2>&1
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >>"$log" 2>&1
echo "commit ${PAGESIM_GIT_COMMIT:-unknown}" >>"$log"
if [ "${2:-}" = first ]; then
    step swap_compare; timeout 60 python3 -m bench.swap_compare --out "$out/swap_compare.json" >>"$log" 2>&1
    step gpu swap tests
    timeout 70 python3 -m pytest -q -p no:cacheprovider -m gpu -k "swap or host_tier" tests/gpu/ >>"$log" 2>&1
    step fp8; timeout 80 python3 -m bench.fp8 --out "$out/fp8.json" --force >>"$log" 2>&1
    step fp8_launch; timeout 130 python3 -m bench.fp8_launch --out "$out/fp8_launch.json" --rounds 3 --force >>"$log" 2>&1
    step host_tier_bw; timeout 45 python3 -m bench.host_tier_bw --out "$out/host_tier_bw.json" --force >>"$log" 2>&1
else
    step fp8; timeout 70 python3 -m bench.fp8 --out "$out/fp8.json" --force >>"$log" 2>&1
    step host_tier_bw; timeout 45 python3 -m bench.host_tier_bw --out "$out/host_tier_bw.json" --force >>"$log" 2>&1
    step swap bandwidth
    timeout 40 python3 -c "import json, torch; from engine.kernels.swap import measure_swap_bandwidth
r = {}
for dt in ('auto', 'fp8'):
    kv = torch.empty((32, 2, 512, 16, 8, 128), dtype=torch.bfloat16 if dt == 'auto' else torch.float8_e4m3fn, device='cuda')
    r[dt] = measure_swap_bandwidth(kv); print(dt, {k: round(v / 1e9, 2) if k.endswith('per_s') else v for k, v in r[dt].items()})
json.dump(r, open('$out/swap_bandwidth.json', 'w'), indent=1)" >>"$log" 2>&1
    step gpu tests
    timeout 200 python3 -m pytest -q -s -p no:cacheprovider -m gpu -k "fp8 or prefill or swap or host_tier" tests/gpu/ \
        >"$out/gpu_tests.txt" 2>&1
    echo "pytest rc $?" >>"$out/gpu_tests.txt"
    tail -3 "$out/gpu_tests.txt" >>"$log"
fi
step done
